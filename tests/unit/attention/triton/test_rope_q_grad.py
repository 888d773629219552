"""q's RoPE on the triton backend hands each branch its own output (`fused.rope_q_fanout`), and its
backward sums the branches' gradients in float32 inside the inverse rotation, one kernel
(`nsa::triton_rope_grad_sum`): values and gradients equal eager's (fp32, fp16; absent gradients
left out), bf16 rounds once (against the float64 result, where autograd's sum in bf16 rounds
thrice), no copy of q forward, fake kernel / opcheck / torch.compile, and in NSAAttention (x's
gradient against eager and reference.py) the backward adds no q-sized tensors and launches the
rotation once with the three gradients (the GPU probe of
the switch: tests/unit/attention/test_gpu_probes.py).

Run: .venv/bin/pytest tests/unit/attention/triton/test_rope_q_grad.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules are imported

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nsa.attention import NSAAttention
from nsa.attention.reference import nsa_reference
from nsa.attention.rope import rope_cos_sin
from nsa.attention.rope import rope_to_layout as eager_rope
from nsa.attention.triton import fused

Q_PERM = (0, 2, 1, 3, 4)


def _tables(T: int, D: int):
    return rope_cos_sin(torch.arange(T) * 3 + 5, D, 10000.0, torch.float32)


def _loss(qs, ws, used):
    """Each consumer i a different function of its q (so each gradient differs); `used` picks them."""
    parts = [(qs[0] * ws[0]).sum(), (qs[1] * ws[1]).sum(), (qs[2].tanh() * ws[2]).sum()]
    return sum(p for p, u in zip(parts, used, strict=True) if u)


@pytest.mark.parametrize(
    ("used", "dtype"),
    [
        ((True, True, True), torch.float32),
        ((True, False, True), torch.float32),  # a branch without q's gradient: two summed
        ((False, True, False), torch.float32),  # one: the rotation alone
        ((True, True, True), torch.float16),
    ],
)
def test_fanout_equals_eager_rope_with_autograds_sum(used, dtype):
    torch.manual_seed(0)
    B, T, Hkv, G, D = 2, 11, 2, 6, 64
    cos, sin = _tables(T, D)
    x = torch.randn(B, T, Hkv, G, D).to(dtype)
    ws = [torch.randn(B, Hkv, T, G, D).to(dtype) for _ in range(3)]
    xe, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    q = eager_rope(xe, cos, sin, Q_PERM)
    qs = fused.rope_q_fanout(xt, cos, sin, 3)
    assert all(t.shape == q.shape and t.dtype == dtype and t.is_contiguous() for t in qs)
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2e-3, "atol": 2e-3}
    torch.testing.assert_close(qs[0], q, **tol)
    _loss((q, q, q), ws, used).backward()
    _loss(qs, ws, used).backward()
    torch.testing.assert_close(xt.grad, xe.grad, **tol)


def test_forward_is_one_tensor_no_copy_and_the_backward_one_launch(monkeypatch):
    """The n outputs share one storage (the forward writes q once); the backward runs the rotation
    once with all present gradients (NX), and a graph whose consumers give none returns none."""
    torch.manual_seed(0)
    B, T, Hkv, G, D = 1, 5, 1, 3, 64
    cos, sin = _tables(T, D)
    x = torch.randn(B, T, Hkv, G, D, requires_grad=True)
    qs = fused.rope_q_fanout(x, cos, sin, 3)
    assert len({t.untyped_storage().data_ptr() for t in qs}) == 1
    launches = _backward_launches(monkeypatch)
    (qs[0].sum() + qs[1].sum() * 2 + qs[2].sum() * 3).backward()
    assert launches == [2]  # X + X2 + X3
    y = fused.rope_q_fanout(x, cos, sin, 2)
    (y[1] * 2).sum().backward()
    assert launches == [2, 0]
    with pytest.raises(ValueError, match="n=4"):
        fused.rope_q_fanout(x, cos, sin, 4)


def test_bf16_gradient_rounds_once(bf16_interpreter):
    """dx against the float64 rotation of the float64 sum: the kernel sums the three bf16 gradients in
    float32 and rounds once, so almost every element is the correctly rounded result; autograd's
    spelling (two bf16 adds, then the rotation) rounds three times and misses far more often (on main
    the triton path was that spelling)."""
    torch.manual_seed(0)
    B, T, Hkv, G, D = 1, 16, 2, 6, 64
    cos, sin = _tables(T, D)
    x = torch.randn(B, T, Hkv, G, D).bfloat16()
    d = [torch.randn(B, Hkv, T, G, D).bfloat16() * s for s in (1.0, 0.37, 2.9)]
    dsum = (d[0].double() + d[1].double() + d[2].double()).permute(0, 2, 1, 3, 4)  # x's layout
    half = D // 2
    c, s = cos.double()[:, None, None, :], sin.double()[:, None, None, :]
    # the rotation's transpose: dx = d*cos + rotate_half^T(d)*sin, rotate_half^T(d) = [d2, -d1]
    want = (dsum * c + torch.cat([dsum[..., half:], -dsum[..., :half]], -1) * s).bfloat16()

    def dx(rope3):
        xl = x.clone().requires_grad_()
        qs = rope3(xl)
        torch.autograd.backward(qs, d)
        return xl.grad

    fused_dx = dx(lambda t: fused.rope_q_fanout(t, cos, sin, 3))
    eager_dx = dx(lambda t: (eager_rope(t, cos, sin, Q_PERM),) * 3)
    ulp = want.float().abs().clamp_min(2.0**-60) * 2.0**-7  # 1-2 bf16 ulps of each value (its exponent)
    fused_err = ((fused_dx.float() - want.float()).abs() / ulp).double()
    eager_err = ((eager_dx.float() - want.float()).abs() / ulp).double()
    assert fused_err.max() <= 1.0, fused_err.max()
    exact_fused = (fused_dx == want).double().mean().item()
    exact_eager = (eager_dx == want).double().mean().item()
    assert exact_fused > 0.99, exact_fused
    assert exact_eager < 0.8, exact_eager  # 0.65 here: the test tells the two spellings apart
    assert fused_err.mean() < 0.5 * eager_err.mean(), (fused_err.mean(), eager_err.mean())


def test_fake_kernel_opcheck_and_compile():
    """The meta device gives the shapes (the fake kernel), opcheck agrees with the real op, and
    torch.compile (aot_eager, fullgraph) gives eager's gradient bit for bit."""
    T, D = 4096, 64
    xm = torch.empty(2, T, 2, 6, D, device="meta", dtype=torch.bfloat16, requires_grad=True)
    cm = torch.empty(T, D, device="meta")
    qs = fused.rope_q_fanout(xm, cm, cm, 3)
    assert [t.shape for t in qs] == [(2, 2, T, 6, D)] * 3
    (qs[0].sum() + qs[1].sum() + qs[2].sum()).backward()
    assert xm.grad.shape == xm.shape
    torch.manual_seed(0)
    cos, sin = _tables(5, 64)
    grads = [torch.randn(1, 2, 5, 3, 64) for _ in range(3)]
    torch.library.opcheck(torch.ops.nsa.triton_rope_grad_sum.default, (grads, cos, sin))
    x = torch.randn(1, 5, 2, 3, 64)
    ws = [torch.randn(1, 2, 5, 3, 64) for _ in range(3)]

    def grad(fn):
        xl = x.clone().requires_grad_()
        return torch.autograd.grad(fn(xl), xl)[0]

    def loss(xl):
        return _loss(fused.rope_q_fanout(xl, cos, sin, 3), ws, (True, True, True))

    torch._dynamo.reset()
    assert torch.equal(grad(torch.compile(loss, backend="aot_eager", fullgraph=True)), grad(loss))


