"""The selection kernel of NSA's compressed branch [Eq. 9-11] and its jit helpers: `_cmp_select`.

Owns the kernel that turns the compressed attention's saved row log-sum-exp into the selection
table: per (batch, KV head, token tile), all G heads of each token as rows, it recomputes each key
tile's final probabilities (1 QK product), sums them over the group [Eq. 10], maps them onto float32
selection-block scores [Eq. 9] and keeps a running top-n per token [Eq. 11] in the order of eager's
`topk` on the key (float bits << 32) | j, on int32 bits with the tie-break by j done by position
(a lone entering key put at its rank instead: `_insert_one`).
Launched, configured and checked by `nsa.attention.triton.compressed` (docs/attention.md,
"compressed branch and selection"); `_cmp_select_v0` (compressed_select_v0.py) is the kernel it
replaced, kept for one GPU comparison."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _eq9_sum(pg, w_u0: tl.constexpr, w_du: tl.constexpr, NU: tl.constexpr, BT: tl.constexpr,
             BJ: tl.constexpr, M: tl.constexpr, A: tl.constexpr, R: tl.constexpr):  # fmt: skip
    """Part of Eq. 9: pg [BT, BJ * M] (column j * M + m: group-summed probability of the m-th key
    that block j weighs here) weighted by w[w_u0 + w_du * m] (selection.overlap_weights; 0 for
    m >= NU) and summed over m: [BT, BJ] float32, one reduction of the same shape for every block."""
    m = tl.arange(0, M)
    u = w_u0 + w_du * m
    w = tl.minimum(tl.minimum(u + 1, A), tl.minimum(R, A + R - 1 - u))
    w = tl.where(m < NU, w, 0).to(tl.float32)
    return tl.sum(tl.reshape(pg, [BT, BJ, M]) * w[None, None, :], axis=2)


@triton.jit
def _block_scores(p, prev, BT: tl.constexpr, GP: tl.constexpr, BJ: tl.constexpr, RP: tl.constexpr,
                  SP: tl.constexpr, A: tl.constexpr, R: tl.constexpr):  # fmt: skip
    """Eq. 10 and Eq. 9 for one key tile: p [BT * GP, BJ * RP] final probabilities of the blocks' own
    keys (key r * j + m in column j * RP + m) -> [BT, BJ] float32 block scores, and the tile's
    group-summed probabilities [BT, BJ * RP] for the next tile.

    Block j weighs its own key r*j + m by w[m + a - 1] and the key r*j - 1 - s before it (s < a - 1,
    in this tile or the previous one) by w[a - 2 - s]. Those are fetched by an exact gather (a copy of
    the same float, never a second product), so every block's score is the same float operations on
    its keys' probabilities: equal probabilities give bit-equal scores (exact ties stay ties)."""
    pg = tl.sum(tl.reshape(p, [BT, GP, BJ * RP]), axis=1)  # Eq. 10
    score = _eq9_sum(pg, A - 1, 1, R, BT, BJ, RP, A, R)
    if A > 1:
        c = tl.arange(0, BJ * SP)
        k = (c // SP) * R - 1 - c % SP  # the key, relative to the tile's first
        here = k >= 0
        k = tl.where(here, k, k + BJ * R)  # in the previous tile (BJ * R >= a - 1: compressed._config)
        col = tl.broadcast_to(((k // R) * RP + k % R)[None, :], [BT, BJ * SP])
        near = tl.where(here[None, :], tl.gather(pg, col, 1), tl.gather(prev, col, 1))
        score += _eq9_sum(near, A - 2, -1, A - 1, BT, BJ, SP, A, R)
    return score, pg


@triton.jit
def _block_scores_shm(p, rot, BT: tl.constexpr, GP: tl.constexpr, BJ: tl.constexpr, RP: tl.constexpr,
                      A: tl.constexpr, R: tl.constexpr):  # fmt: skip
    """`_block_scores` at a = 2 (one key a block shares with the one before: SP 1) without its two
    [BT, BJ * RP] gathers (select_shm): each block's last key's group sum taken out of Eq. 9's own
    reshape (a masked sum over its r keys: x + 0.0 is x), rotated one block on by one [BT, BJ] gather
    (block 0 gets the tile's last block's); block 0 takes it from the previous tile's rotation `rot`
    instead (carried whole, so no reduction picks it out). The same float operations in the same
    order as `_block_scores` (its neighbour sum has one term): bit-equal scores. Returns (scores,
    this tile's rotation)."""
    tl.static_assert(A == 2)
    pg = tl.sum(tl.reshape(p, [BT, GP, BJ * RP]), axis=1)  # Eq. 10
    score = _eq9_sum(pg, A - 1, 1, R, BT, BJ, RP, A, R)
    m = tl.arange(0, RP)
    tail = tl.sum(tl.where((m == R - 1)[None, None, :], tl.reshape(pg, [BT, BJ, RP]), 0.0), axis=2)
    jj = tl.arange(0, BJ)
    here = tl.gather(tail, tl.broadcast_to(((jj + BJ - 1) % BJ)[None, :], [BT, BJ]), 1)
    near = tl.where((jj == 0)[None, :], rot, here)
    score += _eq9_sum(near, A - 2, -1, A - 1, BT, BJ, 1, A, R)
    return score, here


@triton.jit
def _merge_top(top_b, top_j, kb, kj, W: tl.constexpr, BJ: tl.constexpr):
    """The W first of the union of `top` ([.., W] bits and j, sorted like eager's keys) and the tile's
    keys (`kb` [.., BJ] bits, `kj` their j ascending, every one above all of top's), in that order.

    Eager's key (bits << 32) | j orders by bits, then larger j first; the tile's j are all larger
    than top's, so a key goes ahead of a top entry iff its bits are >=, and ahead of another key iff
    its bits are larger, or equal and it comes later. Fillers (bits -1) obey the same order, so the
    ranks are a permutation; each slot takes the one entry of its rank (exact integer selects, no
    sorting network). Every per-entry vector is used as v[:, None, :] except where a rank is counted
    across it, so the only layout changes are top's bits one way and the result back (registers and
    barriers: bench/select_sass.py). Where W == BJ the top's and the keys' counts and placements share
    one reduction each."""
    pos_w = tl.arange(0, W)
    pos_j = tl.arange(0, BJ)
    # [.., j, i]: key j goes ahead of top entry i.
    rank_top = pos_w[None, :] + tl.sum((kb[:, :, None] >= top_b[:, None, :]).to(tl.int32), axis=1)
    # [.., x, j]: key x, or top entry x, goes ahead of key j. For integers, (a > b) or (a == b and x
    # later) is a > b - [x later]: one subtraction and one compare (no overflow: b >= -1).
    later = (pos_j[:, None] > pos_j[None, :]).to(tl.int32)
    ahead = kb[:, :, None] > kb[:, None, :] - later[None, :, :]
    top_ahead = top_b[:, :, None] > kb[:, None, :]
    slot = pos_w[None, :, None]  # [.., slot, x]
    if W == BJ:
        rank_key = tl.sum(ahead.to(tl.int32) + top_ahead.to(tl.int32), axis=1)
        at_t = rank_top[:, None, :] == slot
        at_k = rank_key[:, None, :] == slot
        # (Nested selects instead of the adds issue ~60 fewer instructions but spilled 24 B on sm_80 at
        # G 16 x D 128, triton 3.9.)
        vb = tl.where(at_t, top_b[:, None, :], 0) + tl.where(at_k, kb[:, None, :], 0)
        vj = tl.where(at_t, top_j[:, None, :], 0) + tl.where(at_k, kj[None, None, :], 0)
        new_b, new_j = tl.sum(vb, axis=2), tl.sum(vj, axis=2)
    else:
        rank_key = tl.sum(ahead.to(tl.int32), axis=1) + tl.sum(top_ahead.to(tl.int32), axis=1)
        at_t = rank_top[:, None, :] == slot
        at_k = rank_key[:, None, :] == slot
        new_b = tl.sum(tl.where(at_t, top_b[:, None, :], 0), axis=2)
        new_b += tl.sum(tl.where(at_k, kb[:, None, :], 0), axis=2)
        new_j = tl.sum(tl.where(at_t, top_j[:, None, :], 0), axis=2)
        new_j += tl.sum(tl.where(at_k, kj[None, None, :], 0), axis=2)
    return new_b, new_j


@triton.jit
def _select_tile(top_b, top_j, score, tb, t_end, jb, NS, BJ: tl.constexpr, W: tl.constexpr, LS: tl.constexpr):
    """Eq. 11 for one key tile and tokens `tb` (those < t_end): the tile's block scores ([.., BJ]
    float32) as eager's key bits (forced blocks 0, t//l', t//l'-1 at +inf bits, non-candidates -1),
    merged into the running top-W when one of them would enter it."""
    jt = tb // LS
    j = jb * BJ + tl.arange(0, BJ)
    cand = (j[None, :] * LS <= tb[:, None]) & (tb[:, None] < t_end) & (j[None, :] < NS)
    bits = score.to(tl.int32, bitcast=True) & 0x7FFFFFFF  # drops the sign of -0.0, as eager does
    forced = (j[None, :] == 0) | (j[None, :] == jt[:, None]) | (j[None, :] == jt[:, None] - 1)
    kb = tl.where(cand, tl.where(forced, 0x7F800000, bits), -1)
    # top_b is sorted: its last column is the W-th key. A key enters iff its bits are >= that (ties go
    # to the later j); fillers (-1) never need to. Far tiles mostly hold no such key.
    floor = tl.maximum(tl.min(top_b, axis=1), 0)
    if tl.max((kb >= floor[:, None]).to(tl.int32)) > 0:
        top_b, top_j = _merge_top(top_b, top_j, kb, j, W, BJ)
    return top_b, top_j


@triton.jit
def _insert_one(top_b, top_j, kb, kj, enter, W: tl.constexpr):
    """`_merge_top` where at most one key of each token enters (`enter`: kb >= the token's floor; the
    others are below its W-th key, or non-candidates at -1 where fillers remain, whose place among
    the fillers no table shows): that key x goes in at its rank, r = top entries with larger bits
    (ties go to x, the later j), the entries from r on move one slot down and the last drops out.
    Tokens where none enters keep their top. The same valid entries in the same slots as the merge,
    for one gather of the top a slot on instead of its [.., W, BJ] ranks and placements."""
    xb = tl.max(tl.where(enter, kb, -1), axis=1)
    xj = tl.max(tl.where(enter, kj[None, :], -1), axis=1)
    r = tl.sum((top_b > xb[:, None]).to(tl.int32), axis=1)
    pos = tl.arange(0, W)[None, :]
    src = tl.broadcast_to(tl.maximum(pos - 1, 0), top_b.shape)
    down_b = tl.gather(top_b, src, 1)
    down_j = tl.gather(top_j, src, 1)
    at = pos == r[:, None]
    keep = (pos < r[:, None]) | (xb < 0)[:, None]
    new_b = tl.where(keep, top_b, tl.where(at, xb[:, None], down_b))
    new_j = tl.where(keep, top_j, tl.where(at, xj[:, None], down_j))
    return new_b, new_j


@triton.jit
def _insert_two(top_b, top_j, kb, kj, enter, W: tl.constexpr):
    """`_insert_one` for up to two entering keys a token (INS 2): the one ahead (larger bits, or equal
    and the later j) at r1 = top entries with larger bits, the other at r2 = its own count + 1 (every
    top entry ahead of the first is ahead of it: r2 > r1), the entries between moving one slot down
    and those after two; a token with one key as in `_insert_one`, with none its top kept."""
    b1 = tl.max(tl.where(enter, kb, -1), axis=1)
    j1 = tl.max(tl.where(enter & (kb == b1[:, None]), kj[None, :], -1), axis=1)
    rest = enter & (kj[None, :] != j1[:, None])
    b2 = tl.max(tl.where(rest, kb, -1), axis=1)
    j2 = tl.max(tl.where(rest, kj[None, :], -1), axis=1)
    r1 = tl.sum((top_b > b1[:, None]).to(tl.int32), axis=1)
    r2 = tl.sum((top_b > b2[:, None]).to(tl.int32), axis=1) + 1
    pos = tl.arange(0, W)[None, :]
    src1 = tl.broadcast_to(tl.maximum(pos - 1, 0), top_b.shape)
    src2 = tl.broadcast_to(tl.maximum(pos - 2, 0), top_b.shape)
    d1_b, d1_j = tl.gather(top_b, src1, 1), tl.gather(top_j, src1, 1)
    d2_b, d2_j = tl.gather(top_b, src2, 1), tl.gather(top_j, src2, 1)
    one = (b2 < 0)[:, None]  # no second key: the slots past r1 move one down only
    keep = (pos < r1[:, None]) | (b1 < 0)[:, None]
    at1 = pos == r1[:, None]
    at2 = (pos == r2[:, None]) & ~one
    down1 = one | (pos < r2[:, None])
    new_b = tl.where(
        keep, top_b, tl.where(at1, b1[:, None], tl.where(at2, b2[:, None], tl.where(down1, d1_b, d2_b)))
    )
    new_j = tl.where(
        keep, top_j, tl.where(at1, j1[:, None], tl.where(at2, j2[:, None], tl.where(down1, d1_j, d2_j)))
    )
    return new_b, new_j


@triton.jit
def _merge_or_insert(top_b, top_j, kb, kj, W: tl.constexpr, BJ: tl.constexpr, INS: tl.constexpr):
    """The merge test and merge of a tile's keys `kb` (block ids `kj`) into the running top-W (see
    `_select_tile`): INS 1 takes `_insert_one` where no token of the group has two keys entering
    (29 / 27 % of the token tiles at M7C 64k / 32k on the GPU runs' inputs, 3 % at 8k; bench/RESULTS.md
    "selinsert"), `_merge_top` where one has; INS 0 `_merge_top` whenever one enters."""
    floor = tl.maximum(tl.min(top_b, axis=1), 0)
    enter = kb >= floor[:, None]
    if INS == 2:
        n_in = tl.max(tl.sum(enter.to(tl.int32), axis=1))
        if n_in > 2:
            top_b, top_j = _merge_top(top_b, top_j, kb, kj, W, BJ)
        elif n_in > 1:
            top_b, top_j = _insert_two(top_b, top_j, kb, kj, enter, W)
        elif n_in > 0:
            top_b, top_j = _insert_one(top_b, top_j, kb, kj, enter, W)
    elif INS:
        n_in = tl.max(tl.sum(enter.to(tl.int32), axis=1))
        if n_in > 1:
            top_b, top_j = _merge_top(top_b, top_j, kb, kj, W, BJ)
        elif n_in > 0:
            top_b, top_j = _insert_one(top_b, top_j, kb, kj, enter, W)
    elif tl.max(enter.to(tl.int32)) > 0:
        top_b, top_j = _merge_top(top_b, top_j, kb, kj, W, BJ)
    return top_b, top_j


@triton.jit
def _select_tile_cut(top_b, top_j, score, jt, j0, BJ: tl.constexpr, W: tl.constexpr, INS: tl.constexpr = 0):
    """`_select_tile` with its tokens' blocks hoisted (CUT): `jt` is t // l' of each token, -1 past
    the tile's end (no candidate). A block is a candidate iff j <= t // l' (j * l' <= t; then j < Ns,
    as t < T), forced iff a candidate with j == 0 or j >= t // l' - 1: the same keys and merges
    (INS: `_merge_or_insert`)."""
    j = j0 + tl.arange(0, BJ)
    cand = j[None, :] <= jt[:, None]
    bits = score.to(tl.int32, bitcast=True) & 0x7FFFFFFF  # drops the sign of -0.0, as eager does
    forced = (j[None, :] == 0) | (j[None, :] >= jt[:, None] - 1)
    kb = tl.where(cand, tl.where(forced, 0x7F800000, bits), -1)
    return _merge_or_insert(top_b, top_j, kb, j, W, BJ, INS)  # see _select_tile


@triton.jit
def _select_tile_all(top_b, top_j, score, j0, BJ: tl.constexpr, W: tl.constexpr, INS: tl.constexpr = 0):
    """`_select_tile_cut` on an interior tile (SPLIT): every block a candidate of every token and none
    forced, so each key is the score's bits: the same keys and merges, without the candidate and
    forced compares and selects."""
    j = j0 + tl.arange(0, BJ)
    kb = score.to(tl.int32, bitcast=True) & 0x7FFFFFFF  # drops the sign of -0.0, as eager does
    return _merge_or_insert(top_b, top_j, kb, j, W, BJ, INS)  # see _select_tile


@triton.jit
def _interior_end(t0, n_tiles, BJ: tl.constexpr, R: tl.constexpr, L: tl.constexpr, S: tl.constexpr,
                  LS: tl.constexpr):  # fmt: skip
    """The end of a program's interior key tiles [1, end) (SPLIT) from its first token t0 (< T): tile
    jb is interior iff every key of it is visible to t0, so to every later token of the program
    (((jb + 1) * BJ * R - 1) * S + L - 1 <= t0, hence below NC: no load mask), every block is a
    candidate ((jb + 1) * BJ - 1) * LS <= t0) and none is forced (jb >= 1 and (jb + 1) * BJ - 1 <
    t0 // LS - 1). Tokens >= T and padded heads need no mask there: their rows' lse is +inf (p 0)
    and their tables are never stored. At least 1, at most n_tiles; integers kept >= 0 before //."""
    vis = tl.maximum(t0 - (L - 1) + S, 0) // (BJ * R * S)
    cand = (t0 + LS) // (BJ * LS)
    forced = tl.maximum(t0 // LS - 1, 0) // BJ
    return tl.maximum(tl.minimum(tl.minimum(vis, cand), tl.minimum(forced, n_tiles)), 1)


@triton.jit
def _load_k(K, kc, kc_ok, dcol, dmask, k0, NC, EDGE: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
            R: tl.constexpr, RP: tl.constexpr, kt=0, TMA: tl.constexpr = 0):  # fmt: skip
    """The key tile of a CUT loop step (first key k0): EDGE 0 (an interior tile, SPLIT) without the
    key-range load mask. TMA (select_tma): K is a tensor descriptor over the [B * Hkv * NC, D] keys,
    the tile its rows kt + k0 on (kt = the sequence's first row), one bulk copy instead of a pointer and
    a mask an element; rows past NC are the next sequence's keys (or zeros past the last), finite, and
    only an EDGE tile reaches them, where visibility (key < NC) zeroes their p."""
    if TMA:
        k = K.load([kt + k0, 0])
    else:
        kptr = K + (k0 + kc)[:, None] * D + dcol[None, :]
        if EDGE:
            kmask = kc < NC - k0
            if R != RP:
                kmask = kmask & kc_ok
            k = tl.load(kptr, mask=kmask[:, None] & dmask[None, :], other=0.0)
        elif R != RP:  # padded key columns alias the next block's keys, maybe past NC
            k = tl.load(kptr, mask=kc_ok[:, None] & dmask[None, :], other=0.0)
        elif D != DP:
            k = tl.load(kptr, mask=dmask[None, :], other=0.0)
        else:
            k = tl.load(kptr)
    return k


@triton.jit
def _tile_scores(k, q, lse, bound, kc, kc_ok, k0, qk_scale, prev, rot, EDGE: tl.constexpr, BT: tl.constexpr,
                 GP: tl.constexpr, BJ: tl.constexpr, RP: tl.constexpr, SP: tl.constexpr, L: tl.constexpr,
                 S: tl.constexpr, R: tl.constexpr, A: tl.constexpr, PREC: tl.constexpr, SHM: tl.constexpr):  # fmt: skip
    """One token group's block scores on a loaded key tile `k`: its probabilities (EDGE 0: no
    visibility compare or select, `lse` +inf on padded rows instead) and Eq. 9-10. Returns (scores
    [BT, BJ], prev, rot)."""
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
    if EDGE:
        vis = (k0 + kc)[None, :] * S + (L - 1) <= bound[:, None]
        if R != RP:
            vis = vis & kc_ok[None, :]
        p = tl.where(vis, tl.exp2(s - lse[:, None]), 0.0)
    else:
        p = tl.exp2(s - lse[:, None])
        if R != RP:
            p = tl.where(kc_ok[None, :], p, 0.0)
    if SHM:
        score, rot = _block_scores_shm(p, rot, BT, GP, BJ, RP, A, R)
    else:
        score, prev = _block_scores(p, prev, BT, GP, BJ, RP, SP, A, R)
    return score, prev, rot


@triton.jit
def _tile_select(score, j0, jt_a, jt_b, top_ab, top_aj, top_bb, top_bj, EDGE: tl.constexpr, BT: tl.constexpr,
                 BJ: tl.constexpr, W: tl.constexpr, HALVES: tl.constexpr, TH: tl.constexpr,
                 INS: tl.constexpr = 0):  # fmt: skip
    """One token group's top-n merges of a key tile's block scores (HALVES: its two halves, one
    after the other; EDGE 0: no candidate or forced keys)."""
    if HALVES:
        score_a, score_b = _halves(score, BT, TH, BJ)
        if EDGE:
            top_ab, top_aj = _select_tile_cut(top_ab, top_aj, score_a, jt_a, j0, BJ, W, INS)
            top_bb, top_bj = _select_tile_cut(top_bb, top_bj, score_b, jt_b, j0, BJ, W, INS)
        else:
            top_ab, top_aj = _select_tile_all(top_ab, top_aj, score_a, j0, BJ, W, INS)
            top_bb, top_bj = _select_tile_all(top_bb, top_bj, score_b, j0, BJ, W, INS)
    elif EDGE:
        top_ab, top_aj = _select_tile_cut(top_ab, top_aj, score, jt_a, j0, BJ, W, INS)
    else:
        top_ab, top_aj = _select_tile_all(top_ab, top_aj, score, j0, BJ, W, INS)
    return top_ab, top_aj, top_bb, top_bj


@triton.jit
def _cut_tile(K, q, lse, bound, kc, kc_ok, dcol, dmask, k0, j0, NC, qk_scale, jt_a, jt_b, top_ab, top_aj,
              top_bb, top_bj, prev, rot, EDGE: tl.constexpr, BT: tl.constexpr, GP: tl.constexpr,
              D: tl.constexpr, DP: tl.constexpr, BJ: tl.constexpr, RP: tl.constexpr, SP: tl.constexpr,
              W: tl.constexpr, HALVES: tl.constexpr, L: tl.constexpr, S: tl.constexpr, R: tl.constexpr, A: tl.constexpr,
              TH: tl.constexpr, PREC: tl.constexpr, SHM: tl.constexpr, INS: tl.constexpr = 0, kt=0,
              TMA: tl.constexpr = 0):  # fmt: skip
    """One key tile of `_cmp_select`'s CUT loop (first key k0, first block j0): the probabilities,
    Eq. 9's block scores and the top-n merges. EDGE 0 (an interior tile, SPLIT): no key-range load
    mask, no visibility compare or select (`lse` +inf on padded rows instead), no candidate or
    forced keys; the same floats and merges (TMA: the tile by `_load_k`'s bulk copy). Returns the
    carried state, j0 one tile on."""
    k = _load_k(K, kc, kc_ok, dcol, dmask, k0, NC, EDGE, D, DP, R, RP, kt, TMA)
    score, prev, rot = _tile_scores(k, q, lse, bound, kc, kc_ok, k0, qk_scale, prev, rot, EDGE, BT, GP, BJ, RP, SP,
                                    L, S, R, A, PREC, SHM)  # fmt: skip
    top_ab, top_aj, top_bb, top_bj = _tile_select(score, j0, jt_a, jt_b, top_ab, top_aj, top_bb, top_bj, EDGE, BT,
                                                  BJ, W, HALVES, TH, INS)  # fmt: skip
    return top_ab, top_aj, top_bb, top_bj, prev, rot, j0 + BJ


@triton.jit
def _cut_tile2(K, q, lse, bound, kc, kc_ok, dcol, dmask, k0, j0, NC, qk_scale, jt_a, jt_b, jt2_a, jt2_b, top_ab,
               top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot, EDGE: tl.constexpr,
               BT: tl.constexpr, BP: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
               BJ: tl.constexpr, RP: tl.constexpr, SP: tl.constexpr, W: tl.constexpr, HALVES: tl.constexpr,
               L: tl.constexpr, S: tl.constexpr, R: tl.constexpr, A: tl.constexpr, TH: tl.constexpr,
               PREC: tl.constexpr, SHM: tl.constexpr, INS: tl.constexpr = 0):  # fmt: skip
    """`_cut_tile` for a program of two token groups of BT (PAIR; BP = 2 x BT tokens): one key tile
    load and one QK product over all BP x GP rows, Eq. 9-10 on all of them (each token's floats as in
    `_cut_tile`: the group sum and Eq. 9 are per token), then the scores split by rows into the two
    groups (register selects, no data moved) and each group's merges as `_cut_tile`'s, one after the
    other: the merge's [.., W, BJ] tensors stay those of BT tokens (of TH in halves)."""
    k = _load_k(K, kc, kc_ok, dcol, dmask, k0, NC, EDGE, D, DP, R, RP)
    score, prev, rot = _tile_scores(k, q, lse, bound, kc, kc_ok, k0, qk_scale, prev, rot, EDGE, BP, GP, BJ, RP, SP,
                                    L, S, R, A, PREC, SHM)  # fmt: skip
    score1, score2 = _halves(score, BP, BT, BJ)
    top_ab, top_aj, top_bb, top_bj = _tile_select(score1, j0, jt_a, jt_b, top_ab, top_aj, top_bb, top_bj, EDGE, BT,
                                                  BJ, W, HALVES, TH, INS)  # fmt: skip
    top2_ab, top2_aj, top2_bb, top2_bj = _tile_select(score2, j0, jt2_a, jt2_b, top2_ab, top2_aj, top2_bb, top2_bj,
                                                      EDGE, BT, BJ, W, HALVES, TH, INS)  # fmt: skip
    return top_ab, top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot, j0 + BJ


@triton.jit
def _halves(score, BT: tl.constexpr, TH: tl.constexpr, BJ: tl.constexpr):
    """A tile's block scores [BT, BJ] as its two halves of TH tokens (HALVES; BT 1: the same row twice,
    the second half's tokens all past the end)."""
    if BT > 1:
        return tl.split(tl.permute(tl.reshape(score, [2, TH, BJ]), (1, 2, 0)))
    else:
        return score, score


@triton.jit
def _store_top(IDX, VALID, top_b, top_j, tb, t_end, K_SEL, W: tl.constexpr):
    """The table rows of tokens `tb` (< t_end): idx, and valid where a key was placed (idx 0 else)."""
    slot = tl.arange(0, W)
    toff = tb[:, None] * K_SEL + slot[None, :]
    tmask = (tb[:, None] < t_end) & (slot[None, :] < K_SEL)
    ok = top_b >= 0
    tl.store(IDX + toff, tl.where(ok, top_j, 0).to(tl.int64), mask=tmask)
    tl.store(VALID + toff, ok, mask=tmask)


@triton.jit
def _cmp_select(
    Q,
    K,
    LSE,
    IDX,
    VALID,
    T,
    NC,
    NS,
    K_SEL,
    qk_scale,
    G: tl.constexpr,
    GP: tl.constexpr,
    D: tl.constexpr,
    DP: tl.constexpr,
    BT: tl.constexpr,
    BJ: tl.constexpr,
    RP: tl.constexpr,
    SP: tl.constexpr,
    W: tl.constexpr,
    HALVES: tl.constexpr,
    L: tl.constexpr,
    S: tl.constexpr,
    LS: tl.constexpr,
    PREC: tl.constexpr,
    CUT: tl.constexpr = 0,
    SHM: tl.constexpr = 0,
    SPLIT: tl.constexpr = 0,
    PAIR: tl.constexpr = 0,
    INSERT: tl.constexpr = 0,
    TMA: tl.constexpr = 0,
):
    """Block selection [Eq. 9-11] for BT tokens (all G heads of each as rows, padded to GP): per key
    tile of BJ selection blocks (r = l'/d keys each, padded to RP), the final probabilities from the
    forward's row statistics (one QK product), summed over the group [Eq. 10], weighted into float32
    block scores [Eq. 9] (the a - 1 keys a block shares with earlier ones gathered, SP a block, from
    this tile and the previous one, carried) and merged into a running top-W per token [Eq. 11]
    (HALVES: the tile's tokens in two halves, one after the other, to bound the merge's registers;
    INSERT: a lone entering key inserted instead of merged, `_merge_or_insert`; PAIR: two groups of
    BT tokens a program on one key tile load, `_cut_tile2`; TMA: K a tensor descriptor, each key tile
    one bulk copy, `_load_k`). No V, no accumulator."""
    A: tl.constexpr = L // S
    R: tl.constexpr = LS // S
    tl.static_assert(CUT >= SPLIT)  # SPLIT splits the CUT loop
    tl.static_assert(CUT >= PAIR)  # PAIR pairs the CUT loop's token groups
    tl.static_assert(CUT > 0 or INSERT == 0)  # INSERT: the CUT loop's merges (`_merge_or_insert`)
    tl.static_assert(TMA == 0 or (CUT > 0 and PAIR == 0 and RP == LS // S and DP == D))  # `_load_k`
    BP: tl.constexpr = BT * (1 + PAIR)  # the program's tokens: PAIR: two groups of BT (`_cut_tile2`)
    BM: tl.constexpr = BP * GP
    pid_t = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * T * G * D
    LSE += bh * T * G
    kt = (bh * NC).to(tl.int32)  # TMA: the sequence's first key row of the descriptor
    if not TMA:
        K += bh * NC * D
    IDX += bh * T * K_SEL
    VALID += bh * T * K_SEL

    rows = tl.arange(0, BM)
    tq = pid_t * BP + rows // GP
    gq = rows % GP
    row_ok = (gq < G) & (tq < T)
    row_off = tq * G + gq
    dcol = tl.arange(0, DP)
    dmask = dcol < D
    q = tl.load(Q + row_off[:, None] * D + dcol[None, :], mask=row_ok[:, None] & dmask[None, :], other=0.0)
    lse = tl.load(LSE + row_off, mask=row_ok, other=0.0)

    t_last = tl.minimum(pid_t * BP + BP - 1, T - 1)
    n_blk_tiles = tl.cdiv(t_last // LS + 1, BJ)
    cols = tl.arange(0, BJ * RP)  # key r * j + m of block j in column j * RP + m
    cj = cols // RP
    cm = cols % RP

    TH: tl.constexpr = (BT + 1) // 2 if HALVES else BT
    t_end = tl.minimum(T, pid_t * BP + BP)
    tb_a = pid_t * BP + tl.arange(0, TH)
    tb_b = tb_a + TH
    top_ab = tl.full([TH, W], -1, tl.int32)
    top_aj = tl.zeros([TH, W], tl.int32)
    top_bb = tl.full([TH, W], -1, tl.int32)
    top_bj = tl.zeros([TH, W], tl.int32)
    prev = tl.zeros([BP, BJ * RP], tl.float32)
    if CUT:
        # The loop's integer work in 32 bits, with what is loop-invariant hoisted (bench/RESULTS.md
        # "selcut"): a column's key is k0 + kc (k0 = jb * BJ * R, a scalar), and causal visibility
        # with key < NC is one compare an element against a per-row bound (padded heads and tokens
        # >= T: -1, no key visible). Hoisting kc * S or the load's offsets too, or carrying the
        # W-th key between tiles, cost 4-33 registers (fewer warps an SM): recomputed each tile.
        kc = cj * R + cm
        kc_ok = cm < R
        bound = tl.where(row_ok, tl.minimum(tq, (NC - 1) * S + (L - 1)), -1)
        jt_a = tl.where(tb_a < t_end, tb_a // LS, -1)
        jt_b = tl.where(tb_b < t_end, tb_b // LS, -1)
        rot = tl.zeros([BP, BJ], tl.float32)  # SHM: the previous tile's last keys' sums, rotated
        j0 = pid_t * 0  # the tile's first block, an int32 of its own (jb's uses widen to 64 bits)
        if PAIR:
            # The second group of BT tokens (the program's last BT: rows BT * GP on, in q, lse and
            # bound above) merged into running top-n of its own; each key tile's product, Eq. 9-10
            # for both (`_cut_tile2`). The key tiles are the program's (its last token's count; the
            # interior ones `_interior_end` of its first token, so of every later one); the edge
            # tiles mask each token's own candidates, as within one group.
            tb2_a = tb_a + BT
            tb2_b = tb_b + BT
            jt2_a = tl.where(tb2_a < t_end, tb2_a // LS, -1)
            jt2_b = tl.where(tb2_b < t_end, tb2_b // LS, -1)
            top2_ab = tl.full([TH, W], -1, tl.int32)
            top2_aj = tl.zeros([TH, W], tl.int32)
            top2_bb = tl.full([TH, W], -1, tl.int32)
            top2_bj = tl.zeros([TH, W], tl.int32)
            if SPLIT:
                lo = _interior_end(pid_t * BP, n_blk_tiles, BJ, R, L, S, LS)
            else:
                lo = tl.minimum(n_blk_tiles, 1)
            lse_in = tl.where(row_ok, lse, float("inf"))  # padded rows: exp2(s - inf) = 0, as masked
            for jb in range(0, tl.minimum(n_blk_tiles, 1)):
                top_ab, top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot, j0 = _cut_tile2(
                    K, q, lse, bound, kc, kc_ok, dcol, dmask, jb * (BJ * R), j0, NC, qk_scale, jt_a, jt_b, jt2_a,
                    jt2_b, top_ab, top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot, 1, BT, BP,
                    GP, D, DP, BJ, RP, SP, W, HALVES, L, S, R, A, TH, PREC, SHM, INSERT,
                )  # fmt: skip
            if SPLIT:
                for jb in range(1, lo):
                    top_ab, top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot, j0 = _cut_tile2(
                        K, q, lse_in, bound, kc, kc_ok, dcol, dmask, jb * (BJ * R), j0, NC, qk_scale, jt_a, jt_b,
                        jt2_a, jt2_b, top_ab, top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot,
                        0, BT, BP, GP, D, DP, BJ, RP, SP, W, HALVES, L, S, R, A, TH, PREC, SHM, INSERT,
                    )  # fmt: skip
            for jb in range(lo, n_blk_tiles):
                top_ab, top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot, j0 = _cut_tile2(
                    K, q, lse, bound, kc, kc_ok, dcol, dmask, jb * (BJ * R), j0, NC, qk_scale, jt_a, jt_b, jt2_a,
                    jt2_b, top_ab, top_aj, top_bb, top_bj, top2_ab, top2_aj, top2_bb, top2_bj, prev, rot, 1, BT, BP,
                    GP, D, DP, BJ, RP, SP, W, HALVES, L, S, R, A, TH, PREC, SHM, INSERT,
                )  # fmt: skip
            _store_top(IDX, VALID, top2_ab, top2_aj, tb2_a, t_end, K_SEL, W)
            if HALVES:
                _store_top(IDX, VALID, top2_bb, top2_bj, tb2_b, t_end, K_SEL, W)
        elif SPLIT:
            # Tile 0 (block 0 forced), then the interior tiles [1, lo) with no mask, candidate or
            # forced logic (`_interior_end`), then the edge tiles [lo, n) with today's: in key order,
            # as the running top-n and Eq. 9's carried neighbours need. Three loops, one tile body.
            lo = _interior_end(pid_t * BP, n_blk_tiles, BJ, R, L, S, LS)
            lse_in = tl.where(row_ok, lse, float("inf"))  # padded rows: exp2(s - inf) = 0, as masked
            for jb in range(0, tl.minimum(n_blk_tiles, 1)):
                top_ab, top_aj, top_bb, top_bj, prev, rot, j0 = _cut_tile(
                    K, q, lse, bound, kc, kc_ok, dcol, dmask, jb * (BJ * R), j0, NC, qk_scale, jt_a, jt_b,
                    top_ab, top_aj, top_bb, top_bj, prev, rot, 1, BT, GP, D, DP, BJ, RP, SP, W, HALVES, L, S, R,
                    A, TH, PREC, SHM, INSERT, kt, TMA,
                )  # fmt: skip
            for jb in range(1, lo):
                top_ab, top_aj, top_bb, top_bj, prev, rot, j0 = _cut_tile(
                    K, q, lse_in, bound, kc, kc_ok, dcol, dmask, jb * (BJ * R), j0, NC, qk_scale, jt_a, jt_b,
                    top_ab, top_aj, top_bb, top_bj, prev, rot, 0, BT, GP, D, DP, BJ, RP, SP, W, HALVES, L, S, R,
                    A, TH, PREC, SHM, INSERT, kt, TMA,
                )  # fmt: skip
            for jb in range(lo, n_blk_tiles):
                top_ab, top_aj, top_bb, top_bj, prev, rot, j0 = _cut_tile(
                    K, q, lse, bound, kc, kc_ok, dcol, dmask, jb * (BJ * R), j0, NC, qk_scale, jt_a, jt_b,
                    top_ab, top_aj, top_bb, top_bj, prev, rot, 1, BT, GP, D, DP, BJ, RP, SP, W, HALVES, L, S, R,
                    A, TH, PREC, SHM, INSERT, kt, TMA,
                )  # fmt: skip
        else:
            for jb in range(0, n_blk_tiles):
                top_ab, top_aj, top_bb, top_bj, prev, rot, j0 = _cut_tile(
                    K, q, lse, bound, kc, kc_ok, dcol, dmask, jb * (BJ * R), j0, NC, qk_scale, jt_a, jt_b,
                    top_ab, top_aj, top_bb, top_bj, prev, rot, 1, BT, GP, D, DP, BJ, RP, SP, W, HALVES, L, S, R,
                    A, TH, PREC, SHM, INSERT, kt, TMA,
                )  # fmt: skip
    else:  # the measured path (select_cut 0)
        for jb in range(0, n_blk_tiles):
            key = (jb * BJ + cj) * R + cm
            key_ok = (cm < R) & (key < NC)
            k = tl.load(
                K + key[:, None] * D + dcol[None, :], mask=key_ok[:, None] & dmask[None, :], other=0.0
            )
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
            vis = row_ok[:, None] & key_ok[None, :] & (key[None, :] * S + (L - 1) <= tq[:, None])
            p = tl.where(vis, tl.exp2(s - lse[:, None]), 0.0)
            score, prev = _block_scores(p, prev, BT, GP, BJ, RP, SP, A, R)
            if HALVES:
                score_a, score_b = _halves(score, BT, TH, BJ)
                top_ab, top_aj = _select_tile(top_ab, top_aj, score_a, tb_a, t_end, jb, NS, BJ, W, LS)
                top_bb, top_bj = _select_tile(top_bb, top_bj, score_b, tb_b, t_end, jb, NS, BJ, W, LS)
            else:
                top_ab, top_aj = _select_tile(top_ab, top_aj, score, tb_a, t_end, jb, NS, BJ, W, LS)
    _store_top(IDX, VALID, top_ab, top_aj, tb_a, t_end, K_SEL, W)
    if HALVES:
        _store_top(IDX, VALID, top_bb, top_bj, tb_b, t_end, K_SEL, W)
