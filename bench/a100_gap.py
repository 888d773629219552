"""Why the model prices NSA/FA2 so much worse on an A100 than on an H100, kernel by kernel and, for
the largest kernel of the A100 misses (the key-major selected backward `_sel_bwd_keys_kernel`), term by term.

Modelled, no GPU (no A100 has run these kernels). Four parts, one JSON object per line:
- `gap` rows (M7C, B = 1, the launch settings the code ships for each GPU): each kernel's A100 over
  H100 time beside FlashAttention-2's A100 over H100 time in the same direction, and its excess, the
  A100 milliseconds beyond the H100's scaled by FlashAttention-2's ratio (the excesses sum to what
  keeps the A100's NSA/FA2 above the H100's); a `gap_total` row per T.
- `keys_step` rows: one 64-row step of the keys backward a warp, sm_80 as shipped (bench/a100_proxy_sass.json)
  against sm_90 as shipped (compiled, triton 3.6), its instructions, shared-memory accesses (LDSM
  among them) and HMMA / HGMMA, priced at the keys proxy's H200 constants (what the A100 price
  uses), split into its issue and shared-memory terms; and the A100 over H100 ratio of the kernel's
  model time taken apart (SMs x clock, the step's proxy cycles, the rest: the schedule over
  each GPU's slots and the H100's fitted price against its proxy's).
- `h100c_check` rows: the keys proxy as fitted on the 21 H200 points only (bench/keys_proxy.py, the
  constants the A100 price uses) against the H100 of 2026-11-26c's five points of the shipped sm_90
  build (`keys_div32`, 16-bit partials: 535 SASS a step, below every H200 point's instructions and
  below the A100 setting's): out of sample.
- `ldsm_fit` rows: the proxy refitted with LDSM apart from the other shared accesses (LDS / STS),
  on the H200 points and on them plus the H100's, and what each prices sm_80's step at: whether
  the Hopper evidence makes an LDSM (sm_80's operand loads for mma.sync) cheaper than the
  conversions most Hopper accesses are.

  .venv/bin/python bench/a100_gap.py                    # from bench/a100_gap_sass.json
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/a100_gap.py --recount   # re-record (minutes)

bench/a100_gap_sass.json holds the sm_90 step of the shipped keys backward and the LDSM counts of the
H200 points' settings (their other counts are bench/keys_proxy_sass.json's; `--recount` asserts
they agree). Asserts nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path, load_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SASS_FILE = HERE / "a100_gap_sass.json"
H100C = ROOT / "bench/gpu/2026-11-26c-h100-speed.json"
TS = [8192, 32768]
SM90_SHIPPED = {"BR_keys": 64}  # sm_90's keys backward as shipped (the rest its _config's)
# The keys backward's settings its SASS depends on (bench/attention_cost/sass80.py keys_key's, and the dQ store's)
KEYS_SETTING = ("BR_keys", "warps_keys", "stages_kv", "pdq_bits", "keys_div32", "keys_dq_mma", "keys_rowlim")


def keys_config(arch: int) -> dict:
    """selected.py `_config`'s keys backward settings at M7C (G 6, head_dim 64, l' 64) on sm_`arch`."""
    from nsa.attention.triton import selected as sel

    c = sel._config(6, 64, 64, arch=arch)
    return {k: c[k] for k in KEYS_SETTING}


def _kp():
    return load_by_path("keys_proxy", HERE / "keys_proxy.py")


def recount() -> dict:
    """Compile (triton 3.6 on PYTHONPATH) the shipped sm_90 keys backward and every H200 point's
    setting; the LDSM of each, checked against bench/keys_proxy_sass.json's other counts."""
    kp = _kp()
    old = json.loads(kp.SASS_FILE.read_text())
    out = {"triton": None, "sm90_shipped": None, "ldsm": {}}
    for kernel in ("bwd", "fwd"):
        for p in kp.measured_points(kernel):
            key = kp._key(kernel, p["setting"])
            if key in out["ldsm"]:
                continue
            # the measured runs stored the dQ partials in fp32: the record's counts are that build's
            over = {**p["setting"], **({"pdq_bits": 32} if kernel == "bwd" else {})}
            c = kp.compile_keys(kernel, over)
            step = c["paths"]["step"]
            mism = {k: (v, step[k]) for k, v in old[key]["paths"]["step"].items() if step[k] != v}
            if mism:
                raise SystemExit(f"{key}: recompiled step differs from bench/keys_proxy_sass.json {mism}")
            out["ldsm"][key] = {"step": step["ldsm"], "prologue": c["paths"]["prologue"]["ldsm"],
                                "epilogue": c["paths"]["epilogue"]["ldsm"]}  # fmt: skip
            out["triton"] = c["triton"]
    c = kp.compile_keys("bwd", SM90_SHIPPED)
    out["sm90_shipped"] = {k: c[k] for k in ("registers", "spill", "smem", "paths", "triton")}
    out["sm90_shipped"]["setting"] = keys_config(90)
    return out


