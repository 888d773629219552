"""The selected-branch op alone against a plain masked softmax over gathered blocks, with gradients.

The op splits a table into forced tiles (own block, previous block, block 0) and sorted bins; these
tests feed it tables with and without the forced blocks, duplicates, blocks after the query, empty
rows and T not a multiple of l', so every path and every hand-over between them is compared.
"""

from __future__ import annotations

import pytest
import torch

from nsa.attention.selected import selected_attention
from nsa.attention.selection import top_blocks


def plain_selected(q, k, v, idx, valid, sel_block, scale):
    """One softmax over the keys of every valid table entry (counted as often as listed), keys <= t."""
    B, Hkv, T, _, D = q.shape
    n = idx.shape[-1]
    pos = idx[..., None] * sel_block + torch.arange(sel_block)  # [B, Hkv, T, n, l']
    t = torch.arange(T)[:, None, None]
    ok = valid[..., None] & (pos <= t) & (pos < T)
    pos = pos.clamp(0, T - 1).reshape(B, Hkv, T * n * sel_block)
    kg = torch.gather(k, 2, pos[..., None].expand(-1, -1, -1, D)).view(B, Hkv, T, n * sel_block, D)
    vg = torch.gather(v, 2, pos[..., None].expand(-1, -1, -1, D)).view(B, Hkv, T, n * sel_block, D)
    s = torch.einsum("bhtgd,bhtsd->bhtgs", q, kg) * scale
    s = s.masked_fill(~ok.view(B, Hkv, T, 1, n * sel_block), float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)  # a query with no key at all gets zeros
    return torch.einsum("bhtgs,bhtsd->bhtgd", p, vg)


def _inputs(B, Hkv, T, G, D, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hkv, T, G, D, generator=g, dtype=dtype).requires_grad_()
    k = torch.randn(B, Hkv, T, D, generator=g, dtype=dtype).requires_grad_()
    v = torch.randn(B, Hkv, T, D, generator=g, dtype=dtype).requires_grad_()
    return q, k, v


def _check(q, k, v, idx, valid, lp, chunk, tol, forced=False):
    scale = 0.7
    out = selected_attention(
        q, k, v, idx, valid, sel_block=lp, scale=scale, chunk=chunk, forced_blocks=forced
    )
    want = plain_selected(q, k, v, idx, valid, lp, scale)
    torch.testing.assert_close(out, want, rtol=tol, atol=tol)
    w = torch.randn_like(want)
    got_g = torch.autograd.grad((out * w).sum(), (q, k, v))
    want_g = torch.autograd.grad((want * w).sum(), (q, k, v))
    for a, b in zip(got_g, want_g):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("T", [1, 3, 8, 13, 29, 40])
@pytest.mark.parametrize("chunk", [1, 5, 64])
@pytest.mark.parametrize("n", [2, 4, 6])
@pytest.mark.parametrize("forced", [False, True])
def test_top_blocks_table_matches_plain_softmax(T, chunk, n, forced):
    lp = 4
    q, k, v = _inputs(2, 2, T, 3, 8)
    scores = torch.rand(2, 2, T, -(-T // lp), generator=torch.Generator().manual_seed(T))
    idx, valid = top_blocks(scores, torch.arange(T), lp, min(n, -(-T // lp)))
    _check(q, k, v, idx, valid, lp, chunk, 1e-10, forced)


def test_forced_blocks_promise_broken_gives_nan_not_a_wrong_answer():
    T, lp = 40, 4
    q, k, v = _inputs(1, 1, T, 2, 4, seed=9)
    jt = torch.arange(T) // lp
    idx = torch.stack([jt - 2, jt - 3, jt - 4], -1).clamp(min=1).view(1, 1, T, 3)  # no forced block
    valid = (jt >= 5).view(1, 1, T, 1).expand(1, 1, T, 3)
    out = selected_attention(q, k, v, idx, valid, sel_block=lp, scale=0.5, chunk=4, forced_blocks=True)
    assert out.isnan().all()


@pytest.mark.parametrize("T", [5, 16, 31])
def test_arbitrary_tables_without_forced_blocks_duplicates_and_future_blocks(T):
    """Random tables: forced blocks missing or repeated, blocks after the query, invalid slots, empty rows."""
    lp, n = 4, 5
    ns = -(-T // lp)
    g = torch.Generator().manual_seed(100 + T)
    q, k, v = _inputs(1, 2, T, 2, 8, seed=T)
    idx = torch.randint(0, ns, (1, 2, T, n), generator=g)
    valid = torch.rand(1, 2, T, n, generator=g) < 0.7
    valid[0, 0, T // 2] = False  # a query with an empty table
    _check(q, k, v, idx, valid, lp, 3, 1e-10)


def test_table_of_only_binned_blocks():
    """No forced block anywhere: every pair goes through the bins."""
    T, lp = 24, 4
    q, k, v = _inputs(1, 1, T, 2, 4, seed=7)
    jt = torch.arange(T) // lp
    idx = torch.stack([jt - 2, jt - 3], -1).clamp(min=1).view(1, 1, T, 2)
    valid = (jt >= 3).view(1, 1, T, 1).expand(1, 1, T, 2)
    _check(q, k, v, idx, valid, lp, 2, 1e-10)


def test_float32_large_logits_stay_finite_and_exact():
    """A binned block whose logits sit far above the forced tiles' (the shift is not the row max)."""
    T, lp = 32, 8
    q, k, v = _inputs(1, 1, T, 2, 8, dtype=torch.float32, seed=3)
    with torch.no_grad():
        k[0, 0, 8:16] = q[0, 0, -1, 0] * 6  # block 1 is far more similar to the last query than its own
    scores = torch.zeros(1, 1, T, T // lp)
    scores[..., 1] = 1.0
    idx, valid = top_blocks(scores, torch.arange(T), lp, 4)
    _check(q, k, v, idx, valid, lp, 4, 2e-5)


def test_bfloat16_and_float16_track_float64():
    T, lp = 40, 8
    q, k, v = _inputs(1, 2, T, 2, 8, seed=5)
    idx, valid = top_blocks(torch.rand(1, 2, T, T // lp), torch.arange(T), lp, 3)
    want = plain_selected(q, k, v, idx, valid, lp, 0.5)
    for dt in (torch.bfloat16, torch.float16):
        out = selected_attention(q.to(dt), k.to(dt), v.to(dt), idx, valid, sel_block=lp, scale=0.5, chunk=4)
        assert out.dtype == dt
        torch.testing.assert_close(out.double(), want, rtol=0.05, atol=0.05)
