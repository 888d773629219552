"""GPU-free estimate of the selected branch's forward: the key-major forward (selected_keys.py,
`fwd_keys`) against the token-tile forward (selected_forced.py's dense kernel + selected_query.py's
token tiles), in FLOPs issued by tl.dot and bytes moved by the kernels' loads and stores.

Owns nothing the package runs: it walks the kernels' grids (selected.py `_config` at the GPU's key tile
of 64, the reverse index's segments, the token tiles' `key_steps`) over one random `top_blocks` table
of one (batch, KV head) and scales by B*Hkv (every head's table has the same statistics). An estimate
on the CPU, no timing: "bytes" counts every load and store once (through L2; q is gathered per pair
and K/V per step), "dram_min" only each tensor's first touch (K, V, q, the table once; partials
written and read back). Prints one JSON row per (kernel family, T, B).

  .venv/bin/python bench/selected_keys_estimate.py                 # M7C at 8k x 8 and 64k x 1
  .venv/bin/python bench/selected_keys_estimate.py --T 8192 --B 8 --G 16 --D 128 --Hkv 1
"""

from __future__ import annotations

import argparse
import json

import torch

from nsa.attention.selection import top_blocks
from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys as tkeys
from nsa.attention.triton import selected_query as tq

EL = 2  # bf16 activations


def estimate(T: int, B: int, Hkv: int, G: int, D: int, lp: int = 64, n: int = 16, seed: int = 0) -> list:
    cfg = tsel._config(G, D, lp)  # the GPU's config (key tile 64)
    DP, BN, BR, BK = cfg["DP"], cfg["BN"], cfg["BR_f"], cfg["BK"]
    BH, ns = B * Hkv, -(-T // lp)
    g = torch.Generator().manual_seed(seed)
    idx, valid = top_blocks(torch.rand(1, 1, T, ns, generator=g), torch.arange(T), lp, n)
    NK = idx.shape[-1]
    t = torch.arange(T).view(T, 1)
    keep = valid & (idx >= 0) & (idx * lp <= t)
    pairs = int(keep.sum())  # per (batch, KV head)
    # Useful MMA work: each kept pair's G rows against its block's keys <= t (QK^T and PV).
    vis = torch.clamp(t + 1 - idx * lp, max=lp) * keep
    useful = 4 * G * D * int(vis.sum())

    # Key-major: segments of <= S pairs per block; a step is BR (pair, head) rows x BN keys.
    S = tkeys._seg_pairs(T)
    cnt = torch.bincount(torch.where(keep, idx, ns).view(-1), minlength=ns + 1)[:ns]
    full, rest = cnt // S, cnt % S
    seg_rows = torch.cat([torch.full((int(full.sum()),), S * G), (rest[rest > 0] * G)])
    steps = int(((seg_rows + BR - 1) // BR).sum())
    nb = -(-lp // BN)
    nseg_used = seg_rows.numel()
    kv_seg = nseg_used * nb * 2 * BN * D * EL  # K/V once per segment and key chunk
    q_pairs = pairs * (G * D * EL + 8)  # q gathered per pair, ORDER
    part_rw = nb * pairs * G * (D * EL + 4)  # PO (q's dtype) + PL (fp32), written once
    table = T * NK * 9  # int64 idx + int8 valid
    out_lse = T * G * (D * EL + 4)
    keys = {"flops": BH * nb * steps * 4 * BR * BN * DP, "bytes": BH * (kv_seg + q_pairs + part_rw)}
    keys["programs"] = BH * nseg_used * nb
    # The merge reads PO once and PL twice (max pass, sum pass), the table in both passes.
    merge_bytes = part_rw + nb * pairs * G * 4 + 2 * table + out_lse
    merge = {"flops": 0, "bytes": BH * merge_bytes, "programs": BH * -(-T // cfg["TM"])}
    index = {"flops": 0, "bytes": BH * T * NK * (9 + 8 + 2 * 16), "programs": 0}  # keys, sort in/out
    part = BH * nb * T * NK * G * (D * EL + 4)  # PO + PL allocated (every slot, written or not)
    km_total = {k: keys[k] + merge[k] + index[k] for k in ("flops", "bytes")}
    km_dram = BH * (2 * T * D * EL + T * G * D * EL + table + 2 * part_rw + out_lse)

    # Token-tile forward: the forced kernel (BM rows, 3 key steps of BK) + the token tiles (RP rows,
    # one BK-key step per distinct non-forced block of the tile's union).
    BM, RP, TP = cfg["BM"], cfg["RP"], cfg["TP"]
    fprog = -(-T * G // BM)
    first_tok = torch.arange(fprog) * BM // G
    fsteps = int(torch.clamp(first_tok // lp, max=2).sum() + fprog) * -(-lp // BK)  # block 0, jt-1, jt
    tiles = tq.key_steps(idx, valid, lp, G, key_tile=BK)
    q_once, state = T * G * D * EL, T * G * (D + 1) * 4  # q; the forced fp32 output + lse
    forced_bytes = q_once + fsteps * 2 * BK * D * EL + state + table
    forced = {"flops": BH * fsteps * 4 * BM * BK * DP, "bytes": BH * forced_bytes, "programs": BH * fprog}
    tok_bytes = tiles["steps_tiles"] * 2 * BK * D * EL + q_once + state + table + out_lse  # K/V per step
    tok = {"flops": BH * tiles["steps_tiles"] * 4 * RP * BK * DP, "bytes": BH * tok_bytes}
    tok["programs"] = BH * tiles["programs_tiles"]
    qm_total = {k: forced[k] + tok[k] for k in ("flops", "bytes")}
    qm_dram = BH * (2 * T * D * EL + q_once + 2 * state + table + out_lse)
    base = {"T": T, "B": B, "Hkv": Hkv, "G": G, "D": D, "sel_block": lp, "n": n, "useful_flops": BH * useful}
    return [
        {"estimate": "key_major", **base, **km_total, "dram_min": km_dram, "partials_bytes": part,
         "kernels": {"keys": keys, "merge": merge, "index": index}, "pairs": BH * pairs,
         "segments": BH * nseg_used, "rows_per_step": BR, "pad": 1 - BH * pairs * G / (BH * steps * BR)},
        {"estimate": "token_tiles", **base, **qm_total, "dram_min": qm_dram,
         "kernels": {"forced": forced, "tiles": tok}, "tile_steps": BH * tiles["steps_tiles"],
         "tile_rows_real": TP * G / RP},
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[8192, 65536])
    ap.add_argument("--B", type=int, nargs="+", default=[8, 1], help="one per --T")
    ap.add_argument("--Hkv", type=int, default=2)
    ap.add_argument("--G", type=int, default=6)
    ap.add_argument("--D", type=int, default=64)
    args = ap.parse_args()
    for T, B in zip(args.T, args.B, strict=True):
        for row in estimate(T, B, args.Hkv, args.G, args.D):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
