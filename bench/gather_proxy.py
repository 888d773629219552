"""A GPU-free time proxy for the selected branch's query-major gather loops: the token tiles
(`_sel_fwd_tok_kernel` / `_sel_bwd_dq_tok_kernel`) and the forced tiles (`_sel_forced_fwd_kernel` /
`_sel_forced_dq_kernel`), calibrated on every measured configuration of them (issue 20, `tok_pipe`).

Owns the evidence behind selected.py `_config`'s `tok_pipe` (docs/attention.md, bench/RESULTS.md
"tokgather"). From each build's SASS (bench/gather_sass.py, on bench/select_sass.py's compile and
listing; triton 3.6, sm_90: the GPU runs' build) it reads, per key step of the loop (bench/tok_pipe_sass.py's narrowest loop):
warp instructions `insns`, dependent global-load rounds `rounds` (clusters of synchronous LDG that a
barrier or a conditional branch closes: each waits a full memory latency before the step goes on;
asynchronous copies waited for with nothing left in flight, `DEPBAR.LE SB0, 0`, one round), the
copies left in flight at the wait (`in_flight` > 0: the next step's loads overlap this step), and
the same counts for the prologue and epilogue once a program (a loop before the key loop, the forced
tiles' role count over the table, at NK trips). Registers and shared memory give the programs an SM
holds (select_sass.resident_programs, H100/H200 limits).

The proxy, per launch, in SM cycles summed over the GPU's SMs (Little's law: P programs an SM keep P
steps' loads in flight, so a step's exposed latency costs 1/P of an SM's time):
  lat    = L  x (steps x rounds + programs x rounds_pro) / (SMs x P)   memory latency, exposed
  serial = c1 x (steps x insns + programs x insns_pro) x ceil(W/4) / (SMs x P)   a program's own stream
  issue  = k  x warp instructions / (SMs x 4)                           the SM's 4 schedulers
three constants (cycles; non-negative least squares on relative error, bench/keys_proxy.py's
nnls_rel), floored by the gathered bytes through L2 (8.6 TB/s) and DRAM. A build whose loads stay in
flight across a step (in_flight > 0: tok_pipe at 3 stages) prices its exposed latency as
max(0, L - a step's own stream): outside the calibrated domain (no measured build has it), said so
in its rows (`domain`).

Measured points: the suites' per-kernel tables (bench/gpu/*-speed*.json, each at its build's
settings: RUN_BUILDS, `_launch_before_ce226a4`) and the kernel probes' variants (H200, 8k x 8), whose
number is the whole selected op: a variant's kernel time is the same build's speed run at that T
plus the probe's change of forward (fwd kernels) or backward (fwd_bwd - fwd: dQ kernels) against
its base row. Steps: the cost model's expected union of random tables (counts._sel_steps) for the
token tiles, every table slot for tok_pipe 1, the forced tiles' exact key range per tile.

`--price` prices the candidates (tok_pipe 1 / 2 at 2 / 3 stages at the paper shape and M7C on sm_90
and sm_80; at G 16 on sm_90 also each kernel's stages, warps and the tile's tokens), every override
applied to the measured loop's settings (`run_base`), and prints one "decision" row a G 16 shape:
which build passes SHIP_BAR (calibrated, in the calibrated domain, >= 10 % faster at 8k and 64k) and
the CONFIG_FACTOR tags it would take. selected.py `_config` ships its answer (tok_pipe 2 at G > 8 on
sm_90; bench/RESULTS.md "tokgather"), tests/unit/attention/test_gather_proxy.py holds the two equal.

  .venv/bin/python bench/gather_proxy.py                  # calibration rows, the fit, leave-one-out
  .venv/bin/python bench/gather_proxy.py --price          # the candidates' prices and the decision
  .venv/bin/python bench/gather_proxy.py --robust         # the shipped build under other fits
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/gather_proxy.py --recount  # re-record SASS

The SASS counts are recorded in bench/gather_proxy_sass.json (`--recount` compiles every measured
configuration and the priced candidates again, sm_90 and sm_80). Prints one JSON object per line;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path, load_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
select_sass = load_by_path("select_sass", HERE / "select_sass.py")
keys_proxy = load_by_path("keys_proxy", HERE / "keys_proxy.py")
gather_sass = load_by_path("gather_sass", HERE / "gather_sass.py")  # what the proxy reads from SASS
SHAPES, KERNELS, _COUNTS = gather_sass.SHAPES, gather_sass.KERNELS, gather_sass._COUNTS
compile_counts, run_base, key = gather_sass.compile_counts, gather_sass.run_base, gather_sass.key
SASS_FILE = HERE / "gather_proxy_sass.json"

GPUS = {  # SM limits (select_sass.resident_programs) and the floors' bandwidths
    90: {"sms": 132, "sched": 4, "ghz": 1.98, "regs": 65536, "warps": 64, "blocks": 32, "smem": 233472,
         "l2_tbs": 0.75 * 11.5, "dram_tbs": 3.35},
    80: {"sms": 108, "sched": 4, "ghz": 1.41, "regs": 65536, "warps": 64, "blocks": 32, "smem": 167936,
         "l2_tbs": 0.75 * 7.2, "dram_tbs": 2.039},
}  # fmt: skip
# The token tiles' settings of the builds before ce226a4 (every run before 2026-11-26b): the forward
# at 8 warps past head_dim 64 (selected._config has 2 since).
BEFORE_CE226A4 = {"paper": {"warps_tok": 8}, "m7c": {}}
# Suite runs -> the token-tile settings they measured (over today's _config) by shape.
SPEED = {
    "bench/gpu/2026-11-26-h100-speed.json": BEFORE_CE226A4,
    "bench/gpu/2026-11-26-h200-speed-after.json": BEFORE_CE226A4,
    "bench/gpu/2026-11-26-h200-speed-final.json": BEFORE_CE226A4,
    "bench/gpu/2026-11-26b-h200-speed-shipped.json": {"paper": {}, "m7c": {}},
    "bench/gpu/2026-11-26b-h200-speed-keys.json": {"paper": {}},  # M7C ran key-major there
    "bench/gpu/2026-11-26b-h200-speed-final.json": {"paper": {}},
}
# Kernel probes -> (their base build's speed run, the base's settings by shape). Variants of keys the
# token tiles do not read (warps_kv, BR, ...) are skipped; "TP": "xN" multiplies the tile's tokens.
PROBES = {
    # the selected-op probe of the first H200 session (its compressed kernels the old fused ones; the
    # selected ones those of the speed-after run)
    "bench/gpu/2026-11-26-h200-probe-before.jsonl": ("bench/gpu/2026-11-26-h200-speed-after.json", BEFORE_CE226A4),
    "bench/gpu/2026-11-26-h200-probe-final.jsonl": ("bench/gpu/2026-11-26-h200-speed-final.json", BEFORE_CE226A4),
}  # fmt: skip
TOK_KEYS = {
    "tok_fwd": ("warps_tok", "stages_tok", "TP", "tok_pipe"),
    "tok_dq": ("warps_q", "stages_dq", "TP", "tok_pipe"),
}
# The candidates `--price` compiles beside today's loop: tok_pipe 1 (every slot a step) and 2 (the
# union's blocks; 1 past 64 entries a tile, selected._pipe_mode) at 2 and 3 stages, each kernel at its
# own stages key; warps and tokens as shipped.
PIPE_VARIANTS = [(pipe, stages) for pipe in (1, 2) for stages in (2, 3)]
PRICE_T = (8192, 65536)
TUNE_WARPS, TUNE_TP = (2, 4), (1, 2)  # warps and tokens a tile priced around the candidates (paper shape)


def _model():
    return load_model(HERE / "attention_model.py")


# ---- work counts -----------------------------------------------------------------------------------


def _forced_steps(T: int, G: int, LP: int = 64, BM: int = 64, BK: int = 64) -> int:
    """Key steps of the forced tiles of one (batch, KV head): selected_forced.py `_key_range` per tile."""
    steps = 0
    for r0 in range(0, T * G, BM):
        t_hi = (min(r0 + BM, T * G) - 1) // G
        k0 = max((r0 // G) // LP - 1, 0) * LP
        n1p = LP if k0 > 0 else 0
        steps += -(-(n1p + t_hi + 1 - k0) // BK)
    return steps


def launch(kernel: str, shape: str, T: int, B: int, over: dict, counts: dict, arch: int = 90) -> dict:
    """One launch's iterations, steps, programs, bytes and the proxy's features (module docstring)."""
    m = _model()
    s = m.SHAPES.get(shape) or m.Shape(shape, 1, 64, 4, SHAPES[shape][1])
    G, D, BH = s.G, s.D, B * s.Hkv
    gpu = GPUS[arch]
    k = min(s.n, -(-T // s.lp))  # a token's table entries
    if kernel.startswith("tok"):
        TP = over.get("TP") or m._tokens_per_tile(G)
        programs = BH * -(-T // TP)
        union = BH * m._sel_steps(T, s, TP)
        # The branchy loop and tok_pipe 1 iterate over every table slot of the tile; tok_pipe 2 over the
        # union's blocks. Only the union's steps load (tok_pipe 1 masks the rest).
        iters = union if counts["pipe"] == 2 else BH * T * k
        taken = union if counts["take"]["insns"] else 0
    else:  # the forced tiles: BM rows a program (selected._config "BM", 64 on the GPU)
        BM = over.get("BM", 64)
        programs = BH * -(-T * G // BM)
        iters = union = BH * _forced_steps(T, G, BM=BM)
        taken = 0
    P = max(1, select_sass.resident_programs(counts["registers"], counts["smem"], counts["warps"], gpu))
    dyn = {c: iters * counts["iter"][c] + taken * counts["take"][c] + programs * counts["program"][c]
           for c in _COUNTS}  # fmt: skip
    share = math.ceil(counts["warps"] / gpu["sched"])  # a program's warps on one scheduler
    slots, sched = gpu["sms"] * P, gpu["sms"] * gpu["sched"]
    return {
        "iters": iters, "steps": union, "programs": programs, "resident": P,
        "gathered_bytes": union * 64 * D * 2 * 2,
        "lat": dyn["rounds"] / slots,
        "serial": dyn["insns"] * share / slots,
        "issue": dyn["insns"] * counts["warps"] / sched,
        "smem": dyn["smem"] * counts["warps"] / sched,
        "smem_bytes": dyn["smem_bytes"] * counts["warps"] / gpu["sms"],
        # one iteration's own stream (instructions): what a step in flight overlaps its loads with
        "iter_serial": (counts["iter"]["insns"] + counts["take"]["insns"]) * share,
        "in_flight": counts["in_flight"],
    }  # fmt: skip


# The fitted terms tried (each: constants in cycles, non-negative): latency rounds and a program's own
# stream over the programs an SM holds, the SM's issue and shared-memory throughput.
FEATURES = ("lat", "serial", "issue", "smem", "smem_bytes")
FORMS = {
    "lat+serial": ("lat", "serial"),
    "lat+issue": ("lat", "issue"),
    "lat+smem": ("lat", "smem"),
    "lat+serial+issue": ("lat", "serial", "issue"),
    "lat+serial+smem": ("lat", "serial", "smem"),
    "lat+smem_bytes": ("lat", "smem_bytes"),
    "lat+serial+smem_bytes": ("lat", "serial", "smem_bytes"),
    "all": FEATURES,
}


def proxy_cycles(ln: dict, f: dict) -> dict:
    """The proxy's terms in SM cycles (constant x feature). A loop whose next step's loads are in
    flight (in_flight > 0) exposes only the latency an iteration's own stream does not cover."""
    parts = {t: c * ln[t] for t, c in f.items()}
    if ln["in_flight"] and "lat" in f:
        hidden = min(f["lat"], f.get("serial", 0.0) * ln["iter_serial"])
        parts["lat"] = ln["lat"] * (f["lat"] - hidden)
    return parts


