"""The keys proxy (bench/keys_proxy.py) applied to the query-major path's dK/dV, `_sel_bwd_dkdv_kernel`.

Owns bench/RESULTS.md's "seldkdv" section: whether the proxy fitted on `_sel_bwd_keys_kernel` (the
same `_dkdv_walk`, plus a dQ product) predicts the dK/dV kernel's measured H200 times, and what it
prices larger row tiles at for the paper shape (G 16 x D 128, Hkv 4). The constants are the keys
backward's, refitted here from its own measured points exactly as keys_proxy.py fits them
(form instructions + shared memory: 3.01 cycles an instruction, 43.1 a shared access, per scheduler);
nothing is fitted on the dK/dV kernel. Its measured points: the `_sel_bwd_dkdv_kernel` rows of the
2026-11-26b H200 speed runs (triton 3.6; paper at BR 32 / 4 warps / 1 stage, M7C at BR 64 / 4 / 1:
selected._config's settings then and now). Steps a launch from keys_proxy.segments (the modelled
table, the same reverse index). Its calibrated range: the keys backward's points, per scheduler
(warp instructions, shared accesses) and warps a scheduler (1-2: 2 programs of 4 warps or 1 of 8).

SASS counts per (triton, shape, setting) are recorded in bench/dkdv_proxy_sass.json: `--recount`
compiles what is missing with the triton on PYTHONPATH (3.6 for the measured build, sm_90). Prints
one JSON object per line; asserts nothing.

  .venv/bin/python bench/dkdv_proxy.py                               # calibration rows + candidates
  PYTHONPATH=/tmp/forced-leg36 .venv/bin/python bench/dkdv_proxy.py --recount   # record 3.6 counts
  .venv/bin/python bench/dkdv_proxy.py --refit    # diagnostic: keys_proxy's forms with M7C dK/dV points
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
kp = load_by_path("keys_proxy", HERE / "keys_proxy.py")

SASS_FILE = HERE / "dkdv_proxy_sass.json"
SPEED = [f"bench/gpu/2026-11-26b-h200-speed-{x}.json" for x in ("final", "keys", "shipped", "keys-quick")]
SHAPE_NAME = {"paper_G16_D128": "paper", "m7c": "m7c"}
# The measured settings (selected._config at the runs: BR 32 past head_dim 64, else 64; 4 warps, 1 stage).
MEASURED = {
    "paper": {"BR": 32, "warps_kv": 4, "stages_kv": 1},
    "m7c": {"BR": 64, "warps_kv": 4, "stages_kv": 1},
}
CANDIDATES = [{"BR": br, "warps_kv": w, "stages_kv": s} for br in (64, 128) for w in (4, 8) for s in (1, 2)]
PREDICT = [("paper", 8192, 8), ("paper", 65536, 1)]


def _key(triton: str, shape: str, over: dict) -> str:
    return f"{triton}:{shape}:" + ",".join(f"{k}={v}" for k, v in sorted(over.items()))


def measured_points() -> list[dict]:
    """Every `_sel_bwd_dkdv_kernel` time of the 2026-11-26b H200 speed runs."""
    pts = []
    for path in SPEED:
        for r in json.loads((ROOT / path).read_text())["sections"]["speed"]["records"]:
            for k in r.get("nsa_kernels", []):
                if k["kernel"] == "_sel_bwd_dkdv_kernel":
                    shape = SHAPE_NAME[r["shape"]]
                    pts.append({"source": Path(path).stem.removeprefix("2026-11-26b-h200-"), "shape": shape,
                                "setting": MEASURED[shape], "T": r["T"], "B": r["B"], "ms": k["ms"]})  # fmt: skip
    return pts


def row(counts: dict, shape: str, over: dict, T: int, B: int) -> dict:
    """keys_proxy.launch of the dK/dV kernel at `shape` under `over` (the inputs of its terms)."""
    _, G, D = kp.SHAPES[shape]
    st = kp.settings("dkdv", over, G, D)
    ln = kp.launch("dkdv", T, B, st, counts, shape)
    return {"kernel": "dkdv", "setting": over, "shape": shape, "T": T, "B": B, "registers": counts["registers"],
            "spill": counts["spill"], "smem": counts["smem"], "triton": counts["triton"], **ln}  # fmt: skip


def warps_per_scheduler(r: dict) -> float:
    return max(r["resident"], 1) * r["warps"] / kp.H200["sched"]


def keys_fit(sass: dict) -> tuple[dict, dict]:
    """The keys backward's constants (keys_proxy's default form) and the per-scheduler range of its points."""
    rows = kp.rows_of("bwd", kp.measured_points("bwd"), sass)
    f = kp.fit(rows, kp.FORMS["issue+smem"])
    x = [kp.features(r) for r in rows]
    rng = {k: [min(v[k] for v in x), max(v[k] for v in x)] for k in ("insn", "smem")}
    rng["warps_per_scheduler"] = [min(map(warps_per_scheduler, rows)), max(map(warps_per_scheduler, rows))]
    return f, rng


def price(r: dict, f: dict, rng: dict) -> dict:
    ms, bound = kp.proxy_ms(r, f)
    x = kp.features(r)
    inside = all(rng[k][0] * 0.999 <= x[k] <= rng[k][1] * 1.001 for k in ("insn", "smem")) and (
        rng["warps_per_scheduler"][0] <= warps_per_scheduler(r) <= rng["warps_per_scheduler"][1]
    )
    out = {"shape": r["shape"], "setting": r["setting"], "T": r["T"], "B": r["B"], "triton": r["triton"],
           "registers": r["registers"], "spill": r["spill"], "smem": r["smem"], "resident": r["resident"],
           "warps_per_scheduler": warps_per_scheduler(r), "programs": r["programs"], "steps": r["steps"],
           "step_insns": r["step_insns"], "insn_per_sched": round(x["insn"] / 1e6, 3),
           "smem_per_sched": round(x["smem"] / 1e6, 3), "in_range": inside,
           "parts_ms": {k: round(v, 3) for k, v in kp.parts_ms(r, f).items()}, "bound": bound,
           "proxy_ms": round(ms, 3)}  # fmt: skip
    if "ms" in r:
        out.update(ms=r["ms"], source=r["source"], error=round(ms / r["ms"] - 1, 3))
    return out


def counts_for(sass: dict, triton: str, shape: str, over: dict, recount: bool) -> dict | None:
    k = _key(triton, shape, over)
    if k not in sass and recount:
        _, G, D = kp.SHAPES[shape]
        sass[k] = kp.compile_keys("dkdv", over, G, D)
        print(json.dumps({"recorded": k, **{x: sass[k][x] for x in ("registers", "spill", "smem")}}),
              file=sys.stderr, flush=True)  # fmt: skip
        SASS_FILE.write_text(json.dumps(sass, indent=1, sort_keys=True) + "\n")
    return sass.get(k)


def refit(keys_sass: dict, sass: dict) -> None:
    """Diagnostic, not a proxy anything ships on: each of keys_proxy's FORMS fitted on the keys
    backward's points plus the M7C dK/dV points, the paper shape's points held out; and what the
    form that holds them (step+insn) prices the candidates at over the measured tile."""
    keys = kp.rows_of("bwd", kp.measured_points("bwd"), keys_sass)
    dk = [
        {
            **row(sass[_key("3.6.0", p["shape"], p["setting"])], p["shape"], p["setting"], p["T"], p["B"]),
            "ms": p["ms"],
        }
        for p in measured_points()
    ]
    fits = {}
    for name, form in kp.FORMS.items():
        f = fits[name] = kp.fit(keys + [r for r in dk if r["shape"] == "m7c"], form)
        err = {g: [kp.proxy_ms(r, f)[0] / r["ms"] - 1 for r in rs] for g, rs in
               (("keys", keys), ("m7c", [r for r in dk if r["shape"] == "m7c"]),
                ("paper_held_out", [r for r in dk if r["shape"] == "paper"]))}  # fmt: skip
        print(json.dumps({"refit": name, "cycles": {k: round(v, 2) for k, v in f.items()},
                          **{g: [round(min(e), 3), round(max(e), 3)] for g, e in err.items()}}))  # fmt: skip
    for ver in sorted({k.split(":")[0] for k in sass}):
        base = sass[_key(ver, "paper", MEASURED["paper"])]
        for over in CANDIDATES:
            c = sass[_key(ver, "paper", over)]
            ratio = [kp.proxy_ms(row(c, sh, over, T, B), fits["step+insn"])[0]
                     / kp.proxy_ms(row(base, sh, MEASURED["paper"], T, B), fits["step+insn"])[0]
                     for sh, T, B in PREDICT]  # fmt: skip
            print(json.dumps({"refit_price": "step+insn", "triton": ver, "setting": over, "spill": c["spill"],
                              "over_measured": [round(x, 3) for x in ratio]}))  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recount", action="store_true", help="compile missing settings with this triton")
    ap.add_argument("--triton", action="append", help="the recorded triton versions to price (default all)")
    ap.add_argument("--refit", action="store_true", help="diagnostic: the forms refitted with the M7C dK/dV")
    args = ap.parse_args(argv)
    keys_sass = json.loads(kp.SASS_FILE.read_text())
    sass = json.loads(SASS_FILE.read_text()) if SASS_FILE.exists() else {}
    if args.refit:
        refit(keys_sass, sass)
        return 0
    f, rng = keys_fit(keys_sass)
    print(json.dumps({"fit": "_sel_bwd_keys_kernel", "cycles": {k: round(v, 3) for k, v in f.items()},
                      "range_per_scheduler": {k: [round(a / (1e6 if k != "warps_per_scheduler" else 1), 3)
                                                  for a in v] for k, v in rng.items()}}))  # fmt: skip
    if args.recount:
        import triton

        ver = triton.__version__
        for shape, over in MEASURED.items():
            counts_for(sass, ver, shape, over, True)
        for over in CANDIDATES:
            counts_for(sass, ver, "paper", over, True)
    versions = args.triton or sorted({k.split(":")[0] for k in sass})
    for p in measured_points():
        c = sass.get(_key("3.6.0", p["shape"], p["setting"]))
        if c is None:
            continue
        r = {**row(c, p["shape"], p["setting"], p["T"], p["B"]), "ms": p["ms"], "source": p["source"]}
        print(json.dumps({"calibration": "h200", "kernel": "_sel_bwd_dkdv_kernel", **price(r, f, rng)}))
    for ver in versions:
        base = sass.get(_key(ver, "paper", MEASURED["paper"]))
        for over in [MEASURED["paper"], *CANDIDATES]:
            c = sass.get(_key(ver, "paper", over))
            if c is None or base is None:
                continue
            for shape, T, B in PREDICT:
                pr = price(row(c, shape, over, T, B), f, rng)
                ref = kp.proxy_ms(row(base, shape, MEASURED["paper"], T, B), f)[0]
                print(json.dumps({"prediction": "h200", "kernel": "_sel_bwd_dkdv_kernel", **pr,
                                  "over_measured": round(pr["proxy_ms"] / ref, 3)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
