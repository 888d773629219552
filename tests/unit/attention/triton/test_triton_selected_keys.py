"""The key-major forward of the selected branch (nsa/attention/triton/selected_keys.py, `fwd_keys`)
under TRITON_INTERPRET=1 on CPU tensors.

Forward and gradients (through the unchanged backward) against the eager op in fp32 and fp16, bf16
(honest-bf16 fixture) within rounding bounds, on tables with duplicates, invalid, negative, missing
and future entries and a token without any key, G = 1, 2, 6, T not a multiple of l', and l' = 32
(two key chunks of the interpreter's 16 keys: rows of the second chunk see no key). The merge reads
only the partials the key-major kernel wrote (PO/PL filled with NaN beforehand), two runs are
bitwise equal, the index equals its aten reference, and the launches are constant in T.
NSAAttention (G = 6) against reference.py on this path.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules are imported

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention import selected as eager
from nsa.attention.selection import top_blocks
from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys as tkeys
from tests.fixtures.launch_spy import LaunchSpy
from tests.unit.attention.triton.test_triton_selected import assert_nsa_matches_reference

TOL = {torch.float32: 2e-5, torch.float16: 2e-3}


class _NotLaunched:
    """Stands in for a query-major forward kernel: the key-major path must not launch it."""

    def __getitem__(self, grid):
        raise AssertionError("the query-major forward ran where fwd_keys holds")


@pytest.fixture
def keys_only(monkeypatch):
    monkeypatch.setattr(tsel, "_sel_forced_fwd_kernel", _NotLaunched())
    monkeypatch.setattr(tsel, "_sel_fwd_tok_kernel", _NotLaunched())


def _inputs(T, G, D, dtype, seed, B=1, Hkv=1):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hkv, T, G, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, T, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, T, D, generator=g).to(dtype)
    return q, k, v


def _odd_table(B, Hkv, T, lp, n, seed):
    """top_blocks' table, then broken: duplicates, future blocks, negative and invalid entries, a
    token without any entry (token 3), a token whose only entries are invalid or in its future (9: blocks 2 and 3, l' >= 8)."""
    g = torch.Generator().manual_seed(seed + 1)
    idx, valid = top_blocks(torch.rand(B, Hkv, T, -(-T // lp), generator=g), torch.arange(T), lp, n)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.2, idx.roll(1, -1), idx)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.1, idx + 2, idx)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.05, -1, idx)
    valid = valid & (torch.rand(valid.shape, generator=g) < 0.85)
    valid[..., 3, :] = False
    m = idx.shape[-1]  # top_blocks lists min(n, blocks) entries
    idx[..., 9, :] = torch.tensor([2, 3, 0, 0, 0][:m])
    valid[..., 9, :] = torch.tensor([True, True, False, False, False][:m])
    return idx, valid


# (G, dtype, B, Hkv, T, D, l', n): T = 45 / 37 / 41 are multiples of no l'; l' = 32 runs two key
# chunks per block (the interpreter's key tile is 16); B*Hkv = 2 in one case. head_dim <= 64 runs the
# shipped fwd_forced_merge (the merging forced pass, the keys walk mask-free); head_dim 96 the masked
# walk over every pair and the separate merge, which ship past head_dim 64.
CASES = [
    (1, torch.float32, 1, 2, 37, 96, 16, 4),
    (2, torch.float16, 1, 1, 41, 32, 32, 5),
    (6, torch.float32, 1, 1, 45, 32, 8, 5),
    (6, torch.float16, 1, 1, 45, 64, 16, 4),
]


@pytest.mark.parametrize("G,dtype,B,Hkv,T,D,lp,n", CASES)
def test_key_major_forward_matches_eager(keys_only, monkeypatch, G, dtype, B, Hkv, T, D, lp, n):
    q, k, v = _inputs(T, G, D, dtype, seed=G + T, B=B, Hkv=Hkv)
    idx, valid = _odd_table(B, Hkv, T, lp, n, seed=G)
    scale = D**-0.5
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    # the keys walk's FREE and which kernel ends the forward: fwd_forced_merge at head_dim <= 64
    seen: dict = {"_sel_fwd_keys_kernel": [], "_sel_fwd_merge_kernel": [], "_sel_fwd_forced_merge_kernel": []}
    for name, got in seen.items():
        monkeypatch.setattr(
            tkeys, name, LaunchSpy(getattr(tkeys, name), got, "FREE" if "keys" in name else "G")
        )
    out = tsel.selected_attention(*leaves, idx, valid, sel_block=lp, scale=scale, forced_blocks=True)
    free = D <= 64
    assert list(seen.values()) == [[free], [] if free else [G], [G] if free else []], seen
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    want = eager.selected_attention(qf, kf, vf, idx, valid, sel_block=lp, scale=scale, chunk=7)
    tol = TOL[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)
    assert out[:, :, 3].abs().max() == 0 and out[:, :, 9].abs().max() == 0  # no key: zeros
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(6))
    got = torch.autograd.grad((out.float() * w).sum(), leaves)
    ref = torch.autograd.grad((want * w).sum(), (qf, kf, vf))
    for name, a, b in zip("qkv", got, ref):
        torch.testing.assert_close(
            a.float(), b, rtol=tol * 5, atol=tol * 5, msg=lambda m, n=name: f"d{n}: {m}"
        )


@pytest.mark.parametrize("G,lp", [(1, 16), (6, 32)])
def test_key_major_forward_bf16_within_rounding_bounds(keys_only, bf16_interpreter, G, lp):
    """bf16 as the GPU does it (conftest fixture): the partials are stored in bf16 (normalised, so
    their rounding is the output's), the merge sums them in fp32; output and gradients within the
    bounds of nsa.attention.gpusuite.bounds around the exact result."""
    from nsa.attention.gpusuite import bounds

    T, D, n = 45, 64, 4
    g = torch.Generator().manual_seed(50 + G)
    q, dout = (torch.randn(1, 1, T, G, D, generator=g).bfloat16() for _ in range(2))
    k, v = (torch.randn(1, 1, T, D, generator=g).bfloat16() for _ in range(2))
    idx, valid = top_blocks(torch.rand(1, 1, T, -(-T // lp), generator=g), torch.arange(T), lp, n)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = tsel.selected_attention(*leaves, idx, valid, sel_block=lp, scale=D**-0.5, forced_blocks=True)
    got = {"out": out, **dict(zip(("dq", "dk", "dv"), torch.autograd.grad(out, leaves, dout)))}
    vis = bounds.selected_visible(idx, valid, T, lp)
    for name, want in bounds.attention_bounds(q, k, v, dout, vis, D**-0.5, torch.bfloat16).items():
        res = bounds.check(got[name], want)
        assert got[name].dtype == torch.bfloat16 and res["within_bound"], f"{name}: {res}"


def test_merge_reads_only_written_partials_and_runs_are_bitwise_equal(monkeypatch):
    """The launcher twice: out and lse bitwise equal. The kernels by hand with PO/PL full of NaN: the
    merge skips every entry that adds no keys by itself (same out/lse, bit for bit), and a row of
    the second key chunk that sees no key (t < j*l' + 16) has partial lse -inf. The masked walk over
    every pair and the separate merge: `_config`'s fwd_forced_merge off (its own test file has it on)."""
    shipped = tsel._config
    monkeypatch.setattr(tsel, "_config", lambda *a, **kw: {**shipped(*a, **kw), "fwd_forced_merge": False})
    G, T, D, lp = 2, 70, 16, 32
    q, k, v = _inputs(T, G, D, torch.float32, seed=3)
    idx, valid = _odd_table(1, 1, T, lp, 3, seed=4)
    n = idx.shape[-1]
    runs = [torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, 0.3, True)[:2] for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    cfg = tsel._launch_config(G, D, lp)
    assert cfg["fwd_keys"]
    valid8 = valid.view(torch.int8)
    order, start, seg_end, S, nseg = tkeys.reverse_index(idx, valid8, lp, cfg["seg_target"])  # the launcher's
    nb = -(-lp // cfg["BN"])
    assert nb == 2
    po = torch.full((nb, T * n, G, D), float("nan"))
    pl = torch.full((nb, T * n, G), float("nan"))
    ns = -(-T // lp)
    tkeys._sel_fwd_keys_kernel[(nseg, nb)](
        q, k, v, order, start, start, seg_end, po, pl, T, ns, n, ns, ns.bit_length() + 1, S, 0.3,
        G=G, D=D, LP=lp, DP=cfg["DP"], BN=cfg["BN"], BR=cfg["BR_f"], PREC="ieee", DIV32=cfg["keys_div32"],
    )  # fmt: skip
    out, lse = torch.empty_like(q), torch.empty(1, 1, T, G)
    tkeys._sel_fwd_merge_kernel[(-(-T // cfg["TM"]), 1)](
        po, pl, idx, valid8, out, lse, T, n, nb, G=G, D=D, LP=lp, TM=cfg["TM"], RM=cfg["RM"], DP=cfg["DP"]
    )  # fmt: skip
    assert torch.equal(out, runs[0][0]) and torch.equal(lse, runs[0][1])
    assert pl.isnan().any()  # entries without keys were never written
    t = torch.arange(T).view(T, 1)
    early = (valid & (idx >= 0) & (idx * lp <= t) & (t < idx * lp + 16)).view(-1)
    assert early.any() and (pl[1, early] == float("-inf")).all()
    assert torch.isfinite(pl[0, early]).all()


def _aten_reverse_index(idx, valid, lp, S):
    """The index as selected.py built it with ~16 aten ops before reverse_index became the only
    builder (int64 keys, stable sort, searchsorted, cumsum): the reference it must equal bit for bit."""
    B, Hkv, T, n = idx.shape
    ns = -(-T // lp)
    nblk = B * Hkv * ns
    t = torch.arange(T).view(T, 1)
    keep = valid & (idx >= 0) & (idx * lp <= t)
    key = torch.where(keep, idx + torch.arange(0, nblk, ns).view(B, Hkv, 1, 1), nblk).view(-1)
    skey, order = torch.sort(key, stable=True)
    start = torch.searchsorted(skey, torch.arange(nblk + 1))
    seg_end = torch.cumsum(torch.div(start[1:] - start[:-1] + (S - 1), S, rounding_mode="floor"), 0)
    return order, start, seg_end, nblk + -(-(B * Hkv * T * n) // S)


def test_reverse_index_equals_the_aten_reference():
    """selected_keys.reverse_index (2 kernels + sort + searchsorted), the branch's only index, is the
    aten-op formula bit for bit: order, block starts, segment ends and the static segment bound,
    blocks of more than S pairs, dtypes int64."""
    B, Hkv, T, lp, n = 2, 2, 150, 16, 5
    g = torch.Generator().manual_seed(11)
    idx = torch.randint(-1, 12, (B, Hkv, T, n), generator=g)
    valid = torch.rand(B, Hkv, T, n, generator=g) < 0.8
    idx[..., 0], valid[..., 0] = 0, True
    got = tkeys.reverse_index(idx, valid.view(torch.int8), lp)
    S = got[3]
    order, start, seg_end, nseg = _aten_reverse_index(idx, valid, lp, S)
    assert (start[1:] - start[:-1]).max() > S
    assert torch.equal(got[0], order) and torch.equal(got[1], start) and torch.equal(got[2], seg_end)
    assert got[4] == nseg and {x.dtype for x in got[:3]} == {torch.int64}


def _launches():
    """bench/attention_launches.py, loaded by path as test_launches.py does."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[4] / "bench" / "attention_launches.py"
    spec = importlib.util.spec_from_file_location("attention_launches", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _count_forward(T: int, G: int, D: int = 64, lp: int = 64):
    launches = _launches()
    q, k, v = _inputs(T, G, D, torch.float32, seed=0)
    g = torch.Generator().manual_seed(1)
    idx, valid = top_blocks(torch.rand(1, 1, T, -(-T // lp), generator=g), torch.arange(T), lp, 16)
    counter = launches.LaunchCounter()
    with launches.no_triton_execution(counter), counter:
        torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, 0.125, True)
    return counter


def test_forward_launches_are_constant_in_T_and_sync_free():
    """The key-major forward: 4 kernels (the index, its segments, the keys walk, the merging forced
    pass) + 3 aten ops (sort, arange, searchsorted) at every T, no sync (kernels counted and skipped, as bench/attention_launches.py does); G = 16 keeps the 2
    query-major kernels."""
    rows = [_count_forward(T, 6) for T in (200, 3000)]
    for c in rows:
        assert dict(c.triton) == {
            "_sel_fwd_index_kernel": 1, "_sel_fwd_segs_kernel": 1, "_sel_fwd_keys_kernel": 1,
            "_sel_fwd_forced_merge_kernel": 1,
        }  # fmt: skip
        assert c.aten == 3 and not c.syncs, (c.ops, c.syncs)
    wide = _count_forward(200, 16)
    assert dict(wide.triton) == {"_sel_forced_fwd_kernel": 1, "_sel_fwd_tok_kernel": 1} and wide.aten == 0


def test_config_switch_and_gpucheck_rows():
    """fwd_keys holds for G <= 8 (FSA's range) only; gpucheck compiles the key-major kernels exactly
    where they can run, with the launcher's constexprs."""
    from nsa.attention.triton.spec import GpuShape

    for G in (1, 2, 5, 6, 8, 16):
        for D in (64, 128):
            cfg = tsel._config(G, D, 64)
            assert cfg["fwd_keys"] == (G <= 8)
            assert cfg["RM"] >= cfg["TM"] * G and cfg["TM"] * G <= (64 if D <= 64 else 32)
            shape = GpuShape(
                "x", head_dim=D, group=G, block_len=32, block_stride=16, sel_block=64, n_sel=16, window=512
            )
            specs = {s.name: s for s in tsel.gpucheck_specs(shape, 90)}
            assert all((name in specs) == (G <= 8) for name in tkeys.KEY_MAJOR_FWD), G
            if G <= 8:
                assert specs["selected_fwd_keys"].constexprs["BR"] == cfg["BR_f"]
                assert specs["selected_fwd_merge"].constexprs["TM"] == cfg["TM"]
                # fwd_forced_merge at head_dim <= 64: its kernels and the masked walk's; none past it
                free = D <= 64
                assert cfg["fwd_forced_merge"] is free
                assert specs["selected_fwd_keys"].constexprs["FREE"] is free
                assert specs["selected_fwd_segs"].constexprs["FWD"] is free
                assert specs["selected_fwd_index"].constexprs["FWD"] is free
                assert ("selected_fwd_forced_merge" in specs) is ("selected_fwd_keys_masked" in specs) is free
                if free:
                    assert specs["selected_fwd_forced_merge"].constexprs["BM"] == cfg["BM"]
                    assert specs["selected_fwd_keys_masked"].constexprs["FREE"] is False


def test_nsa_attention_on_the_key_major_forward_matches_reference(keys_only, monkeypatch):
    """NSAAttention (G = 6, forced_blocks=True) with its selected branch on the triton kernels, the
    key-major forward and the unchanged backward, equals the loop reference: output and gradients."""
    from nsa.attention import NSAAttention

    torch.manual_seed(1)
    attn = NSAAttention(24, 6, 1, 16, 8, 4, 16, 3, 16, rope_theta=500.0)
    assert_nsa_matches_reference(monkeypatch, attn, torch.randn(1, 37, 24, requires_grad=True))
