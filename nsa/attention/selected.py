"""The selected branch of NSA: custom ops `nsa::selected_fwd` / `nsa::selected_bwd`.

Owns `selected_attention`: every query attends the l'-token blocks of its selection table, with keys
after the query masked, one softmax over all of them. Loops run over chunks of blocks or bins only; no
[T, T] tensor; nothing may sync with the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nsa.attention.precision import acc_dtype as _acc
from nsa.attention.precision import autocast_off

# How far (in nats) the shift of the forward may sit below a cheap upper bound of a query's largest
# logit: exp() of any logit minus the shift stays <= e^60, far from float32 overflow.
_HEADROOM = 60.0


def _compute(dtype: torch.dtype) -> torch.dtype:
    """GEMM dtype. float16 runs in float32: exp(s - shift) may exceed float16's range (shift is not the max)."""
    return torch.float32 if dtype == torch.float16 else dtype


# Two paths share the work. (1) Forced tiles: in a table from `top_blocks` every query t has its own
# block jt = t // l', the previous block jt - 1 and block 0. Only jt can hold keys after t. These are
# dense tiles without any gather: the l' queries of block j against the 3*l' keys of blocks j, j-1 and
# 0 (one GEMM per block, a static causal mask on the first third). Each query row weights a tile by
# how many times the table lists it (log count added to the logits: -inf when absent), so a table
# without these blocks is still exact. (2) Bins, for every other valid pair: pairs are sorted by block
# and packed into bins of up to P = l' pairs sharing one block, a [P*G, D] x [D, l'] GEMM tile with no
# mask at all (those blocks end before the query; blocks after it contribute nothing and are dropped).
# Results go back to query rows with index_add_. Pairs of blocks after the query are dropped.
#
# GEMM-shaped bookkeeping: K and V carry an extra column of ones and the gathered query rows an extra
# column holding -shift (forward) or -lse (backward), so one GEMM yields q.k - shift, the PV GEMM
# yields the row sums next to the outputs, and in the backward dO.V - delta comes out of one GEMM.
# The forward is one pass: the forced tiles run first and give each query the exact maximum over them,
# m0; the shift is max(m0, ub - 60) with ub a Cauchy-Schwarz bound of the bins' logits, so exp never
# overflows and the sums never underflow. The backward is flash-style (only out and lse are saved).


