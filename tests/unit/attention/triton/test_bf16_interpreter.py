"""bf16 under the triton interpreter: the `bf16_interpreter` fixture (conftest) makes the
interpreter's bf16 dot and casts behave as the GPU's, and the window and compressed kernels in bf16
stay within bounds derived from where they round (nsa.attention.gpusuite.bounds), against the exact
float64 result. Without the fixture the interpreter's bf16 tl.dot multiplies raw bits, so these
kernels could not be tested in the dtype users train in.

Run: .venv/bin/pytest tests/unit/attention/triton/test_bf16_interpreter.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported

import pytest
import torch
import triton
import triton.language as tl

from nsa.attention.gpusuite import bounds
from nsa.attention.gpusuite.interp_bf16 import bf16_bits_to_f32, f32_to_bf16_bits


@triton.jit
def _dot_and_cast(A, B, C, X, Y, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    b = tl.load(B + r[:, None] * N + r[None, :])
    tl.store(C + r[:, None] * N + r[None, :], tl.dot(a, b))
    tl.store(Y + r, tl.load(X + r).to(tl.bfloat16))


def _ties() -> torch.Tensor:
    """float32 values exactly halfway between two bf16 neighbours (even and odd), a carry into the
    exponent, values just off the tie, and random ones."""
    base = torch.tensor([1.0, 1.0078125, 2.0, -3.0, 255.0, 1.9921875], dtype=torch.float32)
    half_ulp = torch.tensor([2.0**-8, 2.0**-8, 2.0**-7, -(2.0**-7), 2.0**0, 2.0**-8])
    ties = base + half_ulp
    near = torch.cat([ties + ties.abs() * 2.0**-20, ties - ties.abs() * 2.0**-20])
    return torch.cat([ties, near, torch.randn(16, generator=torch.Generator().manual_seed(0))])[:32]


def _launch():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(32, 32, generator=g).bfloat16()
    b = torch.randn(32, 32, generator=g).bfloat16()
    c = torch.empty(32, 32)
    x = _ties()
    y = torch.empty(32, dtype=torch.bfloat16)
    _dot_and_cast[(1,)](a, b, c, x, y, N=32)
    return a, b, c, x, y


def test_fixture_makes_bf16_dot_and_rounding_match_the_gpu(bf16_interpreter) -> None:
    a, b, c, x, y = _launch()
    # Exact products of bf16 operands summed in float32, as a tensor core does.
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=0, atol=32 * 2.0**-24 * 40)
    # torch's float -> bf16 is round-to-nearest-even, as the GPU's cvt.rn.bf16.f32.
    assert torch.equal(y.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))


def test_without_the_fixture_the_interpreter_is_wrong_in_bf16() -> None:
    """What the fixture is for (if triton fixes its interpreter, this test says the fixture can go)."""
    a, b, c, x, y = _launch()
    wrong_dot = not torch.allclose(c, a.float() @ b.float(), atol=1e-2)
    wrong_cast = not torch.equal(y.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    assert wrong_dot or wrong_cast


def test_bit_helpers_round_to_nearest_even() -> None:
    x = _ties()
    bits = f32_to_bf16_bits(x.numpy())
    assert torch.equal(torch.from_numpy(bits.view("int16")), x.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(torch.from_numpy(bf16_bits_to_f32(bits)), x.to(torch.bfloat16).float())


def _grads(fn, q, k, v, dout, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves, **kw)
    out = out[0] if isinstance(out, tuple) else out
    return {"out": out, **dict(zip(("dq", "dk", "dv"), torch.autograd.grad(out, leaves, dout)))}


def _assert_within(got: dict, want: dict) -> None:
    for name, (ref, bound) in want.items():
        res = bounds.check(got[name], (ref, bound))
        assert got[name].dtype == torch.bfloat16, name
        assert res["within_bound"], f"{name}: {res}"


# (T, G, D, window)
@pytest.mark.parametrize("case", [(40, 3, 64, 13), (16, 16, 128, 16)], ids=["G3D64", "G16D128"])
def test_window_bf16_within_rounding_bounds(bf16_interpreter, case) -> None:
    from nsa.attention.triton import window as tw

    T, G, D, w = case
    g = torch.Generator().manual_seed(T)
    q, dout = (torch.randn(1, 2, T, G, D, generator=g).bfloat16() for _ in range(2))
    k, v = (torch.randn(1, 2, T, D, generator=g).bfloat16() for _ in range(2))
    scale = D**-0.5
    got = _grads(tw.window_attention, q, k, v, dout, window=w, scale=scale)
    vis = bounds.window_visible(T, w)[None, None]
    _assert_within(got, bounds.attention_bounds(q, k, v, dout, vis, scale, torch.bfloat16))


def test_compressed_bf16_within_rounding_bounds(bf16_interpreter) -> None:
    from nsa.attention.triton import compressed as tc

    T, G, D, bl, d, lp, n = 50, 6, 64, 16, 8, 16, 4
    nc = (T - bl) // d + 1
    g = torch.Generator().manual_seed(7)
    q, dout = (torch.randn(1, 1, T, G, D, generator=g).bfloat16() for _ in range(2))
    kc, vc = (torch.randn(1, 1, nc, D, generator=g).bfloat16() for _ in range(2))
    scale = D**-0.5
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=scale)
    got = _grads(tc.compressed_attention_and_selection, q, kc, vc, dout, **kw)
    vis = bounds.compressed_visible(T, nc, bl, d)[None, None]
    _assert_within(got, bounds.attention_bounds(q, kc, vc, dout, vis, scale, torch.bfloat16))
