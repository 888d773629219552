"""The flash-style tiles' SASS, for bench/flash_proxy.py: what each setting compiles to, counted.

Owns the compile side of the flash tiles' proxy (issue 20, task flashproxy): the measured settings
(`CONFIGS`, and `RUN_OVER`: the launch settings of the builds that measured them where today's
`_config` differs), the gpucheck spec of a setting under `_config` overrides (`build_spec`), its
compile for sm_90 / sm_80 through gpucheck's `compile_spec` (`compile_config`: registers, spills,
shared memory, resident programs, and per program the code outside the loops, per trip a main loop's
path by class, with its wgmma / mma.sync FLOPs and wgmma waits), and the record of them all
(bench/flash_proxy_sass.json: `load_record` / `save_record`). It asserts nothing.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
select_sass = load_by_path("select_sass", HERE / "select_sass.py")
keys_proxy = load_by_path("keys_proxy", HERE / "keys_proxy.py")
H200 = keys_proxy.H200  # 132 SMs x 4 schedulers at 1.98 GHz: the H100's too (docs/attention.md)

# The record: "sass" (each compiled setting's counts, by `_key`) and "spill_grid" (`spill_grid`'s rows
# of the shipped dQ / dK/dV, per triton and arch).
SASS_FILE = HERE / "flash_proxy_sass.json"


def load_record() -> dict:
    rec = json.loads(SASS_FILE.read_text()) if SASS_FILE.exists() else {}
    return {"sass": rec.get("sass", {}), "spill_grid": rec.get("spill_grid", [])}


def save_record(rec: dict) -> None:
    SASS_FILE.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")


H200 = keys_proxy.H200  # 132 SMs x 4 schedulers at 1.98 GHz: the H100's too (docs/attention.md)
# config -> (profiler name, model kernel name, module, gpucheck spec, G, D, tile keys (rows, keys, warps),
# MMA products a trip). The measured launch settings are today's `_config` but where `RUN_OVER` says.
CONFIGS: dict[str, tuple] = {
    "cmp_fwd@64": ("_cmp_fwd", "cmp_fwd", "compressed", "compressed_fwd", 6, 64, 2),
    "cmp_fwd@128": ("_cmp_fwd", "cmp_fwd", "compressed", "compressed_fwd", 16, 128, 2),
    "cmp_dq@64": ("_cmp_bwd_dq", "cmp_bwd_dq", "compressed", "compressed_bwd_dq", 6, 64, 3),
    "cmp_dq@128": ("_cmp_bwd_dq", "cmp_bwd_dq", "compressed", "compressed_bwd_dq", 16, 128, 3),
    "cmp_dkv@64@w8": ("_cmp_bwd_dkv", "cmp_bwd_dkv", "compressed", "compressed_bwd_dkv", 6, 64, 4),
    "cmp_dkv@128@w8": ("_cmp_bwd_dkv", "cmp_bwd_dkv", "compressed", "compressed_bwd_dkv", 16, 128, 4),
    "cmp_dkv@64": ("_cmp_bwd_dkv", "cmp_bwd_dkv", "compressed", "compressed_bwd_dkv", 6, 64, 4),
    "cmp_dkv@128": ("_cmp_bwd_dkv", "cmp_bwd_dkv", "compressed", "compressed_bwd_dkv", 16, 128, 4),
    "win_fwd@64": ("_window_fwd", "win_fwd", "window", "window_fwd", 6, 64, 2),
    "win_fwd@128": ("_window_fwd", "win_fwd", "window", "window_fwd", 16, 128, 2),
    "win_dq@64": ("_window_bwd_dq", "win_bwd_dq", "window", "window_bwd_dq", 6, 64, 3),
    "win_dq@128": ("_window_bwd_dq", "win_bwd_dq", "window", "window_bwd_dq", 16, 128, 3),
    "win_dkdv@64": ("_window_bwd_dkdv", "win_bwd_dkdv", "window", "window_bwd_dkdv", 6, 64, 4),
    "win_dkdv@128": ("_window_bwd_dkdv", "win_bwd_dkdv", "window", "window_bwd_dkdv", 16, 128, 4),
}
# `_config` keys of each compressed kernel: rows (tokens, x GP), keys, warps, stages.
CMP_KEYS = {
    "compressed_fwd": ("bm_fwd", "bn_fwd", "warps_fwd", "stages_fwd"),
    "compressed_bwd_dq": ("BT", "bn_bwd", "warps", "stages_dq"),
    "compressed_bwd_dkv": ("bt_dkv", "bn_dkv", "warps_dkv", "stages_dkv"),
}
WIN_KEYS = {"window_fwd": "fwd", "window_bwd_dq": "dq", "window_bwd_dkdv": "dkdv"}
# Settings of the measured builds that differ from today's `_config` on sm_90: the compressed dK/dV
# ran 8 warps until ce226a4 (bench/attention_cost/counts.py `_launch_before_ce226a4`); every run
# measured dK/dV at 32 keys a tile over 64 query rows (32 past head_dim 64), 2 stages, and dQ past
# head_dim 64 at 32 rows x 32 keys, 4 warps, 2 stages (`_tiles_of_the_runs`; sm_90 ships others since
# this proxy: compressed.py `_config` flash_hopper).
MEASURED_DKV = {
    64: {"bt_dkv": 8, "bn_dkv": 32, "stages_dkv": 2, "split_dkv": 8},
    128: {"bt_dkv": 2, "bn_dkv": 32, "stages_dkv": 2, "split_dkv": 8},
}
MEASURED_DQ128 = {"BT": 2, "bn_bwd": 32, "warps": 4, "stages_dq": 2}
RUN_OVER = {
    "cmp_dkv@64@w8": {**MEASURED_DKV[64], "warps_dkv": 8},
    "cmp_dkv@128@w8": {**MEASURED_DKV[128], "warps_dkv": 8},
    "cmp_dkv@64": MEASURED_DKV[64],
    "cmp_dkv@128": MEASURED_DKV[128],
    "cmp_dq@128": MEASURED_DQ128,
    # the window's tiles every run measured, since sm_90 ships others (window.py `_configs`, wintiles)
    "win_dq@128": {"BLOCK_M": 64, "BLOCK_N": 64},
    "win_dkdv@128": {"BLOCK_M": 64},
    "win_dkdv@64": {"num_warps": 8},
}
# ---- SASS ------------------------------------------------------------------------------------------

_HGMMA = re.compile(r"^x(\d+)x(\d+)")


def mma_flops(seq, warps: int) -> dict:
    """FLOPs a program's `warps` warps issue running `seq` once: wgmma (HGMMA.64xNxK, one op a
    warpgroup of 4 warps: 2 x 64 x N x K) and mma.sync (HMMA.16816 4096 a warp, HMMA.1688 2048)."""
    hg = hm = 0.0
    for op, rest, _ in seq:
        if op.startswith("HGMMA.64"):
            m = _HGMMA.match(rest.strip())
            n, k = (int(m.group(1)), int(m.group(2))) if m else (64, 16)
            hg += 2 * 64 * n * k * warps / 4
        elif op.startswith("HMMA.16816"):
            hm += 4096 * warps
        elif op.startswith("HMMA.1688"):
            hm += 2048 * warps
    return {"hgmma_flops": hg, "hmma_flops": hm}


def _counts(seq) -> dict:
    c = select_sass._classes(seq)
    ops = [x[0] for x in seq]
    return {
        "insns": c["insns"],
        "smem": c["lds_sts"] + c["ldsm"],
        "ldg": sum(op.startswith(("LDG", "LDGSTS", "UTMALDG")) for op in ops),
        "bar": c["bar"],
        "hgmma": sum(op.startswith("HGMMA") for op in ops),
        "hmma": sum(op.startswith("HMMA") for op in ops),
        "wgwait": sum(op.startswith("WARPGROUP.DEPBAR") for op in ops),  # waits for a wgmma's result
        "ldl_stl": c["ldl_stl"],
    }


def mma_loops(insns, label_at) -> list[tuple[int, int]]:
    """[lo, hi) of each outermost loop around a product, narrowest first: the only one, or the
    window's three band phases (edge and diagonal masked, the inside unmasked: the narrowest)."""
    loops = []
    for i, (op, rest, _) in enumerate(insns):
        t = select_sass._target(rest)
        if op.startswith("BRA") and t and label_at.get(t, i) < i:
            lo = label_at[t]
            if any(o.startswith(("HMMA", "HGMMA")) for o, _, _ in insns[lo:i]):
                loops.append((lo, i + 1))
    outer = [a for a in loops if not any(b != a and b[0] <= a[0] and a[1] <= b[1] for b in loops)]
    return sorted(outer, key=lambda x: x[1] - x[0])


