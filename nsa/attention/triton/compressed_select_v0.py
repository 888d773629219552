"""The selection kernel as shipped until 2026-11-26: `_cmp_select_v0`, kept for one GPU comparison.

Owns the previous `_cmp_select` (compressed_select.py has the current one), launched instead of it
when `compressed._config(...)["select_v0"]` is set (bench/kernel_probe.py's `select_v0` variants):
the same tables, from the same inputs, by the older arithmetic: int64 keys (float bits << 32) | j
merged on [BT/2, W, BJ] rank tiles, Eq. 9's reach into earlier blocks moved over by [BJ, BJ]
select-sums with the previous tile carried in registers. Delete it once the GPU has compared them
(docs/attention.md, "compressed branch and selection")."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _eq9_part(p3, H: tl.constexpr, A: tl.constexpr, R: tl.constexpr, RP: tl.constexpr):
    """Score that keys r*j' + m (p3 [BT, BJ, RP] group-summed probabilities) give block j' + H [Eq. 9]:
    weight = the stride pieces compressed block i shares with the selection block, w[u] for
    u = m + a - 1 - r*H (selection.overlap_weights). Same reduction order for every block, so equal
    probabilities give bit-equal scores (exact ties stay ties)."""
    m = tl.arange(0, RP)
    u = m + (A - 1 - R * H)
    w = tl.minimum(tl.minimum(u + 1, A), tl.minimum(R, A + R - 1 - u))
    w = tl.where((u >= 0) & (u < A + R - 1) & (m < R), w, 0).to(tl.float32)
    return tl.sum(p3 * w[None, None, :], axis=2)


@triton.jit
def _shift(x, by: tl.constexpr, BJ: tl.constexpr):
    """y[:, j] = x[:, j - by] (0 outside), exactly: a select, never a rounded product."""
    src = tl.arange(0, BJ)[:, None]
    dst = tl.arange(0, BJ)[None, :]
    hit = src == dst - by
    return tl.sum(tl.where(hit[None, :, :], x[:, :, None], 0.0), axis=1)


@triton.jit
def _merge_top(top, keys, W: tl.constexpr, BJ: tl.constexpr):
    """The W largest of `top` ([BT, W], sorted descending) and `keys` ([BT, BJ]), sorted descending,
    placed by rank.

    Keys are distinct except the -1 fillers; among equal values `top` comes first, then `keys` by
    position, so the ranks are a permutation. Exact selects on [BT, W, BJ] tiles (no xor network,
    which the interpreter runs element by element and which costs registers on the GPU).
    """
    pos_w = tl.arange(0, W)
    pos_j = tl.arange(0, BJ)
    x = top[:, :, None]  # [BT, W(i), 1]
    y = keys[:, None, :]  # [BT, 1, BJ(j)]
    rank_top = pos_w[None, :] + tl.sum((y > x).to(tl.int32), axis=2)  # [BT, W]
    yj = keys[:, :, None]  # [BT, BJ(j), 1]
    ahead = (y > yj) | ((y == yj) & (pos_j[None, None, :] < pos_j[None, :, None]))
    rank_key = tl.sum(ahead.to(tl.int32), axis=2) + tl.sum((top[:, None, :] >= yj).to(tl.int32), axis=2)
    slot = pos_w[None, None, :]
    out = tl.sum(tl.where(rank_top[:, :, None] == slot, x, 0), axis=1)
    return out + tl.sum(tl.where(rank_key[:, :, None] == slot, yj, 0), axis=1)


@triton.jit
def _block_scores(p, prev, BT: tl.constexpr, GP: tl.constexpr, BN: tl.constexpr, BJ: tl.constexpr,
                  RP: tl.constexpr, A: tl.constexpr, R: tl.constexpr, HMAX: tl.constexpr):  # fmt: skip
    """Eq. 10 (sum over the group) and Eq. 9 (overlap weights) for one key tile: the [BT, BJ] float32
    block scores and the tile's group-summed probabilities, carried to the next tile."""
    p3 = tl.reshape(tl.sum(tl.reshape(p, [BT, GP, BN]), axis=1), [BT, BJ, RP])  # Eq. 10
    score = _eq9_part(p3, 0, A, R, RP)
    for h in tl.static_range(1, HMAX + 1):
        score += _shift(_eq9_part(p3, h, A, R, RP), h, BJ)
        score += _shift(_eq9_part(prev, h, A, R, RP), h - BJ, BJ)
    return score, p3


