"""The fast NSA path equals the loop reference (nsa/attention/reference.py): forward and the
gradients of every parameter and of the input, fp32 on CPU, over shapes that hit the edge cases.

Run: .venv/bin/pytest tests/unit/attention/test_attention_reference.py
"""

from __future__ import annotations

import pytest
import torch

from nsa.attention import NSAAttention
from nsa.attention.reference import nsa_reference

# (name, B, T, H, Hkv, D, l, d, l', n, w, compression). B = 2 where T < l and with mean compression
# (7 blocks of 16 for n = 5: it drops blocks too, at G = 2): the loop reference runs each sequence
# alone, the fast path takes B as one more batch axis. The G = 6 case ran B = 2 as well, the file's
# costliest case (57 s of wall at load 8 in fp32, and again in fp64, 2026-11-27): one sequence now.
CASES = [
    ("T<block_len,G=1", 2, 5, 2, 2, 8, 8, 4, 16, 4, 32, "mlp"),
    ("T<window,odd_T,G=2", 1, 27, 4, 2, 8, 8, 4, 16, 4, 32, "mlp"),
    ("drops_blocks,G=6", 1, 150, 6, 1, 8, 8, 4, 16, 4, 32, "mlp"),
    ("drops_blocks,G=16", 1, 131, 16, 1, 4, 8, 4, 16, 4, 24, "mlp"),
    ("paper_blocks,l=32,d=16,l'=64", 1, 300, 4, 2, 8, 32, 16, 64, 4, 64, "mlp"),
    ("mean_compression", 2, 97, 4, 2, 8, 8, 4, 16, 5, 16, "mean"),
    ("l'=l=d", 1, 90, 4, 2, 8, 8, 8, 8, 5, 16, "mlp"),
    ("l'<l", 1, 90, 4, 2, 8, 16, 4, 8, 6, 16, "mlp"),
]


def _module(H, Hkv, D, bl, d, lp, n, w, comp, seed=0) -> NSAAttention:
    torch.manual_seed(seed)
    dim = 24
    attn = NSAAttention(
        dim, H, Hkv, D, bl, d, lp, n, w, compression=comp, sel_chunk=16, cmp_chunk=32, rope_theta=500.0
    )
    # Larger-than-default weights make attention peaked, so the selection actually matters.
    with torch.no_grad():
        for p in attn.parameters():
            p.mul_(2.0)
    return attn


def _compare(case, dtype: torch.dtype, tol: float) -> None:
    _, B, T, H, Hkv, D, bl, d, lp, n, w, comp = case
    attn = _module(H, Hkv, D, bl, d, lp, n, w, comp).to(dtype)
    x = torch.randn(B, T, attn.dim, dtype=dtype, requires_grad=True)
    cot = torch.randn(B, T, attn.dim, dtype=dtype)
    params = dict(attn.named_parameters())
    inputs = [x, *params.values()]

    y = attn(x)
    g_fast = torch.autograd.grad((y * cot).sum(), inputs, allow_unused=True)
    y_ref = nsa_reference(attn, x)
    g_ref = torch.autograd.grad((y_ref * cot).sum(), inputs, allow_unused=True)

    torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
    for name, inp, gf, gr in zip(["x", *params], inputs, g_fast, g_ref):
        if gr is None:
            # Only the compression parameters go unused, and only when no block is complete (T < l).
            assert bl > T and name.startswith("cmp_"), f"reference left {name} without a gradient"
            assert gf is None or not gf.any(), name
            continue
        assert gf is not None, f"fast path left {name} without a gradient"
        assert gf.shape == inp.shape
        bound = tol * max(1.0, gr.abs().max().item())
        torch.testing.assert_close(gf, gr, rtol=tol, atol=bound, msg=lambda m, nm=name: f"grad of {nm}: {m}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fp32_forward_and_gradients_match_reference(case):
    _compare(case, torch.float32, 1e-5)


@pytest.mark.parametrize("case", [CASES[2], CASES[4]], ids=[CASES[2][0], CASES[4][0]])
def test_fp64_agrees_to_rounding(case):
    """In float64 the two implementations agree to ~1e-12: same math, not merely close math."""
    _compare(case, torch.float64, 1e-10)
