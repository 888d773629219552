"""The key-major selected backward (selected_keys_bwd.py; `bwd_keys` in selected.py's `_config`) under
TRITON_INTERPRET=1 on CPU.

It runs for forced_blocks=True at G <= 8: delta, one keys kernel over every (query, block) pair (dK/dV
and dQ partials), the dK/dV reduction, the dQ merge. Gradients against the eager op's autograd on
tables with duplicates, invalid, negative, future and missing entries and a token without any key
(fp32, fp16, and bf16 with the honest-bf16 fixture), T not a multiple of l', l' = 32 so the keys
kernel splits a block into two key chunks (two dQ partials per pair); the dQ partials never
initialised (NaN-filled); two runs bitwise equal; the old kernels not run (and still exact with
bwd_keys off); the launches the same at every T. The NSAAttention check against reference.py at G = 6
(test_triton_selected.py) takes this path too.

The reverse index: the key-major forward's op returns it and the backward reuses it (bitwise the same
gradients as with its own, one build per forward + backward, none in the backward), through the fake
kernel (meta), torch.compile (aot_eager), opcheck and activation checkpointing (rebuilt by the
recomputed forward); a wrong-shaped index is refused; at G 16 the query-major backward builds its own (fp32, fp16, bf16 against eager / rounding
bounds). The dK/dV kernel and the keys kernel are one program (`_dkdv_walk`, WRITE_DQ off / on).
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
from nsa.attention.triton import selected_keys as tkeys_index
from nsa.attention.triton import selected_keys_bwd as tkeys

TOL = {torch.float32: 2e-5, torch.float16: 2e-3}
OLD = ("_sel_forced_dq_kernel", "_sel_bwd_dq_tok_kernel", "_sel_bwd_dkdv_kernel")
NEW = ("_sel_bwd_delta_kernel", "_sel_bwd_keys_kernel", "_sel_bwd_dq_merge_kernel")


class _Forbidden:
    """Stands for a kernel the path under test must not launch."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getitem__(self, grid):
        raise AssertionError(f"{self.name} launched")


def _path(monkeypatch, keys: bool) -> None:
    """bwd_keys forced on or off, and the other path's kernels made to fail if launched."""
    base = tsel._launch_config
    monkeypatch.setattr(tsel, "_launch_config", lambda G, D, LP, *a: {**base(G, D, LP, *a), "bwd_keys": keys})
    for name in OLD if keys else NEW:
        monkeypatch.setattr(tsel if name in OLD else tkeys, name, _Forbidden(name))


def _nan_partials(monkeypatch) -> None:
    """The dQ partials start as NaN: a read of a position the keys kernel did not write shows."""
    monkeypatch.setattr(
        tkeys, "_pdq_buffer", lambda *a: torch.full((a[0], a[1], a[2], a[3]), float("nan"), dtype=a[4])
    )


def _odd_table(T, lp, n, seed, B=1, Hkv=1):
    """top_blocks' table broken on purpose: duplicates, entries moved to the future or to a
    non-forced block, negative and invalid entries, token 3 without any entry."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(B, Hkv, T, -(-T // lp), generator=g)
    idx, valid = top_blocks(scores, torch.arange(T), lp, n)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.2, idx.roll(1, -1), idx)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.1, idx + 2, idx)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.05, -1, idx)
    valid = valid & (torch.rand(valid.shape, generator=g) < 0.85)
    valid[..., 3, :] = False
    return idx, valid


def _grads(q, k, v, idx, valid, lp, dout):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = tsel.selected_attention(
        *leaves, idx, valid, sel_block=lp, scale=q.shape[-1] ** -0.5, forced_blocks=True
    )
    return out, torch.autograd.grad(out, leaves, dout)


def _backward(q, k, v, idx, valid, lp, dout, out_lse=None):
    """The backward op alone (dq, dk, dv), on the forward's (out, lse) when given."""
    scale = q.shape[-1] ** -0.5
    out, lse = (out_lse or torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, scale, True))[:2]
    none = torch.empty(0, dtype=torch.int64)  # no forward index: the backward builds its own
    return torch.ops.nsa_triton.selected_bwd(
        dout, q, k, v, idx, valid, out, lse, none, none, none, lp, scale, True
    )


