"""Selection runs in memory bounded by the tile, not by T^2: every tensor the triton compressed op
(attention + Eq. 9 scores + top-n) allocates, forward and backward, grows at most linearly with T.
The tables stay those of the eager op (test_triton_compressed.py checks them against eager bit for
bit, exact ties included).

Allocations are recorded by the profiler under the interpreter at a small geometry (l' = 16,
n = 2) where T = 32 and T = 64 both have more selection blocks than n, so a [T, T/l'] score tensor
(what the forward kept until now: 512 MiB at T = 64k for M7C) would grow 4x when T doubles.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
from torch.profiler import ProfilerActivity, profile

from nsa.attention.triton import compressed as tri_cmp


def _allocations(fn) -> list[tuple[str, int]]:
    """(op, bytes) of every allocation while `fn` runs, in order: the profiler sees the aten calls
    inside the custom ops too (a dispatch mode stops at the op boundary)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return [
        (e.name, e.cpu_memory_usage)
        for e in prof.events()
        if e.name.startswith("aten::empty") and e.cpu_memory_usage > 0
    ]


def _run(T: int) -> list[tuple[str, int]]:
    B, Hkv, G, D, bl, d, lp, n = 1, 2, 3, 16, 32, 16, 16, 2
    g = torch.Generator().manual_seed(T)
    nc = (T - bl) // d + 1
    q = torch.randn(B, Hkv, T, G, D, generator=g, requires_grad=True)
    kc = torch.randn(B, Hkv, nc, D, generator=g, requires_grad=True)
    vc = torch.randn(B, Hkv, nc, D, generator=g, requires_grad=True)

    def step() -> None:
        o_cmp, _, _ = tri_cmp.compressed_attention_and_selection(
            q, kc, vc, block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=D**-0.5
        )
        o_cmp.sum().backward()

    return _allocations(step)


def test_no_allocation_grows_faster_than_t() -> None:
    small, large = _run(32), _run(64)
    assert [n for n, _ in small] == [n for n, _ in large] and len(small) > 5  # the same allocations
    for (name, a), (_, b) in zip(small, large, strict=True):
        assert b <= 2 * a + 1024, (name, a, b)  # linear in T (+ rounding of the allocator)
