"""Head_dim-128 tiles of the compressed and selected backward (and the compressed forward), no GPU.

Owns the GPU-free evidence behind docs/attention.md's head_dim-128 tile paragraphs (issue 20): for
each kernel that runs small tiles past head_dim 64 (`_cmp_fwd`, `_cmp_bwd_dq`, `_cmp_bwd_dkv` of
compressed.py; `_sel_bwd_dkdv_kernel` of selected.py) it compiles candidate launch settings (query
rows, keys a step, warps, stages) as the module's `gpucheck_specs` would launch them under `_config`
overrides, through gpucheck's `compile_spec` (sm_80 / sm_90, the installed triton: run it again
with PYTHONPATH=<triton 3.6> for the GPU images' version), and prints per candidate: registers,
spill bytes, shared memory, resident warps an SM, and the main loop's SASS (bench/select_sass.py's
`_disasm`, bench/keys_proxy.py's `step_path`: one trip, every conditional branch falling through)
per useful MMA FLOP of that trip (real head_dim, real rows), the MMA instructions (wgmma or
mma.sync) and the bytes a trip loads per FLOP. The counts are relative (issue slots per FLOP, not
time). `--measured` sets the measured builds (the tiles every GPU run measured: sm_80's, since sm_90
ships bench/flash_proxy.py's dQ / dK/dV tiles) beside their fitted efficiencies: the SASS a FLOP does
not tell `cmp_dq@128`'s 0.22 from head_dim 64's 0.56 (equal counts); the MMA instruction (wgmma or
mma.sync) and the bytes a FLOP differ (bench/RESULTS.md). `--what-if` prints the cost model's paper-shape NSA/FA2 if each kernel
ran at its head_dim-64 kernel's fitted efficiency (an assumption, labelled so; superseded for the
compressed backward by bench/flash_proxy.py, whose tiles the "shipped" row now prices). Prints one JSON
object per line; asserts nothing.

  .venv/bin/python bench/tiles_d128.py --kernel cmp_dq --arch 90                 # the candidates
  .venv/bin/python bench/tiles_d128.py --shipped --shape 6x64 --shape 16x128     # shipped tiles only
  PYTHONPATH=/tmp/forced-leg36 .venv/bin/python bench/tiles_d128.py --kernel sel_dkdv  # triton 3.6
  .venv/bin/python bench/tiles_d128.py --what-if
  PYTHONPATH=/tmp/forced-leg36 .venv/bin/python bench/tiles_d128.py --measured   # vs the fitted prices
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
select_sass = load_by_path("select_sass", HERE / "select_sass.py")
keys_proxy = load_by_path("keys_proxy", HERE / "keys_proxy.py")

# Per SM: registers, warps, blocks, shared memory (bytes a block may use in all; 1 KB reserved each).
SM = {80: {"regs": 65536, "warps": 64, "blocks": 32, "smem": 167936},
      90: {"regs": 65536, "warps": 64, "blocks": 32, "smem": 233472}}  # fmt: skip
# kernel -> (module, gpucheck spec name, _config keys: rows, keys, warps, stages; MMA products a trip)
KERNELS = {
    "cmp_fwd": ("compressed", "compressed_fwd", ("bm_fwd", "bn_fwd", "warps_fwd", "stages_fwd"), 2),
    "cmp_dq": ("compressed", "compressed_bwd_dq", ("BT", "bn_bwd", "warps", "stages_dq"), 3),
    "cmp_dkv": ("compressed", "compressed_bwd_dkv", ("bt_dkv", "bn_dkv", "warps_dkv", "stages_dkv"), 4),
    "sel_dkdv": ("selected", "selected_bwd_dkdv", ("BR", "BN", "warps_kv", "stages_kv"), 4),
}
GEO = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}  # M7C / paper
# Candidates: query rows, keys a step, warps, stages (the issue's 64/128 rows, 32-128 keys, 4/8
# warps, 1-3 stages; selected keys stop at l' = 64, a block).
ROWS, KEYS, WARPS, STAGES = (32, 64, 128), (32, 64, 128), (4, 8), (1, 2, 3)


def _module(name: str):
    import importlib

    return importlib.import_module(f"nsa.attention.triton.{name}")


def shipped(kernel: str, G: int, D: int, arch: int) -> dict:
    """The kernel's shipped (rows, keys, warps, stages) at G x D on sm_`arch`: rows are (token, head)
    or (pair, head) rows of a step (compressed dQ / dK/dV: BT tokens x GP heads)."""
    mod, _, keys, _ = KERNELS[kernel]
    c = _config(mod, G, D, arch)
    rows, bn, w, st = (c[k] for k in keys)
    if kernel in ("cmp_dq", "cmp_dkv"):
        rows *= c["GP"]
    return {"rows": rows, "keys": bn, "warps": w, "stages": st}


def _config(mod: str, G: int, D: int, arch: int) -> dict:
    if mod == "compressed":
        return _module(mod)._config(
            G, D, GEO["n_sel"], GEO["block_len"], GEO["block_stride"], GEO["sel_block"], arch
        )
    return _module(mod)._config(G, D, GEO["sel_block"], arch=arch)


def overrides(kernel: str, G: int, D: int, arch: int, rows: int, bn: int, warps: int, stages: int) -> dict:
    """`_config` overrides for one candidate (rows: a step's query rows; compressed dQ / dK/dV take
    them as BT = rows / GP tokens, so rows below GP are not a candidate: None)."""
    mod, _, (k_rows, k_keys, k_warps, k_stages), _ = KERNELS[kernel]
    c = _config(mod, G, D, arch)
    if kernel in ("cmp_dq", "cmp_dkv"):
        if rows < c["GP"]:
            return None
        rows //= c["GP"]
    return {k_rows: rows, k_keys: bn, k_warps: warps, k_stages: stages}


def compile_candidate(kernel: str, G: int, D: int, arch: int, over: dict) -> dict:
    """Compile `kernel` as launched for G x D (bf16) on sm_`arch` with `over` patched into its
    module's `_config`: registers, spills, shared memory, resident warps and the loop's SASS a FLOP."""
    import triton

    from nsa.attention import gpucheck

    modname, spec_name, keys, products = KERNELS[kernel]
    spec = select_sass.patched_spec(
        _module(modname), spec_name, G, D, arch, over, GEO["sel_block"], GEO["n_sel"]
    )
    c = {**_config(modname, G, D, arch), **over}  # as the spec saw it
    rows = c[keys[0]] * (c["GP"] if kernel in ("cmp_dq", "cmp_dkv") else 1)
    bn = c[keys[1]]
    rec = {"kernel": kernel, "G": G, "D": D, "arch": arch, "triton": triton.__version__,
           "rows": rows, "keys": bn, "warps": spec.num_warps, "stages": spec.num_stages}  # fmt: skip
    try:
        k, rep = gpucheck.compile_spec(spec, arch)
    except Exception as e:  # out of resources, a layout triton cannot lower: a result
        return {**rec, "error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    smem = int(k.metadata.shared) + rep["static_smem"]
    spill = rep["spill_stores"] + rep["spill_loads"]
    res = select_sass.resident_programs(rep["registers"], smem, spec.num_warps, SM[arch])
    insns, label_at = select_sass._parse(select_sass._disasm(k.asm["cubin"], arch))
    lo, hi = select_sass._loop(insns, label_at)
    path = keys_proxy.step_path(insns, label_at, lo, hi)
    trip = select_sass._classes(path)
    once = select_sass._classes(insns[:lo] + insns[hi:])
    flops = products * 2 * rows * bn * D  # useful: real head_dim, every row real (no padded heads)
    # Bytes a trip loads (bf16; L2 or DRAM): the key tile's K and V where the loop walks keys (the
    # forward, dQ), the rows' q and dO and their lse and delta where it walks query rows (dK/dV).
    trip_bytes = 4 * bn * D if kernel in ("cmp_fwd", "cmp_dq") else rows * (4 * D + 8)
    warp_insns = trip["insns"] * spec.num_warps
    rec.update(
        registers=rep["registers"], spill=spill, smem=smem, smem_ok=smem <= gpucheck.SMEM_LIMIT[arch],
        resident_warps=res * spec.num_warps, trip_insns=trip["insns"], trip_mma=trip["mma"],
        trip_wgmma=sum(op.startswith("HGMMA") for op, _, _ in path),  # sm_90's async warpgroup MMA
        trip_lds_sts=trip["lds_sts"], trip_bar=trip["bar"], mma_share=round(trip["mma"] / max(1, trip["insns"]), 4),
        # warp instructions issued per useful MFLOP of one trip of the main loop
        sass_per_mflop=round(warp_insns / flops * 1e6, 1),
        bytes_per_kflop=round(trip_bytes / flops * 1e3, 2),
        program_insns=once["insns"] * spec.num_warps,  # outside the loop, once a program
    )  # fmt: skip
    return rec


# The fitted price of each kernel's shipped build (bench/attention_cost/prices.py kinds; cmp_dkv at
# its shipped 4 warps), for `measured`.
KINDS = {
    "cmp_fwd": "cmp_attn@{d}",
    "cmp_dq": "cmp_dq@{d}",
    "cmp_dkv": "cmp_dkv@{d}@w4",
    "sel_dkdv": "sel_dkdv@{d}",
}


def measured(arch: int = 90) -> list[dict]:
    """The shipped builds the GPU measured (M7C G 6 x D 64 and the paper's G 16 x D 128) beside their
    fitted tensor-core efficiency on Hopper: does the loop's SASS a FLOP, its bytes a FLOP or its MMA
    instruction (wgmma or mma.sync) line up with what the H100/H200 runs gave?"""
    from nsa.attention.gpusuite.modelcheck import load_model

    am = load_model()
    prices = sys.modules["attention_cost.prices"]
    rows = []
    for (G, D), kernel in itertools.product(((6, 64), (16, 128)), KERNELS):
        s = shipped(kernel, G, D, 80)  # the tiles the GPUs measured: sm_80's (sm_90 ships flash_proxy's)
        rec = compile_candidate(kernel, G, D, arch, overrides(kernel, G, D, arch, *s.values()))
        kind = KINDS[kernel].format(d=64 if D <= 64 else 128)
        eff = prices.kind_cost(kind, am.GPUS["H100"])["eff"]
        rows.append({**rec, "kind": kind, "fitted_eff": round(eff, 3),
                     "eff_x_sass": round(eff * rec["sass_per_mflop"])})  # fmt: skip
    return rows


def candidates(kernel: str, G: int, D: int, arch: int, stages: tuple[int, ...] = STAGES):
    """Every (rows, keys, warps, stages) of the grid above, as _config overrides."""
    keys = tuple(k for k in KEYS if kernel != "sel_dkdv" or k <= GEO["sel_block"])
    for rows, bn, w, st in itertools.product(ROWS, keys, WARPS, stages):
        over = overrides(kernel, G, D, arch, rows, bn, w, st)
        if over is not None:
            yield over


def _point(text: str) -> tuple[int, int]:
    g, d = (int(x) for x in text.lower().split("x"))
    return g, d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=sorted(KERNELS), action="append", help="default: all four")
    ap.add_argument("--shape", action="append", type=_point, metavar="GxD", help="default: 16x128")
    ap.add_argument("--arch", type=int, nargs="+", default=[80, 90], choices=sorted(SM))
    ap.add_argument("--shipped", action="store_true", help="only the shipped setting")
    ap.add_argument(
        "--stages", type=int, nargs="+", default=list(STAGES), help="the grid's stages (default 1 2 3)"
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="R,K,W,S",
        help="only this candidate: rows, keys, warps, stages (repeatable), e.g. 64,64,8,2",
    )  # fmt: skip
    ap.add_argument("--what-if", action="store_true", help="print the model's what-if rows and exit")
    ap.add_argument(
        "--measured", action="store_true", help="the shipped builds beside their fitted efficiency (sm_90)"
    )
    args = ap.parse_args(argv)
    if args.what_if:
        for row in what_if():
            print(json.dumps(row), flush=True)
        return 0
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-tiles-d128-"))
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    if args.measured:
        for row in measured():
            print(json.dumps(row), flush=True)
        return 0
    sets = [tuple(int(x) for x in s.split(",")) for s in args.set]
    for (G, D), kernel, arch in itertools.product(
        args.shape or [(16, 128)], args.kernel or list(KERNELS), args.arch
    ):
        if args.shipped:
            s = shipped(kernel, G, D, arch)
            overs = [overrides(kernel, G, D, arch, s["rows"], s["keys"], s["warps"], s["stages"])]
        elif sets:
            overs = [o for o in (overrides(kernel, G, D, arch, *s) for s in sets) if o is not None]
        else:
            overs = list(candidates(kernel, G, D, arch, tuple(args.stages)))
        ship = shipped(kernel, G, D, arch)
        for over in overs:
            rec = compile_candidate(kernel, G, D, arch, over)
            rec["shipped"] = all(rec[k] == ship[k] for k in ship)
            print(json.dumps(rec), flush=True)
    return 0


# The first candidate of each kernel the probe carries (bench/kernel_probe.py's variants, in its
# notation: "rows:N" is BT = N // GP tokens), for the what-if: no spill on sm_80 / sm_90, triton 3.6
# and 3.9, at every head_dim > 64 point checked (bench/RESULTS.md).
CANDIDATES: dict[str, dict] = {
    "cmp_fwd": {"bm_fwd": 128, "bn_fwd": 64, "warps_fwd": 8},
    "cmp_dq": {"BT": "rows:128", "warps": 8, "stages_dq": 2},
    "cmp_dkv": {"bn_dkv": 64, "stages_dkv": 1},
    "sel_dkdv": {"BR": 128, "warps_kv": 8},
}
# Fitted efficiencies (bench/attention_cost/prices.py): what the what-if assumes each kernel reaches.
D64_EFF = {"cmp_dq": 0.56}  # cmp_dq@64: 128 rows x 64 keys, 8 warps (its head_dim-128 build: 0.22)


def what_if(
    Ts: tuple[int, ...] = (8192, 32768, 65536), gpus: tuple[str, ...] = ("H100", "H200")
) -> list[dict]:
    """The cost model's paper-shape NSA/FA2 (fwd+bwd) as shipped and under two ASSUMPTIONS (nothing
    measured them): `dq_at_d64_eff`, the compressed dQ at the candidate tile running at its head_dim-64
    build's fitted efficiency (0.56 instead of 0.22); `dkv_too_by_dq_ratio`, also the compressed
    and selected dK/dV sped up by the same 0.56 / 0.22 (the model prices each with one efficiency at
    both head_dims, so "their head_dim-64 efficiency" alone would change nothing). The model reads
    the candidate tiles from the patched `_config`s (programs, waves); per kernel ms beside."""
    from nsa.attention.gpusuite.modelcheck import load_model

    am = load_model()
    prices = sys.modules["attention_cost.prices"]
    cmp, sel = _module("compressed"), _module("selected")
    real = {"kind_cost": prices.kind_cost, "cmp": cmp._config, "sel": sel._config}
    ratio = D64_EFF["cmp_dq"] / prices.H100_COST["cmp_dq@128"]["eff"]

    def patched_cost(boost: dict[str, float]):
        def kind_cost(kind: str, gpu):
            cost = real["kind_cost"](kind, gpu)
            base, key, _ = prices.kind_parts(kind)
            if cost is None or gpu.arch != "hopper" or "@128" not in key or base not in boost:
                return cost
            return {**cost, "eff": boost[base](cost["eff"])}

        return kind_cost

    cases = {
        "shipped": ({}, False),
        "dq_at_d64_eff": ({"cmp_dq": lambda e: D64_EFF["cmp_dq"]}, True),
        "dkv_too_by_dq_ratio": (
            {
                "cmp_dq": lambda e: D64_EFF["cmp_dq"],
                "cmp_dkv": lambda e: e * ratio,
                "sel_dkdv": lambda e: e * ratio,
            },
            True,
        ),
    }
    names = ("cmp_fwd", "cmp_bwd_dq", "cmp_bwd_dkv", "sel_bwd_dkdv")
    rows = []
    try:
        for case, (boost, tiles) in cases.items():
            prices.kind_cost = patched_cost(boost)
            if tiles:
                cmp._config = _with_candidates(real["cmp"], ("cmp_fwd", "cmp_dq", "cmp_dkv"))
                sel._config = _with_candidates(real["sel"], ("sel_dkdv",))
            for gname in gpus:
                gpu = am.GPUS[gname]
                for T in Ts:
                    shape = am.SHAPES["paper"]
                    ks = am.ours_on(T, shape, gpu)
                    t = am.total(ks, gpu)
                    rows.append({
                        "what_if": case, "assumption": case != "shipped", "gpu": gname, "shape": "paper", "T": T,
                        "fwd_bwd": round(t / am.total(am.flash2(T, shape), gpu), 3), "nsa_ms": round(t * 1e3, 2),
                        "kernels_ms": {k.name: round(k.time(gpu) * 1e3, 2) for k in ks if k.name in names},
                    })  # fmt: skip
            cmp._config, sel._config = real["cmp"], real["sel"]
    finally:
        prices.kind_cost, cmp._config, sel._config = real["kind_cost"], real["cmp"], real["sel"]
    return rows


def _with_candidates(fn, kernels: tuple[str, ...]):
    """`fn` (a module's `_config`) with CANDIDATES' overrides of `kernels` past head_dim 64."""

    probe = load_by_path("kernel_probe", HERE / "kernel_probe.py")

    def config(G, D, *a, **k):
        c = fn(G, D, *a, **k)
        for kern in kernels if D > 64 else ():
            c = probe._apply(c, CANDIDATES[kern], G)
        return c

    return config


if __name__ == "__main__":
    sys.exit(main())