def _inputs(B, Hkv, T, G, D, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q, dout = (torch.randn(B, Hkv, T, G, D, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(B, Hkv, T, D, generator=g).to(dtype) for _ in range(2))
    return q, k, v, dout


# (G, dtype, l', B, Hkv): G 1, 2, 6 (FSA's range), l' = 32 is two key chunks of the interpreter's 16.
CASES = [
    (1, torch.float32, 8, 1, 1),
    (2, torch.float16, 16, 2, 1),
    (6, torch.float32, 32, 1, 1),
    (6, torch.float16, 8, 1, 1),
]


def _assert_grads_match_eager(q, k, v, dout, idx, valid, lp: int, dtype) -> None:
    """The triton op's dq/dk/dv (in q's dtype) against the eager op's autograd in fp32, within 5x the
    dtype's tolerance; token 3 (no key in `_odd_table`) gets zero dQ, no NaN from the partials."""
    _, got = _grads(q, k, v, idx, valid, lp, dout)
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    want = eager.selected_attention(qf, kf, vf, idx, valid, sel_block=lp, scale=q.shape[-1] ** -0.5, chunk=7)
    ref = torch.autograd.grad(want, (qf, kf, vf), dout.float())
    tol = TOL[dtype] * 5
    for name, a, b in zip("qkv", got, ref):
        assert a.dtype == dtype, name
        torch.testing.assert_close(a.float(), b, rtol=tol, atol=tol, msg=lambda m, n=name: f"d{n}: {m}")
    assert got[0][0, 0, 3].abs().max() == 0


@pytest.mark.parametrize("G,dtype,lp,B,Hkv", CASES)
def test_keys_backward_matches_eager_autograd(monkeypatch, G, dtype, lp, B, Hkv):
    _path(monkeypatch, keys=True)
    _nan_partials(monkeypatch)
    T, D, n = 41, 16, 4
    q, k, v, dout = _inputs(B, Hkv, T, G, D, dtype, seed=50 + G)
    idx, valid = _odd_table(T, lp, n, seed=G, B=B, Hkv=Hkv)
    _assert_grads_match_eager(q, k, v, dout, idx, valid, lp, dtype)


def _assert_bf16_within_bounds(G: int, D: int, seed: int, table_seed: int) -> None:
    """Output and gradients of the selected op in bf16 (T 40, l' 32: two key chunks; n 2 of
    top_blocks' table, each block once) within nsa.attention.gpusuite.bounds' rounding bounds around
    the exact result, in bf16."""
    from nsa.attention.gpusuite import bounds

    T, lp, n = 40, 32, 2
    q, k, v, dout = _inputs(1, 1, T, G, D, torch.bfloat16, seed=seed)
    g = torch.Generator().manual_seed(table_seed)
    idx, valid = top_blocks(torch.rand(1, 1, T, 2, generator=g), torch.arange(T), lp, n)
    out, grads = _grads(q, k, v, idx, valid, lp, dout)
    got = {"out": out, **dict(zip(("dq", "dk", "dv"), grads))}
    vis = bounds.selected_visible(idx, valid, T, lp)
    for name, want in bounds.attention_bounds(q, k, v, dout, vis, D**-0.5, torch.bfloat16).items():
        res = bounds.check(got[name], want)
        assert got[name].dtype == torch.bfloat16 and res["within_bound"], f"{name}: {res}"


@pytest.mark.parametrize("G", [2, 6])
def test_keys_backward_bf16_within_rounding_bounds(monkeypatch, bf16_interpreter, G):
    """bf16 as the GPU does it (conftest fixture): gradients within nsa.attention.gpusuite.bounds'
    rounding bounds around the exact result; l' = 32 (two key chunks), T = 40."""
    _path(monkeypatch, keys=True)
    _assert_bf16_within_bounds(G, D=32, seed=60 + G, table_seed=G)


def test_keys_backward_is_deterministic(monkeypatch):
    """Two backward runs are bitwise equal (fixed-order sums, no atomics); the partials differ between
    runs (NaN, then whatever memory) and must not matter."""
    _path(monkeypatch, keys=True)
    T, D, lp = 33, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 6, D, torch.float16, seed=70)
    idx, valid = _odd_table(T, lp, 4, seed=70)
    fwd = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, D**-0.5, True)
    a = _backward(q, k, v, idx, valid, lp, dout, fwd)
    _nan_partials(monkeypatch)
    b = _backward(q, k, v, idx, valid, lp, dout, fwd)
    for x, y in zip(a, b):
        assert torch.equal(x.view(torch.int16), y.view(torch.int16))


