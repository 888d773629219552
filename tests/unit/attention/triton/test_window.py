"""The Triton sliding-window kernel equals the eager `window_attention`: forward, dQ, dK, dV.

Runs the kernels under TRITON_INTERPRET=1 on CPU tensors (fp32 and fp16; the interpreter's bf16 dot
is wrong). Shapes cross every case the kernel branches on: G in {1, 2, 4, 6, 8, 16}, T = 1, T below
the window, T and the window not multiples of the tiles, window 1, window >= T, B = 2, head_dim 64
and 128, and enough tokens for the unmasked middle tiles. The interpreter tiles are small
(`_configs(..., interp=True)`) so these shapes reach the same phases as the GPU tiles at long T.

Run: .venv/bin/pytest tests/unit/attention/triton/test_window.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported

import pytest
import torch

from nsa.attention.triton import window as tw
from nsa.attention.triton.spec import GpuShape
from nsa.attention.window import window_attention as eager_window


def _run(fn, q, k, v, do, window):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v, window=window, scale=q.shape[-1] ** -0.5)
    return (out, *torch.autograd.grad(out, (q, k, v), do))


def _inputs(B, Hkv, T, G, D, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hkv, T, G, D, generator=gen)
    k = torch.randn(B, Hkv, T, D, generator=gen)
    v = torch.randn(B, Hkv, T, D, generator=gen)
    do = torch.randn(B, Hkv, T, G, D, generator=gen)
    return [t.to(dtype) for t in (q, k, v, do)]


# (B, Hkv, T, G, D, window)
FP32_CASES = [
    (1, 1, 1, 1, 64, 4),  # T = 1
    (1, 1, 23, 2, 64, 64),  # T < window, T odd
    (2, 1, 45, 6, 64, 21),  # B = 2, G = 6 (not a power of two), window not a multiple of the tile
    (1, 1, 20, 16, 64, 1),  # window = 1: only the token itself
    (1, 1, 37, 4, 128, 13),  # head_dim 128
    (1, 1, 30, 3, 96, 11),  # head_dim 96: padded to 128 columns, masked
    (1, 2, 33, 8, 64, 33),  # window == T
    (1, 2, 100, 1, 64, 40),  # G = 1, long enough for unmasked middle tiles in every kernel
]


@pytest.mark.parametrize(("B", "Hkv", "T", "G", "D", "window"), FP32_CASES)
def test_window_matches_eager_fp32(B, Hkv, T, G, D, window):
    q, k, v, do = _inputs(B, Hkv, T, G, D, torch.float32)
    want = _run(eager_window, q, k, v, do, window)
    got = _run(tw.window_attention, q, k, v, do, window)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        assert a.dtype == torch.float32 and a.shape == b.shape, name
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize(
    ("B", "Hkv", "T", "G", "D", "window"),
    [(1, 1, 50, 6, 128, 19), (2, 1, 70, 1, 64, 32), (1, 1, 29, 16, 64, 64)],
)
def test_window_matches_eager_fp16(B, Hkv, T, G, D, window):
    """fp16 kernel vs the fp32 eager oracle, held to about what eager fp16 itself achieves."""
    q, k, v, do = _inputs(B, Hkv, T, G, D, torch.float16, seed=1)
    oracle = _run(eager_window, *(t.float() for t in (q, k, v, do)), window)
    half = _run(eager_window, q, k, v, do, window)
    got = _run(tw.window_attention, q, k, v, do, window)
    for name, a, e, o in zip(("out", "dq", "dk", "dv"), got, half, oracle, strict=True):
        assert a.dtype == torch.float16, name
        scale = o.abs().max().item()
        err = (a.float() - o).abs().max().item()
        eager_err = (e.float() - o).abs().max().item()
        assert err <= max(4 * eager_err, 2e-3 * scale), (name, err, eager_err, scale)


def test_window_split_is_ignored_and_output_is_contiguous():
    q, k, v, _ = _inputs(1, 1, 9, 3, 64, torch.float32)
    a = tw.window_attention(q, k, v, window=4, scale=0.125)
    b = tw.window_attention(q, k, v, window=4, scale=0.125, split=7)
    assert torch.equal(a, b) and a.is_contiguous()


def test_window_meta_device_gives_shapes_without_running():
    q = torch.empty(2, 2, 4096, 6, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 2, 4096, 64, device="meta", dtype=torch.bfloat16)
    out = tw.window_attention(q, k, k, window=512, scale=0.125)
    assert out.shape == q.shape and out.dtype == torch.bfloat16 and out.device.type == "meta"


def test_window_rejects_mixed_dtypes():
    q, k, v, _ = _inputs(1, 1, 4, 1, 64, torch.float32)
    with pytest.raises(ValueError, match="dtypes"):
        tw.window_attention(q, k.half(), v, window=2, scale=0.125)


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpucheck_specs_cover_every_kernel_with_full_signatures(arch, head_dim):
    shape = GpuShape("m7c", head_dim, 6, 32, 16, 64, 16, 512)
    specs = tw.gpucheck_specs(shape, arch)
    assert [s.name for s in specs] == [
        "window_fwd",
        "window_bwd_dq",
        "window_bwd_dq_delta",
        "window_bwd_dkdv",
    ]
    for s in specs:
        params = list(s.fn.arg_names) if hasattr(s.fn, "arg_names") else None
        if params is not None:
            assert list(s.signature) == params
        assert {n for n, t in s.signature.items() if t == "constexpr"} == set(s.constexprs)
        assert s.constexprs["G"] == 6 and s.constexprs["D"] == head_dim
        assert s.signature["Q"] == "*bf16" and s.signature["LSE"] == "*fp32"
        assert s.num_warps in (4, 8) and s.num_stages >= 1


@pytest.mark.parametrize(("D", "arch"), [(64, 80), (128, 90)])
def test_window_with_the_gpu_tiles_matches_eager(monkeypatch, D, arch):
    """The tiles the GPU launches (not the interpreter's small ones), on a T that crosses them."""
    gpu = tw._configs(D, arch)
    monkeypatch.setattr(tw, "_configs", lambda head_dim, a, interp=False: gpu)
    q, k, v, do = _inputs(1, 1, 300, 2, D, torch.float32, seed=2)
    want = _run(eager_window, q, k, v, do, 150)
    got = _run(tw.window_attention, q, k, v, do, 150)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