def _patched(module, over: dict, spec_name: str):
    """`module`'s `_config` (compressed) or `_configs` (window) with `over` applied while a spec is built."""
    if module.__name__.endswith("window"):
        real = module._configs
        key = WIN_KEYS[spec_name]

        def cfgs(*a, **k):
            c = real(*a, **k)
            return {**c, key: {**c[key], **over}}

        return "_configs", real, cfgs
    real = module._config
    return "_config", real, lambda *a, **k: {**real(*a, **k), **over}


def build_spec(config: str, over: dict, G: int | None = None, D: int | None = None, arch: int = 90):
    """The gpucheck spec of `config` at G x D (default: its own), bf16, l 32 d 16 l' 64 n 16 w 512, with
    the measured build's settings (RUN_OVER) and `over` patched in."""
    import importlib

    from nsa.attention.triton.spec import GpuShape

    _, _, mod, spec_name, g0, d0, _ = CONFIGS[config]
    module = importlib.import_module(f"nsa.attention.triton.{mod}")
    over = {**RUN_OVER.get(config, {}), **over}
    shape = GpuShape("probe", head_dim=D or d0, group=G or g0, block_len=32, block_stride=16, sel_block=64,
                     n_sel=16, window=512, dtype="bf16")  # fmt: skip
    attr, real, patched = _patched(module, over, spec_name)
    setattr(module, attr, patched)
    try:
        return next(s for s in module.gpucheck_specs(shape, arch) if s.name == spec_name)
    finally:
        setattr(module, attr, real)


