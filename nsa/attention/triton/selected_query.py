"""Query-major kernels of NSA's selected branch (the forward and dQ that selected.py launches).

Owns two pairs of kernels and the count that sizes them:
- any table (`forced_blocks=False`): `_sel_fwd_kernel` / `_sel_bwd_dq_kernel`, one program per query
  token, its G heads as the rows of one tile, looping over the token's table (every entry);
- forced split (`forced_blocks=True`, after the dense kernels of selected_forced.py):
  `_sel_fwd_tok_kernel` / `_sel_bwd_dq_tok_kernel`, one program per TP consecutive tokens of one (batch,
  KV head), rows = TP*G (Q's rows t*G + g are contiguous), padded to 16. A program walks the union of
  its tokens' non-forced entries: each distinct block's K/V is loaded once for all TP tokens, and a
  row weights it by how many of its token's entries list it (log2 of the count added to the logits,
  -inf when none), so duplicates count twice and any table stays exact. PIPE 0, the loop every GPU
  run measured, guards a block's K/V loads with `if take:` (not pipelined); PIPE 1 / 2 (selected.py
  `_config` "tok_pipe": 2 ships at G > 8 on sm_90, bench/gather_proxy.py) run it without that
  branch, every slot a masked step or the union's blocks ranked before the loop, bitwise the same
  results, so triton can pipeline the loads;
- `tokens_per_program` (TP) and `key_steps`, the count in torch of the key steps both layouts take
  for a table (what the cost model and the tests use to show the tiles never take more).
None of them syncs with the device or loops in Python over anything that grows with T.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from nsa.attention.triton import next_pow2
from nsa.attention.triton.selected_forced import online_softmax_step

# As in selected.py: tl.reduce with triton's own combine functions (cheaper under the interpreter).
_max_combine = tl.standard._elementwise_max
_sum_combine = tl.standard._sum_combine
_min_combine = tl.standard._elementwise_min

TILE_ROWS = 16  # tl.dot's minimum tile: the rows of every query-major program


@triton.jit
def _sel_fwd_kernel(
    Q, K, V, IDX, VALID, OUT, LSE,
    T, NK, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    GP: tl.constexpr, DP: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    # One program: query token t of one (batch, KV head); rows = its G heads (padded to GP).
    t = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    # int64 only in the per-(batch, KV head) base pointers; offsets inside one head are int32 (small
    # offset tensors keep the register count down).
    g = tl.arange(0, GP)
    d = tl.arange(0, DP)
    gm, dm = g < G, d < D
    qoff = (t * G + g)[:, None] * D + d[None, :]
    qmask = gm[:, None] & dm[None, :]
    q = tl.load(Q + bh * T * G * D + qoff, mask=qmask, other=0.0)
    K += bh * T * D
    V += bh * T * D
    IDX += (bh * T + t) * NK
    VALID += (bh * T + t) * NK
    qk_scale = sm_scale * 1.4426950408889634  # base-2 softmax
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, DP], tl.float32)
    kk = tl.arange(0, BK)
    for i in range(0, NK):
        j = tl.load(IDX + i)
        ok = (tl.load(VALID + i) != 0) & (j >= 0)
        # Keys after t are masked; a block starting after t (or an invalid entry) adds nothing.
        hi = tl.where(ok, tl.minimum(LP, t - j * LP + 1), 0).to(tl.int32)
        start = (j * LP).to(tl.int32)  # used only when hi > 0, i.e. start <= t
        for c in range(0, hi, BK):
            km = (c + kk) < hi
            koff = (start + c + kk)[:, None] * D + d[None, :]
            k = tl.load(K + koff, mask=km[:, None] & dm[None, :], other=0.0)
            v = tl.load(V + koff, mask=km[:, None] & dm[None, :], other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
            s = tl.where(km[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.reduce(s, 1, _max_combine))  # finite: each chunk has a key <= t
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.reduce(p, 1, _sum_combine)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
            m_i = m_new
    # A query with no valid key: zeros out, lse -inf (it then takes no part in the backward).
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(OUT + bh * T * G * D + qoff, out.to(OUT.dtype.element_ty), mask=qmask)
    tl.store(LSE + (bh * T + t) * G + g, lse, mask=gm)


@triton.jit
def _sel_bwd_dq_kernel(
    Q, K, V, IDX, VALID, OUT, DO, LSE, DELTA, DQ,
    T, NK, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    GP: tl.constexpr, DP: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    # Query-major like the forward; also stores delta for the key-major dK/dV kernel that runs next.
    t = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    g = tl.arange(0, GP)
    d = tl.arange(0, DP)
    gm, dm = g < G, d < D
    qoff = (t * G + g)[:, None] * D + d[None, :]
    qmask = gm[:, None] & dm[None, :]
    qbase = bh * T * G * D
    q = tl.load(Q + qbase + qoff, mask=qmask, other=0.0)
    do = tl.load(DO + qbase + qoff, mask=qmask, other=0.0)
    srow = (bh * T + t) * G + g
    o = tl.load(OUT + qbase + qoff, mask=qmask, other=0.0)
    delta = tl.reduce(do.to(tl.float32) * o.to(tl.float32), 1, _sum_combine)
    tl.store(DELTA + srow, delta, mask=gm)
    dq = tl.zeros([GP, DP], tl.float32)
    lse = tl.load(LSE + srow, mask=gm, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)  # such a row has no key: the loop adds nothing
    qk_scale = sm_scale * 1.4426950408889634
    K += bh * T * D
    V += bh * T * D
    IDX += (bh * T + t) * NK
    VALID += (bh * T + t) * NK
    kk = tl.arange(0, BK)
    for i in range(0, NK):
        j = tl.load(IDX + i)
        ok = (tl.load(VALID + i) != 0) & (j >= 0)
        hi = tl.where(ok, tl.minimum(LP, t - j * LP + 1), 0).to(tl.int32)
        start = (j * LP).to(tl.int32)
        for c in range(0, hi, BK):
            km = (c + kk) < hi
            koff = (start + c + kk)[:, None] * D + d[None, :]
            k = tl.load(K + koff, mask=km[:, None] & dm[None, :], other=0.0)
            v = tl.load(V + koff, mask=km[:, None] & dm[None, :], other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
            p = tl.where(km[None, :], tl.exp2(s - lse[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision=PREC)
            ds = p * (dp - delta[:, None])
            dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    tl.store(DQ + qbase + qoff, (dq * sm_scale).to(DQ.dtype.element_ty), mask=qmask)


# The token tiles. Rows r of a program are tokens t0 + r // G (heads r % G); a row is real when
# r < TP*G and its token < T. A non-forced entry of token t lists a block j with 1 <= j <= t//LP - 2
# (block 0, t//LP and t//LP - 1 are the forced kernel's; later blocks hold no key <= t): such a block
# lies wholly before t, so a processed block needs no causal mask, and each row's weight (0 when its
# token does not list the block) decides which rows see it. The table of the program's tokens is
# held once per row ([RP, NKP]: -1 where an entry adds nothing to that row), and the loop over the
# TP*NK entries processes entry e only at the block's first listing in the tile: the union. Their
# names start with _sel_fwd / _sel_bwd_dq, so profiles (and the GPU suite's kernel families, matched by
# prefix) count them where the one-token kernels were.


@triton.jit
def _tile_table(IDX, VALID, ebase, u_r, rm, t_r, NK, LP: tl.constexpr, NKP: tl.constexpr):
    # [RP, NKP]: the block each row's token lists in each slot where that entry is a non-forced,
    # valid one with keys; -1 elsewhere (padding rows and slots, tokens past T included).
    i = tl.arange(0, NKP)
    emask = rm[:, None] & (i < NK)[None, :]
    eoff = u_r[:, None] * NK + i[None, :]
    jm = tl.load(IDX + ebase + eoff, mask=emask, other=-1)
    vm = tl.load(VALID + ebase + eoff, mask=emask, other=0)
    ok = (vm != 0) & (jm >= 1) & (jm <= (t_r // LP)[:, None] - 2)
    return tl.where(ok, jm, -1).to(tl.int32)


@triton.jit
def _first_listing(IDX, ebase, e, jm, pos):
    """Entry e of the tile: its block j, the cells of `jm` listing j, and whether e is processed here,
    at its block's first listing in the tile (the smallest entry position holding j in `jm`, where an
    entry that adds nothing holds -1, hence j >= 1; an id that wraps never takes: its cell holds -1)."""
    j = tl.load(IDX + ebase + e).to(tl.int32)
    hit = jm == j
    take = (tl.reduce(tl.where(hit, pos, 1 << 30), None, _min_combine) == e) & (j >= 1)
    return j, hit, take


@triton.jit
def _listing_bias(hit):
    """Per row: log2 of how many times the row's token lists the block (-inf: not at all)."""
    cnt = tl.reduce(hit.to(tl.float32), 1, _sum_combine)
    return tl.where(cnt > 0, tl.log2(tl.maximum(cnt, 1.0)), float("-inf"))


