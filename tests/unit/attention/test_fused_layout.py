"""The fused eager helpers of NSAAttention equal their plain spellings, values and gradients:
`rope_to_layout` (RoPE written straight into a permuted layout, inverse rotation backward) and
`_gate_mix` (Eq. 5's gated sum written into wo's layout). Compiled code takes the plain path.
The cached RoPE tables equal freshly formed ones and are never inference tensors.

Run: .venv/bin/pytest tests/unit/attention/test_fused_layout.py
"""

from __future__ import annotations

import pytest
import torch

from nsa.attention import NSAAttention
from nsa.attention.nsa import _GateMix
from nsa.attention.rope import _TABLES, apply_rope, rope_cos_sin, rope_tables, rope_to_layout


@pytest.mark.parametrize(
    ("shape", "perm"),
    [((2, 37, 3, 8), (0, 2, 1, 3)), ((1, 19, 2, 3, 8), (0, 2, 1, 3, 4)), ((2, 5, 4, 6), (0, 1, 2, 3))],
)
def test_rope_to_layout_matches_apply_rope_values_and_gradients(shape, perm):
    torch.manual_seed(0)
    T, D = shape[1], shape[-1]
    cos, sin = rope_cos_sin(torch.arange(T) * 7 + 3, D, 10000.0, torch.float64)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    fused = rope_to_layout(x, cos, sin, perm)
    assert fused.is_contiguous()
    plain = apply_rope(x.detach().flatten(2, -2), cos, sin).view(shape).permute(perm)
    torch.testing.assert_close(fused, plain, rtol=0, atol=1e-12)
    torch.autograd.gradcheck(lambda t: rope_to_layout(t, cos, sin, perm), (x,))


def test_rope_to_layout_half_precision_rotates_in_float32():
    torch.manual_seed(0)
    cos, sin = rope_cos_sin(torch.arange(11), 8, 10000.0, torch.float32)
    x = torch.randn(1, 11, 2, 8).bfloat16()
    out = rope_to_layout(x, cos, sin, (0, 2, 1, 3))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, apply_rope(x, cos, sin).permute(0, 2, 1, 3))


def test_gate_mix_matches_the_plain_expression_values_and_gradients():
    torch.manual_seed(0)
    B, Hkv, T, G, D = 2, 2, 7, 3, 4
    g = torch.rand(B, T, Hkv, G, 3, dtype=torch.float64, requires_grad=True)
    outs = [torch.randn(B, Hkv, T, G, D, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    y = _GateMix.apply(g, *outs)
    gv = g.permute(0, 2, 1, 3, 4)
    plain = sum(gv[..., i : i + 1] * o for i, o in enumerate(outs))
    torch.testing.assert_close(y, plain.permute(0, 2, 1, 3, 4).reshape(B, T, Hkv * G * D), rtol=0, atol=1e-12)
    torch.autograd.gradcheck(_GateMix.apply, (g, *outs))


def test_rope_tables_are_cached_and_equal_fresh_tables():
    _TABLES.clear()
    cos, sin = rope_tables(40, 8, 500.0, torch.float32, torch.device("cpu"), step=16, offset=31)
    ref = rope_cos_sin(torch.arange(40) * 16 + 31, 8, 500.0)
    assert torch.equal(cos, ref[0]) and torch.equal(sin, ref[1])
    again = rope_tables(40, 8, 500.0, torch.float32, torch.device("cpu"), step=16, offset=31)
    assert again[0] is cos
    assert rope_tables(40, 8, 500.0, torch.float32, torch.device("cpu"))[0] is not cos  # other positions


def test_tables_formed_in_inference_mode_do_not_break_training():
    _TABLES.clear()
    torch.manual_seed(0)
    attn = NSAAttention(16, 2, 1, 8, block_len=4, block_stride=2, sel_block=4, n_sel=3, window=4)
    x = torch.randn(1, 9, 16)
    with torch.inference_mode():
        attn(x)
    assert not _TABLES
    attn(x.requires_grad_()).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
