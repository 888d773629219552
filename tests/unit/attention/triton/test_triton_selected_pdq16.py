"""The key-major backward's dQ partials in 16 bits (selected.py `_config` "pdq_bits": 16;
selected_keys_bwd.py `pdq_dtype`) under TRITON_INTERPRET=1 on CPU.

PDQ follows q's dtype at 16 bits (the default) when q is bf16/fp16 and stays fp32 for fp32 q (and
at pdq_bits 32, the path the GPU runs measured); the keys kernel rounds each partial once, the merge sums in fp32 in a fixed order. Checked:
the buffer's dtype; dq against the eager op's autograd (fp16, G 1 and 6, a broken table: duplicates,
invalid, negative and future entries, a token without any key, partials never initialised) while
dK/dV stay bitwise those of fp32 partials; bf16 (honest fixture) within the GPU suite's bounds;
fp32 inputs bitwise unchanged; two runs bitwise equal; a bad value refused before any launch; the
gpucheck rows typed as the launcher allocates. The error table: bench/pdq_numerics.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention import selected as eager
from nsa.attention.selection import top_blocks
from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys_bwd as tkeys
from tests.unit.attention.triton.test_triton_selected_keys_bwd import _backward, _inputs, _odd_table


def _config(monkeypatch, bits: int) -> list[torch.dtype]:
    """The key-major backward at pdq_bits `bits`; returns the list the PDQ buffers' dtypes go to (the
    buffers NaN-filled: a read of a position the keys kernel did not write shows)."""
    base = tsel._launch_config
    monkeypatch.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "bwd_keys": True, "pdq_bits": bits})
    seen: list[torch.dtype] = []

    def buffer(nb, npos, G, D, dtype, device):
        seen.append(dtype)
        return torch.full((nb, npos, G, D), float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(tkeys, "_pdq_buffer", buffer)
    return seen


def _run(monkeypatch, bits, q, k, v, idx, valid, lp, dout):
    with monkeypatch.context() as m:
        seen = _config(m, bits)
        fwd = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, q.shape[-1] ** -0.5, True)
        return _backward(q, k, v, idx, valid, lp, dout, fwd), seen


@pytest.mark.parametrize("G,lp", [(1, 8), (6, 32)])
def test_fp16_partials_match_eager_and_leave_dk_dv_alone(monkeypatch, G, lp):
    """fp16 q: PDQ in fp16 at 16 bits (fp32 at 32); dq within the fp16 tolerance of the kernel tests
    against the eager op's fp32 autograd, and not the fp32-partials dq bit for bit (the switch does
    something); dK/dV bitwise those of fp32 partials (PDQ feeds dq only); token 3 (no key) zero."""
    T, D = 41, 16
    q, k, v, dout = _inputs(1, 1, T, G, D, torch.float16, seed=110 + G)
    idx, valid = _odd_table(T, lp, 4, seed=G)
    (dq32, dk32, dv32), seen32 = _run(monkeypatch, 32, q, k, v, idx, valid, lp, dout)
    (dq16, dk16, dv16), seen16 = _run(monkeypatch, 16, q, k, v, idx, valid, lp, dout)
    assert (seen32, seen16) == ([torch.float32], [torch.float16])
    assert torch.equal(dk16.view(torch.int16), dk32.view(torch.int16))
    assert torch.equal(dv16.view(torch.int16), dv32.view(torch.int16))
    assert not torch.equal(dq16, dq32)
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    want = eager.selected_attention(qf, kf, vf, idx, valid, sel_block=lp, scale=D**-0.5, chunk=7)
    ref = torch.autograd.grad(want, qf, dout.float())[0]
    assert dq16.dtype == torch.float16
    torch.testing.assert_close(dq16.float(), ref, rtol=1e-2, atol=1e-2)
    assert dq16[0, 0, 3].abs().max() == 0


@pytest.mark.parametrize("G", [2, 6])
def test_bf16_partials_within_gpu_suite_bounds(monkeypatch, bf16_interpreter, G):
    """bf16 as the GPU does it (conftest fixture): PDQ in bf16, dq within nsa.attention.gpusuite.bounds'
    dq bound with the partials' rounding counted (`dq_parts_rounded`: u * sum |partial|, one more term
    of the size of dS's own rounding), and that term is what the GPU suite adds exactly where the
    launch config rounds the partials; l' = 32 (two key chunks)."""
    from nsa.attention.gpusuite import bounds, checks

    T, D, lp = 40, 32, 32
    q, k, v, dout = _inputs(1, 1, T, G, D, torch.bfloat16, seed=120 + G)
    g = torch.Generator().manual_seed(G)
    idx, valid = top_blocks(torch.rand(1, 1, T, 2, generator=g), torch.arange(T), lp, 2)
    (dq, _, _), seen = _run(monkeypatch, 16, q, k, v, idx, valid, lp, dout)
    assert seen == [torch.bfloat16] and dq.dtype == torch.bfloat16
    vis = bounds.selected_visible(idx, valid, T, lp)
    want = bounds.attention_bounds(q, k, v, dout, vis, D**-0.5, torch.bfloat16, dq_parts_rounded=True)["dq"]
    res = bounds.check(dq, want)
    assert res["within_bound"], res
    plain = bounds.attention_bounds(q, k, v, dout, vis, D**-0.5, torch.bfloat16)["dq"]
    assert torch.equal(plain[0], want[0]) and (want[1] > plain[1]).any() and (want[1] >= plain[1]).all()
    with monkeypatch.context() as m:
        _config(m, 16)
        assert checks._pdq_rounded(G, D, lp, torch.bfloat16, "cpu")  # 16-bit partials
        assert not checks._pdq_rounded(G, D, lp, torch.float32, "cpu")  # fp32 q keeps fp32 partials
    assert checks._pdq_rounded(G, D, lp, torch.bfloat16, "cpu")  # as shipped: 16-bit partials
    with monkeypatch.context() as m:
        _config(m, 32)
        assert not checks._pdq_rounded(G, D, lp, torch.bfloat16, "cpu")  # the measured fp32 partials
    assert not checks._pdq_rounded(16, D, lp, torch.bfloat16, "cpu")  # G 16: query-major, no partials


