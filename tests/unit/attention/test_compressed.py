"""The fused compressed-branch + selection ops (`nsa::compressed_fwd/bwd`) on their own: output and
gradients against a plain masked softmax, the selection table against a direct Eq. 8-11 computation,
rows that see no compressed token, every chunk size, bf16 selection in float32, opcheck.

Run: .venv/bin/pytest tests/unit/attention/test_compressed.py
"""

from __future__ import annotations

import pytest
import torch

from nsa.attention.compressed import compressed_attention_and_selection
from nsa.attention.selection import selection_block_scores, top_blocks


def _plain(q, kc, vc, bl, d, lp, n, scale):
    """Masked dense softmax over the compressed keys, then unfold@w Eq. 9 and top_blocks (float32)."""
    T, nc = q.shape[2], kc.shape[2]
    t = torch.arange(T)
    vis = (torch.arange(nc) * d + bl - 1)[None, :] <= t[:, None]  # [T, Nc]
    s = torch.einsum("bhtgd,bhnd->bhtgn", q, kc) * scale
    p = torch.softmax(s.masked_fill(~vis[:, None, :], float("-inf")), -1)
    p = torch.where(vis[:, None, :], p, torch.zeros_like(p))  # rows that see nothing: 0, not NaN
    out = torch.einsum("bhtgn,bhnd->bhtgd", p, vc)
    ns = -(-T // lp)
    scores = selection_block_scores(p.detach().float().sum(3), bl, d, lp, ns)
    idx, valid = top_blocks(scores, t, lp, n)
    return out, idx, valid


def _inputs(B, Hkv, T, G, D, nc, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hkv, T, G, D, generator=g, dtype=dtype) * 2
    kc = torch.randn(B, Hkv, nc, D, generator=g, dtype=dtype) * 2
    vc = torch.randn(B, Hkv, nc, D, generator=g, dtype=dtype)
    return q, kc, vc


# (B, Hkv, T, G, D, l, d, l', n)
SHAPES = [
    (1, 2, 70, 3, 4, 8, 4, 16, 4),
    (2, 1, 53, 2, 8, 8, 8, 8, 5),  # l' = l = d
    (1, 2, 45, 6, 4, 16, 4, 8, 6),  # l' < l
    (1, 1, 96, 1, 4, 32, 16, 64, 16),  # paper ratios, fewer candidates than n
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", [1, 7, 16, 1000])
def test_matches_masked_softmax_outputs_gradients_and_selection(shape, chunk):
    B, Hkv, T, G, D, bl, d, lp, n = shape
    nc = (T - bl) // d + 1
    q, kc, vc = (t.requires_grad_() for t in _inputs(B, Hkv, T, G, D, nc))
    out, idx, valid = compressed_attention_and_selection(
        q, kc, vc, block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=0.3, chunk=chunk
    )
    want, widx, wvalid = _plain(q, kc, vc, bl, d, lp, n, 0.3)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(valid, wvalid)
    assert torch.equal(torch.where(valid, idx, -1), torch.where(wvalid, widx, -1))
    assert not out[:, :, : bl - 1].any(), "rows before the first complete block must be exact zeros"
    cot = torch.randn_like(out)
    got = torch.autograd.grad((out * cot).sum(), [q, kc, vc])
    ref = torch.autograd.grad((want * cot).sum(), [q, kc, vc])
    for a, b in zip(got, ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert not got[0][:, :, : bl - 1].any()


def test_no_visible_token_anywhere_gives_zeros_and_zero_gradients():
    """T < l: no compressed key exists; chunks of only invisible rows: zeros, never NaN."""
    q = torch.randn(1, 2, 5, 2, 4, requires_grad=True)
    kc = torch.zeros(1, 2, 0, 4, requires_grad=True)
    vc = torch.zeros(1, 2, 0, 4, requires_grad=True)
    out, _, valid = compressed_attention_and_selection(
        q, kc, vc, block_len=8, block_stride=4, sel_block=4, n_sel=3, scale=0.5, chunk=2
    )
    assert not out.any()
    out.sum().backward()
    assert not q.grad.any() and q.grad.shape == q.shape
    # Only forced blocks exist: the own block and the one before.
    assert valid.sum(-1).tolist() == [[[1, 1, 1, 1, 2]] * 2]


def test_bf16_selection_is_computed_in_float32():
    """bf16 inputs: the table equals the one from the same values upcast to float32."""
    B, Hkv, T, G, D, bl, d, lp, n = 1, 2, 200, 4, 8, 8, 4, 16, 5
    q, kc, vc = _inputs(B, Hkv, T, G, D, (T - bl) // d + 1, dtype=torch.bfloat16, seed=1)
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=0.35, chunk=32)
    out16, idx16, valid16 = compressed_attention_and_selection(q, kc, vc, **kw)
    out32, idx32, valid32 = compressed_attention_and_selection(q.float(), kc.float(), vc.float(), **kw)
    assert out16.dtype == torch.bfloat16
    assert torch.equal(idx16, idx32) and torch.equal(valid16, valid32)
    torch.testing.assert_close(out16.float(), out32, rtol=1e-2, atol=1e-2)


def test_custom_ops_pass_opcheck():
    torch.manual_seed(0)
    q = torch.randn(1, 2, 21, 2, 4, requires_grad=True)
    kc = torch.randn(1, 2, 4, 4, requires_grad=True)
    vc = torch.randn(1, 2, 4, 4, requires_grad=True)
    torch.library.opcheck(torch.ops.nsa.compressed_fwd, (q, kc, vc, 8, 4, 8, 3, 0.5, 6))
    out = torch.ops.nsa.compressed_fwd(q, kc, vc, 8, 4, 8, 3, 0.5, 6)[0].detach()
    args = (torch.randn_like(out), q.detach(), kc.detach(), vc.detach(), out, 8, 4, 0.5, 6)
    torch.library.opcheck(torch.ops.nsa.compressed_bwd, args)
