"""The selection kernel's hoisted 32-bit loop (`_cmp_select` CUT, compressed.py `_config`
"select_cut", shipped from G 3) under TRITON_INTERPRET=1: its tables are bitwise those of the loop
the H200 measured (select_cut 0, a bench/kernel_probe.py variant) on broken inputs (random queries and keys, a row
log-sum-exp that is no softmax's, so probabilities above 1 and far tiles that still merge), over
several (batch, KV head) sequences, T no multiple of l', r = l'/d no power of two (padded key
columns), 1-token tiles; and the switch reaches the launch.

Run: .venv/bin/pytest tests/unit/attention/triton/test_compressed_select_cut.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch

from nsa.attention.triton import compressed as tri
from tests.fixtures.launch_spy import LaunchSpy

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")


def _table(monkeypatch, cut: int, q, kc, lse, bl, d, lp, n, switch=("select_cut", "CUT")):
    """The selection table of `_config` with its `switch` (the config key, the kernel's constexpr;
    test_compressed_select_shm.py passes SHM's) set to `cut`, checked to reach the one launch."""
    B, Hkv, T, G, D = q.shape
    c = {**tri._config(G, D, n, bl, d, lp), switch[0]: cut}
    k = min(n, -(-T // lp))
    idx = torch.full((B, Hkv, T, k), -7, dtype=torch.int64)
    valid = torch.zeros((B, Hkv, T, k), dtype=torch.bool)
    seen = []
    with monkeypatch.context() as m:
        m.setattr(tri, "_cmp_select", LaunchSpy(tri._cmp_select, seen, switch[1]))
        tri.launch_select(c, q, kc, lse, idx, valid, bl, d, lp, 0.125 * 1.4426950408889634, "ieee")
    assert seen == [cut]
    return idx, valid


def _tables_off_and_on(monkeypatch, case: tuple, switch=("select_cut", "CUT")):
    """The tables with `switch` off and on (`_table`) for `case`'s broken inputs: random queries and
    keys seeded by T, a row log-sum-exp that is no softmax's (p may exceed 1)."""
    B, Hkv, T, G, D, bl, d, lp, n = case
    g = torch.Generator().manual_seed(T)
    nc = (T - bl) // d + 1
    q = torch.randn(B, Hkv, T, G, D, generator=g)
    kc = torch.randn(B, Hkv, nc, D, generator=g)
    lse = torch.randn(B, Hkv, T, G, generator=g) * 2  # no softmax's: p may exceed 1
    return tuple(_table(monkeypatch, on, q, kc, lse, bl, d, lp, n, switch) for on in (0, 1))


# (B, Hkv, T, G, D, l, d, l', n): d = 1 makes a key tile 64 tokens (BJ * r = 64 keys), so T 100
# spans 2 tiles (the carried Eq. 9 neighbour, far tiles); r = 3 (padded to 4 columns) with Eq. 9
# reaching 3 keys back over 2 tiles, B 2; G 17 (1-token tiles, the top-n's 2nd half empty).
CASES = [
    (1, 1, 100, 6, 32, 2, 1, 2, 5),
    (2, 1, 60, 3, 16, 4, 1, 3, 4),
    (1, 1, 21, 17, 16, 8, 4, 8, 3),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}H{c[1]}T{c[2]}G{c[3]}r{c[7] // c[6]}")
def test_hoisted_loop_gives_the_measured_loops_tables_bit_for_bit(monkeypatch, case):
    n = case[-1]
    old, new = _tables_off_and_on(monkeypatch, case)
    assert torch.equal(new[1], old[1]) and torch.equal(new[0], old[0])
    # The tables are not trivial: late tokens hold n valid blocks, not only the forced ones.
    assert bool(old[1][..., -1, :].all()) and old[0].shape[-1] == n
    assert len(set(old[0][0, 0, -1].tolist())) == n


def test_the_default_is_the_hoisted_loop_except_at_one_or_two_heads_a_token():
    """select_cut ships where ptxas kept it unspilled without losing resident warps (triton 3.6 and
    3.9); at G 1-2 the measured loop stays."""
    for arch in (80, 90):
        assert tri._config(6, 64, 16, 32, 16, 64, arch)["select_cut"] == 1
        assert tri._config(16, 128, 16, 32, 16, 64, arch)["select_cut"] == 1
        assert tri._config(2, 64, 16, 32, 16, 64, arch)["select_cut"] == 0
        assert tri._config(1, 96, 16, 32, 16, 64, arch)["select_cut"] == 0