def test_old_backward_still_exact_with_bwd_keys_off(monkeypatch):
    """bwd_keys=False at G = 2 runs the forced dQ, the token tiles (8 tokens a program) and the dK/dV
    kernel, as before; the keys path agrees with it."""
    T, D, lp = 33, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float32, seed=80)
    idx, valid = _odd_table(T, lp, 4, seed=80)
    fwd = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, D**-0.5, True)
    with monkeypatch.context() as m:
        _path(m, keys=False)
        old = _backward(q, k, v, idx, valid, lp, dout, fwd)
    _path(monkeypatch, keys=True)
    new = _backward(q, k, v, idx, valid, lp, dout, fwd)
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    want = eager.selected_attention(qf, kf, vf, idx, valid, sel_block=lp, scale=D**-0.5, chunk=7)
    ref = torch.autograd.grad(want, (qf, kf, vf), dout)
    for a, b, c in zip(old, new, ref):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_bwd_keys_is_fsa_range_and_launches_are_constant_in_T():
    """The switch: on for G <= 8. Its backward launches the same kernels and aten ops at every T (the
    launch counter of bench/attention_launches.py, kernels counted and skipped) and never syncs."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[4] / "bench" / "attention_launches.py"
    spec = importlib.util.spec_from_file_location("attention_launches", path)
    launches = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launches)
    assert [G for G in range(1, 17) if tsel._config(G, 64, 64)["bwd_keys"]] == list(range(1, 9))
    rows = []
    for T in (40, 300):
        q, k, v, dout = _inputs(1, 2, T, 6, 16, torch.float32, seed=T)
        idx, valid = _odd_table(T, 8, 4, seed=T, Hkv=2)
        out = torch.zeros_like(q)
        lse = torch.zeros(q.shape[:4])
        counter = launches.LaunchCounter()
        with launches.no_triton_execution(counter), counter:
            none = torch.empty(0, dtype=torch.int64)
            torch.ops.nsa_triton.selected_bwd(
                dout, q, k, v, idx, valid, out, lse, none, none, none, 8, 0.25, True
            )
        rows.append((dict(counter.triton), dict(counter.ops), dict(counter.syncs)))
    assert rows[0] == rows[1] and rows[0][2] == {}
    # Given no forward index (empty tensors: the query-major forward ran), the backward builds it with
    # selected_keys.reverse_index: 2 kernels and 3 aten ops (sort, arange, searchsorted), the ~16 aten
    # ops of the deleted _reverse_index gone.
    assert rows[0][0] == {"_sel_bwd_delta_kernel": 1, "_sel_bwd_keys_kernel": 1, "_sel_bwd_reduce_kernel": 1,
                          "_sel_bwd_dq_merge_kernel": 1, "_sel_fwd_index_kernel": 1,
                          "_sel_fwd_segs_kernel": 1}  # fmt: skip
    assert sum(rows[0][1].values()) == 3, rows[0][1]


def _skipping_kernels(fn, *args):
    """fn(*args) with every triton launch counted and skipped (bench/attention_launches.py's counter):
    (its result, the counter). Outputs are garbage; shapes, dtypes and counts are real."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[4] / "bench" / "attention_launches.py"
    spec = importlib.util.spec_from_file_location("attention_launches", path)
    launches = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launches)
    counter = launches.LaunchCounter()
    with launches.no_triton_execution(counter), counter:
        result = fn(*args)
    return result, counter


