"""Dense kernels over the selected branch's forced blocks (used by selected.py when `forced_blocks=True`).

Owns the forced-part forward (`_sel_forced_fwd_kernel`) and dQ (`_sel_forced_dq_kernel`). The forced
blocks of query t are block 0, its own block jt = t // l' and the one before: the same for all l'
tokens of a query block, so they run as dense causal row tiles with no table gather. Q of one (batch,
KV head) is [T*G, D] with row r = t*G + g; a program takes BM consecutive rows (tokens r // G,
possibly from several query blocks) against block 0 and the keys from block (first token's block - 1)
up to its last token, with per-row masks. Each row weights a key block by how many valid table entries
list it in that row's forced role (own, previous, or block 0 when jt >= 2; log2(count) added to the
logits, -inf when absent), so any table stays exact; the query-major kernels of selected.py skip
exactly those entries (table value 0, jt or jt - 1). The forward writes the forced part's lse and
normalized output in fp32, from which the query-major forward resumes its online softmax; the dQ
kernel writes delta = rowsum(dO * O) and the forced part of dQ in fp32, which the query-major dQ adds
to and stores.
"""

from __future__ import annotations

import triton
import triton.language as tl

# As in selected.py: tl.reduce with triton's own combine functions (cheaper under the interpreter).
_max_combine = tl.standard._elementwise_max
_sum_combine = tl.standard._sum_combine


@triton.jit
def online_softmax_step(s, v, m_i, l_i, acc, PREC: tl.constexpr):
    """One key step of a base-2 online softmax: logits s [rows, keys] (-inf where masked) and values v
    into the running (max, sum, output); a row with no key yet keeps max -inf and adds nothing (also
    used by the token tiles of selected_query.py)."""
    m_new = tl.maximum(m_i, tl.reduce(s, 1, _max_combine))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.reduce(p, 1, _sum_combine)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return m_new, l_i, acc


@triton.jit
def _role_bias(IDX, VALID, toff, rm, jt, NK, BM: tl.constexpr):
    """log2 of how many valid table entries list each forced role's block for each row (own block jt,
    previous jt - 1, block 0 when jt >= 2); -inf when the row does not list it in that role."""
    c_own = tl.zeros([BM], tl.float32)
    c_prev = tl.zeros([BM], tl.float32)
    c_first = tl.zeros([BM], tl.float32)
    for i in range(0, NK):
        j = tl.load(IDX + toff + i, mask=rm, other=-1)
        ok = (tl.load(VALID + toff + i, mask=rm, other=0) != 0) & (j >= 0)
        c_own += (ok & (j == jt)).to(tl.float32)
        c_prev += (ok & (j == jt - 1)).to(tl.float32)
        c_first += (ok & (j == 0) & (jt >= 2)).to(tl.float32)
    b_own = tl.where(c_own > 0, tl.log2(tl.maximum(c_own, 1.0)), float("-inf"))
    b_prev = tl.where(c_prev > 0, tl.log2(tl.maximum(c_prev, 1.0)), float("-inf"))
    b_first = tl.where(c_first > 0, tl.log2(tl.maximum(c_first, 1.0)), float("-inf"))
    return b_own, b_prev, b_first


