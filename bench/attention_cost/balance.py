"""The key-major selected kernels' grids scheduled on the SMs: how much longer a launch takes than
its steps spread evenly, from its programs' lengths.

Owns `segment_steps` (each program's BR-row steps: the reverse index's segments of a modelled
table, in grid order) and `balance_factor` (the launch's time over the even spread's). Pure
arithmetic, no torch: prices.py applies the factor (`Kernel.steps`) in place of the waves factor.

Why: a program of `_sel_fwd_keys_kernel` / `_sel_bwd_keys_kernel` / `_sel_bwd_dkdv_kernel` walks one
segment of at most S (query, block) pairs of one selection block. Block 0 is listed by every token
and the early blocks by most (random top-n over the candidates before a token), so at T = 8k a
(batch, KV head) has 4 + 13 segments of 96 steps of 128 rows forward (S = 2048 pairs; one 2047) while
the mean segment holds ~860 pairs. At B*T = 64k (every GPU run) 2,300-9,000 programs hide that; at B = 1
and 8k the 286 programs of M7C's two sequences fill 132 SMs x 2 programs once, and the launch lasts
as long as its longest programs: an even spread is 45 steps a program slot, the longest 96.

The model: programs of `segment_steps` (+ `PROLOGUE` steps each: the binary search for the block
and its keys' load) dealt in grid order to the first free of `slots` program slots (SMs x resident
programs, each slot its share of the SM: the list schedule the block dispatcher runs), makespan
over (total steps / slots) = r. A slot left alone on its SM runs faster than its share, which the
slot schedule ignores, so r overstates the stretch: the factor is 1 + ALPHA (r - 1), normalised by
the same at the fitted run (`REF`: the M7C points the prices were fitted on carry it already).
ALPHA from the H100 of 2026-11-26c (bench/gpu/2026-11-26c-h100-speed.json, every M7C T at B*T =
64k, S = 2048 from 8k): its per-step time of both keys kernels at 8k x 8 and 16k x 4 over 32k x 2
(fwd 1.061 / 1.032, bwd 1.065 / 1.035) against the schedule's r over 32k x 2's (1.128 / 1.080,
1.131 / 1.087): 0.46 by least squares (0.40-0.50 a point); bench/keys_balance.py prints the fit.
The same run's per-step time at 2k x 32 (0.92-0.93 of 32k's; r 1.04-1.06) and 64k x 1 (1.06; r
1.00) moves by as much for other reasons: the factor is good to ~+-7 % a point. Nothing measured below
B*T = 64k: the B = 1 rows (r 1.07-2.15 at 8k) are the schedule's extrapolation.
"""

from __future__ import annotations

import heapq
from functools import lru_cache

ALPHA = 0.46  # the measured share of the slot schedule's stretch (above; bench/keys_balance.py)
PROLOGUE = 1.0  # steps a program costs beyond its rows (binary search, K/V load, partial dK/dV store)
# Mean 1 + ALPHA (r - 1) over the M7C points of the fitted runs (T 2k-64k at B*T = 64k, S as shipped
# then; bench/keys_balance.py): the prices already hold it, so the factor is relative to it.
REF = {"fwd": 1.044, "bwd": 1.037}


def pairs_per_block(T: int, n: int, lp: int) -> list[int]:
    """(query, block) pairs listing each selection block of one (batch, KV head), modelled (also
    bench/keys_proxy.py's `pairs_per_block`): a query of block m lists every block 0..m while m < n;
    past that the forced 0, m - 1 and m, and n - 3 of the m - 2 others spread evenly, as random
    scores spread them."""
    ns = -(-T // lp)
    cnt = [0.0] * ns
    for m in range(ns):
        tok = min(lp, T - m * lp)
        if m < n:
            for j in range(m + 1):
                cnt[j] += tok
            continue
        for j in (0, m - 1, m):
            cnt[j] += tok
        share = tok * (n - 3) / (m - 2)
        for j in range(1, m - 1):
            cnt[j] += share
    return [round(c) for c in cnt]


def pairs_per_block_no_forced(T: int, n: int, lp: int) -> list[int]:
    """`pairs_per_block` without the forced entries (block 0, m - 1 and m of block m's tokens): what
    the key-major forward walks with selected.py's fwd_forced_merge (the merging forced pass takes
    them)."""
    ns = -(-T // lp)
    cnt = [0.0] * ns
    for m in range(ns):
        tok = min(lp, T - m * lp)
        if m < n:
            for j in range(1, m - 1):
                cnt[j] += tok
            continue
        share = tok * (n - 3) / (m - 2)
        for j in range(1, m - 1):
            cnt[j] += share
    return [round(c) for c in cnt]


@lru_cache(maxsize=256)
def segment_steps(
    T: int, BH: int, G: int, n: int, lp: int, BR: int, S: int, nseg: int, forced: bool = True
) -> tuple[int, ...]:
    """BR-row steps of every program of a key-major launch in grid order (BH sequences' blocks in
    order, each block's pairs in S-pair segments; forced False: the non-forced pairs alone), then the
    static grid's spare programs (0 steps) up to nseg."""
    per_seq = []
    for c in (pairs_per_block if forced else pairs_per_block_no_forced)(T, n, lp):
        for i in range(-(-c // S)):
            per_seq.append(-(-(min(S, c - i * S) * G) // BR))
    steps = per_seq * BH
    return tuple(steps + [0] * max(0, nseg - len(steps)))


@lru_cache(maxsize=1024)
def slot_ratio(steps: tuple[int, ...], slots: int) -> float:
    """r: the list schedule's makespan over the even spread of the steps alone (prologues make r > 1
    even for equal programs)."""
    free = [0.0] * slots
    for s in steps:
        heapq.heappush(free, heapq.heappop(free) + s + PROLOGUE)
    return max(free) / (sum(steps) / slots)


def balance_factor(steps: tuple[int, ...], slots: int, kind: str) -> float:
    """The launch's time over its even spread's, relative to the fitted runs' (REF[kind])."""
    return (1 + ALPHA * (slot_ratio(steps, slots) - 1)) / REF[kind]