@triton.jit
def _tile_union(IDX, VALID, ebase, t0, T, NK, LP: tl.constexpr, TP: tl.constexpr, NKP: tl.constexpr):
    """The tile's entries as one vector in entry order (token, slot): the block of each entry that adds
    keys (-1 elsewhere, as `_tile_table`), which are first listings of their block in the tile, each
    first listing's rank among them, and their count: the union's blocks in the branchy loop's order.
    [TP*NKP]^2 compares: for small tiles (selected.py `_pipe_mode` takes it at TP*NKP <= 64)."""
    e = tl.arange(0, TP * NKP)
    u = e // NKP
    i = e % NKP
    t = t0 + u
    em = (i < NK) & (t < T)
    jv = tl.load(IDX + ebase + u * NK + i, mask=em, other=-1)
    vv = tl.load(VALID + ebase + u * NK + i, mask=em, other=0)
    jv = tl.where((vv != 0) & (jv >= 1) & (jv <= t // LP - 2), jv, -1).to(tl.int32)
    earlier = (jv[:, None] == jv[None, :]) & (e[None, :] < e[:, None])
    dup = tl.reduce(earlier.to(tl.int32), 1, _max_combine)
    first = tl.where(dup == 0, jv >= 1, False)
    rank = tl.cumsum(first.to(tl.int32), 0) - 1
    return jv, first, rank, tl.reduce(first.to(tl.int32), 0, _sum_combine)


@triton.jit
def _step_entry(IDX, ebase, e, jm, pos, jv, first, rank, PIPE: tl.constexpr):
    """Step e of the branch-free loop: its block j, the cells of `jm` listing j and whether the step
    adds keys. PIPE 1: e is the tile's e-th entry (`_first_listing`); PIPE 2: the e-th block of the
    tile's union (`_tile_union`), always taken."""
    if PIPE == 2:
        j = tl.reduce(tl.where(first & (rank == e), jv, 0), 0, _sum_combine)
        return j, jm == j, j >= 1
    else:
        return _first_listing(IDX, ebase, e, jm, pos)


@triton.jit
def _pipe_plan(IDX, VALID, ebase, t0, T, NK, pos, LP: tl.constexpr, TP: tl.constexpr, NKP: tl.constexpr,
               BK: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """The branch-free loop's plan: (jv, first, rank) for `_step_entry` and its number of steps, one a
    key chunk of each union block (PIPE 2) or of each tile entry (PIPE 1; jv, first, rank unused)."""
    if PIPE == 2:
        jv, first, rank, n_e = _tile_union(IDX, VALID, ebase, t0, T, NK, LP, TP, NKP)
    else:
        jv, first, rank, n_e = pos, pos, pos, tl.minimum(TP, T - t0) * NK
    return jv, first, rank, n_e * ((LP + BK - 1) // BK)


@triton.jit
def _pipe_step(K, V, IDX, ebase, st, jm, pos, jv, first, rank, kk, d, dm, D: tl.constexpr, LP: tl.constexpr,
               BK: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """Step st of the branch-free loop: its entry's key chunk K/V (loaded only where the entry is
    taken), the chunk's key mask (False where not taken) and the rows' listing bias."""
    e = st // ((LP + BK - 1) // BK)
    c = st % ((LP + BK - 1) // BK) * BK
    j, hit, take = _step_entry(IDX, ebase, e, jm, pos, jv, first, rank, PIPE)
    start = (j * LP).to(tl.int32)  # dereferenced only where taken
    # tl.where, not `dm & take`: the interpreter's load refuses a mask from a scalar `&`.
    k, v, kmc = _block_step(K, V, start, c, kk, d, tl.where(take, dm, False), D, LP)
    return k, v, tl.where(take, kmc, False), _listing_bias(hit)


@triton.jit
def _block_step(K, V, start, c, kk, d, dm, D: tl.constexpr, LP: tl.constexpr):
    """Keys [start + c, start + c + BK) of one block, K and V, with the mask of those inside it (BK > LP
    only for the tests' tiny blocks)."""
    kmc = (c + kk) < LP
    koff = (start + c + kk)[:, None] * D + d[None, :]
    k = tl.load(K + koff, mask=kmc[:, None] & dm[None, :], other=0.0)
    v = tl.load(V + koff, mask=kmc[:, None] & dm[None, :], other=0.0)
    return k, v, kmc


@triton.jit
def _sel_fwd_tok_kernel(
    Q, K, V, IDX, VALID, OUT, LSE, OF, LSEF,
    T, NK, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, TP: tl.constexpr, RP: tl.constexpr,
    NKP: tl.constexpr, DP: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, PIPE: tl.constexpr = 0,
):  # fmt: skip
    # One program: tokens [t0, t0 + TP) of one (batch, KV head). Starts from the forced kernel's
    # softmax state (OF: normalized output, LSEF: base-2 lse) and adds the union of the non-forced
    # blocks its tokens list.
    t0 = tl.program_id(0) * TP
    bh = tl.program_id(1).to(tl.int64)
    r = tl.arange(0, RP)
    d = tl.arange(0, DP)
    dm = d < D
    u_r = r // G
    t_r = t0 + u_r
    rm = (r < TP * G) & (t_r < T)
    qoff = (t0 * G + r)[:, None] * D + d[None, :]
    qmask = rm[:, None] & dm[None, :]
    q = tl.load(Q + bh * T * G * D + qoff, mask=qmask, other=0.0)
    K += bh * T * D
    V += bh * T * D
    ebase = (bh * T + t0) * NK  # the TP tokens' entries are contiguous in the [BH, T, NK] table
    jm = _tile_table(IDX, VALID, ebase, u_r, rm, t_r, NK, LP, NKP)
    qk_scale = sm_scale * 1.4426950408889634  # base-2 softmax
    # (m, l, acc) = (lse, 1, o) is the forced part's exact state; l = 0 where it had no key.
    m_i = tl.load(LSEF + bh * T * G + t0 * G + r, mask=rm, other=float("-inf"))
    l_i = tl.where(m_i > float("-inf"), 1.0, 0.0)
    acc = tl.load(OF + bh * T * G * D + qoff, mask=qmask, other=0.0)
    kk = tl.arange(0, BK)
    pos = u_r[:, None] * NK + tl.arange(0, NKP)[None, :]  # each cell's entry position in the tile
    if PIPE:
        # Branch-free (tok_pipe): with no data-dependent branch in the loop triton's software
        # pipeliner can issue the next steps' K/V loads (cp.async) while this one computes. PIPE 1:
        # every (entry, key chunk) is a step; a step whose entry is not taken loads nothing (masked)
        # and its logits are all -inf, which leaves (m, l, acc) as they were (online_softmax_step:
        # alpha = 1, p = 0). PIPE 2: a step per (block of the tile's union, key chunk), in the same
        # order (first listings by entry position), so no step is wasted.
        jv, first, rank, n_st = _pipe_plan(IDX, VALID, ebase, t0, T, NK, pos, LP, TP, NKP, BK, PIPE)
        for st in range(0, n_st):
            k, v, kmc, bias = _pipe_step(
                K, V, IDX, ebase, st, jm, pos, jv, first, rank, kk, d, dm, D, LP, BK, PIPE
            )
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale + bias[:, None]
            s = tl.where(kmc[None, :], s, float("-inf"))
            m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc, PREC)
    else:
        for e in range(0, tl.minimum(TP, T - t0) * NK):
            j, hit, take = _first_listing(IDX, ebase, e, jm, pos)
            if take:
                bias = _listing_bias(hit)
                start = (j * LP).to(tl.int32)  # int32 offsets inside one head, as everywhere
                for c in range(0, LP, BK):
                    k, v, kmc = _block_step(K, V, start, c, kk, d, dm, D, LP)
                    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale + bias[:, None]
                    s = tl.where(kmc[None, :], s, float("-inf"))
                    m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc, PREC)
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(OUT + bh * T * G * D + qoff, out.to(OUT.dtype.element_ty), mask=qmask)
    tl.store(LSE + bh * T * G + t0 * G + r, lse, mask=rm)


@triton.jit
def _sel_bwd_dq_tok_kernel(
    Q, K, V, IDX, VALID, DO, LSE, DELTA, DQ, DQF,
    T, NK, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, TP: tl.constexpr, RP: tl.constexpr,
    NKP: tl.constexpr, DP: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, PIPE: tl.constexpr = 0,
):  # fmt: skip
    # The forward's tiling. The forced dQ kernel ran first: it stored delta and DQF (the forced
    # entries' part of dQ in fp32, unscaled); this adds the union's part and stores dQ.
    t0 = tl.program_id(0) * TP
    bh = tl.program_id(1).to(tl.int64)
    r = tl.arange(0, RP)
    d = tl.arange(0, DP)
    dm = d < D
    u_r = r // G
    t_r = t0 + u_r
    rm = (r < TP * G) & (t_r < T)
    qoff = (t0 * G + r)[:, None] * D + d[None, :]
    qmask = rm[:, None] & dm[None, :]
    qbase = bh * T * G * D
    q = tl.load(Q + qbase + qoff, mask=qmask, other=0.0)
    do = tl.load(DO + qbase + qoff, mask=qmask, other=0.0)
    srow = bh * T * G + t0 * G + r
    delta = tl.load(DELTA + srow, mask=rm, other=0.0)
    dq = tl.load(DQF + qbase + qoff, mask=qmask, other=0.0)
    lse = tl.load(LSE + srow, mask=rm, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)  # such a row has no key: every weight is -inf
    K += bh * T * D
    V += bh * T * D
    ebase = (bh * T + t0) * NK
    jm = _tile_table(IDX, VALID, ebase, u_r, rm, t_r, NK, LP, NKP)
    qk_scale = sm_scale * 1.4426950408889634
    kk = tl.arange(0, BK)
    pos = u_r[:, None] * NK + tl.arange(0, NKP)[None, :]  # each cell's entry position in the tile
    if PIPE:
        # Branch-free as in the forward (PIPE 1 or 2): a step not taken loads zeros and its p is 0,
        # so it adds dot(0, 0) = 0 to dq.
        jv, first, rank, n_st = _pipe_plan(IDX, VALID, ebase, t0, T, NK, pos, LP, TP, NKP, BK, PIPE)
        for st in range(0, n_st):
            k, v, kmc, bias = _pipe_step(
                K, V, IDX, ebase, st, jm, pos, jv, first, rank, kk, d, dm, D, LP, BK, PIPE
            )
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
            p = tl.where(kmc[None, :], tl.exp2(s + bias[:, None] - lse[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision=PREC)
            ds = p * (dp - delta[:, None])
            dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    else:
        for e in range(0, tl.minimum(TP, T - t0) * NK):
            j, hit, take = _first_listing(IDX, ebase, e, jm, pos)
            if take:
                bias = _listing_bias(hit)
                start = (j * LP).to(tl.int32)  # int32 offsets inside one head, as everywhere
                for c in range(0, LP, BK):
                    k, v, kmc = _block_step(K, V, start, c, kk, d, dm, D, LP)
                    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
                    p = tl.where(kmc[None, :], tl.exp2(s + bias[:, None] - lse[:, None]), 0.0)
                    dp = tl.dot(do, tl.trans(v), input_precision=PREC)
                    ds = p * (dp - delta[:, None])
                    dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    tl.store(DQ + qbase + qoff, (dq * sm_scale).to(DQ.dtype.element_ty), mask=qmask)


def tokens_per_program(G: int) -> int:
    """TP: the largest power of two with TP*G <= 16 (16 -> 1 token at G >= 9, 2 at G = 5..8, 4 at
    G = 3..4, 8 at G = 2, 16 at G = 1). Every row of a tile's first 16 is then real at G = 1, 2, 4, 8, 16."""
    tp = 1
    while 2 * tp * G <= TILE_ROWS:
        tp *= 2
    return tp


def key_steps(
    idx: Tensor, valid: Tensor, sel_block: int, group: int, key_tile: int = 64
) -> dict[str, int | float]:
    """Key steps the forced split's query-major kernels take on a table, tiles vs one token a program.

    One key step = one chunk of BK = min(key_tile, l') keys of one block loaded (K and V) and
    multiplied against one program's 16-row tile (forward: QK and PV; dQ: QK, dO V and dS K). One token
    a program takes ceil(l'/BK) steps per non-forced entry with keys (duplicates each); the token tiles
    take ceil(l'/BK) per distinct block in the union of their TP tokens' such entries. `idx`/`valid`:
    [B, Hkv, T, n]. Pure torch, the kernels' own rule: valid, 1 <= block <= t // l' - 2.
    """
    B, Hkv, T, NK = idx.shape
    tp = tokens_per_program(group)
    per_block = -(-sel_block // min(key_tile, max(16, next_pow2(sel_block))))
    jt = (torch.arange(T, device=idx.device) // sel_block).view(T, 1)
    ok = valid & (idx >= 1) & (idx <= jt - 2)
    j = torch.where(ok, idx, -1)
    j = torch.nn.functional.pad(j, (0, 0, 0, (-T) % tp), value=-1).reshape(B * Hkv, -1, tp * NK)
    s = j.sort(-1).values
    first = (s >= 1) & torch.cat(
        [torch.ones_like(s[..., :1], dtype=torch.bool), s[..., 1:] != s[..., :-1]], -1
    )
    one, tiles = int(ok.sum()) * per_block, int(first.sum()) * per_block
    return {
        "tokens_per_program": tp,
        "programs_one_token": B * Hkv * T,
        "programs_tiles": B * Hkv * -(-T // tp),
        "steps_one_token": one,
        "steps_tiles": tiles,
        "ratio": tiles / one if one else 1.0,
    }
