"""Key-major backward of NSA's selected branch for small GQA groups (selected.py's `bwd_keys` path).

Owns the three kernels that replace the forced dQ, the query-major dQ and the dK/dV kernels when
`_config(...)["bwd_keys"]` holds (G <= 8, FSA's range):
- `_sel_bwd_delta_kernel`: delta = rowsum(dO * O) in fp32, per (token, head) row (not launched
  when the caller hands delta in: gated.py's gate fold formed it);
- `_sel_bwd_keys_kernel`: the dK/dV walk `_dkdv_walk` (one program per segment of the (query, block)
  pairs of one selection block, BN keys of it; selected.py's `_sel_bwd_dkdv_kernel` is the same walk
  with WRITE_DQ off) that also writes each pair's dQ partial,
  (dS @ K) * scale in fp32, to PDQ [nb, BH*T*n, G, D] at the pair's flat table position and key chunk,
  (with `_config`'s keys_dq_mma in its product's own layout: `_store_rows_mma`, `dq_store_consts`)
  rounded once to q's 16-bit dtype (`_config`'s pdq_bits 16, shipped) or kept in fp32 (pdq_bits 32,
  and for fp32 q; `pdq_dtype`):
  s, p, dp and dS are computed once for dQ, dK and dV. Every pair goes through it, the forced entries
  (block 0, the query's own block and the one before) included; with `_config`'s keys_rowlim (`rowlim`:
  ROWLIM) its key mask is a per-row limit on the column, what lets 64 rows a step fit on sm_80
  (shipped there at head_dim <= 64; `keys_rows` is the rule for which settings 64 rows fit);
- `_sel_bwd_dq_merge_kernel`: query-major, per BM (token, head) rows, dQ = the sum of PDQ over the
  token's n entries and the nb key chunks in a fixed order (deterministic, no atomics), skipping the
  entries that add no keys (the reverse index's keep rule: valid, block >= 0, block*l' <= t), which
  the keys kernel never writes: PDQ needs no memset. The loop `_dq_merge_loop` ships (every GPU
  run's); with `_config`'s merge_tiles (a probe variant since the H100 of 2026-11-26c measured it no
  faster) `_dq_merge_tiles`: the metadata loaded once as a tile, the PDQ loads 4 a step, bitwise the
  loop (`merge_slots`: the tiles' width).
`keys_backward` launches them (selected.py's `_selected_bwd` calls it with its reverse index and
reduces the dK/dV partials it returns); `keys_bwd_gpucheck_rows` lists them for selected.py's
`gpucheck_specs`; `_segment` (the lookup of a segment's block and pairs) and `_block_keys` (its key
chunk, loaded) are shared with selected_keys.py's forward, `_dkdv_walk` with selected.py's dK/dV
kernel.
PDQ is transient (the launcher frees it before returning): nb*B*Hkv*T*n*G*D*2 bytes in 16-bit
training, 1.6 GB at M7C 64k x 1 (nb = 1 on the GPU); twice that in fp32 or at pdq_bits 32 (what the
GPU runs measured: a bench/kernel_probe.py variant; bench/pdq_numerics.py measures what 16 bits cost
dq). The merge sums in fp32 either way. The partial dK/dV and their reduction stay selected.py's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from nsa.attention.triton import cdiv, device_arch, interpreting, next_pow2

# As in selected.py: tl.reduce with triton's own combine function (cheaper under the interpreter).
_sum_combine = tl.standard._sum_combine


@triton.jit
def _sel_bwd_delta_kernel(OUT, DO, DELTA, R, D: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr):
    # One program: BM rows of the [R = B*Hkv*T*G, D] output; delta in fp32 for the keys kernel.
    r = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    d = tl.arange(0, DP)
    rm = r < R
    off = r[:, None] * D + d[None, :]
    m = rm[:, None] & (d < D)[None, :]
    o = tl.load(OUT + off, mask=m, other=0.0).to(tl.float32)
    do = tl.load(DO + off, mask=m, other=0.0).to(tl.float32)
    tl.store(DELTA + r, tl.sum(o * do, 1), mask=rm)


@triton.jit
def _segment(SEG_END, START, s_id, NBLK, NSEARCH, S):
    """The block of segment s_id and the pair range [lo, hi) it takes (empty for the static grid's
    spare segments, used False): the first block b with SEG_END[b] > s_id (binary search); block b
    owns segments [SEG_END[b] - ceil(count/S), SEG_END[b])."""
    return _segment_from(SEG_END, START, START, s_id, NBLK, NSEARCH, S)


@triton.jit
def _segment_from(SEG_END, BEGIN, START, s_id, NBLK, NSEARCH, S):
    """`_segment` over a suffix of each block's pairs: block b's pairs [BEGIN[b], START[b + 1]), cut
    into the segments SEG_END counts (the key-major forward's non-forced pairs, selected_keys.py
    `reverse_index` with `forward`; BEGIN = START: every pair)."""
    lo_b = s_id * 0
    hi_b = lo_b + NBLK
    for _ in range(0, NSEARCH):
        mid = (lo_b + hi_b) // 2
        active = lo_b < hi_b
        right = active & (tl.load(SEG_END + tl.minimum(mid, NBLK - 1)) <= s_id)
        lo_b = tl.where(right, mid + 1, lo_b)
        hi_b = tl.where(active & ~right, mid, hi_b)
    used = lo_b < NBLK
    blk = tl.minimum(lo_b, NBLK - 1)
    b0 = tl.load(BEGIN + blk)
    b1 = tl.load(START + blk + 1)
    seg0 = tl.load(SEG_END + blk) - (b1 - b0 + S - 1) // S
    lo = b0 + (s_id - seg0) * S
    hi = tl.where(used, tl.minimum(lo + S, b1), lo)
    return blk, lo, hi, used


@triton.jit
def _block_keys(K, V, blk, nb, NS, T, D: tl.constexpr, LP: tl.constexpr, DP: tl.constexpr, BN: tl.constexpr):
    """Key chunk nb (BN keys) of global selection block blk = bh*NS + j, as every key-major kernel
    holds it: (bh, kpos, kmask, k, v), K and V [BN, DP] loaded once, zeros past the block, T or D."""
    bh = (blk // NS).to(tl.int64)
    n = tl.arange(0, BN)
    d = tl.arange(0, DP)
    kpos = ((blk % NS) * LP + nb * BN + n).to(tl.int32)
    kmask = ((nb * BN + n) < LP) & (kpos < T)
    koff = kpos[:, None] * D + d[None, :]
    km = kmask[:, None] & (d < D)[None, :]
    k = tl.load(K + bh * T * D + koff, mask=km, other=0.0)
    v = tl.load(V + bh * T * D + koff, mask=km, other=0.0)
    return bh, kpos, kmask, k, v


@triton.jit
def _pair_rows(ORDER, lo, rr, nrows, bh, T, NK, G: tl.constexpr, DIV32: tl.constexpr):
    """Rows `rr` of a segment's step, row r = (pair lo + r // G, head r % G): (in range, head, the
    pair's flat table position, its query token within this (batch, KV head)). DIV32: the token by an
    int32 division of the position within this (batch, KV head) (T * NK < 2**31 there; masked rows get
    a negative token, and their loads and stores are masked off); else the int64 (pos // NK) % T.
    The kernels' path at `_config`'s keys_div32 False (what the GPU runs measured); `_pair_rows32`
    otherwise."""
    rm = rr < nrows
    g = rr % G
    pos = tl.load(ORDER + lo + rr // G, mask=rm, other=0)
    if DIV32:
        tq = (pos - bh * T * NK).to(tl.int32) // NK
    else:
        tq = ((pos // NK) % T).to(tl.int32)
    return rm, g, pos, tq


@triton.jit
def _magic32(NK):
    """(m, l), uint32 scalars, with x // NK == umulhi(2 * x, m) >> l for every 0 <= x < 2**31: the
    round-up method of Granlund and Montgomery (1994) at N = 31 bits, l = ceil(log2 NK),
    m = floor(2**(31 + l) / NK) + 1 < 2**32. Why exact: m * NK = 2**(31 + l) + e with 0 < e <= NK <=
    2**l, so x * m / 2**(31 + l) = x / NK + x * e / (NK * 2**(31 + l)), the second term < 1 / NK, less
    than x / NK's distance to the next integer. Once a program (a 64-bit scalar division), so a row's
    token costs a multiply-high and a shift instead of a division's ~8 instructions."""
    lg = NK * 0
    for k in range(0, 31):
        lg += ((1 << k) < NK).to(tl.int32)
    m = (tl.full([], 1, tl.int64) << (31 + lg)) // NK + 1
    return m.to(tl.uint32), lg.to(tl.uint32)


@triton.jit
def _div32(x, m, lg):
    """x // NK for uint32 x < 2**31, (m, lg) = `_magic32(NK)`: int32."""
    return (tl.umulhi(x * 2, m) >> lg).to(tl.int32)


@triton.jit
def _pair_rows32(ORDER, lo, rr, nrows, bh, T, NK, NKM, NKL, G: tl.constexpr):
    """`_pair_rows` in 32 bits (`_config`'s keys_div32): rr and nrows int32 (a segment has at most
    S * G rows); (in range, head, the row's index x * G + g among the partials' rows, its query token
    x // NK), x the pair's position within this (batch, KV head), divided by NK with `_magic32`'s
    (NKM, NKL) (x < T * NK < 2**31). The row index counts from this (batch, KV head)'s first partial
    row: the caller adds bh * T * NK * G to its pointer. Bounds: x * G + g < T * NK * G < 2**32 (past
    it one (batch, KV head)'s fp32 partials alone would pass 256 GB at D 16). Masked rows: token 0,
    row g (their loads and stores are masked off; a kernel that tests the token masks it itself)."""
    rm = rr < nrows
    g = rr % G
    pos = tl.load(ORDER + lo + rr // G, mask=rm, other=0)
    x = tl.where(rm, pos - bh * T * NK, 0).to(tl.uint32)
    return rm, g, x * G + g, _div32(x, NKM, NKL)


@triton.jit
def _store_rows_mma(PTR, row, x, rm, D: tl.constexpr, DP: tl.constexpr, BR: tl.constexpr,
                    WM: tl.constexpr, WN: tl.constexpr, ASC: tl.constexpr):  # fmt: skip
    """PTR[row[r] * D + c] = x[r, c] for the rows rm and columns c < D: `tl.store` of a [BR, DP]
    tensor-core product, written so that the store's layout is the product's own and no layout
    conversion (a round trip through shared memory) precedes it. Why it works: triton gives a store
    the blocked layout its pointer's contiguity asks for (the coalesce pass), and converts the value to
    it. The accumulator of mma.sync (sm_80) and wgmma (sm_90) puts element (r, c), r = 16 m + 8 i + a,
    c = 8 jj + 2 b + k, in lane 4 a + b, register bits k, i, jj, m, and the warps along m (WM of them)
    and jj (WN: `dq_product_warps`), m = mr WM + wm and jj = j WN + wn. Viewed as an 8-d tensor of
    those bits, the pointer is contiguous in k only (2 elements: 8-byte stores), and the coalesce pass
    fills lanes, then warps, from the most contiguous dimension and then through the others in index
    order: ascending on triton 3.6, descending on 3.9 (ASC, `dq_store_consts`), hence the dimensions
    (b, a, wn, wm, i, j, mr, k) or (mr, j, i, wm, wn, a, b, k). That builds exactly the accumulator's
    layout: the conversion is the identity. A wrong WM / WN / ASC only brings the conversion back
    (the same values are stored either way)."""
    MR: tl.constexpr = BR // (16 * WM)
    J: tl.constexpr = DP // (8 * WN)
    x8 = tl.reshape(x, [MR, WM, 2, 8, J, WN, 4, 2])  # (mr, wm, i, a, j, wn, b, k)
    r4 = tl.reshape(row, [MR, WM, 2, 8])
    m4 = tl.reshape(rm, [MR, WM, 2, 8])
    # The row offset is multiplied after the reshape: the pointer's alignment analysis sees through
    # arithmetic, not through a reshape, and 8-byte stores need the row offsets' divisibility.
    if ASC:
        xs = tl.permute(x8, [6, 3, 5, 1, 2, 4, 0, 7])
        rs = tl.permute(r4, [3, 1, 2, 0])[None, :, None, :, :, None, :, None].to(tl.int64) * D
        ms = tl.permute(m4, [3, 1, 2, 0])[None, :, None, :, :, None, :, None]
        b = tl.arange(0, 4)[:, None, None, None, None, None, None, None]
        wn = tl.arange(0, WN)[None, None, :, None, None, None, None, None]
        j = tl.arange(0, J)[None, None, None, None, None, :, None, None]
    else:
        xs = tl.permute(x8, [0, 4, 2, 1, 5, 3, 6, 7])
        rs = tl.permute(r4, [0, 2, 1, 3])[:, None, :, :, None, :, None, None].to(tl.int64) * D
        ms = tl.permute(m4, [0, 2, 1, 3])[:, None, :, :, None, :, None, None]
        b = tl.arange(0, 4)[None, None, None, None, None, None, :, None]
        wn = tl.arange(0, WN)[None, None, None, None, :, None, None, None]
        j = tl.arange(0, J)[None, :, None, None, None, None, None, None]
    k = tl.arange(0, 2)[None, None, None, None, None, None, None, :]
    c = (j * WN + wn) * 8 + b * 2 + k
    tl.store(PTR + rs + c, xs, mask=ms & (c < D))


@triton.jit
def _dkdv_walk(
    Q, K, V, DO, LSE, DELTA, ORDER, START, SEG_END, PDK, PDV, PDQ,
    T, NS, NK, NP, NBLK, NSEARCH, S, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BN: tl.constexpr, BR: tl.constexpr, PREC: tl.constexpr, DIV32: tl.constexpr,
    WRITE_DQ: tl.constexpr, DQ_WM: tl.constexpr = 0, DQ_WN: tl.constexpr = 0, DQ_ASC: tl.constexpr = True,
    ROWLIM: tl.constexpr = False,
):  # fmt: skip
    """The key-major dK/dV program, written once for both of its kernels: BN keys (chunk nb) of one
    selection block against one segment (<= S pairs) of the (query, block) pairs that listed it; rows
    of a step are BR (pair, head) couples, r -> (pair r // G, head r % G), so a group of any size fills
    the tile. Writes the segment's partial dK/dV (fp32). Pairs are sorted by global block bh*NS + j
    (ORDER: their flat table positions, START: where each block's pairs begin); block b owns segments
    [SEG_END[b] - ceil(count/S), SEG_END[b]) (`_segment`); the static grid has spare segments past the
    last block's (used False, no rows). WRITE_DQ (the key-major backward, `_sel_bwd_keys_kernel`) adds
    one product a step, the rows' dQ partial (dS @ K) * scale in fp32, stored to PDQ[nb, ORDER[p]]
    (NP = BH*T*NK table positions: a pair listed twice is two positions, each written once); without
    it (`_sel_bwd_dkdv_kernel`, whose dQ runs query-major) PDQ and NP are not touched. DIV32
    (`_config`'s keys_div32, on for the keys backward; the dK/dV kernel passes False): a step's rows
    in 32 bits (`_pair_rows32`) and the key mask folded into the causal test, instead of the int64
    step index (the pair bounds are int64, so r // G was a 64-bit division by a constant) and
    (pos // NK) % T, whose divisions compile to a branch, a 32-bit fast path and a slow-path call per
    row a thread holds (bench/keys_proxy.py: 1406 -> 654 SASS a step at M7C, triton 3.6 sm_90). Same
    tokens and rows, so bitwise the same partials."""
    s_id = tl.program_id(0)
    nb = tl.program_id(1)
    blk, lo, hi, used = _segment(SEG_END, START, s_id, NBLK, NSEARCH, S)
    bh, kpos, kmask, k, v = _block_keys(K, V, blk, nb, NS, T, D, LP, DP, BN)
    n = tl.arange(0, BN)
    d = tl.arange(0, DP)
    dm = d < D
    Q += bh * T * G * D
    DO += bh * T * G * D
    LSE += bh * T * G
    DELTA += bh * T * G
    if WRITE_DQ:
        PDQ += nb.to(tl.int64) * NP * G * D
        if DIV32:
            PDQ += bh * T * NK * G * D  # _pair_rows32 counts this (batch, KV head)'s rows from 0
    qk_scale = sm_scale * 1.4426950408889634
    dk = tl.zeros([BN, DP], tl.float32)
    dv = tl.zeros([BN, DP], tl.float32)
    r = tl.arange(0, BR)
    if DIV32:
        if ROWLIM:
            # The chunk's keys are kbase + n, the first klast + 1 of them in range (the block, T): a
            # key's causal and range tests are one compare of its column n against a per-row limit
            # (below), so no per-column key position stays live across the loop (16 registers a
            # thread on sm_80 at 64 rows: what made them spill, bench/RESULTS.md "a100keys").
            kbase = (blk % NS).to(tl.int32) * LP + nb * BN
            klast = tl.minimum(LP - nb * BN, T - kbase) - 1
        else:
            # A key masked off (past the block or T) gets a column past every token: with the rows'
            # own mask folded into their token, one compare an element instead of three masks.
            kcol = tl.where(kmask, kpos, T)
        nrows = (hi - lo).to(tl.int32) * G
        nkm, nkl = _magic32(NK)
    else:
        nrows = (hi - lo) * G
    for r0 in range(0, nrows, BR):
        if DIV32:
            rm, g, prow, tq = _pair_rows32(ORDER, lo, r0 + r, nrows, bh, T, NK, nkm, nkl, G)
        else:
            rm, g, pos, tq = _pair_rows(ORDER, lo, r0 + r, nrows, bh, T, NK, G, False)
        qrow = tq * G + g
        qoff = qrow[:, None] * D + d[None, :]
        qm = rm[:, None] & dm[None, :]
        q = tl.load(Q + qoff, mask=qm, other=0.0)
        do = tl.load(DO + qoff, mask=qm, other=0.0)
        lse = tl.load(LSE + qrow, mask=rm, other=0.0)
        delta = tl.load(DELTA + qrow, mask=rm, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        if ROWLIM:
            # n <= tq - kbase (causal) and n <= klast (in range), or nothing for a masked row: the
            # same mask as kcol's, bit for bit.
            ok = n[None, :] <= tl.where(rm, tl.minimum(tq - kbase, klast), -1)[:, None]
        elif DIV32:
            ok = kcol[None, :] <= tl.where(rm, tq, -1)[:, None]
        else:
            ok = rm[:, None] & kmask[None, :] & (kpos[None, :] <= tq[:, None])
        p = tl.where(ok, tl.exp2(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PREC)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = (p * (dp - delta[:, None])).to(q.dtype)
        dk += tl.dot(tl.trans(ds), q, input_precision=PREC)
        if WRITE_DQ:
            dq = tl.dot(ds, k, input_precision=PREC) * sm_scale
            # Rounded to PDQ's dtype (fp32, or q's 16-bit one with pdq_bits 16: `pdq_dtype`) once,
            # here; the merge sums in fp32.
            dq = dq.to(PDQ.dtype.element_ty)
            if DQ_WM:
                if DIV32:
                    _store_rows_mma(PDQ, prow, dq, rm, D, DP, BR, DQ_WM, DQ_WN, DQ_ASC)
                else:
                    _store_rows_mma(PDQ, pos * G + g, dq, rm, D, DP, BR, DQ_WM, DQ_WN, DQ_ASC)
            elif DIV32:
                tl.store(PDQ + prow.to(tl.int64)[:, None] * D + d[None, :], dq, mask=qm)
            else:
                tl.store(PDQ + (pos * G + g)[:, None] * D + d[None, :], dq, mask=qm)
    poff = (s_id.to(tl.int64) * LP + nb * BN + n)[:, None] * DP + d[None, :]
    pm = ((nb * BN + n) < tl.where(used, LP, 0))[:, None]  # spare segments store nothing
    tl.store(PDK + poff, dk * sm_scale, mask=pm)
    tl.store(PDV + poff, dv, mask=pm)


@triton.jit
def _sel_bwd_keys_kernel(
    Q, K, V, DO, LSE, DELTA, ORDER, START, SEG_END, PDK, PDV, PDQ,
    T, NS, NK, NP, NBLK, NSEARCH, S, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BN: tl.constexpr, BR: tl.constexpr, PREC: tl.constexpr, DIV32: tl.constexpr,
    DQ_WM: tl.constexpr = 0, DQ_WN: tl.constexpr = 0, DQ_ASC: tl.constexpr = True, ROWLIM: tl.constexpr = False,
):  # fmt: skip
    # The dK/dV walk with the dQ partials (WRITE_DQ). A kernel of its own name only so that profiles
    # (the GPU suite's per-kernel families, gpusuite/modelcheck.py) tell it from the dK/dV kernel.
    _dkdv_walk(
        Q, K, V, DO, LSE, DELTA, ORDER, START, SEG_END, PDK, PDV, PDQ, T, NS, NK, NP, NBLK, NSEARCH, S,
        sm_scale, G, D, LP, DP, BN, BR, PREC, DIV32, True, DQ_WM, DQ_WN, DQ_ASC, ROWLIM,
    )  # fmt: skip


@triton.jit
def _sel_bwd_dq_merge_kernel(
    PDQ, IDX, VALID, DQ,
    T, NK, NP, NB,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr,
    TILES: tl.constexpr = False, NEP: tl.constexpr = 16, MU: tl.constexpr = 4,
):  # fmt: skip
    # One program: rows [r0, r0 + BM) of one (batch, KV head)'s [T*G, D] dQ (row r = t*G + g). Sums,
    # entry by entry and chunk by chunk (a fixed order), the partials of the entries that add keys; a
    # row whose token has none stores zeros. TILES (`_config`'s merge_tiles): `_dq_merge_tiles`, the
    # metadata loaded once; else the loop the GPU runs measured (each entry loads IDX and VALID, then
    # the partials they mask).
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    bh = tl.program_id(1).to(tl.int64)
    d = tl.arange(0, DP)
    dm = d < D
    rm = r < T * G
    t = tl.where(rm, r // G, 0)
    g = r % G
    ebase = (bh * T + t) * NK
    chunk = (bh * 0 + NP) * G * D  # one key chunk's partials [NP, G, D], in int64 (bh is)
    if TILES:
        dq = _dq_merge_tiles(
            PDQ, IDX, VALID, T, NK, NB, bh, d, dm, rm, t, g, ebase, chunk, G, D, LP, BM, DP, NEP, MU
        )
    else:
        dq = _dq_merge_loop(PDQ, IDX, VALID, NK, NB, d, dm, rm, t, g, ebase, chunk, G, D, LP, BM, DP)
    qoff = (bh * T * G + r)[:, None] * D + d[None, :]
    tl.store(DQ + qoff, dq.to(DQ.dtype.element_ty), mask=rm[:, None] & dm[None, :])


@triton.jit
def _dq_merge_loop(
    PDQ, IDX, VALID, NK, NB, d, dm, rm, t, g, ebase, chunk,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, BM: tl.constexpr, DP: tl.constexpr,
):  # fmt: skip
    """The measured merge's loop (the kernel's rows): the rows' dQ sum in fp32."""
    dq = tl.zeros([BM, DP], tl.float32)
    for i in range(0, NK):
        j = tl.load(IDX + ebase + i, mask=rm, other=-1)
        keep = rm & (tl.load(VALID + ebase + i, mask=rm, other=0) != 0) & (j >= 0) & (j * LP <= t)
        off = ((ebase + i) * G + g)[:, None] * D + d[None, :]
        m = keep[:, None] & dm[None, :]
        for c in range(0, NB):
            dq += tl.load(PDQ + c * chunk + off, mask=m, other=0.0).to(tl.float32)
    return dq


@triton.jit
def _dq_merge_tiles(
    PDQ, IDX, VALID, T, NK, NB, bh, d, dm, rm, t, g, ebase, chunk,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, BM: tl.constexpr, DP: tl.constexpr,
    NEP: tl.constexpr, MU: tl.constexpr,
):  # fmt: skip
    """`_dq_merge_loop`'s sum with its load addresses known ahead: the rows' table metadata as one
    [BM, NEP] tile of (entry, chunk) couples e -> (e // NB, e % NB) (IDX, VALID -> keep), then the
    PDQ loads in the loop's order (entry slot, then chunk), MU of them unrolled a step (independent
    loads in flight together; all NEP at once spilled on triton 3.6, `_config`'s MU_merge), each
    row's keep taken out of the tile by a select and a sum. The same fp32 additions in the same order:
    dQ bitwise the loop's (a padded couple adds +0.0, and dq is never -0.0: it starts at +0.0).
    1 + NEP / MU dependent memory latencies a program (metadata, then a step's PDQ), against two an
    entry in the loop. Returns the rows' dQ sum in fp32."""
    e, _, keep = _entry_keep(IDX, VALID, ebase, rm, t, NK, NB, LP, NEP)
    keep = keep.to(tl.int32)
    # The rows' partials as one scalar pointer (int64) and int32 offsets from it (< BM*NK*D): an
    # int64 offset tile held across the loop cost 2 registers an element.
    t0 = (tl.program_id(0) * BM) // G
    PDQ += (bh * T + t0) * NK * G * D
    rel = ((t - t0) * NK * G + g)[:, None] * D + d[None, :]
    dq = tl.zeros([BM, DP], tl.float32)
    for c0 in range(0, NEP, MU):
        for u in tl.static_range(MU):
            c = c0 + u
            kc = tl.reduce(tl.where(e[None, :] == c, keep, 0), 1, _sum_combine) != 0
            off = (c % NB) * chunk + (c // NB) * G * D
            dq += tl.load(PDQ + off + rel, mask=kc[:, None] & dm[None, :], other=0.0).to(tl.float32)
    return dq


@triton.jit
def _entry_keep(IDX, VALID, ebase, rm, t, NK, NB, LP: tl.constexpr, NEP: tl.constexpr):
    """Both merges' tiles (merge_tiles): the rows' table metadata as one [rows, NEP] tile of (entry,
    chunk) couples e -> (e // NB, e % NB): (e, each couple's table position, keep: the entry adds keys,
    valid, j >= 0 and j * l' <= t, and the couple is one of the row's NK * NB)."""
    e = tl.arange(0, NEP)
    em = rm[:, None] & (e < NK * NB)[None, :]
    meta = ebase[:, None] + (e // NB)[None, :]
    j = tl.load(IDX + meta, mask=em, other=-1)
    keep = em & (tl.load(VALID + meta, mask=em, other=0) != 0) & (j >= 0) & (j * LP <= t[:, None])
    return e, meta, keep


def merge_slots(NK: int, nb: int) -> int:
    """NEP: the merges' (entry, key chunk) couples of a row, NK * nb, padded to a power of two >= 16
    (`merge_tiles`' tile width and unrolled steps). The floor keeps one compiled variant for every T,
    as selected.py's `_slots` (top_blocks lists min(n, blocks) entries at short T); nb = 1 on the GPU."""
    return max(16, next_pow2(NK * nb))


_TORCH_OF = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_TRITON_OF = {v: k for k, v in _TORCH_OF.items()}


def pdq_dtype(cfg: dict, dtype: torch.dtype) -> torch.dtype:
    """PDQ's dtype for activations of `dtype` under `cfg` (selected.py's `_config`): fp32 at
    `pdq_bits` 32 (what every GPU run measured); at 16 (the default), q's own dtype when it is bf16 or
    fp16, fp32 for fp32 q (16-bit partials of fp32 inputs would take fp32 training's precision for
    nothing it asked for). Why q's dtype, not one 16-bit type for both: bf16 training runs without
    loss scaling and its gradients can be far below fp16's smallest subnormal (6e-8), which bf16's
    fp32 exponent keeps (bench/pdq_numerics.py "range": fp16 partials of bf16 gradients ~1e-6 lost
    13 % of dq, rms); fp16 training scales its loss to keep gradients in fp16's range, where fp16's
    11-bit significand rounds 8x finer than bf16's 8 bits. Raises ValueError for other values."""
    bits = cfg["pdq_bits"]
    if bits not in (16, 32):
        raise ValueError(
            f"nsa/attention/triton/selected.py _config: pdq_bits = {bits!r}; use 32 (fp32 dQ partials) "
            "or 16 (the partials in q's 16-bit dtype)"
        )
    return dtype if bits == 16 and dtype in (torch.bfloat16, torch.float16) else torch.float32


def dq_product_warps(arch: int, BR: int, DP: int, warps: int) -> tuple[int, int]:
    """(WM, WN): how triton lays the keys kernel's warps over its [BR, DP] dQ product, along the rows
    and along the columns (`_store_rows_mma` needs it). Triton's rule (AccelerateMatmul, 3.6 and 3.9):
    wgmma (sm_90, rows a multiple of 64, warps of 4) puts the warps along the rows; mma.sync, for a dot
    chained to others as this one is, along the rows when BR >= DP, else along the columns. Checked on
    the compiled kernels: with these values no shared memory moves the tile (bench/RESULTS.md
    "keysmem")."""
    if arch >= 90 and BR % 64 == 0 and warps % 4 == 0:
        return warps, 1
    return (warps, 1) if BR >= DP else (1, warps)


def dq_store_consts(cfg: dict, arch: int) -> dict[str, int | bool]:
    """The keys kernel's DQ_WM / DQ_WN / DQ_ASC for `cfg` on sm_`arch`: `dq_product_warps` with
    `_config`'s keys_dq_mma, (0, 0) without, or where the warps do not tile the [BR_keys, DP] product
    (the dQ tile converted to the store's layout: the path the GPU runs measured). DQ_ASC: the order
    in which this triton's coalesce pass takes a store pointer's equally contiguous dimensions
    (`_store_rows_mma`): ascending on 3.6 (the GPU images'), descending on 3.9 (the venv's); the
    versions between are unchecked and taken as 3.9."""
    wm, wn = dq_product_warps(arch, cfg["BR_keys"], cfg["DP"], cfg["warps_keys"])
    asc = tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 7)
    # A tile too small for its warps (the interpreter's small head_dim at 32 rows) has no such layout.
    if not cfg["keys_dq_mma"] or cfg["BR_keys"] % (16 * wm) or cfg["DP"] % (8 * wn):
        return {"DQ_WM": 0, "DQ_WN": 0, "DQ_ASC": asc}
    return {"DQ_WM": wm, "DQ_WN": wn, "DQ_ASC": asc}


# sm_80's shipped keys step at head_dim <= 64 (`_config`): 64 rows a step with the per-row key limit
# (ROWLIM) that keeps them unspilled. On sm_90, where 64 rows ship already, the probe's row limit alone.
KEYS_BR64_ROWLIM = {"BR_keys": 64, "keys_rowlim": True}
# sm_80's keys step before it shipped 64 rows with ROWLIM (bench/RESULTS.md "a100ship"): 32 rows a
# step, the key mask as a per-column key position. bench/kernel_probe.py's A100 variant, gpucheck's
# `selected_bwd_keys_br32`, the model's what-if `keys_rowlim_off`.
KEYS_BR32_SM80 = {"BR_keys": 32, "keys_rowlim": False}


def rowlim(cfg: dict) -> bool:
    """The keys kernel's ROWLIM for `cfg`: `_config`'s keys_rowlim, which needs the 32-bit rows (its
    per-row limit is the DIV32 path's int32 token)."""
    return bool(cfg.get("keys_rowlim", False) and cfg["keys_div32"])


def keys_rows(cfg: dict, arch: int) -> dict:
    """`cfg` with the keys kernel's rows a step as they fit sm_`arch`'s 255 registers a thread: the one
    rule `_config`, the launcher (`keys_backward`, so a probe's patched config too), gpucheck's rows
    and the cost model's launch (bench/attention_cost/kernels.py) all go through. On sm_80 at head_dim
    <= 64, 64 rows or more a step fit only with ROWLIM (`rowlim`: keys_rowlim with keys_div32) and
    the dQ partial stored in its product's layout (keys_dq_mma): without ROWLIM ptxas spilled 88-96 B,
    with it but the converted store 48 B (G 1-8, triton 3.6 / 3.9; bench/RESULTS.md "a100keys").
    Otherwise the setting that fits is `KEYS_BR32_SM80`, 32 rows without ROWLIM. Hopper and head_dim
    > 64 as given (`_config` owns those: 32 rows at G 1 on sm_90, 32 at 8 warps past head_dim 64)."""
    if arch >= 90 or cfg["DP"] > 64 or cfg["BR_keys"] < 64 or (rowlim(cfg) and cfg["keys_dq_mma"]):
        return cfg
    return {**cfg, **KEYS_BR32_SM80}


def keys_bwd_gpucheck_rows(
    cfg: dict, G: int, D: int, LP: int, dt: str, prec: str, arch: int = 80, NK: int = 16
) -> list[tuple]:
    """selected.py's gpucheck rows (name, kernel, argument types, constexprs, warps, stages) of these
    kernels, as its launcher runs them with `cfg` (its `_config`, through `keys_rows`) on sm_`arch`;
    dt: the activations' triton type.
    PDQ's type follows cfg's `pdq_bits`; where dt is 16-bit, the keys kernel and the merge also at
    the other pdq_bits (`*_pdq32`: fp32 partials, what the GPU runs measured, at the shipped 16;
    `*_pdq16` where a config says 32: the probe's kernels, two cheap compiles, so the GPU probe of
    bench/kernel_probe.py never runs a kernel gpucheck has not seen); the keys kernel also at the
    other `keys_dq_mma` (`selected_bwd_keys_dqmma` / `_dqcvt`) with the rows that setting runs
    (`keys_rows`: 32 without ROWLIM on sm_80 for the converted store) and, on sm_80 at head_dim
    <= 64, at `KEYS_BR32_SM80` (`selected_bwd_keys_br32`: sm_80's setting before 64 rows shipped)
    where cfg is not it; the dQ merge also at the other merge_tiles (`selected_bwd_dq_merge_loop` /
    `_tiles`, the probe's variant), for tables of NK entries."""
    cfg = keys_rows(cfg, arch)
    ptr, f32, i32, i64 = f"*{dt}", "*fp32", "i32", "*i64"

    def keys_consts(c: dict) -> dict:
        return {"G": G, "D": D, "LP": LP, "DP": c["DP"], "BN": c["BN"], "BR": c["BR_keys"], "PREC": prec,
                "DIV32": c["keys_div32"], **dq_store_consts(c, arch), "ROWLIM": rowlim(c)}  # fmt: skip

    merge_consts = {"G": G, "D": D, "LP": LP, "DP": cfg["DP"], "BM": cfg["BM_merge"], "TILES": cfg["merge_tiles"],
                    "NEP": merge_slots(NK, cdiv(LP, cfg["BN"])), "MU": cfg["MU_merge"]}  # fmt: skip
    delta_consts = {"D": D, "DP": cfg["DP"], "BM": cfg["BM_delta"]}
    delta_args = dict(OUT=ptr, DO=ptr, DELTA=f32, R=i32)
    rows = [("selected_bwd_delta", _sel_bwd_delta_kernel, delta_args, delta_consts, cfg["warps_delta"], 1)]
    variants = [("", pdq_dtype(cfg, _TORCH_OF[dt]))]
    other = 48 - cfg["pdq_bits"]
    if variants[0][1] != pdq_dtype({"pdq_bits": other}, _TORCH_OF[dt]):
        variants.append((f"_pdq{other}", pdq_dtype({"pdq_bits": other}, _TORCH_OF[dt])))
    for suffix, dtype in variants:
        pdq = f"*{_TRITON_OF[dtype]}"
        keys_args = dict(
            Q=ptr, K=ptr, V=ptr, DO=ptr, LSE=f32, DELTA=f32, ORDER=i64, START=i64, SEG_END=i64, PDK=f32, PDV=f32,
            PDQ=pdq, T=i32, NS=i32, NK=i32, NP=i32, NBLK=i32, NSEARCH=i32, S=i32, sm_scale="fp32",
        )  # fmt: skip
        merge_args = dict(PDQ=pdq, IDX=i64, VALID="*i8", DQ=ptr, T=i32, NK=i32, NP=i32, NB=i32)
        rows += [
            (f"selected_bwd_keys{suffix}", _sel_bwd_keys_kernel, keys_args, keys_consts(cfg), cfg["warps_keys"], cfg["stages_kv"]),
            (f"selected_bwd_dq_merge{suffix}", _sel_bwd_dq_merge_kernel, merge_args, merge_consts, cfg["warps_merge"], 1),
        ]  # fmt: skip
        if not suffix:
            # The keys kernel at the other keys_dq_mma too (`_dqmma`: the cut where it is not the default,
            # sm_90; `_dqcvt`: the converted store the GPU runs measured, where it is, sm_80, at the 32
            # rows without ROWLIM it runs there: 64 with ROWLIM would spill 48 B): the probe's other
            # variant, a cheap compile.
            flip = keys_rows({**cfg, "keys_dq_mma": not cfg["keys_dq_mma"]}, arch)
            rows.append((f"selected_bwd_keys_{'dqmma' if flip['keys_dq_mma'] else 'dqcvt'}", _sel_bwd_keys_kernel,
                         keys_args, keys_consts(flip), flip["warps_keys"], flip["stages_kv"]))  # fmt: skip
            prev = keys_rows({**cfg, **KEYS_BR32_SM80}, arch)
            if arch < 90 and cfg["DP"] <= 64 and keys_consts(prev) != keys_consts(cfg):
                # sm_80's setting before 64 rows shipped (the bench/kernel_probe.py variant an A100 run
                # times beside the shipped one), so gpucheck has seen it.
                rows.append(("selected_bwd_keys_br32", _sel_bwd_keys_kernel, keys_args, keys_consts(prev),
                             prev["warps_keys"], prev["stages_kv"]))  # fmt: skip
            # The dQ merge at the other merge_tiles (`_loop`: the loop every GPU run measured).
            rows.append((f"selected_bwd_dq_merge_{'loop' if cfg['merge_tiles'] else 'tiles'}", _sel_bwd_dq_merge_kernel,
                         merge_args, {**merge_consts, "TILES": not cfg["merge_tiles"]}, cfg["warps_merge"], 1))  # fmt: skip
    return rows


def _pdq_buffer(nb: int, npos: int, G: int, D: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The dQ partials [nb, BH*T*n, G, D] in `dtype` (`pdq_dtype`), uninitialised: the keys kernel
    writes exactly the positions of the entries that add keys and the merge reads only those (a test
    fills it with NaN)."""
    return torch.empty(nb, npos, G, D, dtype=dtype, device=device)


def keys_backward(dout, q, k, v, idx, valid, out, lse, index, LP: int, scale: float, cfg: dict,
                  prec: str, delta: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """selected.py's backward with `cfg["bwd_keys"]` and forced blocks, but the dK/dV reduction: delta
    (unless handed in, float32 [B, Hkv, T, G]: then no launch and `out` is not read),
    every (query, block) pair of `index` (selected_keys.py `reverse_index`: order, start, seg_end, S,
    nseg),
    forced ones included, through the keys kernel, then the dQ merge. Returns dQ (q's dtype) and the
    segments' fp32 partial dK/dV for selected.py's reduction; PDQ is freed on return."""
    B, Hkv, T, G, D = q.shape
    arch = device_arch(q.device)
    # The rows a step as they fit the GPU's registers (a probe's patched config may flip a switch that
    # 64 rows need); the interpreter has no registers and runs any config a test asks for.
    if not interpreting():
        cfg = keys_rows(cfg, arch)
    BH, NK, DP, BN = B * Hkv, idx.shape[-1], cfg["DP"], cfg["BN"]
    pdq_type = pdq_dtype(cfg, q.dtype)  # a bad pdq_bits stops here, before any launch
    order, start, seg_end, S, nseg = index
    rows = BH * T * G
    if delta is None:
        delta = torch.empty(B, Hkv, T, G, dtype=torch.float32, device=q.device)
        _sel_bwd_delta_kernel[(cdiv(rows, cfg["BM_delta"]),)](
            out, dout, delta, rows, D=D, DP=DP, BM=cfg["BM_delta"], num_warps=cfg["warps_delta"], num_stages=1
        )  # fmt: skip
    ns, nb, npos = -(-T // LP), cdiv(LP, BN), BH * T * NK
    pdk = torch.empty(nseg, LP, DP, dtype=torch.float32, device=q.device)
    pdv = torch.empty_like(pdk)
    pdq = _pdq_buffer(nb, npos, G, D, pdq_type, q.device)
    _sel_bwd_keys_kernel[(nseg, nb)](
        q, k, v, dout, lse, delta, order, start, seg_end, pdk, pdv, pdq,
        T, ns, NK, npos, BH * ns, (BH * ns).bit_length() + 1, S, scale,
        G=G, D=D, LP=LP, DP=DP, BN=BN, BR=cfg["BR_keys"], PREC=prec, DIV32=cfg["keys_div32"],
        **dq_store_consts(cfg, arch), ROWLIM=rowlim(cfg), num_warps=cfg["warps_keys"], num_stages=cfg["stages_kv"],
    )  # fmt: skip
    dq = torch.empty_like(q)
    _sel_bwd_dq_merge_kernel[(cdiv(T * G, cfg["BM_merge"]), BH)](
        pdq, idx, valid.view(torch.int8), dq, T, NK, npos, nb,
        G=G, D=D, LP=LP, DP=DP, BM=cfg["BM_merge"], TILES=cfg["merge_tiles"], NEP=merge_slots(NK, nb),
        MU=cfg["MU_merge"], num_warps=cfg["warps_merge"], num_stages=1,
    )  # fmt: skip
    return dq, pdk, pdv