def test_fp32_inputs_keep_fp32_partials_and_16_bits_are_deterministic(monkeypatch):
    """fp32 q at pdq_bits 16: PDQ stays fp32 and dq/dk/dv are bitwise those of pdq_bits 32. fp16 at
    16 bits: two backward runs bitwise equal (fixed-order fp32 sum of the rounded partials)."""
    T, D, lp = 33, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float32, seed=130)
    idx, valid = _odd_table(T, lp, 4, seed=130)
    a, seen_a = _run(monkeypatch, 32, q, k, v, idx, valid, lp, dout)
    b, seen_b = _run(monkeypatch, 16, q, k, v, idx, valid, lp, dout)
    assert seen_a == seen_b == [torch.float32]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    q, k, v, dout = (x.half() for x in (q, k, v, dout))
    c, _ = _run(monkeypatch, 16, q, k, v, idx, valid, lp, dout)
    d, _ = _run(monkeypatch, 16, q, k, v, idx, valid, lp, dout)
    assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(c, d, strict=True))


def test_a_bad_pdq_bits_is_refused_before_any_launch(monkeypatch):
    """pdq_bits 8 (a probe's typo): ValueError naming the file, key, value and the two values that
    work, raised by the backward op before its first kernel (every kernel made to fail if run)."""

    class Forbidden:
        def __getitem__(self, grid):
            raise AssertionError("a kernel launched")

    T, D, lp = 24, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float16, seed=140)
    idx, valid = _odd_table(T, lp, 3, seed=140)
    fwd = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, 0.25, True)
    _config(monkeypatch, 8)
    for name in ("_sel_bwd_delta_kernel", "_sel_bwd_keys_kernel", "_sel_bwd_dq_merge_kernel"):
        monkeypatch.setattr(tkeys, name, Forbidden())
    monkeypatch.setattr(tsel, "reverse_index", lambda *a: pytest.fail("index built"))
    with pytest.raises(ValueError, match=r"selected\.py _config: pdq_bits = 8; use 32 .* or 16"):
        _backward(q, k, v, idx, valid, lp, dout, fwd)


def test_gpucheck_rows_type_pdq_as_the_launcher_allocates_it():
    """keys_bwd_gpucheck_rows: PDQ typed by pdq_dtype in the keys kernel and the merge; at the default
    16 with 16-bit activations the `*_pdq32` variants come along (the measured fp32 path, the probe's
    kernels, compiled by gpucheck), and at 32 the `*_pdq16` ones; not for fp32 activations (there
    the two are the same kernels)."""
    cfg = tsel._config(6, 64, 64, arch=90)
    assert cfg["pdq_bits"] == 16  # shipped: the partials in q's 16-bit dtype

    def pdq_types(c, dt):
        return {
            n: a["PDQ"]
            for n, _, a, *_ in tkeys.keys_bwd_gpucheck_rows(c, 6, 64, 64, dt, "ieee", arch=90)
            if "PDQ" in a
        }

    # and the keys kernel at the other keys_dq_mma (off on sm_90) and the dQ merge at the other
    # merge_tiles (the tiles, the probe's variant), at the default pdq_bits
    fp32 = {
        "selected_bwd_keys": "*fp32",
        "selected_bwd_dq_merge": "*fp32",
        "selected_bwd_keys_dqmma": "*fp32",
        "selected_bwd_dq_merge_tiles": "*fp32",
    }
    assert pdq_types(cfg, "bf16") == {
        "selected_bwd_keys": "*bf16",
        "selected_bwd_dq_merge": "*bf16",
        "selected_bwd_keys_dqmma": "*bf16",
        "selected_bwd_dq_merge_tiles": "*bf16",
        "selected_bwd_keys_pdq32": "*fp32",
        "selected_bwd_dq_merge_pdq32": "*fp32",
    }
    assert pdq_types(cfg, "fp32") == fp32
    assert pdq_types({**cfg, "pdq_bits": 32}, "fp16") == {
        **fp32,
        "selected_bwd_keys_pdq16": "*fp16",
        "selected_bwd_dq_merge_pdq16": "*fp16",
    }


def test_the_kernel_probe_variant_runs_fp32_partials(monkeypatch):
    """bench/kernel_probe.py's selected variant {"pdq_bits": 32}, applied as probe_sel patches the
    launch config (`_apply` over `_launch_config`), makes the backward allocate fp32 PDQ for fp16 q:
    the next GPU session's one call measures the measured path beside the shipped 16 bits."""
    from tests.fixtures.bench import load_bench

    probe = load_bench("kernel_probe")
    over = {"pdq_bits": 32}
    assert over in probe.SEL_VARIANTS
    seen = _config(monkeypatch, 16)
    shipped = tsel._launch_config  # the default (pdq_bits 16) wrapped as _config left it
    monkeypatch.setattr(
        tsel, "_launch_config", lambda G, D, LP, *a: probe._apply(shipped(G, D, LP, *a), over, G)
    )
    T, D, lp = 24, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float16, seed=150)
    idx, valid = _odd_table(T, lp, 3, seed=150)
    fwd = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, 0.25, True)
    _backward(q, k, v, idx, valid, lp, dout, fwd)
    assert seen == [torch.float32]