def proxy_ms(ln: dict, f: dict, arch: int = 90) -> tuple[float, str]:
    """Milliseconds (the terms' sum, floored by the gathered bytes through L2) and the largest term."""
    gpu = GPUS[arch]
    parts = proxy_cycles(ln, f)
    t = sum(parts.values()) / (gpu["ghz"] * 1e6)
    floor = ln["gathered_bytes"] / (gpu["l2_tbs"] * 1e9)
    return (max(t, floor), "l2" if floor > t else max(parts, key=parts.get))


def fit(rows: list[dict], form: tuple[str, ...]) -> dict:
    """The constants (cycles) of `form` over measured rows (launch dicts with "ms")."""
    clock = GPUS[90]["ghz"] * 1e6
    c = keys_proxy.nnls_rel([[r[t] for t in form] for r in rows], [r["ms"] * clock for r in rows])
    return dict(zip(form, c))


# ---- the measured points ---------------------------------------------------------------------------


def _shape(name: str) -> str:
    return "paper" if name.startswith("paper") else name


def _speed(path: str) -> dict[tuple[str, int, int], dict[str, float]]:
    """(shape, T, B) -> profiler kernel name -> ms of one suite run."""
    out = {}
    for r in json.loads((ROOT / path).read_text())["sections"]["speed"]["records"]:
        out[(_shape(r["shape"]), r["T"], r["B"])] = {k["kernel"]: k["ms"] for k in r.get("nsa_kernels", [])}
    return out


