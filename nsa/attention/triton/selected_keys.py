"""Key-major forward of NSA's selected branch for small GQA groups (FSA's loop order, issue 20).

Owns `keys_forward` (what selected.py's `_selected_fwd` runs instead of the forced split's
query-major pair when `_config(...)["fwd_keys"]` holds, G <= 8), its gpucheck rows
(`keys_fwd_gpucheck_rows`), the branch's one reverse index builder and its kernels:
- `reverse_index`: the (query, block) pairs sorted by block, cut into segments of <= S pairs
  (`_seg_pairs`), in 2 small kernels (`_sel_fwd_index_kernel`: each entry's int32 sort key;
  `_sel_fwd_segs_kernel`: the segment ends, a one-program scan) + sort, arange, searchsorted: 5
  launches. The key-major forward builds it and hands it to the backward; every backward path that
  finds none (the query-major forward ran) builds it with this same function;
- `_sel_fwd_keys_kernel`: one program per segment of the (query, block) pairs that listed one
  selection block (the reverse index and grid of the dK/dV kernel), times the key
  chunks of the block. It loads the chunk's keys and values once and runs every listing pair's G heads
  against them in full tiles of BR (pair, head) rows; each row's softmax over the chunk is written as
  a partial result: the normalised output (PO, in q's dtype) and its base-2 lse (PL, fp32; -inf when
  the row sees no key of the chunk), at the pair's flat table position. Every entry of the table goes
  this way, the forced ones (block 0, the query's own block and the one before) included: block 0's
  T pairs are split into many segments, so the grid stays balanced.
- `_sel_fwd_merge_kernel`: query-major, one program per TM tokens x G heads of one (batch, KV head).
  It combines each row's partials over its table entries and key chunks in a fixed order (entry
  slot, then chunk: deterministic, no atomics) into the output and lse the backward reads, skipping
  the entries that add no keys itself (the reverse index's rule), so PO/PL are never
  initialised. A row without any key gets zeros and lse -inf; an entry listed twice counts twice.
  The two-pass loop `_fwd_merge_loop` ships (every GPU run's); with `_config`'s merge_tiles (a probe
  variant since the H100 of 2026-11-26c measured it no faster) `_fwd_merge_tiles`: the rows' table
  metadata and PL loaded once as tiles, the PO loads 4 a step, bitwise the loop.
The partials are transient (freed when the forward returns): PO holds nb * B*Hkv*T*n * G*D elements.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from nsa.attention.triton import cdiv, device_arch, next_pow2
from nsa.attention.triton.selected_forced import forced_pass
from nsa.attention.triton.selected_keys_bwd import (
    _block_keys,
    _entry_keep,
    _magic32,
    _pair_rows,
    _pair_rows32,
    _segment_from,
    _store_rows_mma,
    dq_store_consts,
    merge_slots,
)

# As in selected.py: tl.reduce with triton's own combine functions (cheaper under the interpreter).
_max_combine = tl.standard._elementwise_max
_sum_combine = tl.standard._sum_combine


def merge_tokens(G: int, DP: int) -> int:
    """TM: tokens per merge program, so that TM*G rows (padded to a power of two) stay near 64, 32 at
    head_dim > 64. With 8 warps ptxas gave the merge 74-80 registers and no spill on triton 3.6 and 3.9
    (gpucheck, G 1/2/5/6/8 x D 64/96/128); 64 rows at head_dim 96 spilled 4 bytes on sm_80, 4 warps
    spilled at 16-32 rows on sm_90 (ptxas capped them at 64/128 registers)."""
    return max(1, (64 if DP <= 64 else 32) // G)


@triton.jit
def _sel_fwd_keys_kernel(
    Q, K, V, ORDER, BEGIN, START, SEG_END, PO, PL,
    T, NS, NK, NBLK, NSEARCH, S, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BN: tl.constexpr, BR: tl.constexpr, PREC: tl.constexpr, DIV32: tl.constexpr,
    O_WM: tl.constexpr = 0, O_WN: tl.constexpr = 0, O_ASC: tl.constexpr = True, FREE: tl.constexpr = False,
):  # fmt: skip
    # One program: BN keys (chunk nb) of one selection block against one segment (<= S pairs) of the
    # pairs that listed it; the walk is _sel_bwd_dkdv_kernel's (binary search for the block owning
    # segment s_id, then its pairs lo..hi), rows of a step are BR couples r -> (pair r // G, head r % G).
    # DIV32 (`_config`'s keys_div32, as the keys backward): the rows' step index, token and partial
    # row in 32 bits (`_pair_rows32`) and the key mask folded into the causal test; else the path the
    # GPU runs measured (an int64 step index, the rows' partial row pos * G + g in int64). O_WM / O_WN /
    # O_ASC (`fwd_store_consts`, `_config`'s keys_fwd_mma): the partial output stored in its
    # product's own layout (selected_keys_bwd.py `_store_rows_mma`); 0: after a conversion.
    # FREE (`_config`'s fwd_forced_merge): the walk takes each block's non-forced pairs only (BEGIN,
    # SEG_END: `reverse_index` with `forward`), whose tokens lie at least a block past the block's last
    # key (t >= (j + 2) * l'; the block ends before T): every row sees every key, so no mask and no
    # row without a key; `_sel_fwd_forced_merge_kernel` runs the forced blocks. Else BEGIN = START.
    s_id = tl.program_id(0)
    nb = tl.program_id(1)
    blk, lo, hi, _ = _segment_from(SEG_END, BEGIN, START, s_id, NBLK, NSEARCH, S)
    bh, kpos, kmask, k, v = _block_keys(K, V, blk, nb, NS, T, D, LP, DP, BN)
    d = tl.arange(0, DP)
    dm = d < D
    Q += bh * T * G * D
    qk_scale = sm_scale * 1.4426950408889634  # base-2 softmax
    # Partials of chunk nb start at pair position nb * P (P = BH*T*NK, the table's size).
    npos = (s_id * 0 + NBLK // NS).to(tl.int64) * T * NK  # int64: B*Hkv*T*n may pass 2**31
    PO += nb.to(tl.int64) * npos * G * D
    PL += nb.to(tl.int64) * npos * G
    r = tl.arange(0, BR)
    if DIV32:
        PO += bh * T * NK * G * D  # _pair_rows32 counts this (batch, KV head)'s rows from 0
        PL += bh * T * NK * G
        kcol = tl.where(kmask, kpos, T)  # a masked key: a column past every token
        nrows = (hi - lo).to(tl.int32) * G
        nkm, nkl = _magic32(NK)
    else:
        nrows = (hi - lo) * G
    for r0 in range(0, nrows, BR):
        if DIV32:
            rm, g, prow, tq = _pair_rows32(ORDER, lo, r0 + r, nrows, bh, T, NK, nkm, nkl, G)
        else:
            rm, g, pos, tq = _pair_rows(ORDER, lo, r0 + r, nrows, bh, T, NK, G, True)  # int32 division
        qoff = (tq * G + g)[:, None] * D + d[None, :]
        q = tl.load(Q + qoff, mask=rm[:, None] & dm[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        if FREE:
            if LP % BN != 0:  # the chunk runs past the block's l' keys
                s = tl.where(kmask[None, :], s, float("-inf"))
            m = tl.reduce(s, 1, _max_combine)
            p = tl.exp2(s - m[:, None])
            l_i = tl.reduce(p, 1, _sum_combine)
            o = tl.dot(p.to(v.dtype), v, input_precision=PREC) / l_i[:, None]
            lse = m + tl.log2(l_i)
        else:
            if DIV32:
                ok = kcol[None, :] <= tq[:, None]  # masked rows are not stored
            else:
                ok = kmask[None, :] & (kpos[None, :] <= tq[:, None])
            s = tl.where(ok, s, float("-inf"))
            m = tl.reduce(s, 1, _max_combine)
            m = tl.where(m == float("-inf"), 0.0, m)  # a row without a key of this chunk: p = 0 below
            p = tl.where(ok, tl.exp2(s - m[:, None]), 0.0)
            l_i = tl.reduce(p, 1, _sum_combine)
            has = l_i > 0
            o = tl.dot(p.to(v.dtype), v, input_precision=PREC) / tl.where(has, l_i, 1.0)[:, None]
            lse = tl.where(has, m + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        if DIV32:
            row = prow.to(tl.int64)
        else:
            row = pos * G + g
        if O_WM:
            _store_rows_mma(PO, row, o.to(PO.dtype.element_ty), rm, D, DP, BR, O_WM, O_WN, O_ASC)
        else:
            tl.store(
                PO + row[:, None] * D + d[None, :], o.to(PO.dtype.element_ty), mask=rm[:, None] & dm[None, :]
            )
        tl.store(PL + row, lse, mask=rm)


@triton.jit
def _sel_fwd_merge_kernel(
    PO, PL, IDX, VALID, OUT, LSE,
    T, NK, NB,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, TM: tl.constexpr, RM: tl.constexpr,
    DP: tl.constexpr, TILES: tl.constexpr = False, NEP: tl.constexpr = 16, MU: tl.constexpr = 4,
):  # fmt: skip
    # One program: tokens [t0, t0 + TM) of one (batch, KV head), rows r -> (token t0 + r // G, head
    # r % G), RM = TM*G padded to a power of two. TILES (`_config`'s merge_tiles): `_fwd_merge_tiles`,
    # no dependent load in a loop; else (the loop the GPU runs measured) two passes over the row's
    # partials in the same fixed order (entry slot, then key chunk): the largest lse M, then
    # sum_i exp2(lse_i - M) * o_i, each step loading IDX and VALID, then the partials they mask.
    t0 = tl.program_id(0) * TM
    bh = tl.program_id(1).to(tl.int64)
    r = tl.arange(0, RM)
    d = tl.arange(0, DP)
    dm = d < D
    t = t0 + r // G
    g = r % G
    rm = (r < TM * G) & (t < T)
    npos = tl.num_programs(1).to(tl.int64) * T * NK
    ebase = (bh * T + t) * NK  # the row's token's first table position
    if TILES:
        acc, l_i, m_s, has = _fwd_merge_tiles(
            PO, PL, IDX, VALID, T, NK, NB, t0, bh, d, dm, t, g, rm, npos, ebase, G, D, LP, RM, DP, NEP, MU
        )
    else:
        acc, l_i, m_s, has = _fwd_merge_loop(
            PO, PL, IDX, VALID, NK, NB, d, dm, t, g, rm, npos, ebase, G, D, LP, RM, DP
        )
    out = acc / tl.where(has, l_i, 1.0)[:, None]  # zeros for a row without any key
    lse_out = tl.where(has, m_s + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    orow = (bh * T + t) * G + g
    tl.store(
        OUT + orow[:, None] * D + d[None, :], out.to(OUT.dtype.element_ty), mask=rm[:, None] & dm[None, :]
    )
    tl.store(LSE + orow, lse_out, mask=rm)


@triton.jit
def _sel_fwd_forced_merge_kernel(
    Q, K, V, IDX, VALID, PO, PL, OUT, LSE,
    T, NK, NB, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    # `_config`'s fwd_forced_merge: the forward's last kernel, on selected_forced.py's grid (BM
    # consecutive (token, head) rows of one (batch, KV head)). The forced blocks as that file's dense
    # causal pass (role biases: exact for any table), then the row's other entries' partials (the FREE
    # keys kernel's, tokens t >= (j + 2) * l') folded into the same online softmax state, in a fixed
    # order (entry slot, then key chunk: deterministic, no atomics), and out / lse stored. It replaces
    # `_sel_fwd_merge_kernel`: the forced pairs never cross DRAM as partials.
    bh = tl.program_id(1).to(tl.int64)
    r, rm, t, d, dm, m_i, l_i, acc = forced_pass(
        Q, K, V, IDX, VALID, tl.program_id(0) * BM, bh, T, NK, sm_scale, G, D, LP, DP, BM, BK, PREC
    )
    g = r % G
    qoff = r[:, None] * D + d[None, :]
    qmask = rm[:, None] & dm[None, :]
    ebase = (bh * T + t) * NK  # the row's token's first table position
    # The partials: (entry, chunk) couples e -> (e // NB, e % NB); a kept entry's partial lse is
    # finite (its row saw the whole chunk).
    npos = tl.num_programs(1).to(tl.int64) * T * NK
    pl_ptr = PL + ebase * G + g
    po_ptr = PO + (ebase * G + g)[:, None] * D + d[None, :]
    for e in range(0, NK * NB):
        i = e // NB
        j = tl.load(IDX + ebase + i, mask=rm, other=-1)
        keep = rm & (tl.load(VALID + ebase + i, mask=rm, other=0) != 0) & (j >= 1) & ((j + 2) * LP <= t)
        off = ((e % NB) * npos + i) * G
        pl = tl.load(pl_ptr + off, mask=keep, other=float("-inf"))
        po = tl.load(po_ptr + off * D, mask=keep[:, None] & dm[None, :], other=0.0)
        m_new = tl.maximum(m_i, pl)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        w = tl.exp2(pl - m_safe)  # 0 where not kept
        l_i = l_i * alpha + w
        acc = acc * alpha[:, None] + w[:, None] * po.to(tl.float32)
        m_i = m_new
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]  # zeros for a row without any key
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(OUT + bh * T * G * D + qoff, out.to(OUT.dtype.element_ty), mask=qmask)
    tl.store(LSE + bh * T * G + r, lse, mask=rm)


@triton.jit
def _fwd_merge_loop(
    PO, PL, IDX, VALID, NK, NB, d, dm, t, g, rm, npos, ebase,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, RM: tl.constexpr, DP: tl.constexpr,
):  # fmt: skip
    """The measured merge's two passes (the kernel's rows): (acc, l, M, has) for its epilogue."""
    # One loop over (entry, chunk) couples e -> (e // NB, e % NB), with the partials' row pointers
    # built once and moved by a scalar per step (nested loops and per-step [RM, DP] int64 offsets
    # cost registers: ptxas spilled a few bytes at head_dim 96/128).
    pl_ptr = PL + ebase * G + g
    po_ptr = PO + (ebase * G + g)[:, None] * D + d[None, :]
    m_i = tl.full([RM], float("-inf"), tl.float32)
    for e in range(0, NK * NB):
        i = e // NB
        j = tl.load(IDX + ebase + i, mask=rm, other=-1)
        keep = rm & (tl.load(VALID + ebase + i, mask=rm, other=0) != 0) & (j >= 0) & (j * LP <= t)
        off = ((e % NB) * npos + i) * G
        m_i = tl.maximum(m_i, tl.load(pl_ptr + off, mask=keep, other=float("-inf")))
    has = m_i > float("-inf")
    m_s = tl.where(has, m_i, 0.0)
    l_i = tl.zeros([RM], tl.float32)
    acc = tl.zeros([RM, DP], tl.float32)
    for e in range(0, NK * NB):
        i = e // NB
        j = tl.load(IDX + ebase + i, mask=rm, other=-1)
        keep = rm & (tl.load(VALID + ebase + i, mask=rm, other=0) != 0) & (j >= 0) & (j * LP <= t)
        off = ((e % NB) * npos + i) * G
        w = tl.exp2(tl.load(pl_ptr + off, mask=keep, other=float("-inf")) - m_s)  # 0: -inf or not kept
        o = tl.load(po_ptr + off * D, mask=keep[:, None] & dm[None, :], other=0.0)
        l_i += w
        acc += w[:, None] * o.to(tl.float32)
    return acc, l_i, m_s, has


@triton.jit
def _fwd_merge_tiles(
    PO, PL, IDX, VALID, T, NK, NB, t0, bh, d, dm, t, g, rm, npos, ebase,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr, RM: tl.constexpr, DP: tl.constexpr,
    NEP: tl.constexpr, MU: tl.constexpr,
):  # fmt: skip
    """`_fwd_merge_loop`'s merge with its load addresses known ahead: the rows' table metadata as one
    [RM, NEP] tile of (entry, chunk) couples e -> (e // NB, e % NB) (IDX, VALID -> keep), PL as one
    tile masked by it (M = its row max: max is exact, the loop's running max to the bit), the weights
    w = exp2(PL - M) from that tile, then the PO loads in the loop's order (entry slot, then chunk),
    MU of them unrolled a step (independent loads in flight together; all NEP at once held 255
    registers on sm_80, `_config`'s MU_m), each row's weight and keep taken out of the tile by a
    select and a sum (one term and zeros: exact). l and acc take the loop's float operations in its
    order, so out and lse are bitwise its; a padded couple (e >= NK*NB) adds +0.0 to l (never -0.0: it
    starts at +0.0) and loads nothing. 2 + NEP / MU dependent memory latencies a program (metadata,
    PL, then a step's PO), against ~4 an entry in the loop. Returns (acc, l, M, has) for the kernel's
    epilogue."""
    e, meta, keep = _entry_keep(IDX, VALID, ebase, rm, t, NK, NB, LP, NEP)
    pl = tl.load(PL + ((e % NB)[None, :] * npos + meta) * G + g[:, None], mask=keep, other=float("-inf"))
    m_i = tl.reduce(pl, 1, _max_combine)
    has = m_i > float("-inf")
    m_s = tl.where(has, m_i, 0.0)
    # The weight where kept (0 <= w <= 1), else -1: one select and sum a step gives both.
    wk = tl.where(keep, tl.exp2(pl - m_s[:, None]), -1.0)
    # The rows' partials as one scalar pointer (int64) and int32 offsets from it (< TM*NK*G*D): an
    # int64 pointer tile held across the loop cost 2 registers an element.
    PO += (bh * T + t0) * NK * G * D
    prel = ((t - t0) * NK * G + g)[:, None] * D + d[None, :]
    l_i = tl.zeros([RM], tl.float32)
    acc = tl.zeros([RM, DP], tl.float32)
    for c0 in range(0, NEP, MU):
        for u in tl.static_range(MU):
            c = c0 + u
            x = tl.reduce(tl.where(e[None, :] == c, wk, 0.0), 1, _sum_combine)
            kc = x >= 0.0
            w = tl.where(kc, x, 0.0)  # the loop's exp2(-inf - M) = 0 where not kept
            off = ((c % NB) * npos + c // NB) * G
            o = tl.load(PO + off * D + prel, mask=kc[:, None] & dm[None, :], other=0.0)
            l_i += w
            acc += w[:, None] * o.to(tl.float32)
    return acc, l_i, m_s, has


@triton.jit
def _sel_fwd_index_kernel(
    IDX, VALID, KEY, T, NK, NS, NBLK, LP: tl.constexpr, BLOCK: tl.constexpr, FWD: tl.constexpr,
):  # fmt: skip
    # The sort key of every table entry (one launch instead of ~9 aten ops): its global
    # block gb = bh*NS + j when the entry adds keys (valid, j >= 0, j*LP <= t), else NBLK (sorts last).
    # FWD (`_config`'s fwd_forced_merge): 2*gb + late instead (else 2*NBLK), late = the pair is one the
    # FREE keys walk runs, its token t >= (j + 2) * LP with j >= 1 (block 0 and a token's own block and
    # the one before are forced). A block's forced tokens all precede its late ones, and the stable sort
    # keeps a block's pairs in table (token) order either way, so the order is the same as without FWD,
    # and one searchsorted over 2*NBLK + 1 keys finds each block's start and first late pair (begin).
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    pm = pos // NK // T < NBLK // NS
    j = tl.load(IDX + pos, mask=pm, other=-1)
    t = (pos // NK) % T
    ok = (tl.load(VALID + pos, mask=pm, other=0) != 0) & (j >= 0) & (j * LP <= t)
    gb = j + pos // (T * NK) * NS
    if FWD:
        key = tl.where(ok, 2 * gb + ((j >= 1) & (t >= (j + 2) * LP)).to(tl.int64), 2 * NBLK)
    else:
        key = tl.where(ok, gb, NBLK)
    tl.store(KEY + pos, key.to(tl.int32), mask=pm)


@triton.jit
def _sel_fwd_segs_kernel(
    BOUNDS, START, SEG_END, BEGIN, SEG_END_F, NBLK, S,
    BLOCK: tl.constexpr, FWD: tl.constexpr,
):  # fmt: skip
    # One program: SEG_END = cumsum(ceil(count_b / S)) over the blocks, BLOCK at a time with a carry
    # (4 aten ops' work in one launch; NBLK = B*Hkv*ceil(T/l') is small). BOUNDS is the searchsorted of
    # the sorted keys: START itself without FWD (read, not written). FWD (`_config`'s fwd_forced_merge):
    # BOUNDS holds 2*NBLK + 1 entries (`_sel_fwd_index_kernel`'s keys 2*gb + late), block b's pairs
    # BOUNDS[2b]..BOUNDS[2b+2], its late ones (those the FREE keys walk runs) from BEGIN[b] =
    # BOUNDS[2b+1]; this writes START (the backward's index, NBLK + 1 entries), BEGIN and SEG_END_F,
    # the late pairs' segments' cumsum.
    b = tl.arange(0, BLOCK)
    carry = tl.sum(b * 0, 0).to(tl.int64)
    carry_f = carry
    for c in range(0, NBLK, BLOCK):
        bm = (c + b) < NBLK
        if FWD:
            s0 = tl.load(BOUNDS + 2 * (c + b), mask=bm, other=0)
            first = tl.load(BOUNDS + 2 * (c + b) + 1, mask=bm, other=0)
            s1 = tl.load(BOUNDS + 2 * (c + b) + 2, mask=bm, other=0)
            tl.store(START + c + b, s0, mask=bm)
            tl.store(START + c + b + 1, s1, mask=bm & (c + b == NBLK - 1))
            tl.store(BEGIN + c + b, first, mask=bm)
            nseg_f = (s1 - first + S - 1) // S
            tl.store(SEG_END_F + c + b, carry_f + tl.cumsum(nseg_f, 0), mask=bm)
            carry_f += tl.sum(nseg_f, 0)
        else:
            s0 = tl.load(BOUNDS + c + b, mask=bm, other=0)
            s1 = tl.load(BOUNDS + c + b + 1, mask=bm, other=0)
        nseg = (s1 - s0 + S - 1) // S
        tl.store(SEG_END + c + b, carry + tl.cumsum(nseg, 0), mask=bm)
        carry += tl.sum(nseg, 0)


INDEX_BLOCK = 1024  # table entries per program of _sel_fwd_index_kernel, blocks per step of the scan


def _seg_pairs(T: int, pairs: int = 0, target: int = 0) -> int:
    """S, (query, block) pairs per segment of the key-major kernels: bounds a program's work (block 0 is
    listed by every query) while keeping the partial-dK/dV buffer small: T/4 pairs, clamped to [16, 2048].
    With `target` (selected.py `_config`'s seg_target; 0: off) also at most the table's `pairs` (B*Hkv*T*n)
    / target, rounded to powers of two (floor 16): at least ~target segments a launch, so a short grid
    (B = 1 at 8k: 2 (batch, KV head) sequences at M7C) is not as long as its few longest programs."""
    S = min(2048, max(16, next_pow2(T) // 4))
    if target and pairs:
        S = min(S, max(16, next_pow2(pairs) // next_pow2(target)))
    return S


def index_bounds(BH: int, T: int, NK: int, LP: int, target: int = 0) -> tuple[int, int]:
    """(S, NSEG) of `reverse_index` for a table [BH, T, NK] and `_config`'s seg_target: pairs per segment
    and the static bound on the segments, from the shape alone (the backward takes them so for the
    forward's index, with the same config)."""
    S = _seg_pairs(T, BH * T * NK, target)
    return S, BH * -(-T // LP) + -(-(BH * T * NK) // S)


def reverse_index(idx: Tensor, valid8: Tensor, LP: int, target: int = 0, forward: bool = False) -> tuple:
    """The selected branch's reverse index, the only one: the (query, block) pairs sorted by block, cut
    into segments of at most S pairs, in 2 kernels and 3 aten ops (sort, arange, searchsorted), no
    host sync. Built once per layer call: the key-major forward's, shared with the backward (selected.py
    `_selected_fwd` returns it), or the backward's own where the forward built none.

    Returns order [BH*T*n] (each sorted pair's flat position in the table [BH, T, n]; entries that add
    no keys -- invalid, block < 0 or after the query -- sort last), start [BH*Ns + 1] (where block b's
    pairs begin), seg_end [BH*Ns] (cumulative count of S-pair segments), S (`_seg_pairs`, at `target`:
    `_config`'s seg_target) and NSEG
    = BH*Ns + ceil(BH*T*n / S), a static bound on the segments (a block with c pairs uses ceil(c/S) <
    c/S + 1 of them): the key-major grids. S and NSEG are Python ints of the static shape.

    With `forward` (`_config`'s fwd_forced_merge) two more, from the same launches: begin [BH*Ns]
    (block b's first non-forced pair: its pairs of tokens t >= (j + 2) * l', j >= 1) and seg_end_f
    (their segments' cumsum), the FREE keys forward's walk (NSEG bounds it too)."""
    B, Hkv, T, NK = idx.shape
    BH, ns = B * Hkv, -(-T // LP)
    nblk, npos = BH * ns, BH * T * NK
    S, nseg = index_bounds(BH, T, NK, LP, target)
    # int32 sort keys (global block ids <= NBLK; with `forward` 2 * id + late <= 2 * NBLK): a radix sort
    # of half the key bits of int64 ones, the same stable order (entries that add no keys sort last).
    # With `forward`, the searchsorted's odd bounds are each block's begin: no search of the pairs (the
    # scan's binary search of each block's pairs before 2026-11-27's thirteenth session: ~20 dependent
    # loads a block step in its one program, on the forward's path).
    key = torch.empty(npos, dtype=torch.int32, device=idx.device)
    _sel_fwd_index_kernel[(cdiv(npos, INDEX_BLOCK),)](
        idx, valid8, key, T, NK, ns, nblk, LP=LP, BLOCK=INDEX_BLOCK, FWD=forward, num_warps=4, num_stages=1
    )
    skey, order = torch.sort(key, stable=True)
    nkeys = 2 * nblk if forward else nblk
    bounds = torch.searchsorted(skey, torch.arange(nkeys + 1, dtype=torch.int32, device=idx.device))
    seg_end = torch.empty(nblk, dtype=torch.int64, device=idx.device)
    # The forward's pairs (FWD: start written from bounds), else the kernel's unused pointers.
    start = torch.empty(nblk + 1, dtype=torch.int64, device=idx.device) if forward else bounds
    begin, seg_end_f = (torch.empty_like(seg_end) for _ in range(2)) if forward else (start, seg_end)
    _sel_fwd_segs_kernel[(1,)](
        bounds, start, seg_end, begin, seg_end_f, nblk, S, BLOCK=INDEX_BLOCK, FWD=forward, num_warps=4, num_stages=1,
    )  # fmt: skip
    if forward:
        return order, start, seg_end, S, nseg, begin, seg_end_f
    return order, start, seg_end, S, nseg


def keys_forward(
    q: Tensor, k: Tensor, v: Tensor, idx: Tensor, valid8: Tensor, out: Tensor, lse: Tensor,
    LP: int, scale: float, cfg: dict, prec: str,
) -> tuple[Tensor, Tensor, Tensor, int, int]:  # fmt: skip
    """The key-major forward into `out`/`lse` (selected.py's `_selected_fwd` with `fwd_keys`): the
    index, partials per (pair, key chunk), the merge. PO/PL are left uninitialised (the merge reads
    only what the keys kernel wrote) and freed on return. Returns the index (`reverse_index`'s
    tuple), which the backward reuses."""
    B, Hkv, T, G, D = q.shape
    BH, NK = B * Hkv, idx.shape[-1]
    free = bool(cfg["fwd_forced_merge"])
    index = reverse_index(idx, valid8, LP, cfg["seg_target"], forward=free)
    order, start, seg_end, S, nseg = index[:5]
    begin, walk = index[5:] if free else (start, seg_end)
    ns = -(-T // LP)
    nb = cdiv(LP, cfg["BN"])
    po = torch.empty(nb, BH * T * NK, G, D, dtype=q.dtype, device=q.device)
    pl = torch.empty(nb, BH * T * NK, G, dtype=torch.float32, device=q.device)
    _sel_fwd_keys_kernel[(nseg, nb)](
        q, k, v, order, begin, start, walk, po, pl, T, ns, NK, BH * ns, (BH * ns).bit_length() + 1, S, scale,
        G=G, D=D, LP=LP, DP=cfg["DP"], BN=cfg["BN"], BR=cfg["BR_f"], PREC=prec, DIV32=cfg["keys_div32"],
        **fwd_store_consts(cfg, device_arch(q.device)), FREE=free,
        num_warps=cfg["warps_fk"], num_stages=cfg["stages_fk"],
    )  # fmt: skip
    if free:
        _sel_fwd_forced_merge_kernel[(cdiv(T * G, cfg["BM"]), BH)](
            q, k, v, idx, valid8, po, pl, out, lse, T, NK, nb, scale,
            G=G, D=D, LP=LP, DP=cfg["DP"], BM=cfg["BM"], BK=cfg["BK"], PREC=prec,
            num_warps=cfg["warps_f"], num_stages=cfg["stages_f"],
        )  # fmt: skip
    else:
        _sel_fwd_merge_kernel[(cdiv(T, cfg["TM"]), BH)](
            po, pl, idx, valid8, out, lse, T, NK, nb,
            G=G, D=D, LP=LP, TM=cfg["TM"], RM=cfg["RM"], DP=cfg["DP"], TILES=cfg["merge_tiles"],
            NEP=merge_slots(NK, nb), MU=cfg["MU_m"], num_warps=cfg["warps_m"], num_stages=1,
        )  # fmt: skip
    return index[:5]


KEY_MAJOR_FWD = ("selected_fwd_index", "selected_fwd_segs", "selected_fwd_keys", "selected_fwd_merge")


def fwd_store_consts(cfg: dict, arch: int) -> dict[str, int | bool]:
    """The keys forward's O_WM / O_WN / O_ASC for `cfg` on sm_`arch` (selected_keys_bwd.py
    `dq_store_consts` for its [BR_f, DP] output product): `_config`'s keys_fwd_mma stores each
    step's partial output in the product's own layout (`_store_rows_mma`); off (0, 0), the store
    after a conversion through shared memory that the GPU runs measured."""
    c = dq_store_consts({**cfg, "keys_dq_mma": cfg["keys_fwd_mma"], "BR_keys": cfg["BR_f"],
                         "warps_keys": cfg["warps_fk"]}, arch)  # fmt: skip
    return {"O_WM": c["DQ_WM"], "O_WN": c["DQ_WN"], "O_ASC": c["DQ_ASC"]}


def keys_fwd_gpucheck_rows(
    cfg: dict, G: int, D: int, LP: int, dt: str, prec: str, arch: int = 80, NK: int = 16
) -> list[tuple]:
    """gpucheck rows (name, kernel, argument types, constexprs, warps, stages) of `keys_forward`'s four
    kernels, with its exact launch settings on sm_`arch` for tables of NK entries; selected.gpucheck_specs
    adds them where fwd_keys holds. The keys kernel also at the other keys_fwd_mma
    (`selected_fwd_keys_omma` / `_ocvt`) and the merge at the other merge_tiles (`selected_fwd_merge_loop`
    / `_tiles`): the probe's variants. fwd_forced_merge's pair: where it holds, `selected_fwd_keys` is
    the FREE walk and `selected_fwd_forced_merge` ends the forward, and the masked walk
    (`selected_fwd_keys_masked`) and the separate merge (`selected_fwd_merge`) are the variants; else
    the other way round (`selected_fwd_keys_free`, `selected_fwd_forced_merge` the variants), at head_dim
    <= 64 only (past it the switch is off and its kernels are not compiled)."""
    ptr, f32, i32, i64, i8 = f"*{dt}", "*fp32", "i32", "*i64", "*i8"
    free = bool(cfg["fwd_forced_merge"])
    fk_consts = {"G": G, "D": D, "LP": LP, "DP": cfg["DP"], "BN": cfg["BN"], "BR": cfg["BR_f"], "PREC": prec,
                 "DIV32": cfg["keys_div32"], **fwd_store_consts(cfg, arch), "FREE": free}  # fmt: skip
    fk_args = dict(
        Q=ptr, K=ptr, V=ptr, ORDER=i64, BEGIN=i64, START=i64, SEG_END=i64, PO=ptr, PL=f32,
        T=i32, NS=i32, NK=i32, NBLK=i32, NSEARCH=i32, S=i32, sm_scale="fp32",
    )  # fmt: skip
    fm_args = dict(Q=ptr, K=ptr, V=ptr, IDX=i64, VALID=i8, PO=ptr, PL=f32, OUT=ptr, LSE=f32,
                   T=i32, NK=i32, NB=i32, sm_scale="fp32")  # fmt: skip
    fm_consts = {"G": G, "D": D, "LP": LP, "DP": cfg["DP"], "BM": cfg["BM"], "BK": cfg["BK"], "PREC": prec}
    m_consts = {"G": G, "D": D, "LP": LP, "TM": cfg["TM"], "RM": cfg["RM"], "DP": cfg["DP"],
                "TILES": cfg["merge_tiles"], "NEP": merge_slots(NK, cdiv(LP, cfg["BN"])), "MU": cfg["MU_m"]}  # fmt: skip
    m_args = dict(PO=ptr, PL=f32, IDX=i64, VALID=i8, OUT=ptr, LSE=f32, T=i32, NK=i32, NB=i32)
    ix_args = dict(IDX=i64, VALID=i8, KEY="*i32", T=i32, NK=i32, NS=i32, NBLK=i32)
    sg_args = dict(BOUNDS=i64, START=i64, SEG_END=i64, BEGIN=i64, SEG_END_F=i64, NBLK=i32, S=i32)
    ix_consts = {"LP": LP, "BLOCK": INDEX_BLOCK, "FWD": free}
    sg_consts = {"BLOCK": INDEX_BLOCK, "FWD": free}
    flip = {**cfg, "keys_fwd_mma": not cfg["keys_fwd_mma"]}
    merge = ("selected_fwd_merge", _sel_fwd_merge_kernel, m_args, m_consts, cfg["warps_m"], 1)
    forced = ("selected_fwd_forced_merge", _sel_fwd_forced_merge_kernel, fm_args, fm_consts, cfg["warps_f"],
              cfg["stages_f"])  # fmt: skip
    # The other side of fwd_forced_merge, where it can ship (head_dim <= 64: `_config`).
    other = [
        (f"selected_fwd_keys_{'masked' if free else 'free'}", _sel_fwd_keys_kernel, fk_args,
         {**fk_consts, "FREE": not free}, cfg["warps_fk"], cfg["stages_fk"]),
        (f"selected_fwd_index_{'all' if free else 'fwd'}", _sel_fwd_index_kernel, ix_args,
         {**ix_consts, "FWD": not free}, 4, 1),
        (f"selected_fwd_segs_{'all' if free else 'fwd'}", _sel_fwd_segs_kernel, sg_args,
         {**sg_consts, "FWD": not free}, 4, 1),
        merge if free else forced,
    ] if cfg["DP"] <= 64 else []  # fmt: skip
    return [
        ("selected_fwd_index", _sel_fwd_index_kernel, ix_args, ix_consts, 4, 1),
        ("selected_fwd_segs", _sel_fwd_segs_kernel, sg_args, sg_consts, 4, 1),
        ("selected_fwd_keys", _sel_fwd_keys_kernel, fk_args, fk_consts, cfg["warps_fk"], cfg["stages_fk"]),
        forced if free else merge,
        *other,
        (f"selected_fwd_keys_{'omma' if flip['keys_fwd_mma'] else 'ocvt'}", _sel_fwd_keys_kernel, fk_args,
         {**fk_consts, **fwd_store_consts(flip, arch)}, cfg["warps_fk"], cfg["stages_fk"]),
        (f"selected_fwd_merge_{'loop' if cfg['merge_tiles'] else 'tiles'}", _sel_fwd_merge_kernel, m_args,
         {**m_consts, "TILES": not cfg["merge_tiles"]}, cfg["warps_m"], 1),
    ]  # fmt: skip
