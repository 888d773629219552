"""The Triton fusions equal the eager ones: `rope_to_layout` (RoPE into the kernels' layout) and
`gate_mix` (Eq. 5's gated sum into wo's layout), values and gradients, fp32 within 1e-6 and fp16;
and NSAAttention with the Triton window branch and fusions swapped in equals the eager module and
reference.py. Kernels run under TRITON_INTERPRET=1 on CPU tensors.

Run: .venv/bin/pytest tests/unit/attention/triton/test_fused.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules are imported

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nsa.attention import NSAAttention
from nsa.attention.nsa import _gate_mix as eager_gate_mix
from nsa.attention.reference import nsa_reference
from nsa.attention.rope import rope_cos_sin
from nsa.attention.rope import rope_to_layout as eager_rope
from nsa.attention.triton import fused, gated
from nsa.attention.triton.spec import GpuShape

Q_PERM, K_PERM = (0, 2, 1, 3, 4), (0, 2, 1, 3)


def _grads(fn, inputs, dout):
    leaves = [t.detach().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return (out, *torch.autograd.grad(out, leaves, dout))


@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        ((2, 19, 2, 6, 64), Q_PERM),  # q, G = 6
        ((1, 1, 1, 1, 64), Q_PERM),  # T = 1, G = 1
        ((1, 13, 1, 16, 128), Q_PERM),  # G = 16, head_dim 128
        ((2, 23, 2, 64), K_PERM),  # keys
        ((1, 9, 3, 128), K_PERM),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rope_to_layout_matches_eager(shape, perm, dtype):
    torch.manual_seed(0)
    T, D = shape[1], shape[-1]
    cos, sin = rope_cos_sin(torch.arange(T) * 16 + 31, D, 10000.0, torch.float32)
    x = torch.randn(shape).to(dtype)
    dout = torch.randn([shape[p] for p in perm]).to(dtype)
    want = _grads(lambda t: eager_rope(t, cos, sin, perm), [x], dout)
    got = _grads(lambda t: fused.rope_to_layout(t, cos, sin, perm), [x], dout)
    assert got[0].is_contiguous() and got[0].dtype == dtype and got[1].dtype == dtype
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-3, "atol": 1e-3}
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **tol)


def test_rope_to_layout_reads_strided_keys_and_falls_back_elsewhere():
    """NSAAttention's keys are strided views (unbind of the packed projection); other perms and
    float64 tables take the eager path."""
    torch.manual_seed(0)
    B, T, Hkv, D = 2, 11, 2, 64
    packed = torch.randn(B, T, 3, 2, Hkv, D)
    k = packed.unbind(2)[1].unbind(2)[0]
    assert not k.is_contiguous()
    cos, sin = rope_cos_sin(torch.arange(T), D, 10000.0, torch.float32)
    torch.testing.assert_close(fused.rope_to_layout(k, cos, sin, K_PERM), eager_rope(k, cos, sin, K_PERM))
    x = torch.randn(B, T, Hkv, D)
    same = fused.rope_to_layout(x, cos, sin, (0, 1, 2, 3))
    assert torch.equal(same, eager_rope(x, cos, sin, (0, 1, 2, 3)))
    c64, s64 = rope_cos_sin(torch.arange(T), D, 10000.0, torch.float64)
    x64 = x.double()
    assert torch.equal(fused.rope_to_layout(x64, c64, s64, K_PERM), eager_rope(x64, c64, s64, K_PERM))


@pytest.mark.parametrize(
    ("B", "Hkv", "T", "G", "D"), [(2, 2, 17, 6, 64), (1, 1, 1, 1, 64), (1, 2, 9, 16, 128)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gate_mix_matches_eager(B, Hkv, T, G, D, dtype):
    torch.manual_seed(0)
    g = torch.rand(B, T, Hkv, G, 3).to(dtype)
    outs = [torch.randn(B, Hkv, T, G, D).to(dtype) for _ in range(3)]
    dy = torch.randn(B, T, Hkv * G * D).to(dtype)
    want = _grads(eager_gate_mix, [g, *outs], dy)
    got = _grads(fused.gate_mix, [g, *outs], dy)
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2e-3, "atol": 2e-3}
    for name, a, b in zip(("y", "dg", "do_cmp", "do_sel", "do_win"), got, want, strict=True):
        assert a.shape == b.shape and a.dtype == dtype, name
        if name != "dg":
            torch.testing.assert_close(a, b, **tol, msg=lambda m, n=name: f"{n}: {m}")
    # dg is a length-D dot summed in another order than eager's bmm: held to the tolerance relative
    # to the sum of |dy * o| of each dot (its rounding scale), not to its possibly cancelled value.
    dyv = dy.float().view(B, T, Hkv, G, D)
    mag = torch.stack([(dyv * o.float().permute(0, 2, 1, 3, 4)).abs().sum(-1) for o in outs], -1)
    err = (got[1].float() - want[1].float()).abs()
    assert (err <= tol["rtol"] * mag + tol["atol"]).all(), (err.max(), mag.max())


def test_meta_device_shapes():
    x = torch.empty(2, 4096, 2, 6, 64, device="meta", dtype=torch.bfloat16)
    cos = torch.empty(4096, 64, device="meta")
    assert fused.rope_to_layout(x, cos, cos, Q_PERM).shape == (2, 2, 4096, 6, 64)
    o = torch.empty(2, 2, 4096, 6, 64, device="meta", dtype=torch.bfloat16)
    g = torch.empty(2, 4096, 2, 6, 3, device="meta", dtype=torch.bfloat16)
    assert fused.gate_mix(g, o, o, o).shape == (2, 4096, 768)


class _CustomOps(TorchDispatchMode):
    """The names ("nsa::...") of the nsa custom ops dispatched inside it (the triton kernels' launchers)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in ("nsa", "nsa_triton"):
            self.names.add(func.name())
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("fold", [True, False])
def test_nsa_attention_with_triton_window_and_fusions_matches_eager_and_reference(monkeypatch, fold):
    """The module-level wiring: backend="triton" (its RoPE, gate mix and window branch, and the gates
    folded into the branch backwards' lse or, FOLD_GATE off, the gate mix's own backward) runs the
    triton ops, and its values and every parameter gradient equal the eager module's (fp32), and the
    output equals reference.py's. (It once patched names nsa.py no longer looked up: eager vs eager.)"""
    monkeypatch.setattr(gated, "FOLD_GATE", fold)
    torch.manual_seed(0)
    kw = dict(dim=64, n_heads=6, n_kv_heads=1, head_dim=64, block_len=8, block_stride=4, sel_block=8,
              n_sel=3, window=12)  # fmt: skip
    eager = NSAAttention(**kw, backend="eager")
    attn = NSAAttention(**kw, backend="triton")
    attn.load_state_dict(eager.state_dict())
    x = torch.randn(1, 21, 64)
    dy = torch.randn(1, 21, 64)
    y_eager = eager(x)
    g_eager = torch.autograd.grad(y_eager, list(eager.parameters()), dy)
    ops = _CustomOps()
    with ops:
        y = attn(x)
        grads = torch.autograd.grad(y, list(attn.parameters()), dy)
    mix_bwd = "nsa::triton_gate_fold_bwd" if fold else "nsa::triton_gate_mix_bwd"
    ran = {"nsa::triton_rope_to_layout", "nsa::triton_gate_mix", mix_bwd, "nsa::triton_window_bwd"}
    assert ran <= ops.names, ops.names
    assert not {"nsa::triton_gate_fold_bwd", "nsa::triton_gate_mix_bwd"} - {mix_bwd} & ops.names, ops.names
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
    for (name, _), a, b in zip(attn.named_parameters(), grads, g_eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    with torch.no_grad():
        torch.testing.assert_close(y.detach(), nsa_reference(attn, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpucheck_specs_cover_every_kernel(head_dim):
    shape = GpuShape("m7c", head_dim, 6, 32, 16, 64, 16, 512)
    specs = fused.gpucheck_specs(shape, 80)
    names = [s.name for s in specs]
    assert names == [
        "rope_q_fwd", "rope_q_bwd", "rope_q_sum_bwd", "rope_k_fwd", "rope_k_bwd", "gate_mix_fwd", "gate_mix_bwd",
        "gate_fold_bwd", "gate_fold_bwd_delta",
    ]  # fmt: skip
    assert specs[-1].signature["LC"] == specs[-1].signature["LW2"] == specs[-1].signature["DW"] == "*fp32"
    assert specs[-1].constexprs["DELTA"] and not specs[-2].constexprs["DELTA"]
    assert specs[-1].signature["DO"] == specs[-1].signature["DY"] == "*bf16"
    assert specs[2].constexprs["NX"] == 3 and specs[1].constexprs["NX"] == 1
    for s in specs:
        assert {n for n, t in s.signature.items() if t == "constexpr"} == set(s.constexprs)
        assert all(t != "constexpr" or n in s.constexprs for n, t in s.signature.items())
    rope_q = specs[0]
    assert rope_q.constexprs["R"] == 6 and rope_q.constexprs["HALF"] == head_dim // 2
    assert rope_q.signature["X"] == "*bf16" and rope_q.signature["COS"] == "*fp32"
    assert rope_q.constexprs["BLOCK_C"] >= 6 * head_dim // 2


def test_custom_ops_pass_opcheck():
    """Schemas, fake (meta) kernels and autograd registrations agree with the real ops."""
    torch.manual_seed(0)
    cos, sin = rope_cos_sin(torch.arange(5), 64, 10000.0, torch.float32)
    x = torch.randn(1, 5, 2, 3, 64, requires_grad=True)
    torch.library.opcheck(torch.ops.nsa.triton_rope_to_layout.default, (x, cos, sin))
    g = torch.rand(1, 5, 2, 3, 3, requires_grad=True)
    outs = [torch.randn(1, 2, 5, 3, 64, requires_grad=True) for _ in range(3)]
    torch.library.opcheck(torch.ops.nsa.triton_gate_mix.default, (g, *outs))
    q = torch.randn(1, 2, 5, 3, 64, requires_grad=True)
    k = torch.randn(1, 2, 5, 64, requires_grad=True)
    torch.library.opcheck(torch.ops.nsa.triton_window_fwd.default, (q, k, k.detach().clone(), 3, 0.125))


def test_gate_mix_float64_takes_the_eager_path():
    torch.manual_seed(0)
    g = torch.rand(1, 4, 1, 2, 3, dtype=torch.float64)
    outs = [torch.randn(1, 1, 4, 2, 8, dtype=torch.float64) for _ in range(3)]
    assert torch.equal(fused.gate_mix(g, *outs), eager_gate_mix(g, *outs))
