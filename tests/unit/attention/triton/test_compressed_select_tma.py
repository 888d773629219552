"""The selection kernel's key tile as one bulk copy through a tensor descriptor (`_cmp_select` TMA,
compressed.py `_config` "select_tma", shipped at M7C's 1 warp on sm_90) under TRITON_INTERPRET=1: its tables are
bitwise those of the pointer loads on M7C's sm_90 setting (2 tokens a tile in halves, SHM, the split
loop, the one- and two-key insertion) over several (batch, KV head) sequences (the descriptor's rows
of one sequence run into the next one's: only edge tiles reach them, where visibility zeroes their p),
T no multiple of l'; and the switch reaches the launch only where the kernel can take it.

Run: .venv/bin/pytest tests/unit/attention/triton/test_compressed_select_tma.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch

from nsa.attention.triton import compressed as tri
from tests.fixtures.launch_spy import LaunchSpy

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")

# M7C's sm_90 selection setting, at a small top-n and key tile: BJ 4 blocks of r = l'/d = 4 keys.
SM90 = {"bt_sel": 2, "halves_sel": 1, "select_cut": 1, "select_shm": 1, "select_split": 1, "select_insert": 2}
BJ = 4


def _table(monkeypatch, tma: int, q, kc, lse, bl, d, lp, n):
    """The selection table with select_tma `tma`, checked to reach the one launch as TMA."""
    B, Hkv, T, G, D = q.shape
    c = {**tri._config(G, D, n, bl, d, lp), **SM90, "BJ": BJ, "W": n, "select_tma": tma}
    k = min(n, -(-T // lp))
    idx = torch.full((B, Hkv, T, k), -7, dtype=torch.int64)
    valid = torch.zeros((B, Hkv, T, k), dtype=torch.bool)
    seen = []
    with monkeypatch.context() as m:
        m.setattr(tri, "_cmp_select", LaunchSpy(tri._cmp_select, seen, "TMA"))
        tri.launch_select(c, q, kc, lse, idx, valid, bl, d, lp, 0.125 * 1.4426950408889634, "ieee")
    assert seen == [tma]
    return idx, valid


def test_bulk_copied_key_tiles_give_the_pointer_loads_tables_bit_for_bit(monkeypatch):
    """Hkv 2 sequences of T 37 (Nc 36 keys: the last tile of the first runs past its keys into the
    second's), G 6, D 16, bf16 keys, a row log-sum-exp that is no softmax's (p above 1, far tiles
    still merge)."""
    B, Hkv, T, G, D, bl, d, lp, n = 1, 2, 37, 6, 16, 2, 1, 4, 4
    g = torch.Generator().manual_seed(3)
    nc = (T - bl) // d + 1
    q = torch.randn(B, Hkv, T, G, D, generator=g).bfloat16()
    kc = torch.randn(B, Hkv, nc, D, generator=g).bfloat16() * 3
    lse = torch.randn(B, Hkv, T, G, generator=g) * 2
    old, new = (_table(monkeypatch, on, q, kc, lse, bl, d, lp, n) for on in (0, 1))
    assert torch.equal(new[1], old[1]) and torch.equal(new[0], old[0])
    # Not trivial: late tokens hold n valid blocks, not only the forced ones, in every sequence.
    assert bool(old[1][..., -1, :].all()) and all(
        len(set(old[0][b, h, -1].tolist())) == n for b in range(B) for h in range(Hkv)
    )


def test_the_switch_ships_at_m7c_on_sm90_and_reaches_the_kernel_only_where_it_can_run():
    """On at M7C's 1 warp on sm_90 (one_warp: the H100 of 2026-11-27 measured it 3.852 ms against 4.146
    at M7C 64k x 1), off elsewhere; `_tma_of` passes it on the CUT loop, unpaired, at 16-bit keys,
    head_dim a power of two and r = l'/d unpadded (the kernel asserts those), else 0."""
    for G, D, arch in ((6, 64, 80), (16, 128, 80), (16, 128, 90), (6, 32, 90), (16, 64, 90)):
        assert tri._config(G, D, 16, 32, 16, 64, arch)["select_tma"] == 0, (G, D, arch)
    for G in (5, 6, 8):
        m7c = tri._config(G, 64, 16, 32, 16, 64, 90)
        assert (m7c["select_tma"], m7c["warps_sel"]) == (1, 1), G
    c = {**tri._config(6, 64, 16, 32, 16, 64, 90), "select_tma": 1}
    bf, f32 = torch.bfloat16, torch.float32
    assert tri._tma_of(c, bf, 64, 16, 64) == 1 and tri._tma_of(c, torch.float16, 64, 16, 64) == 1
    assert tri._tma_of(c, f32, 64, 16, 64) == 0  # fp32 keys: the pointer loads
    assert tri._tma_of({**c, "select_cut": 0}, bf, 64, 16, 64) == 0
    assert tri._tma_of({**c, "select_pair": 1}, bf, 64, 16, 64) == 0
    assert tri._tma_of({**tri._config(6, 48, 16, 32, 16, 64, 90), "select_tma": 1}, bf, 48, 16, 64) == 0
    assert tri._tma_of({**tri._config(6, 64, 16, 32, 16, 48, 90), "select_tma": 1}, bf, 64, 16, 48) == 0