def tile(config: str, spec) -> dict:
    """Rows (query rows of a trip), keys, warps, stages of a spec."""
    c = spec.constexprs
    name = CONFIGS[config][3]
    if name in CMP_KEYS:
        rows = c["BT"] * c["GP"] if name != "compressed_fwd" else c["BM"]
        split = {"split": c["SPLIT"]} if "SPLIT" in c else {}
        return {"rows": rows, "keys": c["BN"], "warps": spec.num_warps, "stages": spec.num_stages, **split}
    return {"rows": c["BLOCK_M"], "keys": c["BLOCK_N"], "warps": spec.num_warps, "stages": spec.num_stages}


def compile_config(
    config: str, over: dict, G: int | None = None, D: int | None = None, arch: int = 90
) -> dict:
    """Compile `config` (with `over`) for sm_`arch` and count: registers, spills, shared memory,
    resident programs an SM, per program the code outside the main loop (`once`), per trip the main
    loop's path (`trip`), by _counts class, with the MMA FLOPs of each."""
    import triton

    from nsa.attention import gpucheck

    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    if "TRITON_CACHE_DIR" not in os.environ:  # a cached kernel would print no ptxas log
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="nsa-flash-proxy-")
    spec = build_spec(config, over, G, D, arch)
    t = tile(config, spec)
    rec = {"config": config, "set": over, "G": G or CONFIGS[config][4], "D": D or CONFIGS[config][5],
           "arch": arch, "triton": triton.__version__, **t}  # fmt: skip
    try:
        k, rep = gpucheck.compile_spec(spec, arch)
    except Exception as e:  # out of resources: a result
        return {**rec, "error": f"{type(e).__name__}: {str(e).strip()[:200]}"}
    smem = int(k.metadata.shared) + rep["static_smem"]
    sm = {**H200, "smem": 233472 if arch == 90 else 167936}
    return {
        **rec, "registers": rep["registers"], "spill": rep["spill_stores"] + rep["spill_loads"], "smem": smem,
        "smem_ok": smem <= gpucheck.SMEM_LIMIT[arch],
        "resident": select_sass.resident_programs(rep["registers"], smem, spec.num_warps, sm),
        **listing_counts(select_sass._disasm(k.asm["cubin"], arch), spec.num_warps),
    }  # fmt: skip


def listing_counts(lines: list[str], warps: int) -> dict:
    """What the proxy reads from one nvdisasm listing of a program of `warps` warps: its main loops
    (`mma_loops`), per trip the narrowest one's path (`trip`), the masked phases' mean trip
    (`masked`; the trip itself where there is one loop) and the code outside the loops once (`once`),
    by `_counts` class with the MMA FLOPs of each. bench/dkdv_fit.py counts the selected dK/dV so."""
    insns, label_at = select_sass._parse(lines)
    loops = mma_loops(insns, label_at)
    exits = [i for i, x in enumerate(insns) if x[0].startswith("EXIT")]
    last = max(exits, default=len(insns) - 1)
    paths = [keys_proxy.step_path(insns, label_at, lo, hi) for lo, hi in loops]
    inside = {i for lo, hi in loops for i in range(lo, hi)}
    once = [x for i, x in enumerate(insns[: last + 1]) if i not in inside]
    trip, masked = paths[0], paths[1:] or paths[:1]  # the masked phases: their mean trip
    mean = {k: sum(_counts(m)[k] for m in masked) / len(masked) for k in _counts(trip)}
    return {
        "loops": len(loops),
        "trip": {**_counts(trip), **mma_flops(trip, warps)}, "once": _counts(once),
        "masked": {**mean, **{k: sum(mma_flops(m, warps)[k] for m in masked) / len(masked)
                              for k in ("hgmma_flops", "hmma_flops")}},
    }  # fmt: skip


def _key(config: str, over: dict, G: int, D: int, arch: int = 90, triton: str = "3.6.0") -> str:
    extra = ",".join(f"{k}={v}" for k, v in sorted(over.items()))
    return f"{config}|{extra}|{G}x{D}|sm{arch}|{triton}"
