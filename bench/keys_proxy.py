"""A GPU-free time proxy for the key-major selected kernels `_sel_bwd_keys_kernel` and `_sel_fwd_keys_kernel`.

Owns the evidence behind docs/attention.md's paragraph on what bounds the key-major kernels, and its
calibration on the H200 runs. It compiles a kernel as selected.py's `gpucheck_specs` launches it
(under `--set KEY=VALUE` overrides of `selected._config`), disassembles it with bench/select_sass.py's
helpers and counts, per program, the prologue and epilogue once and, per step of BR (pair, head)
rows, the row loop's path (`step_path`: the loop body with every conditional branch falling
through; in the backward those are the int64 divisions' 32-bit fast paths, the slow path a call
that never runs for positions < 2**32). Steps come from the reverse index's segments (`segments`):
pairs per selection block from a model of the table, not the exact table (`pairs_per_block`: the
forced blocks 0, own and previous, and the other n - 3 spread evenly over a query's earlier
candidate blocks, as random scores spread them), cut into S-pair segments as `reverse_index` cuts
them. The static grid's spare segments run prologue and epilogue only.

The proxy, per launch on an H200 (132 SMs x 4 schedulers, 1.98 GHz): the sum of fitted terms, each
a constant (SM scheduler cycles, non-negative, least squares on relative error) times a count:
warp instructions, shared-memory accesses and tensor-core instructions over the SMs' 4 schedulers,
and `step`, one latency a step per program slot (steps over SMs x the programs an SM holds, from
registers, shared memory and warps). `FORMS` are the term sets tried; each is fitted per kernel and
on both kernels at once, and checked out of sample by leaving each measured setting out of its own
fit (`held_out`). The rows use `--form` (default issue+smem, bench/select_proxy.py's form without
its latency floor). Beside it, floors not fitted (`floors`): issue at one instruction a cycle, DRAM
at 4.0 TB/s (PDQ / PO written, q and dO gathered once a row, PDK / PDV), tensor cores at 989 TFLOP/s.
The measured points: the suite's per-kernel tables (2026-11-26b-h200-speed-final.json and
-speed-keys.json: the shipped BR_keys 64 / BR_f 128, M7C at 2k..64k) and the key-major probe's
variants (probe-keys-{tune,final}.jsonl), whose one number is the whole selected op: a variant's
kernel time is taken as the speed runs' mean kernel ms at the same T plus the probe's change of
backward (fwd_bwd - fwd) or forward ms against the shipped setting's row of the same file (the
other kernels of the op do not change with these keys). Prints one JSON object per line; asserts
nothing.

  .venv/bin/python bench/keys_proxy.py                         # calibration rows and the fit
  .venv/bin/python bench/keys_proxy.py --predict m7c:8192:8 --set BR_keys=32     # a candidate
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/keys_proxy.py --recount   # re-record SASS

The measured settings' SASS counts (triton 3.6, the GPU runs' version, sm_90) are recorded in
bench/keys_proxy_sass.json (`--recount` compiles them again). Those points carry `MEASURED`, the
values of keys whose default changed after the runs (keys_div32 False, and keys_dq_mma False for
the backward: the kernels' paths as measured, kept unchanged), so `--set keys_div32=False --set
keys_dq_mma=False` prices the measured build. A compiled
candidate's row also gives its step by opcode class (`step_ops`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
select_sass = load_by_path("select_sass", HERE / "select_sass.py")
load_by_path("attention_model", HERE / "attention_model.py")  # bench/attention_cost, by path
from attention_cost import balance  # noqa: E402  (the cost model's schedule: pairs_per_block)

SASS_FILE = HERE / "keys_proxy_sass.json"
SHAPES = {"m7c": (2, 6, 64), "paper": (4, 16, 128)}  # (Hkv, G, D): the key-major kernels run at G <= 8 only;
# the paper shape (G 16 x D 128) for the query-major path's dK/dV (bench/dkdv_proxy.py)
LP, N_SEL = 64, 16  # l' and n (configs/m7c_125m.yaml)
H200 = {"sms": 132, "sched": 4, "ghz": 1.98, "regs": 65536, "warps": 64, "blocks": 32, "smem": 233472,
        "dram_tbs": 4.0, "tc_tflops": 989.0}  # fmt: skip
KERNELS = {"bwd": ("selected_bwd_keys", "_sel_bwd_keys_kernel", "BR_keys", "warps_keys", "stages_kv"),
           "fwd": ("selected_fwd_keys", "_sel_fwd_keys_kernel", "BR_f", "warps_fk", "stages_fk"),
           "dkdv": ("selected_bwd_dkdv", "_sel_bwd_dkdv_kernel", "BR", "warps_kv", "stages_kv")}  # fmt: skip
PRODUCTS = {"bwd": 5, "fwd": 2, "dkdv": 4}  # tensor-core products a step


# ---- SASS ------------------------------------------------------------------------------------------


def step_path(insns: list[tuple[str, str, bool]], label_at: dict[str, int], lo: int, hi: int) -> list:
    """The instructions one trip of the loop [lo, hi) issues when every conditional branch falls
    through and every unconditional one is taken (a forward jump inside the loop): the division fast
    paths run, their slow-path calls are jumped over."""
    out, i = [], lo
    while i < hi:
        op, rest, pred = insns[i]
        out.append(insns[i])
        t = label_at.get(select_sass._target(rest), -1) if op.startswith("BRA") and not pred else -1
        i = t if i < t < hi else i + 1
    return out


# A step's SASS by what it does (`step_ops`): the classes a candidate cuts (bench/RESULTS.md
# "keysdiv"). Opcodes by their first dot-separated word; anything else integer arithmetic (IMAD,
# LEA, IADD3, VIADD, SHF, LOP3...: addresses, row decoding, divisions).
OPCLASSES = {
    "mma": ("HGMMA", "HMMA", "WARPGROUP"),
    "smem": ("LDS", "STS", "LDSM", "STSM"),
    "sync": ("BAR", "MEMBAR", "FENCE", "WARPSYNC", "DEPBAR"),
    "gmem": ("LDG", "STG"),
    "float": ("FFMA", "FMUL", "FADD", "MUFU", "FSEL", "FMNMX", "FSETP", "FCHK"),
    "convert": ("F2FP", "I2F", "F2I", "I2FP"),
    "predicate": ("ISETP", "P2R", "R2P", "PLOP3", "SEL"),
    "move": ("MOV", "CS2R", "R2UR", "UMOV", "S2R", "S2UR", "LDC", "ULDC"),
    "branch": ("BRA", "BSSY", "BSYNC", "EXIT", "CALL", "RET"),
}


def opclasses(seq) -> dict:
    """Instructions of `seq` ((opcode, operands, predicated) as select_sass parses them) per OPCLASSES
    class, plus "int" for the rest."""
    out = dict.fromkeys([*OPCLASSES, "int"], 0)
    for op, _, _ in seq:
        base = op.split(".")[0]
        if base != "NOP":
            out[next((c for c, ops in OPCLASSES.items() if base in ops), "int")] += 1
    return out


def paths(lines: list[str]) -> dict:
    """Per-warp counts: `prologue` (before the row loop), `epilogue` (after it, to the last EXIT),
    `step` (one trip of the loop, `step_path`), `loop_static` (every loop instruction once), and
    `step_ops` (the step by `opclasses`)."""
    insns, label_at = select_sass._parse(lines)
    lo, hi = select_sass._loop(insns, label_at)
    exits = [k for k, x in enumerate(insns) if x[0].startswith("EXIT")]
    last_exit = max(exits, default=len(insns) - 1)
    step = step_path(insns, label_at, lo, hi)
    return {
        "prologue": select_sass._classes(insns[:lo]),
        "epilogue": select_sass._classes(insns[hi : last_exit + 1]),
        "step": select_sass._classes(step),
        "loop_static": select_sass._classes(insns[lo:hi]),
        "step_ops": opclasses(step),
    }


def settings(kernel: str, over: dict, G: int = 6, D: int = 64, arch: int = 90) -> dict:
    """BR, warps, stages, pdq_bits of `kernel` under selected._config with `over`."""
    from nsa.attention.triton import selected as sel

    c = {**sel._config(G, D, LP, arch=arch), **over}
    _, _, br, w, st = KERNELS[kernel]
    return {"BR": c[br], "warps": c[w], "stages": c[st], "pdq_bits": c["pdq_bits"], "BN": c["BN"]}


def compile_keys(kernel: str, over: dict, G: int = 6, D: int = 64, arch: int = 90) -> dict:
    """Compile `kernel` ("bwd"/"fwd") as selected.gpucheck_specs launches it at G x D bf16 on
    sm_`arch` with `over` patched into selected._config: registers, spills, shared memory, paths."""
    import triton

    from nsa.attention import gpucheck
    from nsa.attention.triton import selected as sel

    spec = select_sass.patched_spec(sel, KERNELS[kernel][0], G, D, arch, over, sel_block=LP, n_sel=N_SEL)
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # registers and spills from this compile's ptxas
    if "TRITON_CACHE_DIR" not in os.environ:  # a cached kernel would print no ptxas log
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="nsa-keys-proxy-")
    k, rep = gpucheck.compile_spec(spec, arch)
    return {"registers": rep["registers"], "spill": rep["spill_stores"] + rep["spill_loads"],
            "smem": k.metadata.shared, "triton": triton.__version__,
            "paths": paths(select_sass._disasm(k.asm["cubin"], arch))}  # fmt: skip


# ---- the grid: segments of the reverse index --------------------------------------------------------


def pairs_per_block(T: int, n: int = N_SEL, lp: int = LP) -> list[int]:
    """(query, block) pairs listing each selection block of one (batch, KV head) sequence, modelled:
    a query of block m lists every block 0..m while m < n; past that the forced 0, m - 1, m and
    n - 3 of the m - 2 others, spread evenly (random scores pick them alike). The cost model's
    schedule counts the same table: bench/attention_cost/balance.py owns it (no torch there)."""
    return balance.pairs_per_block(T, n, lp)


def segments(
    T: int, B: int, Hkv: int, G: int, BR: int, n: int = N_SEL, cnt: list[int] | None = None, target: int = 0
) -> dict:
    """programs (the static grid, reverse_index's NSEG), used segments, steps (BR-row trips summed over
    programs) and pairs of one launch (one key chunk: BN = l'); `cnt`: pairs per block of one
    sequence (default: `pairs_per_block`), the same for every (batch, KV head); `target`: selected.py
    `_config`'s seg_target (0: T/4 alone, what the measured runs had at their shapes)."""
    from nsa.attention.triton.selected_keys import index_bounds

    bh = B * Hkv
    S, nseg = index_bounds(bh, T, n, LP, target)  # the kernels' S and static grid
    cnt = pairs_per_block(T, n) if cnt is None else cnt
    used = steps = pairs = 0
    for c in cnt:
        k = -(-c // S)
        used += k
        pairs += c
        steps += (k - 1) * -(-(S * G) // BR) + -(-((c - (k - 1) * S) * G) // BR) if c else 0
    return {"programs": nseg, "used": used * bh, "steps": steps * bh, "pairs": pairs * bh, "S": S}


# ---- the terms ------------------------------------------------------------------------------------


def resident_programs(registers: int, smem: int, warps: int, gpu=H200) -> int:
    """Programs an SM of `gpu` (the H200 by default) holds: select_sass.resident_programs."""
    return select_sass.resident_programs(registers, smem, warps, gpu)


def launch(kernel: str, T: int, B: int, st: dict, counts: dict, shape: str = "m7c") -> dict:
    """One launch's dynamic counts, bytes and FLOPs (the inputs of `features` and `floors`)."""
    Hkv, G, D = SHAPES[shape]
    sg = segments(T, B, Hkv, G, st["BR"])
    p = counts["paths"]
    dyn = {
        c: st["warps"] * (sg["programs"] * (p["prologue"][c] + p["epilogue"][c]) + sg["steps"] * p["step"][c])
        for c in p["step"]
    }
    rows = sg["pairs"] * G
    if kernel == "bwd":  # PDQ written, q and dO gathered (bf16), PDK/PDV written (fp32)
        pdq = 4 if st["pdq_bits"] == 32 else 2
        nbytes = rows * D * (pdq + 2 * 2) + sg["programs"] * LP * D * 4 * 2
    elif kernel == "dkdv":  # q and dO gathered (bf16), PDK/PDV written (fp32)
        nbytes = rows * D * 2 * 2 + sg["programs"] * LP * D * 4 * 2
    else:  # PO (bf16) and PL (fp32) written, q gathered
        nbytes = rows * (D * 2 + 4) + rows * D * 2
    flops = 2 * sg["steps"] * st["BR"] * LP * D * PRODUCTS[kernel]
    res = resident_programs(counts["registers"], counts["smem"], st["warps"])
    return {**sg, "dyn": dyn, "bytes": nbytes, "flops": flops, "resident": res,
            "step_insns": p["step"]["insns"], "warps": st["warps"], "BR": st["BR"]}  # fmt: skip


def floors(ln: dict, gpu=H200) -> dict:
    """Milliseconds of the throughput bounds, none fitted: issue (one warp instruction a scheduler a
    cycle), DRAM (4.0 TB/s) and tensor cores (989 TFLOP/s dense bf16)."""
    return {
        "issue": ln["dyn"]["insns"] / (gpu["sms"] * gpu["sched"] * gpu["ghz"] * 1e6),
        "dram": ln["bytes"] / (gpu["dram_tbs"] * 1e9),
        "tensor": ln["flops"] / (gpu["tc_tflops"] * 1e9),
    }


# What a fitted constant multiplies, in SM cycles: warp instructions, shared-memory accesses and
# tensor-core instructions (HMMA / HGMMA) shared by an SM's 4 schedulers, and `step`, one latency a
# step per program slot (steps over SMs x resident programs: a program's steps run one after another).
FEATURES = ("insn", "smem", "mma", "step")
FORMS = {
    "issue+smem": ("insn", "smem"),  # bench/select_proxy.py's form, without its latency floor
    "step+mma": ("step", "mma"),
    "step+insn": ("step", "insn"),
    "all": FEATURES,
}


def features(ln: dict, gpu=H200) -> dict:
    sched = gpu["sms"] * gpu["sched"]
    return {
        "insn": ln["dyn"]["insns"] / sched,
        "smem": ln["dyn"]["lds_sts"] / sched,
        "mma": ln["dyn"]["mma"] / sched,
        "step": ln["steps"] / (gpu["sms"] * max(ln["resident"], 1)),
    }


def parts_ms(ln: dict, f: dict, gpu=H200) -> dict:
    """Each fitted term's milliseconds: constant (cycles) x feature / clock; the proxy is their sum."""
    x = features(ln, gpu)
    return {k: f[k] * x[k] / (gpu["ghz"] * 1e6) for k in f}


def nnls_rel(xs: list[list[float]], ys: list[float], ws: list[float] | None = None) -> list[float]:
    """Non-negative least squares on relative error, sum w ((c . x) / y - 1)^2 (w 1 without `ws`), by
    trying every subset of the columns (a handful here): negative cycles would mean nothing."""
    import numpy as np

    r = np.sqrt(np.array(ws, dtype=float)) if ws is not None else np.ones(len(ys))
    A = np.array([[v / y for v in x] for x, y in zip(xs, ys)]) * r[:, None]
    b = r.copy()
    n = A.shape[1]
    best, best_r = [0.0] * n, float("inf")
    for mask in range(1, 2**n):
        cols = [i for i in range(n) if mask >> i & 1]
        c = np.linalg.lstsq(A[:, cols], b, rcond=None)[0]
        if (c < 0).any():
            continue
        full = np.zeros(n)
        full[cols] = c
        res = float(((A @ full - b) ** 2).sum())
        if res < best_r:
            best, best_r = [float(v) for v in full], res
    return best


def fit(rows: list[dict], form: tuple[str, ...], gpu=H200) -> dict:
    """The constants (cycles) of `form` over measured rows (launch dicts with "ms")."""
    clock = gpu["ghz"] * 1e6
    xs = [[features(r, gpu)[k] for k in form] for r in rows]
    c = nnls_rel(xs, [r["ms"] * clock for r in rows])
    return dict(zip(form, c))


def proxy_ms(ln: dict, f: dict) -> tuple[float, str]:
    """The proxy's ms (the fitted terms' sum) and the term that takes most of it."""
    p = parts_ms(ln, f)
    return sum(p.values()), max(p, key=p.get)


# ---- the measured points ---------------------------------------------------------------------------

SPEED = ["bench/gpu/2026-11-26b-h200-speed-final.json", "bench/gpu/2026-11-26b-h200-speed-keys.json"]
PROBE = "bench/gpu/2026-11-26b-h200-probe-keys-{}.jsonl"
# _config's values in force when each probe file was measured (bench/RESULTS.md "Key-major selected
# kernels ... measured on an H200"): `first` and `tune` ran the first build (BR_f 64, BR_keys 32),
# `final` the shipped one. `first` has no shipped-setting row to anchor on: not used.
PROBE_BASE = {"tune": {"BR_f": 64, "BR_keys": 32}, "final": {}}
SHIPPED = {"bwd": {"BR_keys": 64}, "fwd": {"BR_f": 128}}
KERNEL_NAME = {k: v[1] for k, v in KERNELS.items()}
# The keys each kernel's setting depends on (other variants change other kernels of the op).
OWN_KEYS = {
    "bwd": ("BR_keys", "warps_keys", "stages_kv", "pdq_bits", "keys_div32", "keys_dq_mma"),
    "fwd": ("BR_f", "warps_fk", "stages_fk", "keys_div32"),
}


def speed_ms(kernel: str) -> dict[tuple[int, int], list[float]]:
    """(T, B) -> the kernel's ms in each speed run (M7C)."""
    out: dict[tuple[int, int], list[float]] = {}
    for path in SPEED:
        for r in json.loads((ROOT / path).read_text())["sections"]["speed"]["records"]:
            if r["shape"] != "m7c":
                continue
            for k in r.get("nsa_kernels", []):
                if k["kernel"] == KERNEL_NAME[kernel]:
                    out.setdefault((r["T"], r["B"]), []).append(k["ms"])
    return out


# Keys whose _config default changed after the GPU runs, at the value those runs measured (the measured
# points carry it, so their SASS counts stay those of the measured build: bench/keys_proxy_sass.json).
MEASURED = {"bwd": {"keys_div32": False, "keys_dq_mma": False}, "fwd": {"keys_div32": False}}


def _own(kernel: str, over: dict) -> dict:
    """The keys of `over` that set this kernel, with the shipped value of its rows a step filled in."""
    o = {k: v for k, v in over.items() if k in OWN_KEYS[kernel]}
    br = KERNELS[kernel][2]
    return {br: o.pop(br, SHIPPED[kernel][br]), **o}


def _measured(kernel: str, over: dict) -> dict:
    """`_own` of a measured point: the keys of MEASURED at the runs' values unless `over` sets them."""
    return _own(kernel, {**MEASURED[kernel], **over})


def measured_points(kernel: str) -> list[dict]:
    """Every measured time of `kernel`: the speed runs' rows (shipped setting), and the probe's
    variants of this kernel's keys, anchored on the speed runs (module docstring)."""
    speed = speed_ms(kernel)
    pts = [{"source": f"speed-{i}", "setting": _measured(kernel, {}), "T": T, "B": B, "ms": ms[i]}
           for (T, B), ms in sorted(speed.items()) for i in range(len(ms))]  # fmt: skip
    for name, base in PROBE_BASE.items():
        rows = [json.loads(x) for x in (ROOT / PROBE.format(name)).read_text().splitlines()]
        for r in rows:
            if r["variant"].get("fwd_keys") is False or r["variant"].get("bwd_keys") is False:
                continue
            r["over"] = {**base, **r["variant"]}
            r["own"] = _measured(kernel, r["over"])
        by_tb: dict[tuple[int, int], list[dict]] = {}
        for r in rows:
            if "own" in r:
                by_tb.setdefault((r["T"], r["B"]), []).append(r)
        for (T, B), group in sorted(by_tb.items()):
            # Only rows that change this kernel's keys (or none): the others vary other kernels.
            mine = [r for r in group if set(r["variant"]) <= set(OWN_KEYS[kernel])]
            ref = [r for r in mine if r["own"] == _measured(kernel, {})]
            if not ref or (T, B) not in speed:
                continue
            val = (lambda r: r["fwd_ms"]) if kernel == "fwd" else (lambda r: r["fwd_bwd_ms"] - r["fwd_ms"])
            anchor = sum(speed[(T, B)]) / len(speed[(T, B)])
            seen = [_measured(kernel, {})]
            for r in mine:
                if r["own"] in seen:
                    continue
                seen.append(r["own"])
                pts.append({"source": f"probe-{name}", "setting": r["own"], "T": T, "B": B,
                            "ms": round(anchor + val(r) - val(ref[0]), 4)})  # fmt: skip
    return pts


def _key(kernel: str, setting: dict) -> str:
    return kernel + ":" + ",".join(f"{k}={v}" for k, v in sorted(setting.items()))


def recount(kernel: str, points: list[dict], sass: dict) -> None:
    for p in points:
        k = _key(kernel, p["setting"])
        if k not in sass:
            sass[k] = compile_keys(kernel, p["setting"])
            print(json.dumps({"recorded": k, **{x: sass[k][x] for x in ("registers", "spill", "smem")}}),
                  file=sys.stderr, flush=True)  # fmt: skip


def rows_of(kernel: str, points: list[dict], sass: dict) -> list[dict]:
    out = []
    for p in points:
        st = settings(kernel, p["setting"])
        c = sass[_key(kernel, p["setting"])]
        ln = launch(kernel, p["T"], p["B"], st, c)
        out.append({**p, "kernel": kernel, "registers": c["registers"], "spill": c["spill"], "smem": c["smem"],
                    "stages": st["stages"], **ln})  # fmt: skip
    return out


def predict(rows: list[dict], f: dict) -> list[dict]:
    out = []
    for r in rows:
        ms, bound = proxy_ms(r, f)
        row = {"calibration" if "ms" in r else "prediction": "h200", "kernel": KERNEL_NAME[r["kernel"]],
               "source": r.get("source"), "setting": r["setting"], "T": r["T"], "B": r["B"],
               "registers": r["registers"], "spill": r["spill"], "smem": r["smem"], "resident": r["resident"],
               "programs": r["programs"], "steps": r["steps"], "step_insns": r["step_insns"],
               "warp_insns": r["dyn"]["insns"], "parts_ms": {k: round(v, 3) for k, v in parts_ms(r, f).items()},
               "floors_ms": {k: round(v, 3) for k, v in floors(r).items()}, "bound": bound,
               "proxy_ms": round(ms, 3)}  # fmt: skip
        if "ms" in r:
            row.update(ms=r["ms"], error=round(ms / r["ms"] - 1, 3))
        out.append(row)
    return out


def held_out(rows: list[dict], form: tuple[str, ...]) -> list[float]:
    """Out of sample: each distinct (kernel, setting) predicted by the constants fitted on the
    others (leave one setting out); the relative errors of its points."""
    errs = []
    keys = {_key(r["kernel"], r["setting"]) for r in rows}
    for k in sorted(keys):
        train = [r for r in rows if _key(r["kernel"], r["setting"]) != k]
        f = fit(train, form)
        errs += [r["error"] for r in predict([r for r in rows if _key(r["kernel"], r["setting"]) == k], f)]
    return errs


def summary(group: str, name: str, rows: list[dict], form: tuple[str, ...], f: dict) -> dict:
    errs = sorted(abs(r["error"]) for r in predict(rows, f))
    loo = sorted(abs(e) for e in held_out(rows, form))
    return {"fit": group, "form": name, "cycles": {k: round(v, 3) for k, v in f.items()},
            "points": len(errs), "settings": len({_key(r["kernel"], r["setting"]) for r in rows}),
            "within_20pct": sum(e <= 0.2 for e in errs), "max_abs_error": errs[-1],
            "median_abs_error": errs[len(errs) // 2], "held_out_within_20pct": sum(e <= 0.2 for e in loo),
            "held_out_max_abs_error": round(loo[-1], 3)}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=("bwd", "fwd"), action="append", help="default: both")
    ap.add_argument("--recount", action="store_true", help="compile the measured settings again and record")
    ap.add_argument("--predict", nargs="*", help="m7c:T:B points of a candidate setting (--set)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a selected._config key (each kernel takes its own: OWN_KEYS)",
    )
    ap.add_argument(
        "--form", choices=sorted(FORMS), default="issue+smem", help="the fitted terms of the rows"
    )
    args = ap.parse_args(argv)
    sass = json.loads(SASS_FILE.read_text()) if SASS_FILE.exists() else {}
    # True/False as booleans (keys_div32): the string "False" would be a true constexpr.
    bools = {"True": True, "False": False}
    over = {k: bools.get(v, select_sass._value(v)) for k, v in (s.split("=", 1) for s in args.set)}
    from nsa.attention.triton import selected as sel

    unknown = sorted(set(over) - set(sel._config(6, 64, LP, arch=90)))
    if unknown:  # a typo would otherwise price the shipped setting under another name
        ap.error(f"--set {unknown[0]}: not a key of nsa/attention/triton/selected.py _config")
    all_rows = {}
    for kernel in args.kernel or ["bwd", "fwd"]:
        points = measured_points(kernel)
        if args.recount:
            recount(kernel, points, sass)
            SASS_FILE.write_text(json.dumps(sass, indent=1, sort_keys=True) + "\n")
        all_rows[kernel] = rows_of(kernel, points, sass)
    # Each form fitted per kernel, and over both kernels at once (shared constants: the real test).
    groups = {
        **{KERNEL_NAME[k]: r for k, r in all_rows.items()},
        "both": [r for rs in all_rows.values() for r in rs],
    }
    for name, rows in groups.items():
        for fname, form in FORMS.items():
            print(json.dumps(summary(name, fname, rows, form, fit(rows, form))), flush=True)
    for kernel, rows in all_rows.items():
        form = FORMS[args.form]
        f = fit(rows, form)
        if args.predict is None:
            for r in predict(rows, f):
                print(json.dumps({**r, "form": args.form}), flush=True)
            continue
        own = _own(kernel, over)
        c = sass.get(_key(kernel, own)) or compile_keys(kernel, own)
        st = settings(kernel, own)
        for spec in args.predict:
            shape, T, B = spec.split(":")
            ln = launch(kernel, int(T), int(B), st, c, shape)
            r = {"setting": own, "T": int(T), "B": int(B), "kernel": kernel, "registers": c["registers"],
                 "spill": c["spill"], "smem": c["smem"], **ln}  # fmt: skip
            ops = {"step_ops": c["paths"]["step_ops"]} if "step_ops" in c["paths"] else {}  # recorded: none
            row = {**predict([r], f)[0], "form": args.form, "triton": c["triton"], **ops}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
