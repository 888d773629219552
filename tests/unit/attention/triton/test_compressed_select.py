"""The selection kernel `_cmp_select` (nsa.attention.triton.compressed_select) under TRITON_INTERPRET=1,
where many blocks tie exactly: its tables must be eager's Eq. 11 (`selection.top_blocks`) of eager's
Eq. 9 (`selection.selection_block_scores`) computed exactly, across key tiles, with the forced
blocks, T not a multiple of l', fewer blocks than n, G 1/2/6/16 and head_dim 64/128; and
`_config`'s select_v0 switch (the kernel before it, kept for the GPU probe) gives the same tables.

Run: .venv/bin/pytest tests/unit/attention/triton/test_compressed_select.py
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch

from nsa.attention.selection import selection_block_scores, top_blocks
from nsa.attention.triton import compressed as tri

SCALE = 0.125
# Rows that see no key: the kernel's exp2 of a huge logit overflows before its mask drops it.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")


def _tied_inputs(T: int, G: int, D: int, bl: int, d: int, lp: int, seed: int):
    """Exact ties by construction. Each selection block's compressed keys are one of three patterns
    (100 times a unit vector), and each token's query (the same for its G heads) one of them too: a
    key's logit is 1250 where its pattern is the token's, else 0, so its probability is exactly 0
    (exp underflows) or one value shared by all of the token's "hot" keys (all visible keys when
    none is hot). Block scores are then that value times an integer count, the same count giving
    the same floats in the same order (Eq. 9 treats every block alike): the tie-break (larger j
    first) and the forced blocks alone order equal counts. (Random logits cannot make exact ties for
    eager itself: its vectorised softmax rounds equal logits in different columns differently.)"""
    g = torch.Generator().manual_seed(seed)
    nc = (T - bl) // d + 1 if bl <= T else 0
    r = lp // d
    unit = 100.0 * torch.eye(3, D)
    q = (
        unit[torch.randint(0, 3, (T,), generator=g)][None, None, :, None, :]
        .expand(1, 1, T, G, D)
        .contiguous()
    )
    kc = unit[torch.randint(0, 3, (-(-nc // r),), generator=g).repeat_interleave(r)[:nc]][None, None]
    return q, kc


def _logits(q, kc, bl, d):
    """[T, G, nc] float64 logits of the (single) batch and KV head, -inf where not causally visible."""
    T, nc = q.shape[2], kc.shape[2]
    s = torch.einsum("tgd,kd->tgk", q[0, 0].double(), kc[0, 0].double()) * SCALE
    seen = torch.arange(nc)[None, :] * d + (bl - 1) <= torch.arange(T)[:, None]
    return s.masked_fill(~seen[:, None, :], float("-inf"))


def _kernel_table(q, kc, bl, d, lp, n, **over):
    """The selection kernel alone, from the exact row log-sum-exp (log2) the forward would save."""
    B, Hkv, T, G, D = q.shape
    s = _logits(q, kc, bl, d) * math.log2(math.e)
    lse = torch.logsumexp(s * math.log(2), dim=-1) / math.log(2) if kc.shape[2] else torch.zeros(T, G)
    lse = torch.where(torch.isfinite(lse), lse, 0.0).float()[None, None]
    c = {**tri._config(G, D, n, bl, d, lp), **over}
    k = min(n, -(-T // lp))
    idx = torch.full((B, Hkv, T, k), -7, dtype=torch.int64)
    valid = torch.zeros((B, Hkv, T, k), dtype=torch.bool)
    tri.launch_select(c, q, kc, lse, idx, valid, bl, d, lp, SCALE * math.log2(math.e), "ieee")
    return idx, valid


def _exact_table(q, kc, bl, d, lp, n):
    """Eager's Eq. 9 and Eq. 11 on exact scores: each block's count of hot keys, overlap-weighted."""
    T = q.shape[2]
    ns = -(-T // lp)
    s = _logits(q, kc, bl, d)[:, 0]  # every head of a token is the same
    hot = (s == s.max(dim=-1, keepdim=True).values) & torch.isfinite(s)
    counts = selection_block_scores(hot.double(), bl, d, lp, ns) if kc.shape[2] else torch.zeros(T, ns)
    idx, valid = top_blocks(counts.float(), torch.arange(T), lp, n)
    return idx[None, None], valid[None, None]


# (T, G, D, l, d, l', n): a key tile is BJ = 32 blocks (128 tokens) at l' = 4, r = 2 (16 blocks at
# r = 4), so T 292 spans three tiles, the last one partial; T 301 is no multiple of l'; T 21 has 6
# blocks for n = 8. G 6 x D 64 at a = 2 runs sm_80's `_config` (the interpreter's): 4 tokens in halves
# with select_shm and select_split; T 292 reaches its interior loop (tile 1 for the programs from
# token 260 on) and its programs before token 260 run what a T 260 case ran (three tiles, no interior
# loop: the selection is causal, a program sees only the tiles up to its tokens), so T 260 is not a
# case of its own any more (28 s of CI, 2026-11-27).
CASES = [
    (292, 6, 64, 4, 2, 4, 6),
    (150, 16, 128, 4, 2, 4, 5),
    (261, 1, 128, 8, 4, 8, 6),
    (21, 2, 64, 4, 2, 4, 8),
    (301, 2, 64, 8, 2, 8, 7),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c[0]}G{c[1]}D{c[2]}l{c[3]}d{c[4]}n{c[6]}")
def test_exactly_tied_blocks_resolve_like_eager(case):
    T, G, D, bl, d, lp, n = case
    q, kc = _tied_inputs(T, G, D, bl, d, lp, seed=T)
    idx, valid = _kernel_table(q, kc, bl, d, lp, n)
    e_idx, e_valid = _exact_table(q, kc, bl, d, lp, n)
    assert idx.shape == e_idx.shape == (1, 1, T, min(n, -(-T // lp)))
    assert torch.equal(valid, e_valid)
    assert torch.equal(idx, e_idx)
    # The ties are real: some late token holds free blocks of equal count, ordered by j alone.
    counts = selection_block_scores(
        (lambda s: ((s == s.max(-1, keepdim=True).values) & torch.isfinite(s)).double())(
            _logits(q, kc, bl, d)[:, 0]
        ),
        bl, d, lp, -(-T // lp),
    )  # fmt: skip
    t = T - 1
    jt = t // lp
    free = [j for j in idx[0, 0, t][valid[0, 0, t]].tolist() if j not in (0, jt, jt - 1)]
    assert len(free) >= 2 and len({float(counts[t, j]) for j in free}) < len(free)


def test_select_v0_switch_gives_the_same_tables():
    """`_config(...)["select_v0"]` launches the kernel before this one (bench/kernel_probe.py compares
    them on the GPU): same tables."""
    T, G, D, bl, d, lp, n = 140, 6, 64, 4, 2, 4, 6
    q, kc = _tied_inputs(T, G, D, bl, d, lp, seed=T)
    e_idx, e_valid = _exact_table(q, kc, bl, d, lp, n)
    idx, valid = _kernel_table(q, kc, bl, d, lp, n, select_v0=1)
    assert torch.equal(valid, e_valid) and torch.equal(idx, e_idx)


def test_select_proxy_candidate_settings_are_the_m7c_case_s_own():
    """bench/select_proxy.py's candidate for the GPU probe (4 tokens a tile merged in halves under a
    register cap, `maxnreg_sel`; the interpreter ignores the cap) is what `_config` ships on sm_80 (the
    interpreter's arch) at M7C's G 6 x D 64 with a = 2, so CASES' T 292 case runs it on exact ties
    against eager's tables, through three key tiles and the interior loop. This test ran the same
    launch again at T 140 (two key tiles, nothing T 292 does not run: the kernel's constexprs are the
    same, T is a runtime argument; 30 s of CI, 2026-11-27); it now pins that the case still runs the
    candidate, so a change of the shipped setting cannot leave the candidate untested."""
    T, G, D, bl, d, lp, n = CASES[0]
    assert (G, D, bl // d) == (6, 64, 2)
    c = tri._config(G, D, n, bl, d, lp)
    assert (c["bt_sel"], c["halves_sel"], c["maxnreg_sel"]) == (4, 1, 168)
    assert 2 * c["BJ"] * lp < T  # three key tiles: the interior loop runs


def test_the_papers_sm90_setting_resolves_ties_like_eager():
    """The paper's shape as sm_90 launches it (4 tokens a tile merged at once, the CUT loop split since
    the second 2026-11-27 call, select_split 1, the one- and two-key insertion, select_insert 2, Eq. 9's
    shared key without its gathers, select_shm 1 since 2026-11-27): eager's tables on exact ties (CASES'
    paper case; a = 2)."""
    T, G, D, bl, d, lp, n = 150, 16, 128, 4, 2, 4, 5
    sm90 = tri._config(G, D, 16, 32, 16, 64, 90)
    keys = ("bt_sel", "halves_sel", "select_cut", "select_shm", "select_split", "select_insert")
    over = {k: sm90[k] for k in keys}
    assert over == {"bt_sel": 4, "halves_sel": 0, "select_cut": 1, "select_shm": 1, "select_split": 1,
                    "select_insert": 2}  # fmt: skip
    q, kc = _tied_inputs(T, G, D, bl, d, lp, seed=T)
    e_idx, e_valid = _exact_table(q, kc, bl, d, lp, n)
    idx, valid = _kernel_table(q, kc, bl, d, lp, n, **over)
    assert torch.equal(valid, e_valid) and torch.equal(idx, e_idx)