def _own(kernel: str, over: dict) -> dict:
    """The settings of `over` that `kernel` reads (the forward's warps are not the dQ's)."""
    return {k: v for k, v in over.items() if k in TOK_KEYS.get(kernel, ())}


def _tok_over(kernel: str, variant: dict, base: dict, shape: str) -> dict | None:
    """The settings a probe variant gives `kernel` (None: the variant does not touch it)."""
    mine = {k: v for k, v in variant.items() if k in TOK_KEYS[kernel]}
    if not mine:
        return None
    over = {**_own(kernel, base), **mine}
    if "TP" in mine:
        over["TP"] = _model()._tokens_per_tile(SHAPES[shape][0]) * int(str(mine["TP"])[1:])
    return over


def measured_points() -> list[dict]:
    """Every measured time of the four kernels: the suites' tables, then the probes' variants of the
    token tiles anchored on their base build's suite run (module docstring)."""
    pts = []
    for path, by_shape in SPEED.items():
        for (shape, T, B), ks in sorted(_speed(path).items()):
            for kernel, (_, prof, _, _) in KERNELS.items():
                if prof not in ks:
                    continue
                if kernel.startswith("tok") and shape not in by_shape:
                    continue
                over = _own(kernel, by_shape.get(shape, {})) if kernel.startswith("tok") else {}
                pts.append({"kernel": kernel, "shape": shape, "T": T, "B": B, "over": over, "ms": ks[prof],
                            "source": Path(path).name})  # fmt: skip
    for path, (speed_path, by_shape) in PROBES.items():
        anchor = _speed(speed_path)
        rows = [json.loads(x) for x in (ROOT / path).read_text().splitlines() if x.strip()]
        rows = [r for r in rows if r["probe"] == "selected"]
        for r in rows:
            shape = _shape(r["shape"])
            base = next(
                b
                for b in rows
                if b["variant"] == {} and (b["shape"], b["T"], b["B"]) == (r["shape"], r["T"], r["B"])
            )
            if not r["variant"] or set(r["variant"]) - {k for ks in TOK_KEYS.values() for k in ks}:
                continue
            for kernel in TOK_KEYS:
                over = _tok_over(kernel, r["variant"], by_shape[shape], shape)
                if over is None or over == _own(kernel, by_shape[shape]):
                    continue
                if kernel == "tok_fwd":
                    delta = r["fwd_ms"] - base["fwd_ms"]
                else:
                    delta = (r["fwd_bwd_ms"] - r["fwd_ms"]) - (base["fwd_bwd_ms"] - base["fwd_ms"])
                ms = anchor[(shape, r["T"], r["B"])][KERNELS[kernel][1]] + delta
                pts.append({"kernel": kernel, "shape": shape, "T": r["T"], "B": r["B"], "over": over,
                            "ms": round(ms, 4), "source": Path(path).name})  # fmt: skip
    return pts


