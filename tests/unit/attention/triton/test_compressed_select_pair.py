"""The selection kernel's paired token groups (`_cmp_select` PAIR, compressed.py `_config`
"select_pair") under TRITON_INTERPRET=1: a program of two groups of BT tokens, one key tile load and
one QK product for both, each group's merges on its own. Its tables are bitwise those of one group a
program on broken inputs (random queries and keys, a row log-sum-exp that is no softmax's, so far
tiles still merge), with the split loop's interior / edge boundary at every position (d = 1, BJ 4),
T no multiple of the program's tokens (the second group partly or wholly past T), 2 and 4 tokens a
group merged in halves, Eq. 9's shared key rotated (SHM), G 5 and 6; eager's with
exact ties (all logits 0); and the switch reaches the launch (half the programs).

Run: .venv/bin/pytest tests/unit/attention/triton/test_compressed_select_pair.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch

from nsa.attention import compressed as eager
from nsa.attention.triton import compressed as tri
from tests.fixtures.launch_spy import LaunchSpy

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")
BJ = 4


class _GridSpy(LaunchSpy):
    """LaunchSpy that also records the launch's program count along T."""

    def __getitem__(self, grid):
        self.seen.append(("grid", grid[0]))
        return super().__getitem__(grid)


def _table(monkeypatch, over: dict, q, kc, lse, bl, d, lp, n):
    """The selection table of `_config` with `over` (select_pair among them), checked to reach the
    one launch at ceil(T / (bt_sel x (1 + pair))) programs."""
    B, Hkv, T, G, D = q.shape
    c = {**tri._config(G, D, n, bl, d, lp), "select_cut": 1, "BJ": BJ, **over}
    k = min(n, -(-T // lp))
    idx = torch.full((B, Hkv, T, k), -7, dtype=torch.int64)
    valid = torch.zeros((B, Hkv, T, k), dtype=torch.bool)
    seen = []
    with monkeypatch.context() as m:
        m.setattr(tri, "_cmp_select", _GridSpy(tri._cmp_select, seen, "PAIR", "BT"))
        tri.launch_select(c, q, kc, lse, idx, valid, bl, d, lp, 0.125 * 1.4426950408889634, "ieee")
    pair = over["select_pair"]
    assert seen == [("grid", -(-T // (c["bt_sel"] * (1 + pair)))), (pair, c["bt_sel"])]
    return idx, valid


# (T, G, D, l, d, l', n, bt_sel, halves_sel, select_shm, select_split). d = 1 and BJ 4 (a key tile is
# 16 tokens at l' 4): the interior / edge boundary falls inside programs of 4 and 8 tokens. Two cases
# (the interpreter's cost is per program and tile): the loop unsplit, without SHM, with 1 token a
# group and G 16 are test_compressed_select_split.py's against the same `_cut_tile` body.
CASES = [
    (42, 6, 16, 2, 1, 4, 4, 2, 1, 1, 1),  # M7C's sm_90 setting (2 tokens in halves, SHM, split); the
    # last program's second group wholly past T (T % 4 = 2)
    (45, 5, 16, 2, 1, 4, 4, 4, 1, 1, 1),  # 4 tokens a group in halves (8 a program); T % 8 = 5
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c[0]}G{c[1]}bt{c[7]}h{c[8]}s{c[9]}sp{c[10]}")
def test_paired_groups_give_one_groups_tables_bit_for_bit(monkeypatch, case):
    T, G, D, bl, d, lp, n, bt, halves, shm, split = case
    g = torch.Generator().manual_seed(T)
    nc = (T - bl) // d + 1
    q = torch.randn(1, 1, T, G, D, generator=g)
    kc = torch.randn(1, 1, nc, D, generator=g)
    lse = torch.randn(1, 1, T, G, generator=g) * 2  # no softmax's: p may exceed 1
    over = {"bt_sel": bt, "halves_sel": halves, "select_shm": shm, "select_split": split}
    old, new = (_table(monkeypatch, {**over, "select_pair": on}, q, kc, lse, bl, d, lp, n) for on in (0, 1))
    assert torch.equal(new[1], old[1]) and torch.equal(new[0], old[0])
    # Not trivial: late tokens hold n valid blocks, not only the forced ones.
    assert bool(old[1][..., -1, :].all()) and len(set(old[0][0, 0, -1].tolist())) == n


def test_paired_groups_give_eagers_tables_ties_included(monkeypatch):
    """Eager's op against the triton op with select_pair on (M7C's sm_90 tile: 2 tokens a group in
    halves, SHM, the split loop), all logits 0: every complete block scores the same and the
    tie-break by j alone orders them; T no multiple of the program's 4 tokens (the second group of
    the last program partly past T)."""
    B, Hkv, T, G, D, bl, d, lp, n = 1, 1, 39, 6, 16, 2, 1, 4, 5
    g = torch.Generator().manual_seed(7)
    nc = (T - bl) // d + 1
    q = torch.zeros(B, Hkv, T, G, D)
    kc, vc = torch.randn(B, Hkv, nc, D, generator=g), torch.randn(B, Hkv, nc, D, generator=g)
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=0.125)
    over = {"select_cut": 1, "select_split": 1, "select_shm": 1, "select_pair": 1, "BJ": BJ, "bt_sel": 2,
            "halves_sel": 1}  # fmt: skip
    real = tri._config
    monkeypatch.setattr(tri, "_config", lambda *a, **k: {**real(*a, **k), **over})
    _, idx, valid = tri.compressed_attention_and_selection(q, kc, vc, **kw)
    _, e_idx, e_valid = eager.compressed_attention_and_selection(q, kc, vc, chunk=1024, **kw)
    assert torch.equal(valid, e_valid) and torch.equal(idx, e_idx)
    free = [j for j in idx[0, 0, -1].tolist() if j not in (0, (T - 1) // lp, (T - 1) // lp - 1)]
    assert len(free) == n - 3 and free == sorted(free, reverse=True)


def test_pair_needs_the_cut_loop():
    """`_pair_of`: select_pair reaches the kernel on the CUT loop only (the kernel asserts CUT >= PAIR)."""
    c = tri._config(6, 64, 16, 32, 16, 64, 90)
    assert tri._pair_of({**c, "select_pair": 1}) == 1
    assert tri._pair_of({**c, "select_pair": 1, "select_cut": 0}) == 0
