"""How many keys enter a running top-16 per key tile of the selection: the shares behind the one- and
two-key insertion's price (compressed.py `_config` select_insert; bench/attention_cost/counts.py
`insert_factor`), measured on CPU, no GPU.

Owns the entry counts of bench/RESULTS.md "selinsert" (M7C, a token a group) and "paperins" (the
paper's shape, 4 tokens merged at once). On the GPU runs' inputs (bench/select_proxy.py's
`window_scores`: the suite's q and compressed keys, windows of 8 consecutive tokens spread over every
(batch, KV head) sequence, eager's Eq. 9-10 in float32) and eager's key bits (`block_keys`: forced
blocks +inf, non-candidates -1), it walks each token's running top-16 over key tiles of 16 blocks and
counts, per tile, the keys at or above the token's floor (the kernel's `enter`); a group of tokens
merged at once takes the most of its tokens' counts (`_merge_or_insert`'s n_in), over the key tiles
its program walks (to its last token's). Prints one JSON object per T: the share of a group's tiles
where none, one, two or more keys enter, for groups of 1, 2 and 4 tokens.

  .venv/bin/python bench/select_entries.py --shape paper --windows 256 --T 8192 32768 65536
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from nsa.attention.gpusuite.modelcheck import load_by_path

sp = load_by_path("select_proxy", Path(__file__).resolve().parent / "select_proxy.py")
BJ, LP = 16, 64  # blocks a key tile (compressed._config's BJ at l' / d = 4), l'


def entry_counts(t: torch.Tensor, keys: torch.Tensor, bj: int = BJ) -> torch.Tensor:
    """[n, tokens, tiles] int: per token and key tile, the keys >= the token's floor (the W-th key of
    its running top-W over the earlier tiles, 0 while fillers remain), as the kernel tests them."""
    n, w, ns = keys.shape
    flat = keys.reshape(-1, ns)
    top = torch.full((flat.shape[0], sp.W_TOP), -1, dtype=torch.int64)
    cnt = []
    for jb in range(-(-ns // bj)):
        kb = flat[:, jb * bj : (jb + 1) * bj]
        cnt.append((kb >= top[:, -1].clamp(min=0)[:, None]).sum(1))
        top = torch.cat([top, kb], 1).topk(sp.W_TOP, dim=1).values
    return torch.stack(cnt, 1).reshape(n, w, -1)


def shares(t: torch.Tensor, counts: torch.Tensor, group: int, bj: int = BJ) -> dict:
    """Of every (group, key tile) its program walks: the share where the most keys entering one of the
    group's tokens is 0, 1, 2 or more."""
    hist = torch.zeros(4)
    for off in range(0, counts.shape[1], group):
        most = counts[:, off : off + group].amax(1)  # [n, tiles]
        n_tiles = -(-(t[:, off + group - 1] // LP + 1) // bj)
        walked = torch.arange(most.shape[1])[None, :] < n_tiles[:, None]
        hist += torch.stack([((most.clamp(max=3) == k) & walked).sum() for k in range(4)]).float()
    tot = float(hist.sum())
    return {k: round(float(v) / tot, 4) for k, v in zip(("none", "one", "two", "more"), hist)} | {
        "tiles": int(tot)
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="paper", choices=sorted(sp.SHAPES))
    ap.add_argument("--windows", type=int, default=256, help="sampled 8-token windows per T (all sequences)")
    ap.add_argument("--T", type=int, nargs="+", default=[8192, 16384, 32768, 65536])
    args = ap.parse_args(argv)
    for T in args.T:
        if T < 2 * LP or T % sp.WINDOW:
            print(
                f"select_entries.py: --T {T}: give a multiple of {sp.WINDOW}, at least {2 * LP}",
                file=sys.stderr,
            )
            return 2
        t, sc = sp.window_scores(args.shape, T, 1, args.windows)
        counts = entry_counts(t, sp.block_keys(t, sc))
        row = {"shape": args.shape, "T": T, "windows": t.shape[0]}
        row.update({f"group{g}": shares(t, counts, g) for g in (1, 2, 4)})
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