def configuration(p: dict) -> str:
    return key(p["kernel"], p["shape"], p["over"])


# ---- rows ------------------------------------------------------------------------------------------


def recount(points: list[dict], sass: dict, arch: int = 90) -> None:
    for p in points:
        k = key(p["kernel"], p["shape"], p["over"], arch)
        if k not in sass:
            sass[k] = compile_counts(p["kernel"], p["shape"], p["over"], arch)
            print(json.dumps({"recorded": k, **{x: sass[k][x] for x in ("registers", "spill", "smem")}}),
                  file=sys.stderr, flush=True)  # fmt: skip


def rows_of(points: list[dict], sass: dict, arch: int = 90) -> list[dict]:
    out = []
    for p in points:
        c = sass[key(p["kernel"], p["shape"], p["over"], arch)]
        out.append({**p, "registers": c["registers"], "spill": c["spill"], "smem_alloc": c["smem"],
                    "warps": c["warps"], "stages": c["stages"], "pipe": c["pipe"],
                    **launch(p["kernel"], p["shape"], p["T"], p["B"], p["over"], c, arch)})  # fmt: skip
    return out


def predict(rows: list[dict], f: dict, arch: int = 90) -> list[dict]:
    out = []
    for r in rows:
        ms, bound = proxy_ms(r, f, arch)
        row = {"calibration" if "ms" in r else "prediction": f"sm{arch}", "configuration": configuration(r),
               "kernel": r["kernel"],
               "shape": r["shape"], "set": r["over"], "T": r["T"], "B": r["B"], "source": r.get("source"),
               "registers": r["registers"], "smem": r["smem_alloc"], "warps": r["warps"], "stages": r["stages"],
               "pipe": r["pipe"], "resident": r["resident"], "steps": round(r["steps"]), "iters": round(r["iters"]),
               "parts_ms": {k: round(v / (GPUS[arch]["ghz"] * 1e6), 3) for k, v in proxy_cycles(r, f).items()},
               "bound": bound, "proxy_ms": round(ms, 3),
               "domain": "extrapolated: loads in flight across a step" if r["in_flight"] else "calibrated"}  # fmt: skip
        if "ms" in r:
            row.update(ms=r["ms"], error=round(ms / r["ms"] - 1, 3))
        out.append(row)
    return out