def gap_rows(model, Ts: list[int]) -> list[dict]:
    """Per kernel, the A100's time over the H100's against FlashAttention-2's (same direction)."""
    rows = []
    shape = model.SHAPES["m7c"]
    a, h = model.GPUS["A100"], model.GPUS["H100"]
    for T in Ts:
        fa = model.flash2(T, shape)
        fa_ratio = {d: model.total(fa, a, d) / model.total(fa, h, d) for d in ("fwd", "bwd")}
        ka, kh = model.ours_on(T, shape, a), model.ours_on(T, shape, h)
        by = {k.name: k for k in kh}
        out, t_a, t_h = [], 0.0, 0.0
        for k in ka:
            ms_a, ms_h = k.time(a) * 1e3, by[k.name].time(h) * 1e3
            t_a, t_h = t_a + ms_a, t_h + ms_h
            excess = ms_a - ms_h * fa_ratio[k.direction]
            out.append({"gap": k.name, "T": T, "dir": k.direction, "kind_a100": k.kind,
                        "a100_ms": round(ms_a, 4), "h100_ms": round(ms_h, 4),
                        "ratio": round(ms_a / ms_h, 2) if ms_h else None,
                        "fa2_ratio": round(fa_ratio[k.direction], 3), "excess_ms": excess})  # fmt: skip
        ex = sum(r["excess_ms"] for r in out)
        for r in sorted(out, key=lambda r: -r["excess_ms"]):
            r["excess_share"] = round(r["excess_ms"] / ex, 3)
            r["excess_ms"] = round(r["excess_ms"], 4)
            rows.append(r)
        fa_a, fa_h = model.total(fa, a) * 1e3, model.total(fa, h) * 1e3
        rows.append({"gap_total": "m7c", "T": T, "a100_ms": round(t_a, 3), "h100_ms": round(t_h, 3),
                     "fa2_a100_ms": round(fa_a, 3), "fa2_h100_ms": round(fa_h, 3),
                     "nsa_over_fa2_a100": round(t_a / fa_a, 3), "nsa_over_fa2_h100": round(t_h / fa_h, 3),
                     "excess_ms": round(ex, 3),
                     "a100_at_h100_ratios": round((t_a - ex) / fa_a, 3)})  # fmt: skip
    return rows


def _cycles(step: dict, f: dict) -> dict:
    """A warp's step at the proxy's constants, per term (scheduler cycles)."""
    return {"insn": f["insn"] * step["insns"], "smem": f["smem"] * step["lds_sts"]}


def _sm80_step(model) -> dict:
    """A warp's loop step of sm_80's shipped keys backward at M7C (the A100 record's entry of what
    `_config` ships on sm_80, bench/a100_proxy.py `keys_setting`)."""
    st = load_by_path("a100_proxy", HERE / "a100_proxy.py").keys_setting(6, 64, {})
    key = sys.modules["attention_cost.sass80"].keys_key(6, 64, st)
    return model.a100_record()["keys_bwd"][key]["paths"]["step"]


def keys_step_rows(model, rec: dict) -> list[dict]:
    f = model.a100_record()["fit"]["keys_bwd"]
    s80 = _sm80_step(model)
    if rec["sm90_shipped"]["setting"] != keys_config(90):
        raise SystemExit(
            f"bench/a100_gap_sass.json: its sm_90 keys backward {rec['sm90_shipped']['setting']} is not what "
            f"selected.py ships now ({keys_config(90)}): run PYTHONPATH=<triton 3.6> bench/a100_gap.py --recount"
        )
    s90 = rec["sm90_shipped"]["paths"]["step"]
    rows = []
    c80, c90 = _cycles(s80, f), _cycles(s90, f)
    for arch, s, c in ((80, s80, c80), (90, s90, c90)):
        tot = sum(c.values())
        cfg = keys_config(arch)
        rows.append({"keys_step": f"sm_{arch}", "rows": cfg["BR_keys"], "warps": cfg["warps_keys"], "insns": s["insns"],
                     "smem": s["lds_sts"], "ldsm": s["ldsm"], "mma": s["mma"],
                     "cycles_a_warp": round(tot), "insn_cycles": round(c["insn"]), "smem_cycles": round(c["smem"]),
                     "smem_share": round(c["smem"] / tot, 3)})  # fmt: skip
    a, h = model.GPUS["A100"], model.GPUS["H100"]
    step_ratio = sum(c80.values()) / sum(c90.values())
    sm_clock = (h.sms * h.clock) / (a.sms * a.clock)
    for T in TS:
        shape = model.SHAPES["m7c"]
        ka = next(k for k in model.ours_on(T, shape, a) if k.name == "sel_bwd_keys")
        kh = next(k for k in model.ours_on(T, shape, h) if k.name == "sel_bwd_keys")
        r = ka.time(a) / kh.time(h)
        rows.append({"keys_ratio": "a100_over_h100", "T": T, "a100_ms": round(ka.time(a) * 1e3, 4),
                     "h100_ms": round(kh.time(h) * 1e3, 4), "ratio": round(r, 3),
                     "sms_x_clock": round(sm_clock, 3), "step_cycles": round(step_ratio, 3),
                     "rest": round(r / sm_clock / step_ratio, 3)})  # fmt: skip
    return rows


