"""A GPU-free estimate of the selected branch's backward: today's query-major dQ path against the
key-major one of nsa/attention/triton/selected_keys_bwd.py (`bwd_keys`, G <= 8, forced blocks).

Owns no model: it counts, per kernel, the grid, the issued (padded) and useful matmul FLOPs, the
minimal DRAM bytes and the bytes gathered through L2, from the kernels' structure (selected.py
`_config` tiles), with bench/attention_model.py's expected counts of valid pairs (`_valid_pairs`) and
token-tile key steps (`_sel_steps`, random tables). bf16 activations, fp32 partials. It also prints
the backward's largest transient scratch per layer for both paths (what bench/memory.py adds on top
of its meta-device peak through attention_model.transient_bytes, which prices the old path only).
It times nothing: an estimate for the GPU run to check.

    .venv/bin/python bench/selected_keys_bwd.py                      # M7C 8k x 8 and 64k x 1
    .venv/bin/python bench/selected_keys_bwd.py --shape 8192x8 65536x1 131072x1

One JSON row per (T, B): {"estimate": "selected_bwd", "shape", "T", "B", "old": {kernel: {...}},
"keys": {kernel: {...}}, "totals": {...}, "transient_bytes": {"old", "keys"}}.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_model


def _p2(x: int, lo: int = 16) -> int:
    return max(lo, 1 << (x - 1).bit_length())


def _row(grid, issued, useful, dram, l2=0.0) -> dict:
    return {"grid": grid, "flops_issued": issued, "flops_useful": useful, "dram_bytes": dram, "l2_bytes": l2}


def estimate(T: int, B: int, Hkv: int = 2, G: int = 6, D: int = 64, lp: int = 64, n: int = 16) -> dict:
    am = load_model(Path(__file__).resolve().with_name("attention_model.py"))
    s = am.Shape("m7c", B, Hkv * G, Hkv, D, lp=lp, n=n)
    BH, ns, bf, DP = B * Hkv, -(-T // lp), 2, _p2(D)
    k = min(n, ns)  # table entries per token
    npairs = BH * am._valid_pairs(T, s)  # entries that add keys (the reverse index's pairs)
    rows = BH * T * G
    act, kvb, table = rows * D * bf, BH * T * D * bf, BH * T * k * 9
    S = min(2048, max(16, _p2(T) // 4))
    nseg = BH * ns + math.ceil(BH * T * k / S)
    part = 2 * nseg * lp * DP * 4  # fp32 partial dK and dV per segment
    prow = npairs * G  # (pair, head) rows of the key-major kernels
    use = 2 * prow * lp * D  # one [rows, l'] x D product over every pair's whole block
    gather = prow * D * bf * 2 + npairs * 8 * 3  # q and dO rows, lse/delta, ORDER
    old, new = {}, {}
    # Today: forced dQ (dense tiles of 64 rows, 3 key steps), token-tile dQ (TP = 2 at G 6: 16 rows
    # a step, one step per distinct non-forced block of the tile), dK/dV (BR = 64), reduce.
    fprog = BH * math.ceil(rows / BH / 64)
    fk = min(T, 3 * lp)
    fissue = 2 * fprog * 64 * fk * D
    old["_sel_forced_dq"] = _row([fprog], 3 * fissue, 3 * 2 * rows * (fk - lp / 2) * D,
                                 3 * act + rows * (D + 1) * 4 + table, fprog * fk * D * bf * 2)  # fmt: skip
    TP = max(1, 1 << max(0, (16 // G).bit_length() - 1))
    steps = BH * am._sel_steps(T, s, TP)
    ones = BH * am._sel_steps(T, s, 1)
    old["_sel_bwd_dq_tok"] = _row([BH * math.ceil(T / TP)], 3 * 2 * steps * _p2(TP * G) * lp * D,
                                  3 * 2 * ones * G * lp * D, 4 * act + 2 * kvb + table + rows * (D + 1) * 4,
                                  steps * lp * D * bf * 2)  # fmt: skip
    br_old = 32 if D > 64 else 64
    old["_sel_bwd_dkdv"] = _row([nseg, 1], 4 * 2 * math.ceil(prow / br_old) * br_old * lp * D, 4 * use,
                                2 * kvb + part, gather)  # fmt: skip
    old["_sel_bwd_reduce"] = _row([BH * ns, 1], 0, 0, part + 2 * kvb)
    # Key-major: delta, keys (BR = 32: 5 products a step; the dQ partial row written in fp32),
    # reduce, merge (reads each pair's partial once).
    pdq_written = prow * D * 4
    new["_sel_bwd_delta"] = _row([math.ceil(rows / 64)], 0, 0, 2 * act + rows * 4)
    new["_sel_bwd_keys"] = _row([nseg, 1], 5 * 2 * math.ceil(prow / 32) * 32 * lp * D, 5 * use,
                                2 * kvb + part + pdq_written, gather)  # fmt: skip
    new["_sel_bwd_reduce"] = old["_sel_bwd_reduce"]
    new["_sel_bwd_dq_merge"] = _row([math.ceil(T * G / 64), BH], 0, 0, pdq_written + table + act)

    def tot(ks: dict) -> dict:
        return {
            f: sum(r[f] for r in ks.values())
            for f in ("flops_issued", "flops_useful", "dram_bytes", "l2_bytes")
        }

    index = 3 * 8 * BH * T * k  # sort keys, order, sorted keys
    pdq_alloc = math.ceil(lp / 64) * BH * T * k * G * D * 4  # every table position, nb = 1 on the GPU
    transient = {
        "old": int(am.transient_bytes(T, s)),
        "keys": int(rows * 4 + index + part + pdq_alloc),
        "keys_pdq": int(pdq_alloc),
    }
    return {
        "estimate": "selected_bwd", "shape": "m7c", "T": T, "B": B, "G": G, "D": D,
        "pairs": int(npairs), "segments": nseg,
        "old": old, "keys": new, "totals": {"old": tot(old), "keys": tot(new)}, "transient_bytes": transient,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", nargs="+", default=["8192x8", "65536x1"], help="TxB at M7C (G 6, D 64)")
    args = ap.parse_args(argv)
    for sh in args.shape:
        T, B = (int(x) for x in sh.split("x"))
        print(json.dumps(estimate(T, B)), flush=True)


if __name__ == "__main__":
    main()
