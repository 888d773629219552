"""The branches' delta = rowsum(dO * O) written once by the gate fold's kernel (gated.FOLD_DELTA,
fused.py `nsa::triton_gate_fold_bwd(..., with_delta=True)`) and handed to each branch's backward op
(`delta=`): the kernel's three deltas are the fp32 row sums (g = 0 and rows without keys included);
each branch op given them returns, bit for bit under the interpreter, what it returns forming its
own (the compressed and window dQ kernels, the selected key-major backward, whose delta kernel no
longer runs, and its query-major forced dQ kernel); gated_branches' gradients with the switch on
equal those with it off bit for bit in fp32 / fp16 / bf16 (honest-bf16 interpreter), key-major
(G 2) and query-major (G 10); the fake kernels and opcheck agree. Launch counts:
tests/unit/attention/triton/test_launches.py.

Run: .venv/bin/pytest tests/unit/attention/triton/test_delta_fold.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules are imported

import pytest
import torch

from nsa.attention.triton import gated
from tests.fixtures.dispatch import OpNames

# As in test_gate_fold.py: the fold kernel's lse - log2(g) warns under numpy at g = 0 and -inf rows.
pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero encountered in log2:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning"),
]

INF = float("inf")
GEO = (4, 2, 4, 3, 5)  # l, d, l', n, w (test_gate_fold.py's)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fold_kernel_writes_each_branch_delta_in_fp32(dtype, bf16_interpreter):
    """with_delta: three fp32 deltas in each lse's shape, rowsum(dy * o_c) summed in fp32 from the
    unrounded products (finite at g = 0 and on rows without keys, which do not enter them); dg is
    the same sum rounded to g's dtype; the other outputs are those without the deltas, bit for bit."""
    torch.manual_seed(0)
    B, Hkv, T, G, D = 1, 2, 5, 3, 16
    g = torch.rand(B, T, Hkv, G, 3)
    g[0, 1, 0, :, 1] = 0.0
    g = g.to(dtype)
    outs = [torch.randn(B, Hkv, T, G, D).to(dtype) for _ in range(3)]
    dy = torch.randn(B, T, Hkv * G * D).to(dtype)
    lses = [torch.randn(B, Hkv, T, G) * 4 for _ in range(3)]
    lses[1][0, 0, 3] = -INF
    lses[2] = lses[2].view(B, Hkv, T * G)  # the window's lse is [B, Hkv, T*G]
    plain = torch.ops.nsa.triton_gate_fold_bwd(dy, g, *outs, *lses)
    got = torch.ops.nsa.triton_gate_fold_bwd(dy, g, *outs, *lses, True)
    assert all(torch.equal(a, b) for a, b in zip(got[:5], plain[:5], strict=True))
    dg, do, deltas = got[0], got[1], got[5:]
    for c, (delta, lse, o) in enumerate(zip(deltas, lses, outs, strict=True)):
        assert delta.dtype == torch.float32 and delta.shape == lse.shape and delta.isfinite().all()
        want = (do.float() * o.float()).sum(-1).view(lse.shape)
        torch.testing.assert_close(delta, want, rtol=1e-5, atol=1e-5)
        assert torch.equal(dg[..., c], delta.view(B, Hkv, T, G).permute(0, 2, 1, 3).to(dtype))


def _branch_ops(G: int):
    """Each branch's backward op on small tensors, as gated.py calls it (forced blocks): (o, lse,
    backward(do, lse, delta) -> grads)."""
    torch.manual_seed(1)
    B, Hkv, T, D = 1, 1, 16, 16
    q = torch.randn(B, Hkv, T, G, D)
    k, v = torch.randn(B, Hkv, T, D), torch.randn(B, Hkv, T, D)
    kc, vc = torch.randn(B, Hkv, 7, D), torch.randn(B, Hkv, 7, D)
    sc = 0.25
    o_c, idx, valid, lse_c = torch.ops.nsa_triton.compressed_fwd(q, kc, vc, 4, 2, 4, 3, sc)
    o_s, lse_s, *index = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, 4, sc, True)
    o_w, lse_w = torch.ops.nsa.triton_window_fwd(q, k, v, 5, sc)

    def cmp_bwd(do, lse, delta):
        return torch.ops.nsa_triton.compressed_bwd(do, q, kc, vc, o_c, lse, 4, 2, 3, 4, sc, delta)

    def sel_bwd(do, lse, delta):
        return torch.ops.nsa_triton.selected_bwd(
            do, q, k, v, idx, valid, o_s, lse, *index, 4, sc, True, delta
        )

    def win_bwd(do, lse, delta):
        return torch.ops.nsa.triton_window_bwd(do, q, k, v, o_w, lse, 5, sc, delta)

    return (o_c, o_s, o_w), (lse_c, lse_s, lse_w), (cmp_bwd, sel_bwd, win_bwd)


