"""The GPU suite's speed section times NSA's attention core on the path training runs
(gpusuite/gpu.py `_nsa_core`): NSAAttention's triton forward takes the gate fold's one node
(gated.gated_branches) whenever it applies, so the core does too: its backward runs the fold kernel
(`nsa::triton_gate_fold_bwd`) and no gate mix backward, with the same output and gradients as the
branches one by one (the path the GPU runs up to 2026-11-26c timed, still taken with the probe switch
gated.FOLD_GATE off). Checked on CPU in triton's interpreter at a small geometry; the record names
the path it timed (`nsa_core`)."""

from __future__ import annotations

import pytest
import torch

from nsa.attention.gpusuite.gpu import _nsa_core, _nsa_core_inputs, core_path
from nsa.attention.triton import gated
from tests.fixtures.dispatch import OpNames

GEO = {"block_len": 8, "block_stride": 4, "sel_block": 8, "n_sel": 3, "window": 8}


def _run(inp: dict) -> tuple[list[str], torch.Tensor, tuple]:
    leaves = list(inp.values())
    y = _nsa_core(inp, GEO, 16**-0.5)
    dout = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    spy = OpNames()
    with spy:
        grads = torch.autograd.grad(y, leaves, dout)
    return spy.names, y.detach(), grads


def test_the_core_runs_the_gate_fold_as_training_does_with_the_branches_results(monkeypatch) -> None:
    inp = _nsa_core_inputs(1, 24, 2, 3, 16, GEO, "cpu", torch.float32)
    assert core_path() == "gated_branches, fold_delta"
    names, y, grads = _run(inp)
    assert names.count("nsa::triton_gate_fold_bwd") == 1 and "nsa::triton_gate_mix_bwd" not in names
    monkeypatch.setattr(gated, "FOLD_GATE", False)
    assert core_path() == "branches one by one"
    names_off, y_off, grads_off = _run(inp)
    assert "nsa::triton_gate_fold_bwd" not in names_off and names_off.count("nsa::triton_gate_mix_bwd") == 1
    torch.testing.assert_close(y, y_off, rtol=1e-5, atol=1e-6)
    assert y.shape == (1, 24, 2 * 3 * 16)  # [B, T, H*D]: wo's input, as the SDPA side's dout
    for name, a, b in zip(inp, grads, grads_off, strict=True):
        assert a is not None and a.abs().sum() > 0, name  # every input, q's three uses summed
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("fold_delta", [True, False])
def test_core_path_names_the_delta_switch(monkeypatch, fold_delta: bool) -> None:
    monkeypatch.setattr(gated, "FOLD_DELTA", fold_delta)
    assert core_path() == ("gated_branches, fold_delta" if fold_delta else "gated_branches")
