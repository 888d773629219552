"""The A100 (sm_80) SASS of the two kernels with a GPU-free time proxy, and their launch candidates.

Owns bench/a100_proxy_sass.json, the record the cost model prices `_cmp_select` and
`_sel_bwd_keys_kernel` on an A100 from (bench/attention_cost/sass80.py): each setting's sm_80 SASS
paths (compiled as gpucheck launches it, bench/select_proxy.py's and bench/keys_proxy.py's
compilers at arch 80), registers, spills and shared memory; the selection's merge rates per tile
(bench/select_proxy.py's simulation on the GPU runs' inputs, B = 1, at MERGE_T: the model
interpolates in log T); and the two proxies' fitted constants (cycles an instruction, a
shared-memory access, a warp's latency), taken from their H200 calibration as recorded. The
assumption: those cycles carry over from Hopper to Ampere per SM cycle (docs/attention.md, A100).
Without `--recount` it prints, per setting and point, the proxy's A100 milliseconds (108 SMs x 4
schedulers x 1.41 GHz, resident warps from sm_80's 64 K registers and 164 KB shared memory) and the
tensor-core floor at 312 TFLOP/s beside it: the candidates of docs/attention.md's sm_80 settings;
and, per keys-backward setting, where its A100 counts lie against the keys proxy's calibrated range
(`range_rows`: warp instructions and shared-memory accesses a scheduler, warps a scheduler, at the
H200 points' token counts), the check a setting must pass before it ships on the proxy's word.
Prints one JSON object per line; asserts nothing.

  .venv/bin/python bench/a100_proxy.py                   # candidates at M7C / paper, B = 1
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/a100_proxy.py --recount   # re-record
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/a100_proxy.py --recompile  # SASS only (minutes)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path
from nsa.attention.triton.selected_keys_bwd import KEYS_BR32_SM80

HERE = Path(__file__).resolve().parent
SASS_FILE = HERE / "a100_proxy_sass.json"
SHAPES = {"m7c": (6, 64), "paper": (16, 128)}  # (G, D)
# The selection settings recorded (tokens a tile, warps, halves, register cap): what compressed.py
# ships on sm_80 (first; 4 / 4 / 0 before 2026-11-26's proxy-chosen setting) and the candidates. The key-major backward at M7C only (G <= 8).
# A fifth entry 1: the split loop (select_split, bench/RESULTS.md "selsplit"); a sixth 1: Eq. 9's shared
# key without its gathers (select_shm, "selshm"): at M7C sm_80's setting the pair (shipped on sm_80
# since RESULTS "a100shm") and each alone. Every entry is compiled with both switches as it names them
# (absent: 0), not as `_config` ships them, so a record's key is its compile.
SELECT = {
    "m7c": [(4, 2, 1, 168, 1, 1), (4, 2, 1, 168), (4, 4, 0, 0), (4, 4, 1, 0), (4, 2, 1, 0), (4, 2, 0, 0),
            (2, 2, 1, 0), (2, 2, 0, 0), (2, 4, 1, 0), (2, 4, 0, 0), (2, 1, 1, 0), (8, 4, 1, 0), (4, 1, 1, 0),
            (4, 2, 1, 168, 1), (4, 2, 1, 168, 0, 1)],
    "paper": [(4, 4, 0, 0), (4, 4, 1, 0), (2, 4, 0, 0), (8, 4, 1, 0), (4, 2, 1, 0), (4, 2, 1, 168), (2, 2, 1, 0),
              (4, 4, 0, 0, 1)],
}  # fmt: skip
# The keys backward's settings recorded, each over sm_80's shipped one (64 rows a step with the per-row
# key limit, keys_rowlim; bench/RESULTS.md "a100ship"). Only settings the launcher runs as given
# (selected_keys_bwd.keys_rows: gpucheck's rows, which these compiles are, go through it too): 64 rows
# without the limit, which spilled 88-96 B (bench/RESULTS.md "a100keys"), launch 32 rows and are
# not recorded. B32: sm_80's 32 rows without the limit, shipped before, and the variants priced
# against it.
B32 = KEYS_BR32_SM80
KEYS = [{}, B32, {**B32, "keys_div32": False}, {**B32, "BR_keys": 16}, {**B32, "BR_keys": 16, "stages_kv": 2},
        {**B32, "warps_keys": 8}, {**B32, "pdq_bits": 32}, {**B32, "pdq_bits": 32, "keys_div32": False, "keys_dq_mma": False},
        {**B32, "keys_dq_mma": False}, {**B32, "keys_dq_mma": False, "keys_div32": False},
        # 32 rows with the limit, and the shipped 64 rows' neighbours
        {"BR_keys": 32}, {"pdq_bits": 32}, {"stages_kv": 2}, {"warps_keys": 8}, {"BR_keys": 128, "warps_keys": 8}]  # fmt: skip
MERGE_T = [2048, 4096, 8192, 16384, 32768, 65536]
POINTS = [8192, 32768, 65536]


def _sibling(name: str):
    return load_by_path(name, HERE / f"{name}.py")


model = _sibling("attention_model")  # the cost model: its A100 counts and prices read the record
sass80, prices = sys.modules["attention_cost.sass80"], sys.modules["attention_cost.prices"]
select_key, keys_key = sass80.select_key, sass80.keys_key


def keys_setting(G: int, D: int, over: dict) -> dict:
    """The keys backward's setting `over` sm_80's shipped `_config`; ValueError where the launcher
    would not run it as given (selected_keys_bwd.keys_rows: a 64-row setting that does not fit), so
    no record names a setting its compile is not."""
    from nsa.attention.triton import selected as sel
    from nsa.attention.triton.selected_keys_bwd import keys_rows

    c = {**sel._config(G, D, 64, arch=80), **over}
    if keys_rows(c, 80) != c:
        raise ValueError(
            f"bench/a100_proxy.py KEYS: {over} does not launch as given on sm_80 (selected_keys_bwd.keys_rows "
            f"runs {KEYS_BR32_SM80} instead: 64 rows need keys_rowlim, keys_div32 and keys_dq_mma); record that"
        )
    names = ("BR_keys", "warps_keys", "stages_kv", "pdq_bits", "keys_div32", "keys_dq_mma", "keys_rowlim")
    return {k: c[k] for k in names}


def _keys_settings():
    """(setting, record key) of each distinct KEYS entry at M7C (an override that is the default
    already, or repeats one before it, once)."""
    seen = set()
    for over in KEYS:
        st = keys_setting(6, 64, over)
        key = keys_key(6, 64, st)
        if key not in seen:
            seen.add(key)
            yield st, key


# The kernels priced on A100 by their Hopper fit carried over per SM cycle, scaled by their sm_80 over
# sm_90 SASS a step (the key-major family the backward's proxy calibrates): kind -> (gpucheck spec
# compiled, G, D). The keys forward twice: the masked walk over every pair (what every GPU run measured;
# gpucheck's variant `selected_fwd_keys_masked` since fwd_forced_merge ships) and the shipped mask-free
# walk (@free).
CARRY = {
    "sel_keys_fwd@64": ("selected_fwd_keys_masked", 6, 64),
    "sel_keys_fwd@64@free": ("selected_fwd_keys", 6, 64),
    "sel_dkdv@64": ("selected_bwd_dkdv", 6, 64),
    "sel_dkdv@128": ("selected_bwd_dkdv", 16, 128),
}


def step_counts(spec_name: str, G: int, D: int, arch: int) -> dict:
    """One loop trip's SASS counts (keys_proxy.paths' `step`) of a selected.py kernel as gpucheck
    launches it at G x D bf16 on sm_`arch` with sm_80's `_config` (the A100 kind carries no sm_90
    launch tag, so both sides compile its settings: sm_90 ships 128 rows a dK/dV step at head_dim 128,
    the tagged `sel_dkdv@br128`, where sm_80 and the fit's untagged kind run 32), with its registers
    and spills."""
    import os

    from nsa.attention import gpucheck
    from nsa.attention.triton import selected as sel

    kp, ss = _sibling("keys_proxy"), sys.modules["select_sass"]
    spec = ss.patched_spec(sel, spec_name, G, D, arch, {} if arch == 80 else sel._config(G, D, 64, arch=80))
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    k, rep = gpucheck.compile_spec(spec, arch)
    step = kp.paths(ss._disasm(k.asm["cubin"], arch))["step"]
    return {"registers": rep["registers"], "spill": rep["spill_stores"] + rep["spill_loads"], "step": step}


def recount(old: dict | None = None) -> dict:
    """Compile every recorded setting at sm_80 (this triton); with `old` (a record) keep its merge
    rates and constants (they depend on the inputs and the H200 points, not on the kernels' code),
    else simulate the merge rates and take the two proxies' constants from their H200 calibration
    (select_proxy's fit over its measured points, keys_proxy's issue+smem fit of the backward)."""
    import os
    import tempfile

    import triton

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="nsa-a100-proxy-")  # fresh: a ptxas log each
    sp, kp = _sibling("select_proxy"), _sibling("keys_proxy")
    rec: dict = {"triton": triton.__version__, "select": {}, "keys_bwd": {}, "carry": {},
                 "merge_rate": dict(old["merge_rate"]) if old else {}}  # fmt: skip
    for shape, settings in SELECT.items():
        G, D = SHAPES[shape]
        for bt, w, h, cap, *sw in settings:
            split, shm = (*sw, 0, 0)[:2]
            over = {**({"maxnreg_sel": cap} if cap else {}), "select_split": split, "select_shm": shm}
            c = sp.sass_counts(shape, "int32", bt, w, h, arch=80, over=over)
            key = select_key(G, D, bt, w, h, cap, split, shm)
            rec["select"][key] = {k: c[k] for k in ("registers", "spill", "smem", "paths")}
            print(json.dumps({"recorded": key, "registers": c["registers"], "spill": c["spill"]}),
                  file=sys.stderr, flush=True)  # fmt: skip
            mkey = f"G{G}xD{D}/bt{bt}/h{h}"
            if split and f"{mkey}/interior" not in rec["merge_rate"]:  # per loop (select_split)
                rates = {"interior": {}, "edge": {}}
                for T in MERGE_T:
                    dyn = sp.dynamic_count_split(shape, T, 1, bt, c["paths"], w)
                    for path in rates:
                        rates[path][str(T)] = dyn[f"merge_rate_{path}"]
                for path, table in rates.items():
                    rec["merge_rate"][f"{mkey}/{path}"] = table
            if mkey not in rec["merge_rate"]:
                rates = {}
                for T in MERGE_T:
                    dyn = sp.dynamic_count(shape, T, 1, bt, h, c["paths"], w)
                    rates[str(T)] = dyn["merge_rate"]
                rec["merge_rate"][mkey] = rates
    for st, key in _keys_settings():
        c = kp.compile_keys("bwd", st, arch=80)
        rec["keys_bwd"][key] = {k: c[k] for k in ("registers", "spill", "smem", "paths")}
        print(json.dumps({"recorded": key, "registers": c["registers"], "spill": c["spill"]}),
              file=sys.stderr, flush=True)  # fmt: skip
    for name, (spec, G, D) in CARRY.items():
        rec["carry"][name] = {str(arch): step_counts(spec, G, D, arch) for arch in (80, 90)}
    if old:
        rec["fit"] = old["fit"]
        return rec
    rows = sp.proxy_rows(sp.measured_points(), json.loads(sp.SASS_FILE.read_text()))
    fs = sp.fit(rows)
    ksass = json.loads(kp.SASS_FILE.read_text())
    krows = kp.rows_of("bwd", kp.measured_points("bwd"), ksass)
    fk = kp.fit(krows, kp.FORMS["issue+smem"])
    rec["fit"] = {
        "select": {k: round(fs[k], 4) for k in ("insn", "smem", "lat")},
        "keys_bwd": {k: round(v, 4) for k, v in fk.items()},
    }
    return rec


def candidate_rows(rec: dict) -> list[dict]:
    """The proxy's A100 ms of every recorded setting at POINTS (B = 1) through the cost model's own
    pricing (bench/attention_cost/sass80.py), with the tensor-core floor and the shipped setting's."""
    m = model
    gpu = m.GPUS["A100"]
    rows = []
    for shape, settings in SELECT.items():
        G, D = SHAPES[shape]
        s = m.SHAPES[shape]
        for bt, w, h, cap, *sw in settings:
            split, shm = (*sw, 0, 0)[:2]
            c = rec["select"][select_key(G, D, bt, w, h, cap, split, shm)]
            for T in POINTS:
                launch = {
                    "bt_sel": bt,
                    "warps_sel": w,
                    "halves_sel": h,
                    "maxnreg_sel": cap,
                    "select_split": split,
                    "select_shm": shm,
                }
                work = sass80.select_work(T, s, launch)
                ms = prices.sass_seconds(work, "select", gpu) * 1e3
                rows.append({"a100_candidate": "cmp_select", "shape": shape, "T": T, "bt_sel": bt, "warps_sel": w,
                             "halves_sel": h, "maxnreg_sel": cap, "select_split": split, "select_shm": shm,
                             "registers": c["registers"], "spill": c["spill"],
                             "resident_warps": work["resident_warps"], "warp_insns": work["warp_insns"],
                             "proxy_ms": round(ms, 3)})  # fmt: skip
    s = m.SHAPES["m7c"]
    for st, key in _keys_settings():
        c = rec["keys_bwd"][key]
        for T in POINTS:
            work = sass80.keys_bwd_work(T, s, st)
            ms = prices.sass_seconds(work, "keys_bwd", gpu) * 1e3
            flops = 2 * work["steps"] * st["BR_keys"] * 64 * 64 * 5
            rows.append({"a100_candidate": "sel_bwd_keys", "shape": "m7c", "T": T, **st, "registers": c["registers"],
                         "spill": c["spill"], "resident_programs": work["resident_programs"],
                         "steps": work["steps"], "warp_insns": work["warp_insns"], "proxy_ms": round(ms, 3),
                         "tensor_floor_ms": round(flops / gpu.peak * 1e3, 3)})  # fmt: skip
    return rows


# The keys proxy's H200 calibration points run 8k x 8, 32k x 2 and 64k x 1 tokens (bench/keys_proxy.py
# measured_points): a candidate's A100 features are compared with the calibrated ones at these.
RANGE_POINTS = [(8192, 8), (32768, 2), (65536, 1)]
# the model's A100 (its SMs and clock, as `prices.sass_seconds` prices it) with sm_80's occupancy limits
A100_SM = {"sms": model.GPUS["A100"].sms, "sched": 4, "ghz": model.GPUS["A100"].clock / 1e9, **sass80.SM80}


def calibrated_range() -> dict:
    """The keys proxy's calibrated range: min and max of its H200 points' warp instructions and
    shared-memory accesses a scheduler (`keys_proxy.features`), and their warps a scheduler."""
    kp = _sibling("keys_proxy")
    rows = kp.rows_of("bwd", kp.measured_points("bwd"), json.loads(kp.SASS_FILE.read_text()))
    xs = [kp.features(r) for r in rows]
    return {"points": len(rows), "x_insn": [min(x["insn"] for x in xs), max(x["insn"] for x in xs)],
            "x_smem": [min(x["smem"] for x in xs), max(x["smem"] for x in xs)],
            "warps_per_scheduler": sorted({r["resident"] * r["warps"] / 4 for r in rows})}  # fmt: skip


def range_rows(rec: dict, cal: dict) -> list[dict]:
    """Every recorded keys setting's A100 features at RANGE_POINTS (M7C), each as a fraction of the
    calibrated range's edge it passes (below: of the lowest, above: of the highest; 1 inside), and
    whether all three (instructions, shared accesses, warps a scheduler) lie inside `cal`."""
    kp = _sibling("keys_proxy")
    rows = []
    for st, key in _keys_settings():
        c = rec["keys_bwd"][key]
        ks = {"BR": st["BR_keys"], "warps": st["warps_keys"], "pdq_bits": st["pdq_bits"]}
        for T, B in RANGE_POINTS:
            ln = kp.launch("bwd", T, B, ks, c)
            ln["resident"] = kp.resident_programs(c["registers"], c["smem"], ks["warps"], A100_SM)
            x = kp.features(ln, A100_SM)
            wps = ln["resident"] * ks["warps"] / 4
            edge = {f: x[f] / min(max(x[f], cal[f"x_{f}"][0]), cal[f"x_{f}"][1]) for f in ("insn", "smem")}
            rows.append({"a100_keys_range": key, "T": T, "B": B, "spill": c["spill"], "x_insn": round(x["insn"]),
                         "x_smem": round(x["smem"]), "warps_per_scheduler": wps,
                         "insn_vs_range": round(edge["insn"], 3), "smem_vs_range": round(edge["smem"], 3),
                         "inside": edge["insn"] == edge["smem"] == 1 and wps in cal["warps_per_scheduler"]})  # fmt: skip
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--recount", action="store_true", help="compile at sm_80, simulate, refit, record the JSON"
    )
    ap.add_argument(
        "--recompile",
        action="store_true",
        help="compile at sm_80 and record, keeping the recorded merge rates and constants (after a kernel change)",
    )
    args = ap.parse_args(argv)
    if args.recount or args.recompile:
        old = json.loads(SASS_FILE.read_text()) if args.recompile else None
        SASS_FILE.write_text(json.dumps(recount(old), indent=1, sort_keys=True) + "\n")
    rec = json.loads(SASS_FILE.read_text())
    print(json.dumps({"triton": rec["triton"], "fit": rec["fit"]}), flush=True)
    for r in candidate_rows(rec):
        print(json.dumps(r), flush=True)
    cal = calibrated_range()
    print(json.dumps({"keys_calibrated_range": "h200", **cal}), flush=True)
    for r in range_rows(rec, cal):
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