def _rows(kp, rec: dict) -> tuple[list[dict], list[dict]]:
    """The 21 H200 points (the keys backward's, bench/keys_proxy.py's rows) with their LDSM added, and
    the H100 of 2026-11-26c's points of the shipped sm_90 build."""
    sass = json.loads(kp.SASS_FILE.read_text())
    for key, v in rec["ldsm"].items():
        for part in ("step", "prologue", "epilogue"):
            sass[key]["paths"][part] = {**sass[key]["paths"][part], "ldsm": v[part]}
    h200 = kp.rows_of("bwd", kp.measured_points("bwd"), sass)
    cur = rec["sm90_shipped"]
    st = kp.settings("bwd", SM90_SHIPPED)
    h100 = []
    for r in json.loads(H100C.read_text())["sections"]["speed"]["records"]:
        for k in r.get("nsa_kernels", []) if r["shape"] == "m7c" else []:
            if k["kernel"] == "_sel_bwd_keys_kernel":
                h100.append(
                    {**kp.launch("bwd", r["T"], r["B"], st, cur), "ms": k["ms"], "T": r["T"], "B": r["B"]}
                )
    return h200, h100


def _x(kp, ln: dict) -> dict:
    sched = kp.H200["sms"] * kp.H200["sched"]
    d = ln["dyn"]
    return {"insn": d["insns"] / sched, "smem": d["lds_sts"] / sched, "ldsm": d["ldsm"] / sched,
            "other_smem": (d["lds_sts"] - d["ldsm"]) / sched}  # fmt: skip


def _fit(kp, rows: list[dict], form: tuple[str, ...]) -> dict:
    clock = kp.H200["ghz"] * 1e6
    c = kp.nnls_rel([[_x(kp, r)[k] for k in form] for r in rows], [r["ms"] * clock for r in rows])
    return dict(zip(form, c))


def _ms(kp, ln: dict, f: dict) -> float:
    x = _x(kp, ln)
    return sum(f[k] * x[k] for k in f) / (kp.H200["ghz"] * 1e6)


def check_rows(model, rec: dict) -> list[dict]:
    kp = _kp()
    h200, h100 = _rows(kp, rec)
    f = model.a100_record()["fit"]["keys_bwd"]
    rows = []
    lo = min(_x(kp, r)["insn"] for r in h200)
    for r in h100:
        p = _ms(kp, r, f)
        rows.append({"h100c_check": "_sel_bwd_keys_kernel", "T": r["T"], "B": r["B"], "ms": r["ms"],
                     "proxy_ms": round(p, 3), "error": round(p / r["ms"] - 1, 3),
                     "x_insn_over_h200_lowest": round(_x(kp, r)["insn"] / lo, 3)})  # fmt: skip
    s80 = _sm80_step(model)
    x80 = {
        "insn": s80["insns"],
        "smem": s80["lds_sts"],
        "ldsm": s80["ldsm"],
        "other_smem": s80["lds_sts"] - s80["ldsm"],
    }
    base = f["insn"] * x80["insn"] + f["smem"] * x80["smem"]
    for pts, name in ((h200, "h200"), (h200 + h100, "h200+h100c")):
        for form in (("insn", "smem"), ("insn", "ldsm", "other_smem")):
            g = _fit(kp, pts, form)
            err = sorted(abs(_ms(kp, r, g) / r["ms"] - 1) for r in h200)
            step = sum(g[k] * x80[k] for k in form)
            rows.append({"ldsm_fit": name, "form": "+".join(form), "cycles": {k: round(v, 2) for k, v in g.items()},
                         "h200_within_20pct": sum(e <= 0.2 for e in err), "h200_max_error": round(err[-1], 3),
                         "h100c_errors": [round(_ms(kp, r, g) / r["ms"] - 1, 3) for r in h100],
                         "sm80_step_cycles": round(step), "over_shipped_constants": round(step / base, 3)})  # fmt: skip
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recount", action="store_true", help="compile again (triton 3.6) and record")
    args = ap.parse_args(argv)
    if args.recount:
        rec = recount()
        SASS_FILE.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    rec = json.loads(SASS_FILE.read_text())
    model = load_model()
    for r in gap_rows(model, TS) + keys_step_rows(model, rec) + check_rows(model, rec):
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