def held_out(rows: list[dict], form: tuple[str, ...]) -> list[dict]:
    """Leave one configuration out: its points priced by the constants fitted on the others."""
    out = []
    for c in sorted({configuration(r) for r in rows}):
        f = fit([r for r in rows if configuration(r) != c], form)
        out += predict([r for r in rows if configuration(r) == c], f)
    return out


def summary(name: str, rows: list[dict], form: tuple[str, ...]) -> dict:
    f = fit(rows, form)
    errs = sorted(abs(r["error"]) for r in predict(rows, f))
    loo = sorted(abs(r["error"]) for r in held_out(rows, form))
    return {"fit": name, "cycles": {k: round(v, 3) for k, v in f.items()}, "points": len(errs),
            "configurations": len({configuration(r) for r in rows}),
            "within_30pct": sum(e <= 0.3 for e in errs), "max_abs_error": errs[-1],
            "median_abs_error": errs[len(errs) // 2], "held_out_within_35pct": sum(e <= 0.35 for e in loo),
            "held_out_max_abs_error": round(loo[-1], 3)}  # fmt: skip


def load_sass() -> dict:
    return json.loads(SASS_FILE.read_text()) if SASS_FILE.is_file() else {}


# The default form's constants as fitted on the committed points and SASS (bench/RESULTS.md
# "tokgather"; tests check the fit still gives them): cycles a latency round, a program's instruction
# and a byte of shared-memory traffic an SM.
FITTED = {"lat": 34.054, "serial": 2.0082, "smem_bytes": 0.011838}
# The bar for shipping a candidate (issue 20, tokgather): every calibration point within 30 %, every
# held-out one within 35 %, the candidate in the calibrated domain, and the token tiles (forward + dQ)
# priced at least 10 % faster at the paper shape at 8k and 64k on sm_90.
SHIP_BAR = {"point": 0.30, "held_out": 0.35, "gain": 0.10}


def decision(calib: dict, priced: list[dict], shape: str = "paper") -> dict:
    """Which tok_pipe build the proxy would ship (None: none passes SHIP_BAR), with the evidence: for
    each loop (tok_pipe 0, 1, 2) and tokens a tile, each kernel at its cheapest priced stages and
    warps (the sum over PRICE_T), the token tiles' ms (forward + dQ) over today's at the paper shape
    on sm_90, each T."""
    ok = (
        calib["max_abs_error"] <= SHIP_BAR["point"]
        and calib["held_out_max_abs_error"] <= SHIP_BAR["held_out"]
    )
    paper = [r for r in priced if r["shape"] == shape and r.get("prediction", r.get("calibration")) == "sm90"]
    by: dict[tuple, dict] = {}  # (pipe, TP, kernel, setting) -> {T: row}
    for r in paper:
        o = r["set"]
        k = (o.get("tok_pipe", 0), o.get("TP", 1), r["kernel"], json.dumps(o, sort_keys=True))
        by.setdefault(k, {})[r["T"]] = r
    base = {kern: by[(0, 1, kern, "{}")] for kern in TOK_KEYS}
    out = {}
    for pipe, tp in sorted({(k[0], k[1]) for k in by}):
        best = {}
        for kern in TOK_KEYS:
            opts = [v for k, v in by.items() if k[:3] == (pipe, tp, kern)]
            best[kern] = min(opts, key=lambda v: sum(v[T]["proxy_ms"] for T in PRICE_T))
        out[f"tok_pipe {pipe}, {tp} token(s)"] = {
            "ratio": {T: round(sum(best[k][T]["proxy_ms"] for k in TOK_KEYS)
                               / sum(base[k][T]["proxy_ms"] for k in TOK_KEYS), 3) for T in PRICE_T},
            "settings": {k: best[k][PRICE_T[0]]["set"] for k in TOK_KEYS},
            "kernel_ratio": {k: {T: round(best[k][T]["proxy_ms"] / base[k][T]["proxy_ms"], 4) for T in PRICE_T}
                             for k in TOK_KEYS},
            "calibrated_domain": all(best[k][T]["domain"] == "calibrated" for k in TOK_KEYS for T in PRICE_T),
        }  # fmt: skip
    passing = [n for n, v in out.items() if not n.startswith("tok_pipe 0")
               and v["calibrated_domain"] and all(x <= 1 - SHIP_BAR["gain"] for x in v["ratio"].values())]  # fmt: skip
    ship = min(passing, key=lambda n: max(out[n]["ratio"].values())) if ok and passing else None
    return {"decision": "tok_pipe", "shape": shape, "calibrated": ok, "token_tiles": out, "ship": ship}


def ship_factors(d: dict) -> dict:
    """CONFIG_FACTOR's tags for a shipped decision `d` (bench/attention_cost/prices.py): each token-tile
    kernel's proxy time at the shipped settings over the measured loop's, the geometric mean over
    PRICE_T (the model prices the paper shape's token tiles per gathered byte as measured)."""
    if not d["ship"]:
        return {}
    v = d["token_tiles"][d["ship"]]
    return {
        f"{k}@pipe": round(math.prod(v["kernel_ratio"][k].values()) ** (1 / len(PRICE_T)), 3)
        for k in TOK_KEYS
    }


def shipped_settings(G: int, D: int, arch: int) -> dict:
    """selected._config's token-tile settings for (G, D) on sm_`arch` that differ from `run_base`."""
    from nsa.attention.triton import selected as sel

    cfg = sel._config(G, D, 64, arch=arch)
    return {k: cfg[k] for k, v in run_base(D).items() if cfg[k] != v}


def robustness(rows: list[dict], sass: dict, shape: str = "paper") -> dict:
    """The shipped build's token-tile ratio at `shape` (sm_90) under every calibrating form and under
    each fit with one measured configuration left out: how much the decision rests on one choice."""
    G, D = SHAPES[shape]
    ship = {
        k: {**{x: v for x, v in shipped_settings(G, D, 90).items() if x in TOK_KEYS[k]}} for k in TOK_KEYS
    }
    tp = _model()._tokens_per_tile(G)

    def norm(o: dict) -> dict:
        return {**run_base(D), "TP": tp, **o}

    for k in TOK_KEYS:  # as `candidates` spelled it (the same build, its settings written out or not)
        ship[k] = next(c["over"] for c in candidates(90)
                       if c["kernel"] == k and c["shape"] == shape and norm(c["over"]) == norm(ship[k]))  # fmt: skip
    pts = [{"kernel": k, "shape": shape, "T": T, "B": 1, "over": o} for k in TOK_KEYS for o in ({}, ship[k])
           for T in PRICE_T]  # fmt: skip
    launches = rows_of(pts, sass)

    def ratio(f: dict) -> dict:
        ms = {(r["T"], bool(r["over"])): 0.0 for r in launches}
        for r in launches:
            ms[(r["T"], bool(r["over"]))] += proxy_ms(r, f)[0]
        return {T: round(ms[(T, True)] / ms[(T, False)], 3) for T in PRICE_T}

    forms = {name: ratio(fit(rows, form)) for name, form in FORMS.items()
             if summary(name, rows, form)["max_abs_error"] <= SHIP_BAR["point"]}  # fmt: skip
    held = [ratio(fit([r for r in rows if configuration(r) != c], FORMS["lat+serial+smem_bytes"]))
            for c in sorted({configuration(r) for r in rows})]  # fmt: skip
    return {"robustness": shape, "settings": ship, "calibrating_forms": forms,
            "held_out_min": {T: min(h[T] for h in held) for T in PRICE_T},
            "held_out_max": {T: max(h[T] for h in held) for T in PRICE_T}}  # fmt: skip


def candidates(arch: int) -> list[dict]:
    """The priced launches: each token-tile kernel at the paper shape and M7C, B 1, T in PRICE_T, as
    shipped (tok_pipe 0) and at PIPE_VARIANTS; on sm_90 where the token tiles run (G > 8) also each
    kernel's stages, warps (TUNE_WARPS) and the tile's tokens (TUNE_TP) under tok_pipe 0 and 2."""
    out = []
    for shape in SHAPES:
        for kernel in TOK_KEYS:
            _, _, warps_key, stages_key = KERNELS[kernel]
            overs = [{}] + [{"tok_pipe": p, stages_key: st} for p, st in PIPE_VARIANTS]
            if SHAPES[shape][0] > 8 and arch == 90:  # where the token tiles run (G > 8); calibrated arch
                for pipe in (0, 2):
                    for st in (1, 2, 3) if pipe == 0 else (2, 3):
                        for w in TUNE_WARPS:
                            for tp in TUNE_TP:
                                o = {
                                    stages_key: st,
                                    warps_key: w,
                                    "TP": tp,
                                    **({"tok_pipe": 2} if pipe else {}),
                                }
                                if o not in overs:
                                    overs.append(o)
            out += [{"kernel": kernel, "shape": shape, "T": T, "B": 1, "over": o, "arch": arch}
                    for o in overs for T in PRICE_T]  # fmt: skip
    return out


def price_rows(f: dict, sass: dict) -> list[dict]:
    """Every candidate's proxy ms on sm_90 (H100/H200: the calibrated arch) and sm_80 (A100: the same
    constants per SM cycle, carried over, not calibrated), with its ratio to today's loop."""
    out = []
    for arch in (90, 80):
        cands = candidates(arch)
        priced = {}
        for c in cands:
            r = rows_of([c], sass, arch)[0]
            row = predict([r], f, arch)[0]
            priced[(c["kernel"], c["shape"], c["T"], json.dumps(c["over"], sort_keys=True))] = row
        for (kernel, shape, T, _over), row in priced.items():
            base = priced[(kernel, shape, T, "{}")]
            row["ratio"] = round(row["proxy_ms"] / base["proxy_ms"], 3)
            row["gpu"] = "H100" if arch == 90 else "A100 (constants carried over per SM cycle)"
            out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recount", action="store_true", help="compile the configurations, record their SASS")
    ap.add_argument("--form", default="lat+serial+smem_bytes", choices=sorted(FORMS))
    ap.add_argument("--rows", action="store_true", help="every point's calibration row (and held-out error)")
    ap.add_argument("--price", action="store_true", help="tok_pipe 1/2 at 2/3 stages beside today's loop")
    ap.add_argument("--robust", action="store_true", help="the shipped build's ratio under other fits")
    args = ap.parse_args(argv)
    pts = measured_points()
    sass = load_sass()
    if args.recount:
        os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-gather-proxy-"))
        os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
        recount(pts, sass)
        for arch in (90, 80):
            recount(candidates(arch), sass, arch)
        SASS_FILE.write_text(json.dumps(sass, indent=1, sort_keys=True) + "\n")
    rows = rows_of(pts, sass)
    if args.robust:
        for shape, (G, _) in SHAPES.items():
            if G > 8:
                print(json.dumps(robustness(rows, sass, shape)), flush=True)
        return 0
    if args.price:
        priced = price_rows(fit(rows, FORMS[args.form]), sass)
        for r in priced:
            print(json.dumps(r), flush=True)
        calib = summary(args.form, rows, FORMS[args.form])
        for shape, (G, _) in SHAPES.items():
            if G > 8:
                d = decision(calib, priced, shape)
                print(json.dumps({**d, "config_factor": ship_factors(d)}), flush=True)
        return 0
    for name, form in FORMS.items():
        print(json.dumps(summary(name, rows, form)), flush=True)
    if args.rows:
        form = FORMS[args.form]
        loo = {(r["configuration"], r["T"], r["B"], r["source"]): r["error"] for r in held_out(rows, form)}
        for p in predict(rows, fit(rows, form)):
            print(json.dumps({**p, "held_out_error": loo[(p["configuration"], p["T"], p["B"], p["source"])]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
