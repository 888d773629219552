"""NSAAttention(backend="triton") end to end under the interpreter, against eager: the output and the
gradients of every parameter (projections, gates, compression MLP, position encoding) in float32, and
a few optimizer steps at head_dim 96 (padded to 128 inside the kernels) that track eager's losses.
Also run by scripts/test.sh's triton 3.6 leg.

Run: .venv/bin/pytest tests/unit/attention/triton/test_module_triton.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported

import pytest
import torch

from nsa.attention.nsa import NSAAttention


def _pair(head_dim: int):
    torch.manual_seed(0)
    kw = dict(dim=48, n_heads=4, n_kv_heads=2, head_dim=head_dim, block_len=16, block_stride=8,
              sel_block=16, n_sel=3, window=16)  # fmt: skip
    tri = NSAAttention(**kw, backend="triton")
    ref = NSAAttention(**kw, backend="eager")
    ref.load_state_dict(tri.state_dict())
    return tri, ref


def test_output_and_every_parameter_gradient_match_eager() -> None:
    tri, ref = _pair(64)
    x = torch.randn(1, 40, 48, generator=torch.Generator().manual_seed(1))
    dy = torch.randn(1, 40, 48, generator=torch.Generator().manual_seed(2))
    outs = []
    for mod in (tri, ref):
        xl = x.clone().requires_grad_()
        y = mod(xl)
        y.backward(dy)
        outs.append((y, xl.grad))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-4, atol=2e-5)
    names = [n for n, _ in tri.named_parameters()]
    assert any("cmp" in n for n in names) and any("gate" in n for n in names)
    for (name, a), (_, b) in zip(tri.named_parameters(), ref.named_parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=2e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_head_dim_96_trains_like_eager() -> None:
    """Three AdamW steps on a fixed batch: the triton losses follow eager's and go down."""
    tri, ref = _pair(96)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 24, 48, generator=g)
    target = torch.randn(1, 24, 48, generator=g)
    losses = []
    for mod in (tri, ref):
        opt = torch.optim.AdamW(mod.parameters(), lr=3e-3)
        seq = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(mod(x), target)
            loss.backward()
            opt.step()
            seq.append(loss.item())
        losses.append(seq)
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
    assert losses[0][-1] < losses[0][0]


def test_head_dim_past_128_is_refused_at_config_load(tmp_path) -> None:
    """What the kernels cannot serve stops at config load with exit 2 (eager stays allowed)."""
    import subprocess
    import sys

    cfg = tmp_path / "wide.yaml"
    cfg.write_text("model: {head_dim: 160}\ntrain: {steps: 1, seq_len: 64, batch_size: 1}\n")
    run_dir = str(tmp_path / "r")
    cmd = [sys.executable, "-m", "nsa.train", "--config", str(cfg), "--run-dir", run_dir, "--check"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "model.head_dim=160" in out.stderr and "model.nsa.backend: eager" in out.stderr
    eager = [*cmd, "--set", "model.nsa.backend=eager"]
    ok = subprocess.run(eager, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
