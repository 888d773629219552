"""The gates folded into the branch backwards' lse (nsa.attention.triton.gated, fused.py
`nsa::triton_gate_fold_bwd`): the fold kernel writes dy in the kernels' layout unrounded, dg and
lse - log2 g (+inf at g = 0, -inf kept for a row without keys, never NaN) in fp32 / fp16 / bf16;
each branch's backward op run on that one dO with its lse' equals it run on g * dO with its lse
(g = 0 rows, rows without keys); NSAAttention's triton backward hands the three branches one dO and
writes no g * dO copies (three on main), with gradients equal to eager's (a zero gate included);
meta device, opcheck and torch.compile (the GPU probe of
the switch: tests/unit/attention/test_gpu_probes.py).

Run: .venv/bin/pytest tests/unit/attention/triton/test_gate_fold.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules are imported

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nsa.attention import NSAAttention
from nsa.attention.triton import gated

# The fold kernel computes lse - log2(g) for every row and then keeps -inf where the row has no key:
# under the interpreter numpy warns at g = 0 (log2(0) = -inf, the intended +inf lse') and at -inf -
# (-inf) in the discarded branch of the select. IEEE results on the GPU alike; not a test failure.
pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero encountered in log2:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning"),
]

INF = float("inf")


def _fold_inputs(dtype: torch.dtype, B=1, Hkv=2, T=5, G=3, D=16):
    torch.manual_seed(0)
    g = torch.rand(B, T, Hkv, G, 3)
    g[0, 1, 0, :, 1] = 0.0  # a zero gate
    g[0, 2, 1, 0] = 0.0  # all three
    g = g.to(dtype)
    outs = [torch.randn(B, Hkv, T, G, D).to(dtype) for _ in range(3)]
    dy = torch.randn(B, T, Hkv * G * D).to(dtype)
    lses = [torch.randn(B, Hkv, T, G) * 4 for _ in range(3)]
    lses[1][0, 0, 3] = -INF  # rows without keys (the selected kernels' mark), one under a zero gate
    lses[1][0, 1, 2, 0] = -INF
    lses[2] = lses[2].view(B, Hkv, T * G)  # the window's lse is [B, Hkv, T*G]
    return g, outs, dy, lses


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fold_kernel_copies_dy_and_folds_the_gates_into_the_lse(dtype, bf16_interpreter):
    g, outs, dy, lses = _fold_inputs(dtype)
    B, Hkv, T, G, D = outs[0].shape
    dg, do, *folded, dc, ds, dw = torch.ops.nsa.triton_gate_fold_bwd(dy, g, *outs, *lses)
    assert dc.numel() == ds.numel() == dw.numel() == 0  # no deltas asked for
    assert do.dtype == dtype and do.shape == outs[0].shape
    assert torch.equal(do, dy.view(B, T, Hkv, G, D).permute(0, 2, 1, 3, 4))  # a copy: no rounding
    gf = g.float().permute(0, 2, 1, 3, 4)  # [B, Hkv, T, G, 3]
    for c, (lse, got) in enumerate(zip(lses, folded, strict=True)):
        lse, got, gc = lse.view(B, Hkv, T, G), got.view(B, Hkv, T, G), gf[..., c]
        assert got.dtype == torch.float32 and not got.isnan().any()
        keyless = lse == -INF
        assert (got[keyless] == -INF).all()  # kept, also where g = 0
        zero = (gc == 0) & ~keyless
        assert zero.any() and (got[zero] == INF).all()
        rest = ~keyless & ~zero
        torch.testing.assert_close(got[rest], lse[rest] - torch.log2(gc[rest]), rtol=1e-6, atol=1e-6)
    dyv = dy.float().view(B, T, Hkv, G, D)
    want = torch.stack([(dyv * o.float().permute(0, 2, 1, 3, 4)).sum(-1) for o in outs], -1)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(dg.float(), want, rtol=tol, atol=tol)


def _identity_cases():
    """(forward, backward) of each branch op on small tensors: backward(dout, lse) -> grads."""
    torch.manual_seed(1)
    B, Hkv, T, G, D = 1, 1, 16, 2, 16
    q = torch.randn(B, Hkv, T, G, D)
    k, v = torch.randn(B, Hkv, T, D), torch.randn(B, Hkv, T, D)
    kc, vc = torch.randn(B, Hkv, 7, D), torch.randn(B, Hkv, 7, D)  # l 4, d 2: 7 blocks at T 16
    sc = 0.25
    o_c, _, _, lse_c = torch.ops.nsa_triton.compressed_fwd(q, kc, vc, 4, 2, 4, 3, sc)

    def cmp_bwd(do, lse):
        return torch.ops.nsa_triton.compressed_bwd(do, q, kc, vc, o_c, lse, 4, 2, 3, 4, sc)

    # the selected branch on any table (forced False: the query-major kernels), two tokens without keys
    sidx = torch.randint(0, 4, (B, Hkv, T, 2))
    svalid = torch.rand(B, Hkv, T, 2) < 0.8
    svalid[..., 5, :] = False
    svalid[..., 9, :] = False
    o_s, lse_s, *index = torch.ops.nsa_triton.selected_fwd(q, k, v, sidx, svalid, 4, sc, False)
    assert (lse_s[..., 5, :] == -INF).all()

    def sel_bwd(do, lse):
        return torch.ops.nsa_triton.selected_bwd(do, q, k, v, sidx, svalid, o_s, lse, *index, 4, sc, False)

    o_w, lse_w = torch.ops.nsa.triton_window_fwd(q, k, v, 5, sc)

    def win_bwd(do, lse):
        return torch.ops.nsa.triton_window_bwd(do, q, k, v, o_w, lse, 5, sc)

    return (o_c, o_s, o_w), (lse_c, lse_s, lse_w), (cmp_bwd, sel_bwd, win_bwd)


def test_each_branch_backward_on_the_folded_lse_equals_it_on_the_scaled_dO():
    """The identity the fold rests on, through the real ops: backward(dO, lse - log2 g) equals
    backward(g * dO, lse) for every branch, zero gates and rows without keys included (fp32)."""
    outs, lses, bwds = _identity_cases()
    B, Hkv, T, G, D = outs[0].shape
    torch.manual_seed(2)
    g = torch.rand(B, T, Hkv, G, 3) + 0.05
    g[0, 3, 0, 1, :] = 0.0  # a zero gate in every branch
    g[0, 9, 0, 0, 1] = 0.0  # a selected row without keys under a zero gate
    dy = torch.randn(B, T, Hkv * G * D)
    _, do, *folded, _, _, _ = torch.ops.nsa.triton_gate_fold_bwd(dy, g, *outs, *lses)
    for c, (bwd, lse, lse2) in enumerate(zip(bwds, lses, folded, strict=True)):
        scaled = do * g[..., c].permute(0, 2, 1, 3)[..., None]
        want = bwd(scaled, lse)
        got = bwd(do, lse2)
        for name, a, b in zip(("dq", "dk", "dv"), got, want, strict=True):
            assert a.isfinite().all(), (c, name)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, n=f"{c} {name}": f"{n}: {m}")


class _BranchBackwards(TorchDispatchMode):
    """The dO each branch backward op receives, and the nsa ops dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.dos: dict[str, torch.Tensor] = {}
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        self.names.append(name)
        if name in ("nsa_triton::compressed_bwd", "nsa_triton::selected_bwd", "nsa::triton_window_bwd"):
            self.dos[name] = args[0]
        return func(*args, **(kwargs or {}))