def _backward_launches(monkeypatch) -> list[int]:
    """The inverse rotations launched from here on, each as the number of gradients added to X."""
    launches: list[int] = []
    real = fused._launch_rope

    def spy(*args, **kwargs):
        if kwargs["neg"]:
            launches.append(len(kwargs.get("more", ())))
        return real(*args, **kwargs)

    monkeypatch.setattr(fused, "_launch_rope", spy)
    return launches


class _QSizedAdds(TorchDispatchMode):
    """Records the shapes of aten.add outputs (autograd's sum of a tensor's gradients is aten.add)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.add:
            self.shapes.append(tuple(out.shape))
        return out


def test_nsa_attention_backward_adds_no_q_sized_tensors_and_matches_eager(monkeypatch):
    """The module's wiring: with the triton backend the three branches' q gradients meet in RoPE's
    backward (one launch with three gradients), not in autograd's adds (two q-sized aten.add on main);
    x's gradient equals eager's and reference.py's (fp32)."""
    torch.manual_seed(0)
    kw = dict(dim=48, n_heads=6, n_kv_heads=1, head_dim=32, block_len=8, block_stride=4, sel_block=8,
              n_sel=3, window=8)  # fmt: skip
    tri = NSAAttention(**kw, backend="triton")
    ref = NSAAttention(**kw, backend="eager")
    ref.load_state_dict(tri.state_dict())
    x = torch.randn(1, 20, 48)
    dy = torch.randn(1, 20, 48)
    launches = _backward_launches(monkeypatch)
    xt, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    y = tri(xt)
    adds = _QSizedAdds()
    with adds:
        y.backward(dy)
    ref(xe).backward(dy)
    q_shape = (1, 1, 20, 6, 32)
    assert q_shape not in adds.shapes, adds.shapes
    assert launches.count(2) == 1  # the q gradient sum: X + X2 + X3, one launch
    torch.testing.assert_close(xt.grad, xe.grad, rtol=1e-4, atol=1e-5)
    xr = x.clone().requires_grad_()
    nsa_reference(tri, xr).backward(dy)  # reference.py's loops, differentiated by autograd
    torch.testing.assert_close(xt.grad, xr.grad, rtol=1e-4, atol=1e-5)
    # the probe switch off: the path the GPU runs measured (autograd's two q-sized adds)
    monkeypatch.setattr(fused, "FUSE_Q_GRAD", False)
    launches.clear()
    y = tri(x.clone().requires_grad_())
    with adds:
        y.backward(dy)
    assert adds.shapes.count(q_shape) == 2 and 2 not in launches, (adds.shapes, launches)
