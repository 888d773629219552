"""The Triton selected-branch kernels (nsa/attention/triton/selected.py) under TRITON_INTERPRET=1 on CPU.

Forward and dq/dk/dv against the eager op (nsa.attention.selected) on tables from `top_blocks` and on
hand-made tables (invalid entries, duplicates, blocks after the query, a query without any entry), in
fp32 and fp16, plus one NSAAttention-level check against the loop reference. The forced-block split
(`forced_blocks=True`, selected_forced.py): its dense kernel's state against a float64 softmax, the
split exact on tables that break top_blocks' promise, and bf16 (honest-bf16 fixture) within rounding
bounds. The query-major token tiles (selected_query.py: TP tokens a program over the union of their
blocks) on tables where adjacent tokens share their blocks or none, and their key-step count
(`key_steps`). Shapes are tiny because the interpreter runs every program instance in Python.

Run: .venv/bin/pytest tests/unit/attention/triton/test_triton_selected.py
(Not test_selected.py: tests/unit has no __init__.py, so two test_selected modules would collide.)
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (see KERNELS)

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention import selected as eager
from nsa.attention.selection import top_blocks
from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys as tkeys
from nsa.attention.triton import selected_query as tsel_query


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


TOL = {torch.float32: 2e-5, torch.float16: 2e-3}


def _inputs(B, Hkv, T, G, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hkv, T, G, D, generator=g).to(dtype).requires_grad_()
    k = torch.randn(B, Hkv, T, D, generator=g).to(dtype).requires_grad_()
    v = torch.randn(B, Hkv, T, D, generator=g).to(dtype).requires_grad_()
    return q, k, v


def _table(B, Hkv, T, lp, n, seed=0):
    """A realistic table: top_blocks over random scores (forced blocks first, then by importance)."""
    g = torch.Generator().manual_seed(seed + 1)
    scores = torch.rand(B, Hkv, T, -(-T // lp), generator=g)
    return top_blocks(scores, torch.arange(T), lp, n)


def _compare(q, k, v, idx, valid, lp, forced):
    """Triton vs eager: forward and the three gradients, eager in float32 from the same inputs."""
    scale = 1.0 / q.shape[-1] ** 0.5
    out = tsel.selected_attention(q, k, v, idx, valid, sel_block=lp, scale=scale, forced_blocks=forced)
    assert out.dtype == q.dtype and out.shape == q.shape
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    want = eager.selected_attention(
        qf, kf, vf, idx, valid, sel_block=lp, scale=scale, chunk=7, forced_blocks=forced
    )
    tol = TOL[q.dtype]
    torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    got = torch.autograd.grad((out.float() * w).sum(), (q, k, v))
    ref = torch.autograd.grad((want * w).sum(), (qf, kf, vf))
    for name, a, b in zip("qkv", got, ref):
        assert a.dtype == q.dtype, name
        torch.testing.assert_close(
            a.float(), b, rtol=tol * 5, atol=tol * 5, msg=lambda m, n=name: f"d{n}: {m}"
        )
    return out


# (G, B, Hkv, T, D, l', n, dtype): every G of the issue; T = 1, T < l', odd T, several blocks; B = 2;
# head_dim 64 and 128; l' = 16, 32 and 64.
CASES = [
    (1, 2, 1, 37, 64, 16, 4, torch.float32),
    (2, 2, 1, 1, 64, 16, 4, torch.float16),
    (4, 1, 2, 11, 64, 16, 3, torch.float32),
    (6, 2, 1, 45, 64, 16, 3, torch.float16),
    (6, 1, 1, 70, 64, 32, 2, torch.float32),
    (8, 1, 1, 20, 128, 16, 2, torch.float32),
    (16, 1, 1, 19, 64, 16, 2, torch.float16),
    (6, 1, 1, 67, 64, 64, 2, torch.float16),  # the paper's l' = 64: four key steps per block here
]


@pytest.mark.parametrize("G,B,Hkv,T,D,lp,n,dtype", CASES)
def test_top_blocks_table_matches_eager(G, B, Hkv, T, D, lp, n, dtype):
    q, k, v = _inputs(B, Hkv, T, G, D, dtype)
    idx, valid = _table(B, Hkv, T, lp, n)
    _compare(q, k, v, idx, valid, lp, forced=True)


def test_hand_made_table_matches_eager():
    """Invalid entries, an entry listed twice (counts twice, as in eager), blocks after the query, no
    forced blocks, a query whose only entries are invalid or in its future (zeros, zero gradient)."""
    B, Hkv, T, G, D, lp = 1, 1, 40, 3, 64, 16
    q, k, v = _inputs(B, Hkv, T, G, D, torch.float32, seed=3)
    g = torch.Generator().manual_seed(7)
    idx = torch.randint(0, 3, (B, Hkv, T, 3), generator=g)
    valid = torch.rand(B, Hkv, T, 3, generator=g) < 0.7
    idx[0, 0, 5] = torch.tensor([0, 0, 2])  # block 0 twice, block 2 starts after t = 5
    valid[0, 0, 5] = True
    idx[0, 0, 9], valid[0, 0, 9] = torch.tensor([0, 1, 2]), torch.tensor([False, True, True])  # only future
    idx[0, 0, 33], valid[0, 0, 33] = torch.tensor([1, 1, 0]), False  # nothing valid
    out = _compare(q, k, v, idx, valid, lp, forced=False)
    assert out[0, 0, 9].abs().max() == 0 and out[0, 0, 33].abs().max() == 0


def _odd_table(B, Hkv, T, lp, n, seed):
    """top_blocks' table, then broken on purpose: forced blocks listed twice, dropped, made invalid,
    blocks after the query, negative entries; every kind of row the forced split must keep exact."""
    idx, valid = _table(B, Hkv, T, lp, n, seed)
    g = torch.Generator().manual_seed(seed + 2)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.2, idx.roll(1, -1), idx)  # duplicates
    idx = torch.where(
        torch.rand(idx.shape, generator=g) < 0.1, idx + 2, idx
    )  # the future, or a non-forced block
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.05, -1, idx)
    valid = valid & (torch.rand(valid.shape, generator=g) < 0.85)
    valid[..., 3, :] = False  # a token without any entry
    return idx, valid


@pytest.mark.parametrize("G,lp", [(1, 8), (6, 8), (16, 16)])
def test_forced_kernel_state_is_the_softmax_over_the_forced_entries(G, lp):
    """The dense kernel alone: its lse and normalized output over the row's forced entries (each
    weighted by its count: block 0, t // l', t // l' - 1) equal a float64 softmax with those weights.
    Row tiles of 32 rows straddle query blocks at every G here; l' = 8 < 16 keys per step mixes blocks."""
    from nsa.attention.triton import selected_forced as tf

    B, Hkv, T, D, n = 1, 2, 45, 32, 4
    q, k, v = (x.detach() for x in _inputs(B, Hkv, T, G, D, torch.float32, seed=G))
    idx, valid = _odd_table(B, Hkv, T, lp, n, seed=G)
    cfg = tsel._launch_config(G, D, lp)
    of = torch.empty(q.shape)
    lsef = torch.empty(q.shape[:4])
    scale = 0.3
    tf._sel_forced_fwd_kernel[(triton_cdiv(T * G, cfg["BM"]), B * Hkv)](
        q, k, v, idx, valid.view(torch.int8), of, lsef, T, idx.shape[-1], scale,
        G=G, D=D, LP=lp, DP=cfg["DP"], BM=cfg["BM"], BK=cfg["BK"], PREC="ieee",
    )  # fmt: skip
    t = torch.arange(T)
    jt, kb = (t // lp)[:, None], (t // lp)[None, :]  # query block [T, 1], key block [1, T]
    forced = (kb == jt) | (kb == jt - 1) | (kb == 0)
    hit = (idx[..., None] == kb) & valid[..., None] & (idx[..., None] >= 0)  # [B, Hkv, T, n, T]
    w = (hit.sum(-2) * (forced & (t[None, :] <= t[:, None]))).double()  # [B, Hkv, T, Tk]
    s = torch.einsum("bhtgd,bhkd->bhtgk", q.double(), k.double()) * scale + w.log()[:, :, :, None]
    lse = torch.logsumexp(s, -1)
    want = torch.einsum("bhtgk,bhkd->bhtgd", torch.softmax(s, -1).nan_to_num(), v.double())
    has = w.sum(-1) > 0
    assert has.any() and (~has).any()  # rows without a forced key are covered too
    torch.testing.assert_close(lsef.double() * math.log(2), lse, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        of.double(), torch.where(has[..., None, None], want, 0.0), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("G,dtype", [(2, torch.float32), (6, torch.float16)])
def test_forced_split_is_exact_for_any_table(G, dtype):
    """forced_blocks=True splits every row into its forced entries (dense kernels) and the rest
    (query-major gather); on a table that breaks top_blocks' promise (duplicated, missing, invalid
    forced entries) it still equals the eager op without the promise, forward and gradients."""
    B, Hkv, T, D, lp, n = 1, 1, 41, 32, 8, 5
    q, k, v = _inputs(B, Hkv, T, G, D, dtype, seed=10 + G)
    idx, valid = _odd_table(B, Hkv, T, lp, n, seed=G)
    scale = 1.0 / D**0.5
    out = tsel.selected_attention(q, k, v, idx, valid, sel_block=lp, scale=scale, forced_blocks=True)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    want = eager.selected_attention(qf, kf, vf, idx, valid, sel_block=lp, scale=scale, chunk=7)
    tol = TOL[dtype]
    torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(6))
    got = torch.autograd.grad((out.float() * w).sum(), (q, k, v))
    ref = torch.autograd.grad((want * w).sum(), (qf, kf, vf))
    for name, a, b in zip("qkv", got, ref):
        torch.testing.assert_close(
            a.float(), b, rtol=tol * 5, atol=tol * 5, msg=lambda m, n=name: f"d{n}: {m}"
        )


@pytest.mark.parametrize("G", [1, 6])
def test_forced_path_bf16_within_rounding_bounds(bf16_interpreter, G):
    """bf16 as the GPU does it (conftest fixture), forced_blocks=True on a top_blocks table: output and
    gradients within the rounding bounds of nsa.attention.gpusuite.bounds around the exact result."""
    from nsa.attention.gpusuite import bounds

    B, Hkv, T, D, lp, n = 1, 1, 45, 64, 16, 4
    g = torch.Generator().manual_seed(20 + G)
    q, dout = (torch.randn(B, Hkv, T, G, D, generator=g).bfloat16() for _ in range(2))
    k, v = (torch.randn(B, Hkv, T, D, generator=g).bfloat16() for _ in range(2))
    idx, valid = _table(B, Hkv, T, lp, n, seed=G)
    scale = D**-0.5
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = tsel.selected_attention(*leaves, idx, valid, sel_block=lp, scale=scale, forced_blocks=True)
    got = {"out": out, **dict(zip(("dq", "dk", "dv"), torch.autograd.grad(out, leaves, dout)))}
    vis = bounds.selected_visible(idx, valid, T, lp)
    for name, want in bounds.attention_bounds(q, k, v, dout, vis, scale, torch.bfloat16).items():
        res = bounds.check(got[name], want)
        assert got[name].dtype == torch.bfloat16 and res["within_bound"], f"{name}: {res}"


def _compare_any_table(q, k, v, idx, valid, lp):
    """forced_blocks=True against the eager op without the promise (exact for any table), forward and
    gradients."""
    scale = 1.0 / q.shape[-1] ** 0.5
    out = tsel.selected_attention(q, k, v, idx, valid, sel_block=lp, scale=scale, forced_blocks=True)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    want = eager.selected_attention(qf, kf, vf, idx, valid, sel_block=lp, scale=scale, chunk=7)
    tol = TOL[q.dtype]
    torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(6))
    got = torch.autograd.grad((out.float() * w).sum(), (q, k, v))
    ref = torch.autograd.grad((want * w).sum(), (qf, kf, vf))
    for name, a, b in zip("qkv", got, ref):
        torch.testing.assert_close(
            a.float(), b, rtol=tol * 5, atol=tol * 5, msg=lambda m, n=name: f"d{n}: {m}"
        )


