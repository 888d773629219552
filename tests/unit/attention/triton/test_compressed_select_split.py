"""The selection kernel's CUT loop split into interior and edge key tiles (`_cmp_select` SPLIT,
compressed.py `_config` "select_split") under TRITON_INTERPRET=1: its tables are bitwise those of the
unsplit CUT loop on broken inputs (random queries and keys, a row log-sum-exp that is no softmax's,
so probabilities above 1 and far tiles that still merge) and eager's on real ones (exact ties
included: all logits 0), with the interior / edge boundary at every position: d = 1 makes a key tile
BJ * r tokens, so T of 3-5 tiles puts each program's first interior-free tile everywhere; 1, 2 and
4 tokens a tile (merged at once and in halves), G 1 / 6 / 16, T no multiple of the tile or of l',
r = l'/d no power of two (padded key columns), Eq. 9's shared keys gathered and rotated (SHM); and
the switch reaches the launch, off by default.

Run: .venv/bin/pytest tests/unit/attention/triton/test_compressed_select_split.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch
import triton
import triton.language as tl

from nsa.attention import compressed as eager
from nsa.attention.triton import compressed as tri
from nsa.attention.triton import compressed_select as sel
from tests.fixtures.launch_spy import LaunchSpy

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")


def _table(monkeypatch, over: dict, q, kc, lse, bl, d, lp, n):
    """The selection table of `_config` with `over` (select_split among them), checked to reach the
    one launch."""
    B, Hkv, T, G, D = q.shape
    c = {**tri._config(G, D, n, bl, d, lp), "select_cut": 1, "BJ": BJ, **over}
    k = min(n, -(-T // lp))
    idx = torch.full((B, Hkv, T, k), -7, dtype=torch.int64)
    valid = torch.zeros((B, Hkv, T, k), dtype=torch.bool)
    seen = []
    with monkeypatch.context() as m:
        m.setattr(tri, "_cmp_select", LaunchSpy(tri._cmp_select, seen, "SPLIT", "BT"))
        tri.launch_select(c, q, kc, lse, idx, valid, bl, d, lp, 0.125 * 1.4426950408889634, "ieee")
    assert seen == [(over["select_split"], c["bt_sel"])]
    return idx, valid


# (B, Hkv, T, G, D, l, d, l', n, bt_sel, halves_sel, select_shm). d = 1, and BJ 4 blocks a key tile
# instead of _config's 64 keys (the kernel is generic in BJ; the interpreter's cost is per program
# and tile): a tile is 16 tokens at l' 4 (r 4), the first interior tile (1) from t0 = 36 on, and up
# to 2 of them; `_interior_end` itself is checked at every position by
# test_interior_end_is_the_definition.
CASES = [
    (1, 1, 53, 6, 16, 2, 1, 4, 4, 2, 1, 1),  # M7C's sm_90 setting: 2 tokens in halves, SHM (shmsplit)
    (1, 1, 57, 6, 16, 2, 1, 4, 4, 4, 1, 1),  # M7C's sm_80 setting: 4 tokens in halves, SHM (a100shm)
    (1, 1, 41, 16, 16, 2, 1, 4, 4, 1, 0, 0),  # 1 token a tile, Eq. 9's neighbours gathered (no SHM)
]
BJ = 4


def _interior_end(t0: int, t_last: int, bl: int, d: int, lp: int, bj: int) -> int:
    """The definition: the first tile from 1 on that is not interior for a program of tokens
    t0..t_last (or its tile count): every key of the tile visible to t0, every block a candidate of
    t0, none forced (block 0, t0 // l' - 1 and later)."""
    r = lp // d
    n_tiles = -(-(t_last // lp + 1) // bj)
    end = 1
    while end < n_tiles:
        blocks = range(end * bj, (end + 1) * bj)
        keys_seen = ((end + 1) * bj * r - 1) * d + bl - 1 <= t0
        if not (keys_seen and all(j * lp <= t0 and 0 < j < t0 // lp - 1 for j in blocks)):
            break
        end += 1
    return end


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c[2]}G{c[3]}bt{c[9]}h{c[10]}s{c[11]}")
def test_split_loop_gives_the_cut_loops_tables_bit_for_bit(monkeypatch, case):
    B, Hkv, T, G, D, bl, d, lp, n, bt, halves, shm = case
    g = torch.Generator().manual_seed(T)
    nc = (T - bl) // d + 1
    q = torch.randn(B, Hkv, T, G, D, generator=g)
    kc = torch.randn(B, Hkv, nc, D, generator=g)
    lse = torch.randn(B, Hkv, T, G, generator=g) * 2  # no softmax's: p may exceed 1
    over = {"bt_sel": bt, "halves_sel": halves, "select_shm": shm}
    assert max(_interior_end(t0, min(t0 + bt, T) - 1, bl, d, lp, BJ) for t0 in range(0, T, bt)) > 1
    old, new = (_table(monkeypatch, {**over, "select_split": on}, q, kc, lse, bl, d, lp, n) for on in (0, 1))
    assert torch.equal(new[1], old[1]) and torch.equal(new[0], old[0])
    # Not trivial: late tokens hold n valid blocks, not only the forced ones.
    assert bool(old[1][..., -1, :].all()) and len(set(old[0][0, 0, -1].tolist())) == n


def test_split_loop_gives_eagers_tables_ties_included(monkeypatch):
    """Eager's op against the triton op with select_split on, all logits 0: every complete block
    scores the same, the tie-break by j alone orders them and every interior tile merges; 1 head and
    4 tokens a tile merged at once, r 3 (padded key columns: the interior keeps their mask), T no
    multiple of BT."""
    B, Hkv, T, G, D, bl, d, lp, n = 1, 1, 50, 1, 16, 2, 1, 3, 5
    g = torch.Generator().manual_seed(7)
    nc = (T - bl) // d + 1
    q = torch.zeros(B, Hkv, T, G, D)
    kc, vc = torch.randn(B, Hkv, nc, D, generator=g), torch.randn(B, Hkv, nc, D, generator=g)
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=0.125)
    over = {"select_cut": 1, "select_split": 1, "BJ": BJ, "bt_sel": 4, "halves_sel": 0}
    real = tri._config
    monkeypatch.setattr(tri, "_config", lambda *a, **k: {**real(*a, **k), **over})
    assert max(_interior_end(t0, min(t0 + 4, T) - 1, bl, d, lp, BJ) for t0 in range(0, T, 4)) == 3
    _, idx, valid = tri.compressed_attention_and_selection(q, kc, vc, **kw)
    _, e_idx, e_valid = eager.compressed_attention_and_selection(q, kc, vc, chunk=1024, **kw)
    assert torch.equal(valid, e_valid) and torch.equal(idx, e_idx)
    free = [j for j in idx[0, 0, -1].tolist() if j not in (0, (T - 1) // lp, (T - 1) // lp - 1)]
    assert len(free) == n - 3 and free == sorted(free, reverse=True)


@triton.jit
def _ends_kernel(OUT, T, BT: tl.constexpr, N: tl.constexpr, BJ: tl.constexpr, R: tl.constexpr,
                 L: tl.constexpr, S: tl.constexpr, LS: tl.constexpr):  # fmt: skip
    """`_interior_end` of the programs of BT tokens (first tokens 0, BT, ..) as `_cmp_select` calls it."""
    t0 = tl.arange(0, N) * BT
    t_last = tl.minimum(t0 + BT - 1, T - 1)
    tl.store(OUT + tl.arange(0, N), sel._interior_end(t0, tl.cdiv(t_last // LS + 1, BJ), BJ, R, L, S, LS))


@pytest.mark.parametrize(
    "geo", [(32, 16, 64, 16), (48, 16, 64, 16), (64, 16, 64, 16), (2, 1, 9, 4), (2, 1, 3, 16)]
)
def test_interior_end_is_the_definition(geo):
    """The kernel's closed form against the definition, tile by tile, for every program's first token
    over 8 key tiles (the edge at every position: the interior's end moves one tile each BJ * l'
    tokens), at 1, 2 and 4 tokens a program and T no multiple of them; M7C's geometry first."""
    bl, d, lp, bj = geo
    T = 8 * bj * lp + 3
    for bt in (1, 2, 4):
        n = triton.next_power_of_2(-(-T // bt))
        out = torch.zeros(n, dtype=torch.int32)
        _ends_kernel[(1,)](out, T, bt, n, bj, lp // d, bl, d, lp)
        want = [_interior_end(t0, min(t0 + bt, T) - 1, bl, d, lp, bj) for t0 in range(0, T, bt)]
        assert out[: len(want)].tolist() == want
        assert max(want) >= 6  # the interior reaches far tiles


def test_the_switch_ships_with_select_shm_at_m7c_shapes_and_the_papers_on_sm90():
    """On sm_90 and sm_80 at 5-8 heads a token and head_dim 33-64 (a = 2), with select_shm beside it (the
    pair on the proxy's word: sm_90 bench/RESULTS.md "shmsplit", sm_80 "a100shm", at each arch's own
    tokens, warps and halves), and at the paper's shape on sm_90 (select_shm's scope there, beside the
    insertion: the H100 of 2026-11-27 measured it 12.73 ms against 14.02 at paper 64k x 1); off at
    head_dim <= 32, at other groups and where a != 2. Turning select_cut off (the measured loop) takes
    the split off with it."""
    for arch in (80, 90):
        for G, D in ((1, 64), (4, 64), (6, 32), (6, 128), (16, 64)):
            assert tri._config(G, D, 16, 32, 16, 64, arch)["select_split"] == 0, (G, D, arch)
        for G, D in ((5, 64), (6, 64), (6, 48), (8, 64)):
            c = tri._config(G, D, 16, 32, 16, 64, arch)
            assert c["select_split"] == c["select_shm"] == 1, (G, D, arch)
            assert tri._split_of(c) == 1 and tri._split_of({**c, "select_cut": 0}) == 0
        assert tri._config(6, 64, 16, 48, 16, 64, arch)["select_split"] == 0  # a = 3
    assert (
        tri._config(16, 128, 16, 32, 16, 64, 80)["select_split"] == 0
    )  # sm_80 at the paper's shape: unpriced
    for G, D in ((16, 128), (12, 128), (9, 128), (16, 96)):
        c = tri._config(G, D, 16, 32, 16, 64, 90)
        assert (c["select_split"], c["select_shm"], c["select_insert"]) == (1, 1, 2), (G, D)
    assert tri._config(16, 128, 16, 48, 16, 64, 90)["select_split"] == 0  # a = 3
    # sm_80's pair runs at its own setting: 4 tokens a tile in halves, 2 warps, 168 registers
    c = tri._config(6, 64, 16, 32, 16, 64, 80)
    assert (c["bt_sel"], c["halves_sel"], c["warps_sel"], c["maxnreg_sel"]) == (4, 1, 2, 168)
