"""The eager backend's CUDA settings, exercised on CPU by forcing them: half GEMMs with float32
results in the compressed op, and its per-device chunk limit."""

from __future__ import annotations

import pytest
import torch

from nsa.attention import compressed


def _inputs(dtype, T=150, G=3, D=16, nc=None, B=2, Hkv=2):
    torch.manual_seed(0)
    bl, d = 8, 4
    nc = nc if nc is not None else (T - bl) // d + 1
    q = torch.randn(B, Hkv, T, G, D, dtype=dtype, requires_grad=True)
    kc = torch.randn(B, Hkv, nc, D, dtype=dtype, requires_grad=True)
    vc = torch.randn(B, Hkv, nc, D, dtype=dtype, requires_grad=True)
    return q, kc, vc, dict(block_len=bl, block_stride=d, sel_block=16, n_sel=4, scale=D**-0.5)


def _run(q, kc, vc, kw, chunk=None):
    o, idx, valid = compressed.compressed_attention_and_selection(q, kc, vc, **kw, chunk=chunk)
    g = torch.autograd.grad(o.float().square().sum(), (q, kc, vc))
    return o, idx, valid, g


def test_half_gemms_with_float32_results_match_float32_gemms(monkeypatch) -> None:
    q, kc, vc, kw = _inputs(torch.bfloat16, T=90, B=1)
    o32, idx32, valid32, g32 = _run(q, kc, vc, kw)  # CPU default: float32 GEMMs on upcast copies
    monkeypatch.setattr(compressed, "_low_precision_gemms", lambda q: True)  # the CUDA path
    o16, idx16, valid16, g16 = _run(q, kc, vc, kw)
    assert o16.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in g16)
    torch.testing.assert_close(o16.float(), o32.float(), atol=2e-2, rtol=2e-2)
    for a, b in zip(g16, g32, strict=True):  # bf16 gradients: compare as a whole (relative L2 error)
        assert (a.float() - b.float()).norm() / b.float().norm() < 1e-2
    # Same selection on well-separated random scores (bf16 rounding of q.k moves only near-ties).
    assert (idx16 == idx32).float().mean() > 0.97 and torch.equal(valid16, valid32)


def test_cpu_and_meta_keep_the_measured_cpu_chunk() -> None:
    for dev in ("cpu", "meta"):
        assert compressed._max_rows(torch.empty(1, 2, 65536, 6, 64, device=dev), 4095) == compressed._MAX_ROWS


def test_cuda_rows_fit_the_budget(monkeypatch) -> None:
    q = torch.empty(1, 2, 65536, 6, 64)
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
    rows = compressed._max_rows(q, 4095)
    assert rows * 4 * 2 * 6 * 4095 <= compressed._CUDA_CHUNK_BYTES < (rows + 1) * 4 * 2 * 6 * 4095
    assert 65536 / rows < 30  # ~25 chunks at 64k instead of 512 with the CPU's 128 rows


@pytest.mark.parametrize("chunk", [None, 7])
def test_chunk_none_means_the_device_limit(chunk) -> None:
    q, kc, vc, kw = _inputs(torch.float32, T=70)
    ref = _run(q, kc, vc, kw, chunk=128)
    got = _run(q, kc, vc, kw, chunk=chunk)
    torch.testing.assert_close(got[0], ref[0])
    assert torch.equal(got[1], ref[1])