@triton.jit
def _select_tile(top, score, tb, t_end, jb, NS, BJ: tl.constexpr, W: tl.constexpr, LS: tl.constexpr):
    """Eq. 11 for one key tile and some tokens `tb` (those < t_end): the tile's block scores ([.., BJ]
    float32) as eager's keys (float bits << 32) | j (forced blocks 0, t//l', t//l'-1 at +inf bits,
    non-candidates -1), merged into the running top-W `top` ([.., W], sorted descending)."""
    jt = tb // LS
    j = jb * BJ + tl.arange(0, BJ)
    cand = (j[None, :] * LS <= tb[:, None]) & (tb[:, None] < t_end) & (j[None, :] < NS)
    bits = score.to(tl.int32, bitcast=True) & 0x7FFFFFFF  # drops the sign of -0.0, as eager does
    forced = (j[None, :] == 0) | (j[None, :] == jt[:, None]) | (j[None, :] == jt[:, None] - 1)
    bits = tl.where(forced, 0x7F800000, bits).to(tl.int64)
    keys = tl.where(cand, (bits << 32) | j[None, :].to(tl.int64), -1)
    # Most tiles far from the query hold nothing above the current n-th key of any token.
    if tl.max(tl.max(keys, axis=1) - tl.min(top, axis=1)) > 0:
        top = _merge_top(top, keys, W, BJ)
    return top


@triton.jit
def _store_top(IDX, VALID, top, tb, t_end, K_SEL, W: tl.constexpr):
    """The table rows of tokens `tb` (< t_end): idx, and valid where a key was placed."""
    slot = tl.arange(0, W)
    toff = tb[:, None] * K_SEL + slot[None, :]
    tmask = (tb[:, None] < t_end) & (slot[None, :] < K_SEL)
    ok = top >= 0
    tl.store(IDX + toff, tl.where(ok, top & 0xFFFFFFFF, 0), mask=tmask)
    tl.store(VALID + toff, ok, mask=tmask)


@triton.jit
def _cmp_select_v0(
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
    W: tl.constexpr,
    L: tl.constexpr,
    S: tl.constexpr,
    LS: tl.constexpr,
    PREC: tl.constexpr,
):
    """Block selection [Eq. 9-11] for BT tokens (all G heads of each as rows, padded to GP): per key
    tile, the final probabilities from the forward's row statistics (one QK product), summed over
    the group [Eq. 10], mapped onto float32 selection-block scores [Eq. 9] and merged into a running
    top-n per token [Eq. 11]. No V, no accumulator: its own kernel so that the attention runs at
    flash tiles and this one at the occupancy its top-n merge needs (bench/kernel_probe.py)."""
    A: tl.constexpr = L // S
    R: tl.constexpr = LS // S
    HMAX: tl.constexpr = (A - 1 + R - 1) // R
    BN: tl.constexpr = BJ * RP
    BM: tl.constexpr = BT * GP
    pid_t = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * T * G * D
    LSE += bh * T * G
    K += bh * NC * D
    IDX += bh * T * K_SEL
    VALID += bh * T * K_SEL

    rows = tl.arange(0, BM)
    tq = pid_t * BT + rows // GP
    gq = rows % GP
    row_ok = (gq < G) & (tq < T)
    row_off = tq * G + gq
    dcol = tl.arange(0, DP)
    dmask = dcol < D
    q = tl.load(Q + row_off[:, None] * D + dcol[None, :], mask=row_ok[:, None] & dmask[None, :], other=0.0)
    lse = tl.load(LSE + row_off, mask=row_ok, other=0.0)

    t_last = tl.minimum(pid_t * BT + BT - 1, T - 1)
    n_blk_tiles = tl.cdiv(t_last // LS + 1, BJ)
    cols = tl.arange(0, BN)
    cj = cols // RP
    cm = cols % RP

    # The top-n merge runs for each half of the tile's tokens in turn: merged at once, its [BT, W, BJ]
    # rank tiles spilled on sm_80 and sm_90 at G = 6 (ptxas, docs/attention.md). A 1-token tile
    # (G > 16) has an empty second half: its tokens are >= t_end.
    TH: tl.constexpr = (BT + 1) // 2
    t_end = tl.minimum(T, pid_t * BT + BT)
    tb_a = pid_t * BT + tl.arange(0, TH)
    tb_b = tb_a + TH
    top_a = tl.full([TH, W], -1, tl.int64)
    top_b = tl.full([TH, W], -1, tl.int64)
    prev = tl.zeros([BT, BJ, RP], tl.float32)
    for jb in range(0, n_blk_tiles):
        key = (jb * BJ + cj) * R + cm
        key_ok = (cm < R) & (key < NC)
        k = tl.load(K + key[:, None] * D + dcol[None, :], mask=key_ok[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        vis = row_ok[:, None] & key_ok[None, :] & (key[None, :] * S + (L - 1) <= tq[:, None])
        p = tl.where(vis, tl.exp2(s - lse[:, None]), 0.0)
        score, prev = _block_scores(p, prev, BT, GP, BN, BJ, RP, A, R, HMAX)
        if BT > 1:
            score_a, score_b = tl.split(tl.permute(tl.reshape(score, [2, TH, BJ]), (1, 2, 0)))
        else:
            score_a, score_b = score, score
        top_a = _select_tile(top_a, score_a, tb_a, t_end, jb, NS, BJ, W, LS)
        top_b = _select_tile(top_b, score_b, tb_b, t_end, jb, NS, BJ, W, LS)
    _store_top(IDX, VALID, top_a, tb_a, t_end, K_SEL, W)
    _store_top(IDX, VALID, top_b, tb_b, t_end, K_SEL, W)