def _index_builds(fn) -> int:
    """How many times `fn` builds the reverse index (its first kernel and its sort; nothing runs)."""
    _, counter = _skipping_kernels(fn)
    assert counter.ops["aten.sort.stable"] == counter.triton["_sel_fwd_index_kernel"]
    return counter.triton["_sel_fwd_index_kernel"]


@pytest.mark.parametrize("keys", [True, False])
def test_forward_index_is_the_backwards(monkeypatch, keys):
    """With forced blocks at G <= 8 the forward's op returns its reverse index (reverse_index's, bit for
    bit) and the backward takes it instead of sorting again: the same gradients, bit for bit, on the
    key-major backward and (bwd_keys off) on the query-major dK/dV path; forward + backward through
    autograd build the index once. Elsewhere the forward returns empty int64 tensors and the
    backward builds it (G 16, or no forced blocks)."""
    _path(monkeypatch, keys=keys)
    T, D, lp = 33, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 6, D, torch.float16, seed=90)
    idx, valid = _odd_table(T, lp, 4, seed=90)
    scale = D**-0.5
    out, lse, *index = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, scale, True)
    target = tsel._launch_config(6, D, lp)["seg_target"]  # the launcher's segments
    want = tkeys_index.reverse_index(idx, valid.view(torch.int8), lp, target)
    assert all(torch.equal(a, b) for a, b in zip(index, want[:3], strict=True))
    shared = torch.ops.nsa_triton.selected_bwd(dout, q, k, v, idx, valid, out, lse, *index, lp, scale, True)
    own = _backward(q, k, v, idx, valid, lp, dout, (out, lse))
    for a, b in zip(shared, own, strict=True):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    assert _index_builds(lambda: _grads(q, k, v, idx, valid, lp, dout)) == 1
    for G, forced in ((16, True), (6, False)):
        qg = torch.randn(1, 1, T, G, D).half()
        fwd = torch.ops.nsa_triton.selected_fwd
        _, _, *none = _skipping_kernels(fwd, qg, k, v, idx, valid, lp, scale, forced)[0]
        assert [(x.dtype, x.numel()) for x in none] == [(torch.int64, 0)] * 3, (G, forced)


def test_fake_kernel_gives_the_index_shapes_and_compile_and_checkpointing_use_it(monkeypatch):
    """The fake kernel (meta device, torch.compile's fake tensors) gives the real op's output shapes
    and dtypes, the index's included (empty where the forward builds none). torch.compile (aot_eager,
    fullgraph) and activation checkpointing (the forward runs again in the backward and saves the
    index it rebuilt: never a stale one) give the eager gradients bit for bit; checkpointing builds the
    index twice (forward, recomputation), the backward none."""
    from torch.utils.checkpoint import checkpoint

    _path(monkeypatch, keys=True)
    T, D, lp = 24, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float32, seed=95)
    idx, valid = _odd_table(T, lp, 3, seed=95)
    for G, forced in ((2, True), (2, False), (16, True)):
        qg = torch.randn(1, 1, T, G, D)
        args = (qg, k, v, idx, valid, lp, 0.25, forced)
        real = _skipping_kernels(torch.ops.nsa_triton.selected_fwd, *args)[0]
        meta = torch.ops.nsa_triton.selected_fwd(*(x.to("meta") for x in args[:5]), *args[5:])
        assert [(x.shape, x.dtype) for x in real] == [(x.shape, x.dtype) for x in meta], (G, forced)
    with monkeypatch.context() as patched:  # the fake asks the launch config as the op does (probes patch it)
        base = tsel._launch_config
        patched.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "fwd_keys": False})
        meta = torch.ops.nsa_triton.selected_fwd(
            *(x.to("meta") for x in (q, k, v, idx, valid)), lp, 0.25, True
        )
        assert [x.numel() for x in meta[2:]] == [0, 0, 0]

    def loss(q, k, v):
        out = tsel.selected_attention(q, k, v, idx, valid, sel_block=lp, scale=0.25, forced_blocks=True)
        return (out * dout).sum()

    def grads(fn):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        return torch.autograd.grad(fn(*leaves), leaves)

    want = grads(loss)
    torch._dynamo.reset()
    compiled = grads(torch.compile(loss, backend="aot_eager", fullgraph=True))
    ckpt = grads(lambda *a: checkpoint(loss, *a, use_reentrant=False))
    for got in (compiled, ckpt):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert _index_builds(lambda: grads(lambda *a: checkpoint(loss, *a, use_reentrant=False))) == 2


