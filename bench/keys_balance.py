"""The key-major selected kernels' program lengths, scheduled: the fit of bench/attention_cost/balance.py's
ALPHA and REF on a GPU run, and the schedule's stretch at B = 1 for each segment length.

Owns the evidence for the cost model's balance factor (docs/attention.md, bench/RESULTS.md "selkeys").
A key-major program walks one segment of at most S (query, block) pairs of one selection block;
`balance.slot_ratio` deals the programs, in grid order, to SMs x 2 program slots (both keys kernels
hold 2 programs an SM: 180-227 registers at 128 threads) and returns the makespan over the even
spread (r). The run's per-step time of each kernel (its ms over the modelled steps) at 8k x 8 and
16k x 4 over 32k x 2's against r's ratios gives ALPHA (least squares through the origin of
per-step ratio - 1 on r ratio - 1); REF is the mean of 1 + ALPHA (r - 1) over the run's M7C points.
Prints one JSON object per line; asserts nothing.

  .venv/bin/python bench/keys_balance.py                      # the fit on the 2026-11-26c H100 run
  .venv/bin/python bench/keys_balance.py --b1                 # r and the factor at B = 1, S 2048..256
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
# bench/attention_cost as bench/attention_model.py loads it, by path: the balance module the model
# prices with. Never bench/ on sys.path: a test that loads this file left it there, and the worker's
# next `import launcher` got bench/launcher.py (modelcheck.load_by_path).
load_by_path("attention_model", HERE / "attention_model.py")
from attention_cost import balance  # noqa: E402

RUN = HERE / "gpu" / "2026-11-26c-h100-speed.json"
KERNELS = {"fwd": ("_sel_fwd_keys_kernel", 128), "bwd": ("_sel_bwd_keys_kernel", 64)}  # M7C's BR_f / BR_keys
HKV, G, N, LP, SMS, RESIDENT = 2, 6, 16, 64, 132, 2


def seg_pairs(T: int, BH: int, target: int) -> int:
    from nsa.attention.triton.selected_keys import _seg_pairs

    return _seg_pairs(T, BH * T * N, target)


def steps_of(T: int, B: int, BR: int, S: int) -> tuple[int, ...]:
    BH = B * HKV
    nseg = BH * -(-T // LP) + -(-(BH * T * N) // S)
    return balance.segment_steps(T, BH, G, N, LP, BR, S, nseg)


def fit(run: Path = RUN) -> list[dict]:
    recs = [r for r in json.loads(run.read_text())["sections"]["speed"]["records"] if r["shape"] == "m7c"]
    rows, alpha_num, alpha_den = [], 0.0, 0.0
    for kernel, BR in KERNELS.values():
        pts = {}
        for r in recs:
            ms = {k["kernel"]: k["ms"] for k in r["nsa_kernels"]}[kernel]
            S = seg_pairs(r["T"], r["B"] * HKV, 0)  # the run's rule: T/4, clamped to [16, 2048]
            st = steps_of(r["T"], r["B"], BR, S)
            pts[r["T"]] = (ms / sum(st), balance.slot_ratio(st, SMS * RESIDENT), r["B"])
        ref = pts[32768]
        for T, (per, r, B) in sorted(pts.items()):
            y, x = per / ref[0] - 1, r / ref[1] - 1
            if T in (8192, 16384):
                alpha_num, alpha_den = alpha_num + x * y, alpha_den + x * x
            rows.append({"kernel": kernel, "T": T, "B": B, "ns_per_step": round(per * 1e6, 3), "r": round(r, 4),
                         "per_step_over_32k": round(per / ref[0], 4), "r_over_32k": round(r / ref[1], 4)})  # fmt: skip
    alpha = alpha_num / alpha_den
    out = [*rows, {"alpha": round(alpha, 3)}]
    for name in KERNELS:
        rs = [row["r"] for row in rows if row["kernel"] == KERNELS[name][0]]
        out.append({"ref": name, "value": round(sum(1 + alpha * (r - 1) for r in rs) / len(rs), 4)})
    return out


def b1(targets: tuple[int, ...] = (0, 1024, 512, 256)) -> list[dict]:
    rows = []
    for T in (8192, 16384, 32768, 65536):
        for target in targets:
            S = seg_pairs(T, HKV, target)
            row = {"T": T, "B": 1, "seg_target": target, "S": S}
            for name, (_, BR) in KERNELS.items():
                st = steps_of(T, 1, BR, S)
                row[f"{name}_programs"] = len(st)
                row[f"{name}_r"] = round(balance.slot_ratio(st, SMS * RESIDENT), 3)
                row[f"{name}_factor"] = round(balance.balance_factor(st, SMS * RESIDENT, name), 3)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--b1", action="store_true", help="the schedule at B = 1 for seg_target 0 (T/4), 1024, 512, 256"
    )
    a = ap.parse_args(argv)
    for row in b1() if a.b1 else fit():
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
