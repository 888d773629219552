"""A GPU-free time proxy for the flash-style tiles: the compressed attention, dQ and dK/dV, the window kernels.

Owns the proxy behind docs/attention.md's tile paragraphs and its calibration (issue 20, task
flashproxy). For each flash-style kernel setting a GPU measured (`CONFIGS`: compressed.py's
`_cmp_fwd`, `_cmp_bwd_dq`, `_cmp_bwd_dkv` at 8 and 4 warps, window.py's three kernels, each at M7C
G 6 x D 64 and the paper's G 16 x D 128, and the kernel probes' variants of the compressed ones)
bench/flash_sass.py compiles the kernel as `gpucheck_specs` launches it under the settings of the
build that measured it (`RUN_OVER`; gpucheck's `compile_spec`, triton 3.6 = the GPU images', sm_90),
disassembles it (bench/select_sass.py) and counts per program the code outside its loops once and per trip a main
loop's path (bench/keys_proxy.py's `step_path`; the window's three band phases: the narrowest,
unmasked loop and the mean of the two masked ones) by class: instructions, shared-memory accesses
(LDS/STS/LDSM), wgmma FLOPs (HGMMA.64xNxK: 2 x 64 x N x K a warpgroup) and waits for them
(WARPGROUP.DEPBAR), mma.sync FLOPs (HMMA.16816: 4096 a warp); registers, shared memory and the
programs an SM holds. A launch's programs and trips come from the kernels' own loop bounds
(`grid_trips`), its DRAM bytes from the cost model (bench/attention_cost, RUN_BUILDS' flags). Time:
    max(issue, latency) + per-program cycles / (SMs x clock), stretched by the last wave, floored by
    DRAM; issue = c x (warp instructions and shared-memory accesses over 4 schedulers, wgmma FLOPs
    an SM); latency = c x a program slot's waits for wgmma results; per-program = c x programs a slot
(`FORM`, `FIT`: non-negative, weighted relative error, each setting weighted alike, fitted by
alternating least squares). `held_out` refits without each setting in turn. Prints one JSON object
per line; asserts nothing. bench/flash_proxy_ship.py prices candidates with it.

  .venv/bin/python bench/flash_proxy.py                       # calibration rows, the fit, leave-one-out
  .venv/bin/python bench/flash_proxy.py --form insn,smem,hgmma//prog     # another form (no latency)
  PYTHONPATH=/tmp/forced-leg36 .venv/bin/python bench/flash_proxy.py --recount     # re-record SASS (3.6)
  PYTHONPATH=/tmp/forced-leg36 .venv/bin/python bench/flash_proxy.py --count cmp_dkv@64 bn_dkv=64

The measured settings' counts (and the candidates') are recorded in bench/flash_proxy_sass.json
(`--recount` / `--count` compile again; a recount reproduces the record), so the fit needs no
compiler.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path, load_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
keys_proxy = load_by_path("keys_proxy", HERE / "keys_proxy.py")
flash_sass = load_by_path("flash_sass", HERE / "flash_sass.py")
H200 = keys_proxy.H200  # 132 SMs x 4 schedulers at 1.98 GHz: the H100's too (docs/attention.md)
# the compile side (bench/flash_sass.py), re-exported: `flash_proxy.X` stays the scripts' and tests' one interface
CONFIGS, RUN_OVER, SASS_FILE = flash_sass.CONFIGS, flash_sass.RUN_OVER, flash_sass.SASS_FILE
MEASURED_DKV, MEASURED_DQ128 = flash_sass.MEASURED_DKV, flash_sass.MEASURED_DQ128
load_record, save_record, _key = flash_sass.load_record, flash_sass.save_record, flash_sass._key
build_spec, compile_config, mma_loops = flash_sass.build_spec, flash_sass.compile_config, flash_sass.mma_loops

# The runs with a kernel profile (bench/gpu), the model's flags of their builds (RUN_BUILDS), and
# which configs they measured: the compressed attention as its own kernel since 45bc233 (not in the
# H100 run), dK/dV at 8 warps before ce226a4.
SPEED = [
    "2026-11-26-h100-speed.json",
    "2026-11-26-h200-speed-after.json",
    "2026-11-26-h200-speed-final.json",
    "2026-11-26b-h200-speed-shipped.json",
    "2026-11-26b-h200-speed-keys.json",
    "2026-11-26b-h200-speed-final.json",
]


def run_configs(build: dict) -> list[str]:
    """The CONFIGS a run of `build` (RUN_BUILDS' flags) measured."""
    out = []
    for name in CONFIGS:
        if name.startswith("cmp_fwd") and build.get("split_cmp_fwd") is False:
            continue  # the fused two-pass forward: not a flash tile
        if name.startswith("cmp_dkv") and name.endswith("@w8") != bool(build.get("before_ce226a4")):
            continue
        out.append(name)
    return out


# ---- the measured points ---------------------------------------------------------------------------


def _shape(rec: dict, am):
    return am.Shape(rec["shape"], rec["B"], rec["H"], rec["Hkv"], rec["D"])


def _model_kernels(am, rec: dict, build: dict) -> dict:
    return {k.name: k for k in am.ours(rec["T"], _shape(rec, am), cc=90, **build)}


def measured_points() -> list[dict]:
    """Every measured time of a CONFIGS kernel: the speed runs' per-kernel tables (`speed_points`) and
    the kernel probes' variants (`probe_points`); each with B * Hkv and the model's DRAM bytes."""
    return speed_points() + probe_points()


def speed_points() -> list[dict]:
    am = load_model()
    pts = []
    for fname in SPEED:
        build = am.RUN_BUILDS.get(fname, {})
        gpu = "H100" if "h100" in fname else "H200"
        for r in json.loads((ROOT / "bench/gpu" / fname).read_text())["sections"]["speed"]["records"]:
            d = 64 if r["D"] <= 64 else 128
            ks = _model_kernels(am, r, build)
            for config in run_configs(build):
                prof, mname, *_ = CONFIGS[config]
                if CONFIGS[config][5] != d:
                    continue
                ms = sum(x["ms"] for x in r.get("nsa_kernels", []) if x["kernel"] == prof)
                if not ms or mname not in ks:
                    continue
                pts.append({"config": config, "set": {}, "run": fname, "gpu": gpu, "shape": r["shape"], "T": r["T"],
                            "B": r["B"], "ms": ms, "BH": r["B"] * r["Hkv"], "dram": ks[mname].dram})  # fmt: skip
    return pts


# The kernel probes (bench/kernel_probe.py) with variants of these kernels, each beside the speed run
# of the same build (RUN_BUILDS: both before ce226a4, or both before 2930e5c): a variant's kernel time
# is that run's kernel ms at the same shape, T and B plus the probe's change against its base row
# (the attention alone; the compressed backward as a whole, where a variant changes one kernel).
PROBES = {
    "2026-11-26-h200-probe-after.jsonl": "2026-11-26-h200-speed-after.json",
    "2026-11-26-h200-probe-final.jsonl": "2026-11-26-h200-speed-final.json",
    "2026-11-26b-h200-probe-select.jsonl": "2026-11-26b-h200-speed-keys.json",
}
DKV_KEYS = ("bn_dkv", "bt_dkv", "warps_dkv", "split_dkv", "stages_dkv")


def probe_config(row: dict) -> tuple[str, dict] | None:
    """(CONFIGS entry, _config overrides) a probe row measured (the probes' base builds: dK/dV at 8
    warps), None for a row of another kernel; overrides equal to the setting's own value dropped."""
    from nsa.attention.triton import compressed as cmp

    v = {k: x for k, x in row["variant"].items() if k not in ("kernel", "shape")}
    d = 64 if row["shape"] == "m7c" else 128
    G = 6 if d == 64 else 16
    if row["probe"] == "cmp_fwd" and row["variant"].get("kernel") == "attend":
        config = f"cmp_fwd@{d}"
    elif row["probe"] == "cmp_bwd" and v and set(v) <= set(DKV_KEYS):
        config = f"cmp_dkv@{d}@w8"
        if v.get("warps_dkv") == 4:
            config, v = f"cmp_dkv@{d}", {k: x for k, x in v.items() if k != "warps_dkv"}
    elif row["probe"] == "cmp_bwd" and set(v) == {"warps"}:
        config = f"cmp_dq@{d}"
    else:
        return None
    c = {**cmp._config(G, d, 16, 32, 16, 64, 90), **RUN_OVER.get(config, {})}
    out = {}
    for k, x in v.items():
        x = c[k] * 2 if x == "x2" else ((4 if c[k] == 8 else 8) if x == "toggle" else x)
        if x != c[k]:
            out[k] = x
    return config, out


def probe_points() -> list[dict]:
    am = load_model()
    pts = []
    for pname, sname in PROBES.items():
        rows = [json.loads(x) for x in (ROOT / "bench/gpu" / pname).read_text().splitlines()]
        build = am.RUN_BUILDS.get(sname, {})
        speed = {(r["shape"], r["T"], r["B"]): r
                 for r in json.loads((ROOT / "bench/gpu" / sname).read_text())["sections"]["speed"]["records"]}  # fmt: skip
        for r in rows:
            pc = probe_config(r) if isinstance(r.get("ms"), float) else None
            if pc is None or (not pc[1] and not r["variant"].get("warps_dkv")):
                continue  # another kernel, or the base setting itself (the speed run has it)
            config, over = pc
            base = [b for b in rows if b["probe"] == r["probe"] and (b["shape"], b["T"], b["B"]) == (r["shape"], r["T"], r["B"])
                    and {k: x for k, x in b["variant"].items() if k != "shape"} == ({"kernel": "attend"} if r["probe"] == "cmp_fwd" else {})]  # fmt: skip
            rec = speed.get(("m7c" if r["shape"] == "m7c" else "paper_G16_D128", r["T"], r["B"]))
            if not base or rec is None:
                continue
            prof, mname = CONFIGS[config][:2]
            anchor = sum(x["ms"] for x in rec["nsa_kernels"] if x["kernel"] == prof)
            ms = round(anchor + r["ms"] - base[0]["ms"], 4)
            pts.append({"config": config, "set": over, "run": pname, "gpu": "H200", "shape": rec["shape"], "T": r["T"],
                        "B": r["B"], "ms": ms, "BH": rec["B"] * rec["Hkv"],
                        "dram": _model_kernels(am, rec, build)[mname].dram})  # fmt: skip
    return pts


# ---- the proxy -------------------------------------------------------------------------------------

# What a constant multiplies (SM cycles): warp instructions and shared-memory accesses over an SM's 4
# schedulers, wgmma / mma.sync FLOPs and wgmma instructions an SM, and per program slot (one program's
# work runs in order) its trips (`lat`), its waits for a wgmma result (`wait`: a warp waits for the
# tensor cores, WARPGROUP.DEPBAR) or its prologue's loads and epilogue's stores (`prog`).
FEATURES = ("insn", "smem", "hgmma", "hmma", "wgmma", "wait", "lat", "prog")
# The proxy: max(issue, latency) + per-program, each a sum of constant x feature. The SM issues the
# instruction stream, shared-memory accesses and wgmma FLOPs, or a program slot waits on its wgmma
# results one after another, whichever is longer; then a program's prologue and epilogue. mma.sync
# FLOPs and wgmma instructions are not in it: fitted alone they took 0 (HMMA is an instruction of the
# stream) or did not improve the held-out error (bench/RESULTS.md).
FORM = (("insn", "smem", "hgmma"), ("wait",), ("prog",))
# The fit of FORM over the committed runs' points and the recorded counts (`fit`; the test reproduces
# it): ~1 cycle an instruction issued, 8.9 a shared-memory access, 2,610 wgmma FLOPs a cycle an SM
# (0.69 of the 3,784 of the dense bf16 peak), 122 cycles a program waits for each wgmma result, and
# 2,410 cycles a program's prologue and epilogue.
FIT = {"insn": 0.999935, "smem": 8.859645, "hgmma": 0.000382724, "wait": 121.5246, "prog": 2412.584}
DRAM_BW = {"H100": 3.35e12, "H200": 4.8e12}


def _cdiv(a, b):
    return -(-a // b)


def grid_trips(c: dict, T: int, L: int = 32, S: int = 16, W: int = 512) -> dict:
    """One (batch, KV head) sequence of a launch of record `c` at T, as the kernel walks it: programs,
    unmasked and masked trips (the window's edge and diagonal phases; the compressed loops have one
    phase: all unmasked). l, d and w of M7C and the paper (configs/m7c_125m.yaml)."""
    import numpy as np

    kernel, G, BM, BN = CONFIGS[c["config"]][3], c["G"], c["rows"], c["keys"]
    nc = max(0, (T - L) // S + 1)
    if kernel in ("compressed_fwd", "compressed_bwd_dq"):
        pid = np.arange(_cdiv(T * G, BM))
        t_last = np.minimum((pid * BM + BM - 1) // G, T - 1)
        n_vis = np.where(t_last >= L - 1, np.minimum(nc, (t_last - (L - 1)) // S + 1), 0)
        return {"programs": len(pid), "unmasked": int(_cdiv(n_vis, BN).sum()), "masked": 0}
    if kernel == "compressed_bwd_dkv":
        pid_n = np.arange(_cdiv(max(nc, 1), BN))
        first = (pid_n * BN * S + L - 1) * G // BM
        n_tiles = np.maximum(_cdiv(T * G, BM) - first, 0)
        return {"programs": len(pid_n) * c.get("split", 8), "unmasked": int(n_tiles.sum()), "masked": 0}
    if kernel in ("window_fwd", "window_bwd_dq"):
        r0 = np.arange(_cdiv(T * G, BM)) * BM
        t_lo, t_hi = r0 // G, np.minimum((r0 + BM - 1) // G, T - 1)
        lo = (np.maximum(t_lo - W + 1, 0) // BN) * BN
        end = _cdiv(t_hi + 1, BN) * BN
        full_lo = np.maximum(lo, _cdiv(np.maximum(t_hi - W + 1, 0), BN) * BN)
        b = np.minimum(full_lo, end)
        cc = np.maximum(b, np.minimum(((t_lo + 1) // BN) * BN, end))
        return {"programs": len(r0), "unmasked": int(((cc - b) // BN).sum()),
                "masked": int(((b - lo) // BN + (end - cc) // BN).sum())}  # fmt: skip
    n0 = np.arange(_cdiv(T, BN)) * BN  # window dK/dV: key tiles walking their rows
    r_start = n0 * G
    n_tiles = _cdiv(np.minimum(T, n0 + BN - 1 + W) * G - r_start, BM)
    i1 = np.minimum(_cdiv((BN - 1) * G, BM), n_tiles)
    i2 = np.maximum(i1, np.minimum((np.minimum(T, n0 + W) * G - r_start) // BM, n_tiles))
    return {"programs": len(n0), "unmasked": int((i2 - i1).sum()), "masked": int((i1 + n_tiles - i2).sum())}


def launch(p: dict, c: dict) -> dict:
    """One launch's dynamic counts: per sequence `grid_trips`, x B * Hkv sequences."""
    g = grid_trips(c, p["T"])
    bh, w = p["BH"], c["warps"]
    tr, mk, once = c["trip"], c["masked"], c["once"]
    dyn = {k: bh * w * (g["unmasked"] * tr[k] + g["masked"] * mk[k] + g["programs"] * once[k])
           for k in ("insns", "smem", "ldg", "bar")}  # fmt: skip
    programs = bh * g["programs"]
    slots = H200["sms"] * max(1, c["resident"])
    waves = -(-programs // slots)
    stretch = waves * slots / programs if waves < 8 else 1.0
    mma = {
        k: bh * (g["unmasked"] * tr[f"{k}_flops"] + g["masked"] * mk[f"{k}_flops"]) for k in ("hgmma", "hmma")
    }
    # wgmma instructions, one a warpgroup (its 4 warps issue each), and a warp's waits for their results
    mma["wgmma"] = bh * w / 4 * (g["unmasked"] * tr["hgmma"] + g["masked"] * mk["hgmma"])
    mma["wgwait"] = bh * (g["unmasked"] * tr["wgwait"] + g["masked"] * mk["wgwait"])
    return {"trips": bh * (g["unmasked"] + g["masked"]), "dyn": dyn, "stretch": stretch, **mma, "slots": slots,
            "programs": programs}  # fmt: skip


def features(ln: dict) -> dict:
    """SM cycles per unit constant: instructions and shared-memory accesses over an SM's 4 schedulers,
    tensor FLOPs an SM, and `lat` one trip after another on each program slot; x the last wave's stretch."""
    sms, s = H200["sms"], ln["stretch"]
    return {
        "insn": s * ln["dyn"]["insns"] / (sms * 4),
        "smem": s * ln["dyn"]["smem"] / (sms * 4),
        "hgmma": s * ln["hgmma"] / sms,
        "hmma": s * ln["hmma"] / sms,
        "wgmma": s * ln["wgmma"] / sms,
        "wait": s * ln["wgwait"] / ln["slots"],
        "lat": s * ln["trips"] / ln["slots"],
        "prog": s * ln["programs"] / ln["slots"],
    }


def _terms(x: dict, f: dict, form) -> tuple[float, float, float]:
    """(issue, latency, per-program) cycles of features `x` under constants `f`."""
    return tuple(sum(f.get(k, 0.0) * x[k] for k in part) for part in form)


def proxy_ms(p: dict, c: dict, f: dict, form=FORM) -> tuple[float, dict]:
    """The proxy's ms of point `p` (T, B * Hkv, DRAM bytes) for record `c`: max(issue, latency) +
    per-program cycles over the clock, floored by DRAM at 80 % of the datasheet; and each term's ms."""
    x = features(launch(p, c))
    clock = H200["ghz"] * 1e6
    parts = {k: f.get(k, 0.0) * x[k] / clock for part in form for k in part}
    issue, lat, add = _terms(x, f, form)
    dram = p["dram"] / (DRAM_BW[p.get("gpu", "H200")] * 0.8) * 1e3
    return max((max(issue, lat) + add) / clock, dram), parts


def nnls_rel(xs: list[list[float]], ys: list[float], ws: list[float]) -> list[float]:
    """Non-negative least squares on weighted relative error: keys_proxy.nnls_rel with weights."""
    return keys_proxy.nnls_rel(xs, ys, ws)


# Starting latency constants (cycles) of the max() fit's restarts.
LAT_STARTS = (10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0)


def fit(points: list[dict], sass: dict, form=FORM) -> dict:
    """The constants (SM cycles) of `form` = (issue, latency, per-program features), non-negative, in
    weighted relative error: each measured setting weighted alike (a probe variant's one or two points
    count as much as a speed run setting's thirty), spilled settings left out. max() is fitted by
    alternating: given which side of the max each point is on, one least squares over all points
    (each point's features on the other side zeroed); repeat until no point changes side; restarted
    from LAT_STARTS (the latency constants at that value, the rest from the additive fit) and the
    lowest error kept. Deterministic; no compiler."""
    issue, lat, add = form
    cols = [*issue, *lat, *add]
    pts = [p for p in points if sass[p["key"]]["spill"] == 0]
    clock = H200["ghz"] * 1e6
    n: dict[str, int] = {}
    for p in pts:
        n[p["key"]] = n.get(p["key"], 0) + 1
    X = [features(launch(p, sass[p["key"]])) for p in pts]
    ys = [p["ms"] * clock for p in pts]
    ws = [1 / n[p["key"]] for p in pts]

    def solve(side: list[bool]) -> dict:
        rows = [[x[k] if (k in add or (k in issue) == s) else 0.0 for k in cols] for x, s in zip(X, side)]
        return dict(zip(cols, nnls_rel(rows, ys, ws)))

    def loss(f: dict) -> float:
        return sum(w * ((max(a, b) + c) / y - 1) ** 2 for (a, b, c), y, w in
                   ((_terms(x, f, form), y, w) for x, y, w in zip(X, ys, ws)))  # fmt: skip

    base = solve([True] * len(X))
    if not lat:
        return base
    best, best_loss = base, loss(base)
    for start in LAT_STARTS:
        f = {**base, **dict.fromkeys(lat, start)}
        side = None
        for _ in range(50):
            new = [a >= b for a, b, _ in (_terms(x, f, form) for x in X)]
            if new == side:
                break
            side, f = new, solve(new)
        cur = loss(f)
        if cur < best_loss:
            best, best_loss = f, cur
    return best


def predict(points: list[dict], sass: dict, f: dict, form=FORM) -> list[dict]:
    out = []
    for p in points:
        ms, parts = proxy_ms(p, sass[p["key"]], f, form)
        row = {**{k: p[k] for k in ("config", "set", "run", "shape", "T", "B") if k in p}, "proxy_ms": round(ms, 4),
               "bound": max(parts, key=parts.get)}  # fmt: skip
        if "ms" in p:
            row.update(ms=p["ms"], error=round(ms / p["ms"] - 1, 4))
        out.append(row)
    return out


def held_out(points: list[dict], sass: dict, form=FORM) -> dict[str, list[float]]:
    """Each measured configuration's points (a kernel at one launch setting: `key`) predicted by the
    constants fitted without them."""
    out = {}
    for key in sorted({p["key"] for p in points}):
        f = fit([p for p in points if p["key"] != key], sass, form)
        out[key] = [r["error"] for r in predict([p for p in points if p["key"] == key], sass, f, form)]
    return out


def with_keys(points: list[dict]) -> list[dict]:
    for p in points:
        c = CONFIGS[p["config"]]
        p["key"] = _key(p["config"], p["set"], c[4], c[5])
    return points


def summary(points: list[dict], sass: dict, form=FORM) -> dict:
    """The fit over every point, its errors, and each configuration's error held out of the fit."""
    f = fit(points, sass, form)
    errs = sorted(abs(r["error"]) for r in predict(points, sass, f, form))
    loo = held_out(points, sass, form)
    loo_all = sorted(abs(e) for es in loo.values() for e in es)
    return {"fit": "h100+h200", "form": {"issue": form[0], "latency": form[1], "per_program": form[2]}, "cycles": {k: round(v, 6) for k, v in f.items()},
            "points": len(errs), "configs": len(loo), "within_30pct": sum(e <= 0.30 for e in errs),
            "max_abs_error": round(errs[-1], 3), "median_abs_error": round(errs[len(errs) // 2], 3),
            "held_out_within_35pct": sum(e <= 0.35 for e in loo_all), "held_out_max_abs_error": round(loo_all[-1], 3),
            "held_out_by_config": {k: round(max(abs(e) for e in v), 3) for k, v in loo.items()}}  # fmt: skip


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--recount", action="store_true", help="compile the measured configurations again, record"
    )
    ap.add_argument(
        "--count", nargs="+", metavar=("CONFIG", "KEY=VALUE"), help="compile one candidate, record"
    )
    ap.add_argument("--shape", help="GxD for --count (default: the config's own)")
    ap.add_argument("--arch", type=int, default=90, choices=(80, 90))
    ap.add_argument(
        "--form",
        help="ISSUE/LATENCY/PER_PROGRAM FEATURES, comma-separated (default insn,smem,hgmma/wait/prog)",
    )
    args = ap.parse_args(argv)
    record = load_record()
    sass = record["sass"]
    if args.recount or args.count:
        keys = {(p["config"], json.dumps(p["set"], sort_keys=True)) for p in measured_points()}
        todo = [(c, json.loads(o), None, None) for c, o in sorted(keys)] if args.recount else []
        if args.count:
            over = {k: _value(v) for k, v in (s.split("=", 1) for s in args.count[1:])}
            G, D = (int(x) for x in args.shape.split("x")) if args.shape else (None, None)
            todo.append((args.count[0], over, G, D))
        for config, over, G, D in todo:
            rec = compile_config(config, over, G, D, args.arch)
            sass[_key(config, over, rec["G"], rec["D"], args.arch, rec["triton"])] = rec
            print(json.dumps({k: v for k, v in rec.items() if k not in ("trip", "once")}), flush=True)
        save_record(record)
        return 0
    form = (
        tuple(tuple(x for x in part.split(",") if x) for part in args.form.split("/")) if args.form else FORM
    )
    if len(form) != 3 or not set(sum(form, ())) <= set(FEATURES):
        ap.error(f"--form {args.form}: three '/'-separated lists of {', '.join(FEATURES)}")
    points = with_keys(measured_points())
    for r in predict(points, sass, fit(points, sass, form), form):
        print(json.dumps({"calibration": "h100+h200", **r}), flush=True)
    print(json.dumps(summary(points, sass, form)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