# The nsa ops dispatched, by tests.fixtures.dispatch.OpNames (the selected key-major delta kernel is
# seen by its launch count in test_launches.py; here: that O is never needed, by handing the ops a
# NaN-filled O).


@pytest.mark.parametrize("G", [2, 10])  # the selected branch key-major (G <= 8) and query-major forced
def test_each_branch_backward_given_the_fold_delta_equals_it_forming_its_own(G):
    """backward(dO, lse', delta from the fold kernel) == backward(dO, lse') bit for bit (fp32), zero
    gates included; given the delta, no kernel reads O (a NaN-filled O changes nothing)."""
    outs, lses, bwds = _branch_ops(G)
    B, Hkv, T, _, D = outs[0].shape
    torch.manual_seed(2)
    g = torch.rand(B, T, Hkv, G, 3) + 0.05
    g[0, 3, 0, 1, :] = 0.0  # a zero gate in every branch
    dy = torch.randn(B, T, Hkv * G * D)
    _, do, *folded = torch.ops.nsa.triton_gate_fold_bwd(dy, g, *outs, *lses, True)
    folded, deltas = folded[:3], folded[3:]
    for c, (bwd, lse2, delta, o) in enumerate(zip(bwds, folded, deltas, outs, strict=True)):
        want = bwd(do, lse2, None)
        got = bwd(do, lse2, delta)
        o_real = o.clone()
        o.fill_(float("nan"))  # the op's saved O: unread when given delta
        try:
            blind = bwd(do, lse2, delta)
        finally:
            o.copy_(o_real)
        for name, a, b, n in zip(("dq", "dk", "dv"), got, want, blind, strict=True):
            assert a.isfinite().all(), (c, name)
            assert torch.equal(a, b), (G, c, name, float((a - b).abs().max()))
            assert torch.equal(n, a), (G, c, name)


