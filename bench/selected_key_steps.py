"""Key steps of the selected branch's query-major kernels (forced split), token tiles vs one token a program.

Owns the CPU count behind docs/attention.md "Triton backend: selected branch" (token tiles): for a
selection table, how many (64-key chunk, 16-row tile) steps the forward and the dQ kernel each take
when a program holds TP tokens and walks the union of their non-forced blocks
(nsa.attention.triton.selected_query.key_steps), against one token a program. A step is the unit of
both the padded MMA work and the K/V bytes read through L2, so the ratio is what the tiles save of
both. No GPU, no kernel runs; prints one JSON row per (table kind, G, T). It measures, it asserts nothing.

Tables (n = 16, l' = 64 as M7C, one (batch, KV head)):
- "random": top_blocks over uniform random scores, each token independent (adjacent tokens share only
  by chance: the worst case for the tiles);
- "shared": scores constant over each query block, so every token of a block selects the same blocks
  (adjacent tokens identical: the best case, 1/TP).

  .venv/bin/python bench/selected_key_steps.py                 # T 8192, G 1/2/4/6/16
  .venv/bin/python bench/selected_key_steps.py --T 8192 32768 --G 6
"""

from __future__ import annotations

import argparse
import json

import torch

from nsa.attention.selection import top_blocks
from nsa.attention.triton.selected_query import key_steps


def table(kind: str, T: int, lp: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[1, 1, T, n] selection table of the given kind (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    ns = -(-T // lp)
    if kind == "random":
        scores = torch.rand(1, 1, T, ns, generator=g)
    else:
        per_block = torch.rand(1, 1, ns, 1, ns, generator=g)
        scores = per_block.expand(-1, -1, -1, lp, -1).reshape(1, 1, ns * lp, ns)[:, :, :T]
    return top_blocks(scores, torch.arange(T), lp, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[8192])
    ap.add_argument("--G", type=int, nargs="+", default=[1, 2, 4, 6, 16])
    ap.add_argument("--sel-block", type=int, default=64)
    ap.add_argument("--n-sel", type=int, default=16)
    args = ap.parse_args()
    for T in args.T:
        for kind in ("random", "shared"):
            idx, valid = table(kind, T, args.sel_block, args.n_sel)
            for G in args.G:
                row = key_steps(idx, valid, args.sel_block, G)
                print(
                    json.dumps(
                        {
                            "table": kind,
                            "T": T,
                            "G": G,
                            "sel_block": args.sel_block,
                            "n_sel": args.n_sel,
                            **row,
                        }
                    )
                )


if __name__ == "__main__":
    main()