def test_dkdv_and_keys_kernels_are_one_walk():
    """The dK/dV kernel of the query-major paths and the key-major backward's keys kernel are one
    program, `_dkdv_walk`, with its constexpr WRITE_DQ off / on (the dQ partials' product and store
    are the only difference): each kernel is that one call, kept under its own name for the profiles
    (the GPU suite's families). Both uses' numerics: the tests above (keys) and bwd_keys off (dK/dV).
    The dK/dV kernel stops at WRITE_DQ (the dQ store's constexprs after it keep their defaults)."""
    import ast
    import inspect
    import textwrap

    params = list(inspect.signature(getattr(tkeys._dkdv_walk, "fn", tkeys._dkdv_walk)).parameters)
    at = params.index("WRITE_DQ")
    for kernel, write_dq in ((tsel._sel_bwd_dkdv_kernel, False), (tkeys._sel_bwd_keys_kernel, True)):
        fn = getattr(kernel, "fn", kernel)
        body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body
        assert len(body) == 1 and isinstance(body[0].value, ast.Call), fn.__name__
        call = body[0].value
        assert call.func.id == "_dkdv_walk" and ast.literal_eval(call.args[at]) is write_dq
        assert len(call.args) == (len(params) if write_dq else at + 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_query_major_path_at_g16_builds_its_own_index_and_matches_eager(dtype):
    """G 16 (the paper's group: query-major forward, forced dQ + token-tile dQ + the dK/dV walk without
    dQ partials), where the forward builds no index and the backward builds reverse_index itself:
    gradients against the eager op's autograd on a table with duplicates, invalid, negative and future
    entries and a token without any key (zero dQ there)."""
    T, D, lp = 33, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 16, D, dtype, seed=99)
    idx, valid = _odd_table(T, lp, 4, seed=99)
    _assert_grads_match_eager(q, k, v, dout, idx, valid, lp, dtype)


def test_query_major_path_at_g16_bf16_within_rounding_bounds(bf16_interpreter):
    """The G 16 path in bf16 as the GPU does it (conftest fixture): output and gradients within
    nsa.attention.gpusuite.bounds' rounding bounds; l' = 32 (two key chunks of the dK/dV walk)."""
    _assert_bf16_within_bounds(16, D=16, seed=98, table_seed=98)


def test_ops_pass_opcheck_and_a_wrong_index_is_refused():
    """torch.library.opcheck of the forward op with its index outputs (schema, autograd registration,
    fake tensors, aot dispatch with dynamic shapes) on the key-major path; the backward op refuses an
    index of the wrong shape with an error that names it, before any kernel runs."""
    T, D, lp = 24, 16, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float32, seed=97)
    idx, valid = top_blocks(
        torch.rand(1, 1, T, 3, generator=torch.Generator().manual_seed(97)), torch.arange(T), lp, 3
    )
    leaves = [x.requires_grad_() for x in (q, k, v)]
    torch.library.opcheck(torch.ops.nsa_triton.selected_fwd, (*leaves, idx, valid, lp, 0.25, True))
    out, lse, order, start, seg_end = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, 0.25, True)
    with pytest.raises(
        ValueError, match=r"reverse index of shapes \(71,\).*pass the forward's index or empty"
    ):
        torch.ops.nsa_triton.selected_bwd(
            dout, q, k, v, idx, valid, out, lse, order[:-1], start, seg_end, lp, 0.25, True
        )