@triton.jit
def _key_range(r0, T, G: tl.constexpr, LP: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr):
    """The tile's keys: [0, n1) is block 0 when it lies before the local range (all rows then have
    jt >= 2), padded to n1p (a multiple of BK) so no step mixes the two; then [k0, k1), the keys from
    the block before the tile's first token's block up to its last token."""
    t_hi = (tl.minimum(r0 + BM, T * G) - 1) // G
    b_lo = (r0 // G) // LP
    k0 = tl.maximum(b_lo - 1, 0) * LP
    k1 = t_hi + 1
    n1 = tl.where(k0 > 0, LP, 0)
    n1p = (n1 + BK - 1) // BK * BK
    return n1, n1p, k0, k1


@triton.jit
def _step_keys(K, V, c, n1, n1p, k0, k1, kk, d, dm, t, jt, b_own, b_prev, b_first, D: tl.constexpr,
               LP: tl.constexpr):  # fmt: skip
    """Step c of the tile's key range: its K and V, each (row, key)'s role bias and whether the key
    exists and is not after the row's token."""
    first = c < n1p
    pos = tl.where(first, c, k0 + c - n1p) + kk
    km = pos < tl.where(first, n1, k1)
    koff = pos[:, None] * D + d[None, :]
    k = tl.load(K + koff, mask=km[:, None] & dm[None, :], other=0.0)
    v = tl.load(V + koff, mask=km[:, None] & dm[None, :], other=0.0)
    kb = (pos // LP)[None, :]
    bias = tl.where(
        kb == jt[:, None],
        b_own[:, None],
        tl.where(
            kb == jt[:, None] - 1,
            b_prev[:, None],
            tl.where((kb == 0) & (jt[:, None] >= 2), b_first[:, None], float("-inf")),
        ),
    )
    ok = km[None, :] & (pos[None, :] <= t[:, None])
    return k, v, bias, ok


@triton.jit
def forced_pass(
    Q, K, V, IDX, VALID, r0, bh, T, NK, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """The forced blocks of rows [r0, r0 + BM) of (batch, KV head) bh's [T*G, D] queries as one dense
    causal online softmax: (rows, in range, their tokens, head_dim columns, columns in range, the
    base-2 state m, l, acc). Also the key-major forward's merging pass (selected_keys.py)."""
    r = r0 + tl.arange(0, BM)
    d = tl.arange(0, DP)
    dm = d < D
    rm = r < T * G
    t = tl.where(rm, r // G, 0)
    jt = t // LP
    qoff = r[:, None] * D + d[None, :]
    q = tl.load(Q + bh * T * G * D + qoff, mask=rm[:, None] & dm[None, :], other=0.0)
    K += bh * T * D
    V += bh * T * D
    b_own, b_prev, b_first = _role_bias(IDX, VALID, (bh * T + t) * NK, rm, jt, NK, BM)
    n1, n1p, k0, k1 = _key_range(r0, T, G, LP, BM, BK)
    qk_scale = sm_scale * 1.4426950408889634  # base-2 softmax
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, DP], tl.float32)
    kk = tl.arange(0, BK)
    for c in range(0, n1p + k1 - k0, BK):
        k, v, bias, ok = _step_keys(K, V, c, n1, n1p, k0, k1, kk, d, dm, t, jt, b_own, b_prev, b_first, D, LP)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        s = tl.where(ok, s + bias, float("-inf"))
        m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc, PREC)
    return r, rm, t, d, dm, m_i, l_i, acc


@triton.jit
def _sel_forced_fwd_kernel(
    Q, K, V, IDX, VALID, OF, LSEF,
    T, NK, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    # One program: rows [r0, r0 + BM) of one (batch, KV head)'s [T*G, D] queries.
    bh = tl.program_id(1).to(tl.int64)
    r, rm, _t, d, dm, m_i, l_i, acc = forced_pass(
        Q, K, V, IDX, VALID, tl.program_id(0) * BM, bh, T, NK, sm_scale, G, D, LP, DP, BM, BK, PREC
    )
    qoff = r[:, None] * D + d[None, :]
    qmask = rm[:, None] & dm[None, :]
    has = l_i > 0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(OF + bh * T * G * D + qoff, o, mask=qmask)
    tl.store(LSEF + bh * T * G + r, lse, mask=rm)


@triton.jit
def _sel_forced_dq_kernel(
    Q, K, V, IDX, VALID, OUT, DO, LSE, DELTA, DQF,
    T, NK, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, HAVE_DELTA: tl.constexpr,
):  # fmt: skip
    # The forward's tiling; p from the final lse. Also stores delta for the two kernels that follow,
    # unless HAVE_DELTA (formed before, by the gate fold's kernel: OUT is not read).
    r0 = tl.program_id(0) * BM
    bh = tl.program_id(1).to(tl.int64)
    r = r0 + tl.arange(0, BM)
    d = tl.arange(0, DP)
    dm = d < D
    rm = r < T * G
    t = tl.where(rm, r // G, 0)
    jt = t // LP
    qoff = r[:, None] * D + d[None, :]
    qmask = rm[:, None] & dm[None, :]
    qbase = bh * T * G * D
    q = tl.load(Q + qbase + qoff, mask=qmask, other=0.0)
    do = tl.load(DO + qbase + qoff, mask=qmask, other=0.0)
    if HAVE_DELTA:
        delta = tl.load(DELTA + bh * T * G + r, mask=rm, other=0.0)
    else:
        o = tl.load(OUT + qbase + qoff, mask=qmask, other=0.0)
        delta = tl.reduce(do.to(tl.float32) * o.to(tl.float32), 1, _sum_combine)
        tl.store(DELTA + bh * T * G + r, delta, mask=rm)
    lse = tl.load(LSE + bh * T * G + r, mask=rm, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)  # such a row has no key: every p below is 0
    K += bh * T * D
    V += bh * T * D
    b_own, b_prev, b_first = _role_bias(IDX, VALID, (bh * T + t) * NK, rm, jt, NK, BM)
    n1, n1p, k0, k1 = _key_range(r0, T, G, LP, BM, BK)
    qk_scale = sm_scale * 1.4426950408889634
    dq = tl.zeros([BM, DP], tl.float32)
    kk = tl.arange(0, BK)
    for c in range(0, n1p + k1 - k0, BK):
        k, v, bias, ok = _step_keys(K, V, c, n1, n1p, k0, k1, kk, d, dm, t, jt, b_own, b_prev, b_first, D, LP)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        p = tl.where(ok, tl.exp2(s + bias - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    tl.store(DQF + qbase + qoff, dq, mask=qmask)  # unscaled: the query-major dQ adds its part, scales


def forced_rows_per_tile(interpret: bool) -> int:
    """BM: query rows (token, head) per program; a power of two >= 16 (tl.dot's minimum).

    64 on the GPU (a full MMA tile: 64/G tokens, e.g. 10.7 at G = 6, 4 at G = 16); 32 under the
    interpreter, so the tests' small blocks see tiles straddling query blocks and several tiles per block.
    """
    return 32 if interpret else 64