def _adjacent_table(T, lp, n, shared, seed, odd=True):
    """[1, 1, T, n] table: the forced blocks (0, jt, jt - 1, jt - 1 invalid at jt = 0), then n - 3
    non-forced blocks (1 <= j <= jt - 2). shared: every token of a query block lists the same ones, so
    adjacent tokens share them all; else token t picks among blocks of its own parity, so tokens t and
    t + 1 share none. odd: then broken a little (block 0 twice at jt = 1, a slot listed twice,
    invalid entries, a future block); without it every listed block is listed once."""
    g = torch.Generator().manual_seed(seed)
    ns = -(-T // lp)
    per_block = torch.rand(ns, ns, generator=g)
    idx = torch.zeros(T, n, dtype=torch.int64)
    valid = torch.zeros(T, n, dtype=torch.bool)
    for t in range(T):
        jt = t // lp
        cand = torch.arange(1, max(1, jt - 1))
        if not shared:
            cand = cand[cand % 2 == t % 2]
        score = per_block[jt] if shared else torch.rand(ns, generator=g)
        pick = cand[score[cand].argsort(descending=True)][: n - 3]
        row = torch.tensor([0, jt, jt - 1, *pick.tolist()])
        idx[t, : len(row)] = row.clamp(min=0)
        valid[t, : len(row)] = True
        valid[t, 2] = jt >= (1 if odd else 2)
    if not odd:
        return idx[None, None], valid[None, None]
    idx[5::7, -1] = idx[5::7, -2]  # duplicates: counted twice
    valid[::11, 3] = False
    idx[9::13, 4] = idx[9::13, 1] + 1  # the future: no keys
    return idx[None, None], valid[None, None]


# (G, dtype, shared): TP = 16, 8, 2 with adjacent tokens sharing their blocks and not. G = 16 (TP = 1)
# runs the same kernels in CASES (forced_blocks=True on every top_blocks case).
TILE_CASES = [
    (1, torch.float32, True),
    (1, torch.float16, False),
    (2, torch.float16, True),
    (2, torch.float32, False),
    (6, torch.float32, True),
    (6, torch.float16, False),
]


@pytest.fixture
def query_major_fwd(monkeypatch):
    """The forced path's query-major forward (forced kernel + token tiles) even where the key-major
    one is the default (G <= 8): the GPU probe still compares the two, so both stay exact."""
    config = tsel._launch_config
    monkeypatch.setattr(
        tsel, "_launch_config", lambda G, D, LP, *a: {**config(G, D, LP, *a), "fwd_keys": False}
    )


@pytest.mark.parametrize("G,dtype,shared", TILE_CASES)
def test_token_tiles_match_eager(query_major_fwd, G, dtype, shared):
    """forced_blocks=True runs the query-major token tiles (TP = 16, 8, 2 tokens a program at G = 1, 2,
    6) over the union of their tokens' non-forced blocks: adjacent tokens listing the same blocks
    (each block loaded once for the tile) or disjoint ones (rows masked per token), duplicates, invalid
    and future entries; T = 37 is a multiple of neither l' nor TP. Forward and gradients against eager."""
    T, D, lp, n = 37, 32, 4, 6  # l' = 4: up to 7 non-forced candidates per token at T = 37
    q, k, v = _inputs(1, 1, T, G, D, dtype, seed=30 + G)
    idx, valid = _adjacent_table(T, lp, n, shared, seed=G)
    steps = tsel_query.key_steps(idx, valid, lp, G)
    assert steps["steps_tiles"] <= steps["steps_one_token"]
    assert steps["ratio"] < 0.6 or not shared
    _compare_any_table(q, k, v, idx, valid, lp)


def test_token_tiles_bf16_within_rounding_bounds(query_major_fwd, bf16_interpreter):
    """bf16 as the GPU does it (honest-bf16 fixture) through tiles of 8 tokens (G = 2) on a
    shared-blocks table (G = 1 and 6 run the tiles in test_forced_path_bf16_within_rounding_bounds)."""
    from nsa.attention.gpusuite import bounds

    G, T, D, lp, n = 2, 45, 64, 8, 6
    g = torch.Generator().manual_seed(40 + G)
    q, dout = (torch.randn(1, 1, T, G, D, generator=g).bfloat16() for _ in range(2))
    k, v = (torch.randn(1, 1, T, D, generator=g).bfloat16() for _ in range(2))
    idx, valid = _adjacent_table(T, lp, n, True, seed=G, odd=False)  # the bounds see a block once
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = tsel.selected_attention(*leaves, idx, valid, sel_block=lp, scale=D**-0.5, forced_blocks=True)
    got = {"out": out, **dict(zip(("dq", "dk", "dv"), torch.autograd.grad(out, leaves, dout)))}
    vis = bounds.selected_visible(idx, valid, T, lp)
    for name, want in bounds.attention_bounds(q, k, v, dout, vis, D**-0.5, torch.bfloat16).items():
        res = bounds.check(got[name], want)
        assert got[name].dtype == torch.bfloat16 and res["within_bound"], f"{name}: {res}"


def test_key_steps_count_the_union_of_each_tile():
    """key_steps' torch count equals a plain set count: per tile of TP tokens, the distinct blocks
    among entries that are valid, non-forced and hold keys (1 <= j <= t // l' - 2)."""
    T, lp, n, G = 150, 8, 7, 6
    g = torch.Generator().manual_seed(12)
    idx = torch.randint(-1, 20, (1, 2, T, n), generator=g)
    valid = torch.rand(1, 2, T, n, generator=g) < 0.8
    got = tsel_query.key_steps(idx, valid, lp, G, key_tile=4)  # 2 steps of 4 keys per block of 8
    tp = tsel_query.tokens_per_program(G)
    ok = [
        [
            (t, int(j))
            for t in range(T)
            for j, val in zip(idx[0, h, t], valid[0, h, t])
            if val and 1 <= j <= t // lp - 2
        ]
        for h in range(2)
    ]
    assert got["steps_one_token"] == 2 * sum(len(o) for o in ok)
    assert got["steps_tiles"] == 2 * sum(
        len({j for t, j in o if t // tp == p}) for o in ok for p in range(-(-T // tp))
    )
    assert (tp, got["programs_tiles"], got["programs_one_token"]) == (2, 2 * 75, 2 * T)


def test_token_tiles_take_the_key_steps_key_steps_counts(monkeypatch):
    """key_steps counts what the kernels do: the token-tile forward runs 2 dot products per key step
    and the dQ 3, counted in the interpreter on a random table (duplicates, invalid and negative
    entries; l' = 32 is 2 steps of the interpreter's 16 keys)."""
    from triton.runtime import interpreter

    dots = []
    create_dot = interpreter.InterpreterBuilder.create_dot

    def counting_dot(self, *args):
        dots.append(1)
        return create_dot(self, *args)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", counting_dot)
    G, T, D, lp, n = 2, 203, 16, 32, 6
    g = torch.Generator().manual_seed(13)
    q, k, v = (x.detach() for x in _inputs(1, 1, T, G, D, torch.float32, seed=13))
    idx = torch.randint(-1, T // lp + 1, (1, 1, T, n), generator=g)
    valid = (torch.rand(1, 1, T, n, generator=g) < 0.8).view(torch.int8)
    cfg = tsel._launch_config(G, D, lp)
    want = tsel_query.key_steps(idx, valid.bool(), lp, G, key_tile=cfg["BK"])["steps_tiles"]
    rows = torch.zeros(1, 1, T, G)
    grid = (triton_cdiv(T, cfg["TP"]), 1)
    consts = dict(
        G=G, D=D, LP=lp, TP=cfg["TP"], RP=cfg["RP"], NKP=16, DP=cfg["DP"], BK=cfg["BK"], PREC="ieee"
    )
    tsel_query._sel_fwd_tok_kernel[grid](
        q, k, v, idx, valid, torch.empty_like(q), rows.clone(), torch.zeros_like(q), rows.clone(), T, n, 0.25,
        **consts,
    )  # fmt: skip
    assert want > 0 and len(dots) == 2 * want
    dots.clear()
    tsel_query._sel_bwd_dq_tok_kernel[grid](
        q, k, v, idx, valid, q, rows.clone(), rows.clone(), torch.empty_like(q), torch.zeros_like(q), T, n, 0.25,
        **consts,
    )  # fmt: skip
    assert len(dots) == 3 * want


def test_token_tiles_never_take_more_key_steps_and_share_adjacent_blocks():
    """On top_blocks tables over random scores the tiles take at most the one-token steps (each block
    of the union is some entry's); when every token of a query block selects the same blocks (scores
    constant over a query block), a tile of TP tokens takes exactly 1/TP of them."""
    T, lp, n = 4096, 64, 16  # 64 blocks: a token chooses 13 of up to 61 non-forced ones
    g = torch.Generator().manual_seed(4)
    rand = top_blocks(torch.rand(1, 2, T, T // lp, generator=g), torch.arange(T), lp, n)
    per_query_block = torch.rand(1, 2, T // lp, 1, T // lp, generator=g)
    same = top_blocks(per_query_block.expand(-1, -1, -1, lp, -1).reshape(1, 2, T, -1), torch.arange(T), lp, n)
    for G, tp in ((1, 16), (2, 8), (6, 2), (16, 1)):
        assert tsel_query.tokens_per_program(G) == tp
        r, s = (tsel_query.key_steps(*tab, lp, G) for tab in (rand, same))
        assert r["steps_tiles"] <= r["steps_one_token"] and s["steps_one_token"] > 0, G
        assert s["steps_tiles"] * tp == s["steps_one_token"], G
        assert r["ratio"] > s["ratio"] or tp == 1, G


def test_reverse_index_covers_every_pair_once():
    """The branch's one index (selected_keys.reverse_index, which the key-major forward builds and
    the backward reuses or builds) lists every table entry that adds keys exactly once, under its own
    block, in table order within a block (stable); the segment ends are the cumulative ceil(count/S)
    and the static segment bound holds (blocks with more than S pairs are split)."""
    B, Hkv, T, lp, n = 1, 3, 150, 16, 5
    g = torch.Generator().manual_seed(11)
    idx = torch.randint(-1, 11, (B, Hkv, T, n), generator=g)
    valid = torch.rand(B, Hkv, T, n, generator=g) < 0.8
    idx[..., 0], valid[..., 0] = 0, True  # every query lists block 0: more than S pairs
    order, start, seg_end, S, nseg = tkeys.reverse_index(idx, valid.view(torch.int8), lp)
    ns = -(-T // lp)
    assert tkeys._seg_pairs(T) == S and nseg == B * Hkv * ns + -(-(B * Hkv * T * n) // S)
    assert int(seg_end[-1]) <= nseg and (start[1:] - start[:-1]).max() > S
    counts = start[1:] - start[:-1]
    assert torch.equal(seg_end, torch.cumsum(-(-counts // S), 0))
    assert all(torch.all(order[start[b] : start[b + 1]].diff() > 0) for b in range(B * Hkv * ns))
    got = []
    for blk in range(B * Hkv * ns):
        bh, j = divmod(blk, ns)
        for o in order[start[blk] : start[blk + 1]].tolist():
            h, rest = divmod(o, T * n)
            t, slot = divmod(rest, n)
            assert h == bh and int(idx[0, h, t, slot]) == j
            got.append((h, t, slot))
    want = [
        (h, t, i)
        for h in range(Hkv)
        for t in range(T)
        for i in range(n)
        if valid[0, h, t, i] and 0 <= idx[0, h, t, i] <= t // lp
    ]
    assert sorted(got) == want


def test_nsa_attention_with_triton_selected_matches_reference(monkeypatch):
    """NSAAttention with its selected branch swapped for the Triton kernels equals the loop reference
    (the real kernels replace the eager function; the backend dispatch is not on this branch)."""
    torch.manual_seed(0)
    assert_nsa_matches_reference(
        monkeypatch, NSAAttention_small(), torch.randn(2, 37, 24, requires_grad=True)
    )


def assert_nsa_matches_reference(monkeypatch, attn, x) -> None:
    """`attn` (an NSAAttention) on `x` with its selected branch swapped for the Triton kernels (the
    eager backend's ops with `selected` replaced, on x's device) equals the loop reference: the
    output, and the gradients of x and of the kv projection; the Triton op ran, forward and backward."""
    from nsa.attention import nsa as nsa_mod
    from nsa.attention.reference import nsa_reference

    want = nsa_reference(attn, x)
    calls = []

    def selected(*args, **kwargs):
        calls.append(kwargs.get("chunk"))
        return tsel.selected_attention(*args, **kwargs)

    ops = nsa_mod._EAGER._replace(selected=selected)
    monkeypatch.setitem(attn._dispatch, x.device.type, ops)
    got = attn(x)
    assert calls == [None]  # the Triton kernels took the branch (chunk: the eager op's row limit)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    gx, gw = torch.autograd.grad(got.square().sum(), (x, attn.wkv.weight))
    rx, rw = torch.autograd.grad(want.square().sum(), (x, attn.wkv.weight))
    torch.testing.assert_close(gx, rx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gw, rw, rtol=1e-4, atol=1e-5)


def NSAAttention_small():
    from nsa.attention import NSAAttention

    attn = NSAAttention(24, 6, 1, 16, 8, 4, 16, 3, 16, rope_theta=500.0)
    with torch.no_grad():
        for p in attn.parameters():
            p.mul_(2.0)
    return attn


def test_gpucheck_specs_name_every_argument():
    """Each spec's signature lists exactly the kernel's parameters, constexprs typed "constexpr"."""
    import inspect

    from nsa.attention.triton.spec import GpuShape

    shape = GpuShape(
        "m7c", head_dim=64, group=6, block_len=32, block_stride=16, sel_block=64, n_sel=16, window=512
    )
    specs = tsel.gpucheck_specs(shape, 80)
    assert [s.name for s in specs] == [
        "selected_forced_fwd",
        "selected_fwd",
        "selected_fwd_any",
        "selected_fwd_index",  # G = 6: the key-major forward (fwd_keys, test_triton_selected_keys.py)
        "selected_fwd_segs",
        "selected_fwd_keys",
        "selected_fwd_forced_merge",  # fwd_forced_merge: the merging forced pass ends the forward
        "selected_fwd_keys_masked",  # its probe variant: the masked walk over every pair,
        "selected_fwd_index_all",  # the sort keys and
        "selected_fwd_segs_all",  # the segments of every pair alone,
        "selected_fwd_merge",  # and the separate merge
        "selected_fwd_keys_omma",  # the keys forward at the other keys_fwd_mma (the probe's variant)
        "selected_fwd_merge_tiles",  # the merge at the other merge_tiles (the probe's variant)
        "selected_forced_dq",
        "selected_forced_dq_delta",  # handed the gate fold's delta (gated.FOLD_DELTA)
        "selected_bwd_dq",
        "selected_bwd_dq_any",
        "selected_bwd_dkdv",
        "selected_bwd_reduce",
        "selected_bwd_delta",  # G = 6 <= 8: the key-major backward's kernels too
        "selected_bwd_keys",
        "selected_bwd_dq_merge",
        "selected_bwd_keys_dqcvt",  # the keys kernel at the other keys_dq_mma (the probe's variant)
        "selected_bwd_keys_br32",  # sm_80's 32 rows without keys_rowlim, shipped before (the probe's variant)
        "selected_bwd_dq_merge_tiles",  # the dQ merge at the other merge_tiles (the probe's variant)
        "selected_bwd_keys_pdq32",  # bf16: the same two at pdq_bits 32 (the measured fp32 partials)
        "selected_bwd_dq_merge_pdq32",
        "selected_fwd_pipe",  # the token tiles' branch-free loop (tok_pipe, the probe's stages)
        "selected_bwd_dq_pipe",
    ]
    for s in specs:
        fn = getattr(s.fn, "fn", s.fn)
        assert list(s.signature) == list(inspect.signature(fn).parameters), s.name
        assert {k for k, t in s.signature.items() if t == "constexpr"} == set(s.constexprs), s.name


def test_meta_device_forward_and_backward_shapes():
    """The custom ops' fake kernels: shapes and dtypes on the meta device, no kernel runs."""
    q, k, v = (x.detach().to("meta").requires_grad_() for x in _inputs(2, 2, 50, 6, 64, torch.float16))
    idx, valid = (x.to("meta") for x in _table(2, 2, 50, 16, 3))
    out = tsel.selected_attention(q, k, v, idx, valid, sel_block=16, scale=0.125, chunk=64)
    assert out.shape == q.shape and out.dtype == torch.float16 and out.device.type == "meta"
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


def test_meta_device_with_forced_blocks():
    """The forced split's ops on the meta device (what NSAAttention runs): shapes, no kernel."""
    q, k, v = (x.detach().to("meta").requires_grad_() for x in _inputs(1, 2, 40, 6, 64, torch.bfloat16))
    idx, valid = (x.to("meta") for x in _table(1, 2, 40, 16, 4))
    out = tsel.selected_attention(q, k, v, idx, valid, sel_block=16, scale=0.125, forced_blocks=True)
    assert out.shape == q.shape and out.dtype == torch.bfloat16 and out.device.type == "meta"
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


def test_cpu_tensors_without_interpreter_are_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    q, k, v = _inputs(1, 1, 4, 2, 16, torch.float32)
    idx, valid = _table(1, 1, 4, 16, 2)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        tsel.selected_attention(q, k, v, idx, valid, sel_block=16, scale=0.25)