def test_nsa_attention_backward_hands_the_branches_one_dO_and_matches_eager(monkeypatch):
    """NSAAttention (triton): the three branch backwards get one and the same dO, the layout copy of
    wo's input gradient (on main: three g * dO copies from the gate mix's backward); x's and every
    parameter's gradient equal eager's (fp32), with the selected branch's gate exactly 0."""
    torch.manual_seed(0)
    kw = dict(dim=48, n_heads=6, n_kv_heads=2, head_dim=16, block_len=8, block_stride=4, sel_block=8,
              n_sel=3, window=8)  # fmt: skip
    tri = NSAAttention(**kw, backend="triton")
    with torch.no_grad():
        tri.gate.bias.view(6, 3)[:, 1] = -1.0e4  # sigmoid: exactly 0
        tri.gate.weight.view(6, 3, 48)[:, 1] = 0.0
    ref = NSAAttention(**kw, backend="eager")
    ref.load_state_dict(tri.state_dict())
    x, dy = torch.randn(1, 19, 48), torch.randn(1, 19, 48)
    xt, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    y = tri(xt)
    spy = _BranchBackwards()
    with spy:
        y.backward(dy)
    ref(xe).backward(dy)
    assert len(spy.dos) == 3 and len({d.data_ptr() for d in spy.dos.values()}) == 1, spy.dos.keys()
    assert spy.names.count("nsa::triton_gate_fold_bwd") == 1 and "nsa::triton_gate_mix_bwd" not in spy.names
    torch.testing.assert_close(xt.grad, xe.grad, rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(tri.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    # the probe switch off: the measured path, the gate mix's backward and its three dO copies
    monkeypatch.setattr(gated, "FOLD_GATE", False)
    spy = _BranchBackwards()
    y = tri(x.clone().requires_grad_())
    with spy:
        y.backward(dy)
    assert len({d.data_ptr() for d in spy.dos.values()}) == 3 and "nsa::triton_gate_fold_bwd" not in spy.names


def _gated_inputs(device: str, dtype: torch.dtype = torch.float32, B=1, Hkv=1, T=12, G=2, D=16):
    """`gated_branches`' inputs as leaves: queries, compressed keys (5 blocks at l 4, d 2, T 12), keys."""
    q, kc, k = (B, Hkv, T, G, D), (B, Hkv, (T - 4) // 2 + 1, D), (B, Hkv, T, D)
    shapes = {"q": q, "q_sel": q, "q_win": q, "kc": kc, "vc": kc, "ks": k, "vs": k, "kw": k, "vw": k}
    inp = {n: torch.randn(s, device=device, dtype=dtype).requires_grad_() for n, s in shapes.items()}
    g = torch.rand(B, T, Hkv, G, 3, device=device, dtype=dtype).requires_grad_()
    return inp, g


GEO = (4, 2, 4, 3, 5)  # l, d, l', n, w


def test_meta_device_opcheck_and_compile():
    """The fake kernels give the node's shapes forward and backward on the meta device; opcheck agrees
    with the fold op; torch.compile (aot_eager, fullgraph) gives the uncompiled gradients bit for bit."""
    inp, g = _gated_inputs("meta", torch.bfloat16, B=2, T=4096, G=6, D=64)
    y, idx, valid = gated.gated_branches(inp, g, *GEO, scale=0.125)
    assert y.shape == (2, 4096, 6 * 64) and idx.shape == (2, 1, 4096, 3) and valid.dtype == torch.bool
    y.sum().backward()
    assert all(t.grad.shape == t.shape for t in (*inp.values(), g))
    torch.manual_seed(0)
    g5, outs, dy, lses = _fold_inputs(torch.float32)
    torch.library.opcheck(torch.ops.nsa.triton_gate_fold_bwd.default, (dy, g5, *outs, *lses))
    inp, g = _gated_inputs("cpu")
    leaves = [*inp.values(), g]

    def loss(*ts):
        y, _, _ = gated.gated_branches(dict(zip(inp, ts[:-1], strict=True)), ts[-1], *GEO, scale=0.25)
        return (y * y).sum()

    want = torch.autograd.grad(loss(*leaves), leaves)
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(loss, backend="aot_eager", fullgraph=True)(*leaves), leaves)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_mixed_dtypes_and_the_switch_fall_back(monkeypatch):
    inp, g = _gated_inputs("cpu")
    inp["vw"] = inp["vw"].double()
    assert gated.gated_branches(inp, g, *GEO, scale=0.25) is None
    inp, g = _gated_inputs("cpu")
    monkeypatch.setattr(gated, "FOLD_GATE", False)
    assert gated.gated_branches(inp, g, *GEO, scale=0.25) is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_gradients_match_the_unfolded_path(monkeypatch, bf16_interpreter, dtype):
    """fp16 / bf16 (honest-bf16 interpreter): the node's gradients against the float32 ones no worse
    than the unfolded path's (the branch ops' own autograd and the gate mix's g * dO copies) in the
    same dtype, plus a rounding's worth; one selected gate exactly 0."""
    torch.manual_seed(3)
    inp32, g32 = _gated_inputs("cpu")
    with torch.no_grad():
        g32[0, 5, 0, 1, 1] = 0.0
    dy = torch.randn(1, 12, 2 * 16)

    def grads(fold: bool, dt: torch.dtype):
        monkeypatch.setattr(gated, "FOLD_GATE", fold)
        inp = {n: t.detach().to(dt).requires_grad_() for n, t in inp32.items()}
        g = g32.detach().to(dt).requires_grad_()
        mixed = gated.gated_branches(inp, g, *GEO, scale=0.25)
        if mixed is None:  # the branches one by one, as NSAAttention then runs them
            from nsa.attention.triton import compressed, fused, selected, window

            o_c, idx, valid = compressed.compressed_attention_and_selection(
                inp["q"], inp["kc"], inp["vc"], block_len=4, block_stride=2, sel_block=4, n_sel=3, scale=0.25
            )
            o_s = selected.selected_attention(
                inp["q_sel"], inp["ks"], inp["vs"], idx, valid, sel_block=4, scale=0.25, forced_blocks=True
            )
            o_w = window.window_attention(inp["q_win"], inp["kw"], inp["vw"], window=5, scale=0.25)
            y = fused.gate_mix(g, o_c, o_s, o_w)
        else:
            y = mixed[0]
        return torch.autograd.grad(y, [*inp.values(), g], dy.to(dt))

    want = grads(True, torch.float32)
    unit = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
    for a, b, w in zip(grads(True, dtype), grads(False, dtype), want, strict=True):
        assert a.isfinite().all()
        err_fold = float((a.float() - w).norm() / w.norm())
        err_copies = float((b.float() - w).norm() / w.norm())
        assert err_fold <= err_copies + 2 * unit, (err_fold, err_copies)