def _classify(idx: Tensor, valid: Tensor, sel_block: int) -> tuple[Tensor, Tensor]:
    """Split the table [B, Hkv, T, n]: (binned [B, Hkv, T, n] bool, counts [B, Hkv, T, 3] int64).

    counts[..., c] = how many valid entries are the query's own block (c=0), the previous one (c=1) or
    block 0 when that is neither (c=2); binned marks the other valid entries of blocks before the query's.
    """
    T = idx.shape[2]
    jt = (torch.arange(T, device=idx.device) // sel_block)[:, None]
    v = valid & (idx <= jt) & (idx >= 0)
    own, prev = v & (idx == jt), v & (idx == jt - 1)
    first = v & (idx == 0) & (jt >= 2)
    counts = torch.stack([own.sum(-1), prev.sum(-1), first.sum(-1)], -1)
    return v & ~own & ~prev & ~first, counts


def _binned_capacity(T: int, n: int, sel_block: int, forced: bool) -> int:
    """Static bound on the binned pairs of one (batch, KV head): n per query, or with `forced` (the table
    lists the query's forced blocks, as `top_blocks` does) min(n - 3, jt - 2) per query t, jt = t // l'."""
    if not forced:
        return T * n
    ns, m = -(-T // sel_block), max(n - 3, 0)
    top = max(ns - 3, 0)  # block j holds queries with cap min(max(j - 2, 0), m); sum over j < ns:
    s = m * (m + 1) // 2 + (top - m) * m if top >= m else top * (top + 1) // 2
    return s * sel_block - (ns * sel_block - T) * min(top, m)  # the last block may be partial


def _selected_bins(
    binned: Tensor, idx: Tensor, sel_block: int, Tp: int, cap: int
) -> tuple[Tensor, Tensor, int]:
    """Pack the binned pairs [B, Hkv, T, n] into bins of P = l' pairs sharing a block.

    Returns lane_row [NB*P] (query row bh*Tp + t; BH*Tp, the dummy row, for an empty lane), bin_blk [NB]
    (K/V table row bh*Ns + j) and NB = ceil(BH*cap/P) + BH*Ns, a static upper bound on the bins (no
    sync) for at most `cap` binned pairs per (batch, KV head): each block wastes less than one bin;
    unused bins are empty, pairs beyond the bound are dropped (the caller turns that into NaN).
    """
    B, Hkv, T, n = idx.shape
    P, dev = sel_block, idx.device
    ns = Tp // sel_block
    nkey = B * Hkv * ns
    nb = -(-(B * Hkv * cap) // P) + nkey
    bh = torch.arange(B * Hkv, device=dev).view(B, Hkv, 1, 1)
    key = torch.where(binned, bh * ns + idx, nkey).reshape(-1)  # other pairs: key nkey, dropped
    row = (bh * Tp + torch.arange(T, device=dev)[:, None]).expand(B, Hkv, T, n).reshape(-1)
    skey, order = torch.sort(key, stable=True)
    counts = torch.zeros(nkey + 1, dtype=torch.int64, device=dev).scatter_add_(0, key, torch.ones_like(key))
    start = torch.cumsum(counts, 0) - counts
    nbins = (counts + P - 1) // P
    nbins[nkey] = 0
    bin_start = torch.cumsum(nbins, 0) - nbins
    rank = torch.arange(key.numel(), device=dev) - start[skey]
    bin_id = bin_start[skey] + rank // P
    bin_id = torch.where((skey < nkey) & (bin_id < nb), bin_id, nb)  # dropped -> trash bin nb, cut below
    lane = bin_id * P + rank % P
    lane_row = torch.full((nb * P + P,), B * Hkv * Tp, dtype=torch.int64, device=dev)
    lane_row.index_put_((lane,), row[order])
    bin_blk = torch.zeros(nb + 1, dtype=torch.int64, device=dev).index_put_(
        (bin_id,), skey.clamp(max=nkey - 1)
    )
    return lane_row[: nb * P], bin_blk[:nb], nb


def _tile_keys(ext: Tensor, j0: int, j1: int) -> Tensor:
    """Keys (or values) of the forced tiles of query blocks j0..j1-1: [BH*(j1-j0), 3*l', D+1].

    ext is the K (or V) table with a zero block in front ([BH, Ns+1, l', D+1]): block j is ext[:, j+1],
    so the previous block of j=0 is all zeros (its count is 0, the tile is masked anyway).
    """
    BH, _, lp, W = ext.shape
    c = j1 - j0
    first = ext[:, 1:2].expand(BH, c, lp, W)
    return torch.cat([ext[:, j0 + 1 : j1 + 1], ext[:, j0:j1], first], 2).view(BH * c, 3 * lp, W)


def _tile_bias(counts: Tensor, j0: int, j1: int, lp: int, dtype: torch.dtype) -> Tensor:
    """[BH*(j1-j0), l', 1, 3*l'] additive logit bias: log(count) per tile, -inf above the diagonal."""
    BH = counts.shape[0]
    c = j1 - j0
    cnt = counts[:, j0 * lp : j1 * lp].to(dtype).log().view(BH * c, lp, 1, 3, 1)
    tri = torch.ones(lp, lp, dtype=torch.bool, device=counts.device).triu(1)
    mask = torch.zeros(lp, 1, 3, lp, dtype=dtype, device=counts.device)
    mask[:, 0, 0].masked_fill_(tri, float("-inf"))
    return (cnt + mask).view(BH * c, lp, 1, 3 * lp)


def _setup(q: Tensor, kv: Tensor, idx: Tensor, valid: Tensor, sel_block: int, scale: float):
    """Shared by forward and backward: padded layout, K/V table, table split, counts per padded row."""
    B, Hkv, T, _, D = q.shape
    Tp = kv.shape[2]
    ns, BH = Tp // sel_block, B * Hkv
    cdt = _compute(q.dtype)
    kv = kv.to(cdt)
    one = kv.new_ones(B, Hkv, Tp, 1)
    ktab = torch.cat([kv[..., :D] * scale, one], -1).view(BH, ns, sel_block, D + 1)
    vtab = torch.cat([kv[..., D:], one], -1).view(BH, ns, sel_block, D + 1)
    kext, vext = F.pad(ktab, (0, 0, 0, 0, 1, 0)), F.pad(vtab, (0, 0, 0, 0, 1, 0))
    binned, counts = _classify(idx, valid, sel_block)
    counts = F.pad(counts.view(BH, T, 3), (0, 0, 0, Tp - T))
    return Tp, ns, BH, cdt, ktab, vtab, kext, vext, binned, counts


def _block_chunk(chunk: int, BH: int) -> int:
    """Query blocks per forced-tile step: about as much work as `chunk` bins (a tile is 3 bins' worth)."""
    return max(1, chunk // (3 * BH))


@torch.library.custom_op("nsa::selected_fwd", mutates_args=())
@autocast_off
def _selected_fwd(
    q: Tensor,
    kv: Tensor,
    idx: Tensor,
    valid: Tensor,
    sel_block: int,
    chunk: int,
    scale: float,
    forced: bool = False,
) -> tuple[Tensor, Tensor]:
    B, Hkv, T, G, D = q.shape
    lp, acc = sel_block, _acc(q.dtype)
    Tp, ns, BH, cdt, ktab, vtab, kext, vext, binned, counts = _setup(q, kv, idx, valid, sel_block, scale)
    R = BH * Tp
    qp = F.pad(q.to(cdt), (0, 0, 0, 0, 0, Tp - T)).reshape(BH, ns, lp * G, D)
    # Cauchy-Schwarz bound of each query's binned logits: |q| * max |k*scale| over its binned blocks.
    kmax = ktab[..., :D].float().norm(dim=-1).amax(-1).view(-1)  # [BH*Ns]
    bh = torch.arange(BH, device=q.device).view(B, Hkv, 1, 1) * ns
    kub = torch.where(binned, kmax[bh + idx.clamp(0, ns - 1)], float("-inf")).amax(-1).view(BH, T)
    kub = F.pad(kub, (0, Tp - T), value=float("-inf"))
    # Forced tiles: exact per-row maximum m0, the shift, and the tiles' share of num and den.
    q_aug = q.new_empty(R + 1, G, D + 1, dtype=cdt)
    q_aug[R] = 0
    q_aug[R, :, D] = float("-inf")  # the dummy row: every logit -inf, so empty lanes add exact zeros
    num = torch.empty(R + 1, G, D + 1, dtype=acc, device=q.device)
    num[R] = 0
    shift = torch.empty(BH, Tp, G, dtype=acc, device=q.device)
    qa = q_aug[:R].view(BH, ns, lp, G, D + 1)
    na = num[:R].view(BH, ns, lp * G, D + 1)
    cb = _block_chunk(chunk, BH)
    for j0 in range(0, ns, cb):
        j1 = min(ns, j0 + cb)
        c = j1 - j0
        qt = qp[:, j0:j1].reshape(BH * c, lp * G, D)
        kt, vt = _tile_keys(kext, j0, j1), _tile_keys(vext, j0, j1)
        s = torch.bmm(qt, kt[..., :D].transpose(1, 2)).to(acc).view(BH * c, lp, G, 3 * lp)
        s.add_(_tile_bias(counts, j0, j1, lp, acc))
        m0 = s.amax(-1)
        kb = kub[:, j0 * lp : j1 * lp].reshape(BH * c, lp, 1)
        ub = torch.where(kb == float("-inf"), kb, qt.float().norm(dim=-1).view(BH * c, lp, G) * kb)
        m = torch.maximum(m0, ub - _HEADROOM)
        m = torch.where(m == float("-inf"), 0.0, m).to(cdt).to(acc)  # the shift the bins' GEMM will see
        p = s.sub_(m[..., None]).exp_().view(BH * c, lp * G, 3 * lp)
        na[:, j0:j1] = torch.bmm(p.to(cdt), vt).to(acc).view(BH, c, lp * G, D + 1)
        shift[:, j0 * lp : j1 * lp] = m.view(BH, c * lp, G)
        qa[:, j0:j1, :, :, :D] = qp[:, j0:j1].view(BH, c, lp, G, D)
        qa[:, j0:j1, :, :, D] = -m.view(BH, c, lp, G).to(cdt)
    # Bins: exp(q.k - shift) @ [V, 1] for every binned pair, added into the query rows.
    cap = _binned_capacity(T, idx.shape[-1], lp, forced)
    lane_row, bin_blk, nb = _selected_bins(binned, idx, sel_block, Tp, cap)
    kflat, vflat = ktab.view(BH * ns, lp, D + 1), vtab.view(BH * ns, lp, D + 1)
    for b0 in range(0, nb, chunk):
        b1 = min(nb, b0 + chunk)
        rows, blk = lane_row[b0 * lp : b1 * lp], bin_blk[b0:b1]
        qb = q_aug.index_select(0, rows).view(b1 - b0, lp * G, D + 1)
        p = torch.bmm(qb, kflat.index_select(0, blk).transpose(1, 2)).exp_()
        num.index_add_(0, rows, torch.bmm(p, vflat.index_select(0, blk)).to(acc).view(-1, G, D + 1))
    num = num[:R].view(BH, Tp, G, D + 1)[:, :T]
    den = num[..., D]
    den_safe = torch.where(den > 0, den, 1.0)
    if forced:  # a table that breaks the promise may have lost pairs: make that loud (NaN), not wrong
        den_safe = torch.where(binned.sum() > BH * cap, float("nan"), den_safe)
    out = (num[..., :D] / den_safe[..., None]).to(q.dtype)
    lse = shift[:, :T] + torch.log(den)
    return out.reshape(B, Hkv, T, G, D), lse.reshape(B, Hkv, T, G)


@_selected_fwd.register_fake
def _(q, kv, idx, valid, sel_block, chunk, scale, forced=False):
    return torch.empty_like(q), q.new_empty(q.shape[:4], dtype=_acc(q.dtype))


@torch.library.custom_op("nsa::selected_bwd", mutates_args=())
@autocast_off
def _selected_bwd(
    dout: Tensor,
    q: Tensor,
    kv: Tensor,
    idx: Tensor,
    valid: Tensor,
    out: Tensor,
    lse: Tensor,
    sel_block: int,
    chunk: int,
    scale: float,
    forced: bool = False,
) -> tuple[Tensor, Tensor]:
    B, Hkv, T, G, D = q.shape
    lp, acc = sel_block, _acc(q.dtype)
    Tp, ns, BH, cdt, ktab, vtab, kext, vext, binned, counts = _setup(q, kv, idx, valid, sel_block, scale)
    R = BH * Tp
    # Rows [R + 1, G, D + 1]: [q, -lse] and [dO, -delta] (delta = rowsum(dO * O)); the dummy row R has
    # lse = +inf (its lanes get p = 0) and dO = 0. Rows without any pair have lse = -inf: use 0 there.
    lse = torch.where(lse == float("-inf"), 0.0, lse.to(acc))
    delta = (dout.to(acc) * out.to(acc)).sum(-1)

    def rows_aug(x: Tensor, col: Tensor, dummy: float) -> Tensor:
        rows = torch.empty(R + 1, G, D + 1, dtype=cdt, device=q.device)
        body = rows[:R].view(BH, Tp, G, D + 1)
        body[:, :T, :, :D] = x.reshape(BH, T, G, D)
        body[:, :T, :, D] = -col.reshape(BH, T, G)
        body[:, T:] = 0
        rows[R] = 0
        rows[R, :, D] = dummy
        return rows

    q_aug = rows_aug(q, lse, float("-inf"))
    do_aug = rows_aug(dout, delta, 0.0)
    dq = torch.empty(R + 1, G, D + 1, dtype=acc, device=q.device)
    dq[R] = 0
    dk = torch.empty(BH, ns, lp, D + 1, dtype=acc, device=q.device)
    dv = torch.empty(BH, ns, lp, D + 1, dtype=acc, device=q.device)
    qa = q_aug[:R].view(BH, ns, lp * G, D + 1)
    da = do_aug[:R].view(BH, ns, lp * G, D + 1)
    dqa = dq[:R].view(BH, ns, lp * G, D + 1)
    cb = _block_chunk(chunk, BH)
    for j0 in range(0, ns, cb):
        j1 = min(ns, j0 + cb)
        c = j1 - j0
        qt, dot = qa[:, j0:j1].reshape(BH * c, lp * G, D + 1), da[:, j0:j1].reshape(BH * c, lp * G, D + 1)
        kt, vt = _tile_keys(kext, j0, j1), _tile_keys(vext, j0, j1)
        s = torch.bmm(qt, kt.transpose(1, 2)).to(acc).view(BH * c, lp, G, 3 * lp)
        p = s.add_(_tile_bias(counts, j0, j1, lp, acc)).exp_().view(BH * c, lp * G, 3 * lp)
        pc = p.to(cdt)
        ds = torch.bmm(dot, vt.transpose(1, 2)).to(acc).mul_(p).to(cdt)
        dqa[:, j0:j1] = torch.bmm(ds, kt).to(acc).view(BH, c, lp * G, D + 1)
        for tab, d in ((dk, torch.bmm(ds.transpose(1, 2), qt)), (dv, torch.bmm(pc.transpose(1, 2), dot))):
            d = d.to(acc).view(BH, c, 3, lp, D + 1)
            tab[:, j0:j1] = d[:, :, 0]
            tab[:, max(j0 - 1, 0) : j1 - 1] += d[:, 1 if j0 == 0 else 0 :, 1]
            tab[:, 0] += d[:, :, 2].sum(1)
    lane_row, bin_blk, nb = _selected_bins(
        binned, idx, sel_block, Tp, _binned_capacity(T, idx.shape[-1], lp, forced)
    )
    kflat, vflat = ktab.view(BH * ns, lp, D + 1), vtab.view(BH * ns, lp, D + 1)
    dkf, dvf = dk.view(BH * ns, lp, D + 1), dv.view(BH * ns, lp, D + 1)
    for b0 in range(0, nb, chunk):
        b1 = min(nb, b0 + chunk)
        rows, blk = lane_row[b0 * lp : b1 * lp], bin_blk[b0:b1]
        qb = q_aug.index_select(0, rows).view(b1 - b0, lp * G, D + 1)
        dob = do_aug.index_select(0, rows).view(b1 - b0, lp * G, D + 1)
        kb = kflat.index_select(0, blk)
        p = torch.bmm(qb, kb.transpose(1, 2)).exp_()
        ds = torch.bmm(dob, vflat.index_select(0, blk).transpose(1, 2)).mul_(p)
        dq.index_add_(0, rows, torch.bmm(ds, kb).to(acc).view(-1, G, D + 1))
        dkf.index_add_(0, blk, torch.bmm(ds.transpose(1, 2), qb).to(acc))
        dvf.index_add_(0, blk, torch.bmm(p.transpose(1, 2), dob).to(acc))
    dq = dq[:R].view(BH, Tp, G, D + 1)[:, :T, :, :D]
    dkv = torch.cat([dk[..., :D] * scale, dv[..., :D]], -1).view(B, Hkv, Tp, 2 * D)
    # Contiguous, as the fake kernel promises (inductor checks the strides of what the op returns).
    return dq.reshape_as(q).to(q.dtype).contiguous(), dkv.to(kv.dtype)


@_selected_bwd.register_fake
def _(dout, q, kv, idx, valid, out, lse, sel_block, chunk, scale, forced=False):
    return torch.empty_like(q), torch.empty_like(kv)


def _selected_setup(ctx, inputs, output) -> None:
    q, kv, idx, valid, sel_block, chunk, scale, forced = inputs
    out, lse = output
    ctx.save_for_backward(q, kv, idx, valid, out, lse)
    ctx.sel_block, ctx.chunk, ctx.scale, ctx.forced = sel_block, chunk, scale, forced


def _selected_backward(ctx, dout, _dlse):
    q, kv, idx, valid, out, lse = ctx.saved_tensors
    dq, dkv = torch.ops.nsa.selected_bwd(
        dout, q, kv, idx, valid, out, lse, ctx.sel_block, ctx.chunk, ctx.scale, ctx.forced
    )
    return dq, dkv, None, None, None, None, None, None


torch.library.register_autograd("nsa::selected_fwd", _selected_backward, setup_context=_selected_setup)


def selected_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    idx: Tensor,
    valid: Tensor,
    *,
    sel_block: int,
    scale: float,
    chunk: int,
    forced_blocks: bool = False,
) -> Tensor:
    """Selected branch: q [B,Hkv,T,G,D], k/v [B,Hkv,T,D], idx/valid [B,Hkv,T,n] -> [B,Hkv,T,G,D].

    Any table works. `forced_blocks=True` promises a table from `top_blocks` (every query lists block 0,
    its own block and the one before, all distinct): the op then sizes its bins for n - 3 other blocks
    per query (~20 % less work at the defaults); a table that breaks the promise gives NaN outputs.
    """
    T = q.shape[2]
    pad = -(-T // sel_block) * sel_block - T
    kv = F.pad(torch.cat([k, v], dim=-1), (0, 0, 0, pad))
    out, _ = torch.ops.nsa.selected_fwd(
        q.contiguous(), kv, idx, valid, sel_block, chunk, scale, forced_blocks
    )
    return out
