"""The selection kernel's one- and two-key insertion (`_cmp_select` INSERT 1 / 2, compressed.py
`_config` "select_insert") under TRITON_INTERPRET=1: where at most one (two) keys of each token enter
its running top-n, `_insert_one` (`_insert_two`) gives `_merge_top`'s result (the same bits in every slot, the same block ids in
every valid one) on constructed tops and keys: ties between the keys and top entries and between the
two keys, a key equal to the floor, fillers left in the top, non-candidate keys, the forced +inf key,
tokens where fewer or none enter;
and the kernel's tables with it are bitwise those without it where the running top-n fills early (so
tiles with one and with two keys entering: counted by eager's arithmetic), fp32 and bf16, the split loop's
interior and edge tiles, T no multiple of l'.

Run: .venv/bin/pytest tests/unit/attention/triton/test_compressed_select_insert.py
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch
import triton
import triton.language as tl

from nsa.attention.selection import selection_block_scores
from nsa.attention.triton import compressed as tri
from nsa.attention.triton import compressed_select as sel
from tests.fixtures.launch_spy import LaunchSpy

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")
INF_BITS = 0x7F800000


@triton.jit
def _both_kernel(TB, TJ, KB, KJ, MB, MJ, IB, IJ, N: tl.constexpr, W: tl.constexpr, BJ: tl.constexpr,
                 TWO: tl.constexpr):  # fmt: skip
    """`_merge_top` and `_insert_one` (TWO: `_insert_two`) of the same N tokens' tops [N, W] and keys
    [N, BJ]."""
    rw = tl.arange(0, N)[:, None] * W + tl.arange(0, W)[None, :]
    rk = tl.arange(0, N)[:, None] * BJ + tl.arange(0, BJ)[None, :]
    top_b, top_j, kb = tl.load(TB + rw), tl.load(TJ + rw), tl.load(KB + rk)
    kj = tl.load(KJ + tl.arange(0, BJ))
    floor = tl.maximum(tl.min(top_b, axis=1), 0)
    mb, mj = sel._merge_top(top_b, top_j, kb, kj, W, BJ)
    if TWO:
        ib, ij = sel._insert_two(top_b, top_j, kb, kj, kb >= floor[:, None], W)
    else:
        ib, ij = sel._insert_one(top_b, top_j, kb, kj, kb >= floor[:, None], W)
    tl.store(MB + rw, mb)
    tl.store(MJ + rw, mj)
    tl.store(IB + rw, ib)
    tl.store(IJ + rw, ij)


def _case(g: torch.Generator, W: int, BJ: int, j0: int, keys: int = 1):
    """One token's sorted top (eager's order: bits, then larger j first; ties among its bits, fillers
    at -1 in some) and keys of blocks j0.. of which at most `keys` are >= the floor (two: the second
    drawn like the first, so the two tie with each other too)."""
    n_valid = int(torch.randint(W // 2, W + 1, (1,), generator=g)) if torch.rand(1, generator=g) < 0.4 else W
    bits = torch.randint(100, 108, (n_valid,), generator=g)  # few values: ties
    js = torch.randperm(j0, generator=g)[:n_valid]
    order = sorted(range(n_valid), key=lambda i: (int(bits[i]), int(js[i])), reverse=True)
    top_b = torch.full((W,), -1, dtype=torch.int32)
    top_j = torch.zeros(W, dtype=torch.int32)
    top_b[:n_valid] = bits[order].int()
    top_j[:n_valid] = js[order].int()
    floor = max(int(top_b.min()), 0)
    # below the floor: non-candidates (-1) where fillers remain (floor 0), else bits under the floor
    below = (
        torch.full((BJ,), -1, dtype=torch.int32)
        if floor == 0
        else torch.randint(-1, floor, (BJ,), generator=g)
    )
    kb = below.int()
    for at in torch.randperm(BJ, generator=g)[:keys].tolist():
        pick = int(torch.randint(0, 5, (1,), generator=g))
        if pick == 1:
            kb[at] = floor  # equal to the floor: enters (ties go to the later j)
        elif pick == 2:
            kb[at] = int(top_b[int(torch.randint(0, n_valid, (1,), generator=g))])  # ties a top entry
        elif pick == 3:
            kb[at] = INF_BITS  # forced
        elif pick == 4:
            kb[at] = 108 + int(torch.randint(0, 2, (1,), generator=g))  # above every top entry
    return top_b, top_j, kb  # pick 0: that key does not enter


@pytest.mark.parametrize("W,BJ,keys", [(16, 16, 1), (16, 4, 1), (16, 16, 2), (16, 4, 2)])
def test_inserting_one_or_two_keys_is_the_merge(W, BJ, keys):
    N, j0 = 64, 200
    g = torch.Generator().manual_seed(W * BJ + keys)
    rows = [_case(g, W, BJ, j0, keys) for _ in range(N)]
    tb, tj, kb = (torch.stack([r[i] for r in rows]).contiguous() for i in range(3))
    kj = (j0 + torch.arange(BJ)).int()
    out = [torch.empty(N, W, dtype=torch.int32) for _ in range(4)]
    _both_kernel[(1,)](tb, tj, kb, kj, *out, N, W, BJ, keys == 2)
    mb, mj, ib, ij = out
    floor = tb.min(1).values.clamp(min=0)
    entering = (kb >= floor[:, None]).sum(1)
    assert int(entering.max()) == keys  # at most `keys` enter each token
    assert int((entering == keys).sum()) >= N // 4  # and that many do in many
    assert torch.equal(ib, mb)
    ok = mb >= 0
    assert torch.equal(ij[ok], mj[ok])
    # Not trivial: keys went in at every rank, the last slot included, and some tokens kept fillers.
    moved = (ib != tb).any(1)
    assert bool(moved.any()) and bool((ib < 0).any())


def _table(monkeypatch, over: dict, q, kc, lse, bl, d, lp, n):
    """The selection table of `_config` with `over` (select_insert among them), checked to reach the
    one launch."""
    B, Hkv, T, G, D = q.shape
    c = {**tri._config(G, D, n, bl, d, lp), "select_cut": 1, "BJ": BJ, "W": n, **over}
    k = min(n, -(-T // lp))
    idx = torch.full((B, Hkv, T, k), -7, dtype=torch.int64)
    valid = torch.zeros((B, Hkv, T, k), dtype=torch.bool)
    seen = []
    with monkeypatch.context() as m:
        m.setattr(tri, "_cmp_select", LaunchSpy(tri._cmp_select, seen, "INSERT"))
        tri.launch_select(c, q, kc, lse, idx, valid, bl, d, lp, SCALE * math.log2(math.e), "ieee")
    assert seen == [over["select_insert"]]
    return idx, valid


def _entries(q, kc, bl, d, lp, n, group: int = 1) -> tuple[int, int]:
    """Token tiles where exactly one / two keys enter the running top-n, by eager's Eq. 9-11
    arithmetic (the kernel's floats differ in the last bits: counts to show the paths run); `group`:
    of each `group` consecutive tokens merged at once, the most keys entering one of them (the
    kernel's `n_in`), tiles to the group's last token."""
    T, nc = q.shape[2], kc.shape[2]
    s = torch.einsum("tgd,kd->tgk", q[0, 0].double(), kc[0, 0].double()) * SCALE
    seen = torch.arange(nc)[None, :] * d + (bl - 1) <= torch.arange(T)[:, None]
    p = torch.softmax(s.masked_fill(~seen[:, None, :], float("-inf")), dim=-1).nan_to_num(0.0).sum(1)
    ns = -(-T // lp)
    sc = selection_block_scores(p.float(), bl, d, lp, ns)
    t, j = torch.arange(T), torch.arange(ns)
    bits = sc.contiguous().view(torch.int32).long() & 0x7FFFFFFF
    jt = (t // lp)[:, None]
    bits = torch.where((j == 0) | (j == jt) | (j == jt - 1), INF_BITS, bits)
    keys = torch.where(j * lp <= t[:, None], bits, -1)
    top = torch.full((T, n), -1, dtype=torch.int64)
    one = two = 0
    last = torch.clamp((t // group) * group + group - 1, max=T - 1)[::group]  # each group's last token
    for jb in range(-(-ns // BJ)):
        kb = keys[:, jb * BJ : (jb + 1) * BJ]
        cnt = (kb >= top[:, -1:].clamp(min=0)).sum(1)  # 0 where no candidate (keys -1)
        cnt = torch.nn.functional.pad(cnt, (0, -T % group)).view(-1, group).amax(1)[jb * BJ * lp <= last]
        one, two = one + int((cnt == 1).sum()), two + int((cnt == 2).sum())
        top = torch.cat([top, kb], 1).topk(n, dim=1).values
    return one, two


BJ, SCALE = 4, 0.125


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_insertion_gives_the_merges_tables_bit_for_bit(monkeypatch, dtype):  # select_insert 2: both paths
    """A top-4 (W and n 4: full after the first key tile of 4 blocks, d 1, l' 4) over 14 blocks,
    M7C's sm_90 setting (2 tokens a tile in halves, SHM, the split loop), the forward's row
    log-sum-exp; T no multiple of l'."""
    T, G, D, bl, d, lp, n = 55, 6, 16, 2, 1, 4, 4
    g = torch.Generator().manual_seed(11)
    nc = (T - bl) // d + 1
    q = torch.randn(1, 1, T, G, D, generator=g).to(dtype)
    kc = torch.randn(1, 1, nc, D, generator=g).to(dtype)
    s = torch.einsum("tgd,kd->tgk", q[0, 0].double(), kc[0, 0].double()) * SCALE * math.log2(math.e)
    seen = torch.arange(nc)[None, :] * d + (bl - 1) <= torch.arange(T)[:, None]
    s = s.masked_fill(~seen[:, None, :], float("-inf"))
    lse = torch.logsumexp(s * math.log(2), dim=-1) / math.log(2)
    lse = torch.where(torch.isfinite(lse), lse, 0.0).float()[None, None]
    over = {"bt_sel": 2, "halves_sel": 1, "select_shm": 1, "select_split": 1}
    old, new = (_table(monkeypatch, {**over, "select_insert": on}, q, kc, lse, bl, d, lp, n) for on in (0, 2))
    assert torch.equal(new[1], old[1]) and torch.equal(new[0], old[0])
    # Not trivial: the one-key path has tiles to run on, and late tokens chose among 14 blocks
    one, two = _entries(q, kc, bl, d, lp, n)
    assert one >= 10 and two >= 10, (one, two)
    assert bool(old[1][..., -1, :].all()) and len(set(old[0][0, 0, -1].tolist())) == n


def test_insert_needs_the_cut_loop():
    """`_insert_of`: select_insert reaches the kernel on the CUT loop only (the kernel asserts it)."""
    c = tri._config(6, 64, 16, 32, 16, 64, 90)
    assert tri._insert_of({**c, "select_insert": 1}) == 1
    assert tri._insert_of({**c, "select_insert": 1, "select_cut": 0}) == 0


def test_insertion_at_the_papers_setting_gives_the_merges_tables(monkeypatch):
    """The paper's sm_90 setting (select_insert 2 at G 16 past head_dim 64: 4 tokens a tile merged at
    once, SHM since 2026-11-27, the CUT loop split since that day's second call): the paths go by the most keys entering one of the 4 tokens,
    so tokens with fewer (or none) take the group's insertion. A top-4 over 14 blocks (as above), G 16,
    bf16, T no multiple of 4 or l'."""
    T, G, D, bl, d, lp, n = 53, 16, 16, 2, 1, 4, 4
    g = torch.Generator().manual_seed(9)
    nc = (T - bl) // d + 1
    q = torch.randn(1, 1, T, G, D, generator=g).bfloat16()
    kc = torch.randn(1, 1, nc, D, generator=g).bfloat16()
    s = torch.einsum("tgd,kd->tgk", q[0, 0].double(), kc[0, 0].double()) * SCALE * math.log2(math.e)
    seen = torch.arange(nc)[None, :] * d + (bl - 1) <= torch.arange(T)[:, None]
    s = s.masked_fill(~seen[:, None, :], float("-inf"))
    lse = torch.logsumexp(s * math.log(2), dim=-1) / math.log(2)
    lse = torch.where(torch.isfinite(lse), lse, 0.0).float()[None, None]
    shipped = tri._config(16, 128, 16, 32, 16, 64, 90)
    over = {k: shipped[k] for k in ("bt_sel", "halves_sel", "select_shm", "select_split")}
    assert over == {"bt_sel": 4, "halves_sel": 0, "select_shm": 1, "select_split": 1}
    assert shipped["select_insert"] == 2 and shipped["warps_sel"] == 4
    old, new = (_table(monkeypatch, {**over, "select_insert": on}, q, kc, lse, bl, d, lp, n) for on in (0, 2))
    assert torch.equal(new[1], old[1]) and torch.equal(new[0], old[0])
    # and the build the H100 of 2026-11-27 measured (the gathers' Eq. 9, select_shm 0) beside it
    gathers = _table(monkeypatch, {**over, "select_shm": 0, "select_insert": 2}, q, kc, lse, bl, d, lp, n)
    assert torch.equal(new[1], gathers[1]) and torch.equal(new[0], gathers[0])
    # and the unsplit loop (select_split 0, the build the second 2026-11-27 call measured against it)
    unsplit = _table(monkeypatch, {**over, "select_split": 0, "select_insert": 2}, q, kc, lse, bl, d, lp, n)
    assert torch.equal(new[1], unsplit[1]) and torch.equal(new[0], unsplit[0])
    one, two = _entries(q, kc, bl, d, lp, n, group=4)
    assert one >= 5 and two >= 5, (one, two)
    assert bool(old[1][..., -1, :].all()) and len(set(old[0][0, 0, -1].tolist())) == n