def _gated_inputs(dtype: torch.dtype, G: int, T: int = 12, D: int = 16):
    q, kc, k = (1, 1, T, G, D), (1, 1, (T - 4) // 2 + 1, D), (1, 1, T, D)
    shapes = {"q": q, "q_sel": q, "q_win": q, "kc": kc, "vc": kc, "ks": k, "vs": k, "kw": k, "vw": k}
    inp = {n: torch.randn(s).to(dtype) for n, s in shapes.items()}
    g = torch.rand(1, T, 1, G, 3)
    g[0, 5, 0, 1, 1] = 0.0  # a selected gate exactly 0
    return inp, g.to(dtype)


@pytest.mark.parametrize(
    "dtype,G",
    [(torch.float32, 2), (torch.float16, 2), (torch.bfloat16, 2), (torch.float32, 10), (torch.bfloat16, 10)],
)
def test_gated_gradients_with_the_fold_delta_equal_the_unfused_path_bit_for_bit(
    monkeypatch, bf16_interpreter, dtype, G
):
    """gated_branches' gradients (every input and the gates) with FOLD_DELTA on equal those with it
    off (each branch backward forming its own delta), bit for bit: the same fp32 products and row
    sums, formed in another kernel. One selected gate exactly 0; T 12 at l' 4: rows without keys in
    the compressed branch (t < l - 1)."""
    torch.manual_seed(3)
    inp0, g0 = _gated_inputs(dtype, G)
    dy = torch.randn(1, 12, G * 16).to(dtype)

    def grads(fold_delta: bool):
        monkeypatch.setattr(gated, "FOLD_DELTA", fold_delta)
        inp = {n: t.clone().requires_grad_() for n, t in inp0.items()}
        g = g0.clone().requires_grad_()
        y, _, _ = gated.gated_branches(inp, g, *GEO, scale=0.25)
        spy = OpNames()
        with spy:
            out = torch.autograd.grad(y, [*inp.values(), g], dy)
        return out, spy.names

    on, names_on = grads(True)
    off, names_off = grads(False)
    assert names_on == names_off  # the same ops (the delta kernel is a launch inside the selected op)
    for name, a, b in zip([*inp0, "g"], on, off, strict=True):
        assert a.isfinite().all(), name
        assert torch.equal(a, b), (name, float((a.float() - b.float()).abs().max()))


def test_fake_kernels_and_opcheck_with_the_delta():
    """The ops' fake kernels with a delta (meta device: the node's backward with FOLD_DELTA on), and
    opcheck of the fold op asking for the deltas and of each branch's backward op handed one (its
    schema `Tensor? delta`, not mutated)."""
    inp = {
        n: t.to("meta").requires_grad_() for n, t in _gated_inputs(torch.bfloat16, 6, T=4096, D=64)[0].items()
    }
    g = torch.rand(1, 4096, 1, 6, 3, dtype=torch.bfloat16, device="meta").requires_grad_()
    y, _, _ = gated.gated_branches(inp, g, *GEO, scale=0.125)
    y.sum().backward()
    assert all(t.grad.shape == t.shape for t in (*inp.values(), g))
    torch.manual_seed(0)
    B, Hkv, T, G, D = 1, 2, 5, 3, 16
    g5 = torch.rand(B, T, Hkv, G, 3)
    outs = [torch.randn(B, Hkv, T, G, D) for _ in range(3)]
    lses = [torch.randn(B, Hkv, T, G) for _ in range(3)]
    dy = torch.randn(B, T, Hkv * G * D)
    torch.library.opcheck(torch.ops.nsa.triton_gate_fold_bwd.default, (dy, g5, *outs, *lses, True))
    torch.manual_seed(1)
    q = torch.randn(1, 1, 16, 2, 16)
    k, v, kc, vc = (
        torch.randn(1, 1, 16, 16),
        torch.randn(1, 1, 16, 16),
        torch.randn(1, 1, 7, 16),
        torch.randn(1, 1, 7, 16),
    )
    o_c, idx, valid, lse_c = torch.ops.nsa_triton.compressed_fwd(q, kc, vc, 4, 2, 4, 3, 0.25)
    o_s, lse_s, *index = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, 4, 0.25, True)
    o_w, lse_w = torch.ops.nsa.triton_window_fwd(q, k, v, 5, 0.25)
    do = torch.randn_like(q)
    cmp_args = (do, q, kc, vc, o_c, lse_c, 4, 2, 3, 4, 0.25, (do * o_c).sum(-1))
    torch.library.opcheck(torch.ops.nsa_triton.compressed_bwd.default, cmp_args)
    sel_args = (do, q, k, v, idx, valid, o_s, lse_s, *index, 4, 0.25, True, (do * o_s).sum(-1))
    torch.library.opcheck(torch.ops.nsa_triton.selected_bwd.default, sel_args)
    win_args = (do, q, k, v, o_w, lse_w, 5, 0.25, (do * o_w).sum(-1).view(lse_w.shape))
    torch.library.opcheck(torch.ops.nsa.triton_window_bwd.default, win_args)


def test_a_delta_of_the_wrong_kind_is_refused_before_any_launch():
    """A delta not float32, not contiguous or of another row count: a clear error naming the op."""
    torch.manual_seed(1)
    q = torch.randn(1, 1, 8, 2, 16)
    k, v = torch.randn(1, 1, 8, 16), torch.randn(1, 1, 8, 16)
    o_w, lse_w = torch.ops.nsa.triton_window_fwd(q, k, v, 5, 0.25)
    do = torch.randn_like(q)
    for bad in (torch.zeros(lse_w.shape, dtype=torch.float16), torch.zeros(1, 1, 4), torch.zeros(2, 8).t()):
        with pytest.raises(
            ValueError, match=r"nsa::triton_window_bwd: delta .* float32, contiguous, 16 rows"
        ):
            torch.ops.nsa.triton_window_bwd(do, q, k, v, o_w, lse_w, 5, 0.25, bad)
    o_c, idx, valid, lse_c = torch.ops.nsa_triton.compressed_fwd(q, k, v, 4, 2, 4, 3, 0.25)
    with pytest.raises(ValueError, match="nsa_triton::compressed_bwd: delta"):
        torch.ops.nsa_triton.compressed_bwd(do, q, k, v, o_c, lse_c, 4, 2, 3, 4, 0.25, torch.zeros(3))
    with pytest.raises(ValueError, match="nsa_triton::selected_bwd: delta"):
        torch.ops.nsa_triton.selected_bwd(
            do, q, k, v, idx, valid, o_c, lse_c, *(torch.empty(0, dtype=torch.int64),) * 3, 4, 0.25, True,
            torch.zeros(lse_c.shape, dtype=torch.float64),
        )  # fmt: skip
