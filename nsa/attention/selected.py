"""The selected branch of NSA: custom ops `nsa::selected_fwd` / `nsa::selected_bwd`, block-major.

Owns `selected_attention`: every query attends the l'-token blocks of its selection table, with keys
after the query masked. Loops run over bin chunks only; no [T, T] tensor; nothing may sync with the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _acc(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype for softmax and gradient sums: float32 for half types, else the input's."""
    return torch.promote_types(dtype, torch.float32)


# The selected branch, block-major: every valid (query, selected block) pair of the table is sorted by
# block and packed into bins of up to P = l' pairs that share one block. A bin is one dense tile, P
# queries x G heads against the block's l' keys, so the [l', 2D] K/V block is read once per bin
# instead of once per query, and the per-pair traffic is the query's own G*D row (1.5 KB instead of
# a 32 KB K/V copy at the defaults). Results go back to query rows with scatter_add_. The softmax
# spans all of a query's bins, so the forward takes two passes over the bins: (A) each query's
# maximum logit, (B) exp(s - max) @ V and the row sums, summed into query rows. The backward is
# flash-style: only output and log-sum-exp are saved, the bins are rebuilt (one sort). Empty lanes
# point at an extra all-zero query row whose shift is +inf, so they contribute exact zeros. As
# custom ops, torch.compile sees two opaque nodes instead of the unrolled loop over bin chunks.


def _selected_bins(idx: Tensor, valid: Tensor, sel_block: int) -> tuple[Tensor, Tensor, Tensor, int]:
    """Pack the valid pairs of (idx, valid) [B, Hkv, T, n] into bins of P = l' pairs sharing a block.

    Returns lane_row [NB*P] (query row (b*Hkv + h)*T + t; R = B*Hkv*T, the dummy row, for an empty
    lane), bin_blk [NB] (K/V table row (b*Hkv + h)*Ns + j), pair_lane [R*n] (each pair's lane,
    NB*P for an invalid pair) and NB = ceil(R*n/P) + B*Hkv*Ns, a static upper bound on the bins
    (no sync): each block wastes less than one bin; unused bins are empty.
    """
    B, Hkv, T, n = idx.shape
    P, dev = sel_block, idx.device
    ns = -(-T // sel_block)
    nkey, R = B * Hkv * ns, B * Hkv * T
    nb = -(-(R * n) // P) + nkey
    bh = torch.arange(B * Hkv, device=dev).view(B, Hkv, 1, 1)
    key = torch.where(valid, bh * ns + idx, nkey).reshape(-1)  # invalid pairs: key nkey, dropped
    skey, order = torch.sort(key, stable=True)
    counts = torch.zeros(nkey + 1, dtype=torch.int64, device=dev).scatter_add_(0, key, torch.ones_like(key))
    start = torch.cumsum(counts, 0) - counts
    nbins = (counts + P - 1) // P
    nbins[nkey] = 0
    bin_start = torch.cumsum(nbins, 0) - nbins
    rank = torch.arange(key.numel(), device=dev) - start[skey]
    ok = skey < nkey
    bin_id = torch.where(ok, bin_start[skey] + rank // P, nb)  # invalid -> trash bin nb, cut below
    lane = bin_id * P + rank % P
    lane_row = torch.full((nb * P + P,), R, dtype=torch.int64, device=dev).index_put_((lane,), order // n)
    bin_blk = torch.zeros(nb + 1, dtype=torch.int64, device=dev).index_put_(
        (bin_id,), skey.clamp(max=nkey - 1)
    )
    pair_lane = torch.empty_like(key).index_put_((order,), torch.where(ok, lane, nb * P))
    return lane_row[: nb * P], bin_blk[:nb], pair_lane, nb


def _causal_ok(rows: Tensor, blk: Tensor, T: int, ns: int, sel_block: int) -> Tensor:
    """[nbc, P, l'] bool: key j*l' + i of the bin's block is at or before the lane's query."""
    nbc = blk.shape[0]
    t = (rows % T).view(nbc, -1, 1)
    keypos = (blk % ns).view(nbc, 1, 1) * sel_block + torch.arange(sel_block, device=rows.device)
    return keypos <= t


def _shifted_logits(qb: Tensor, kb: Tensor, ok: Tensor, shift: Tensor) -> Tensor:
    """q.k - shift as [nbc, P*G, l'] (acc dtype), -inf where not causal; shift [nbc, P, G]."""
    nbc, P, G = shift.shape
    bias = torch.where(ok, 0.0, float("-inf")).to(shift.dtype)[:, :, None, :] - shift[..., None]
    bias = bias.view(nbc, P * G, -1)
    if qb.dtype == bias.dtype:
        return bias.baddbmm_(qb, kb.transpose(-1, -2))
    return bias.add_(torch.bmm(qb, kb.transpose(-1, -2)))


def _selected_prep(q: Tensor, kv: Tensor, sel_block: int, scale: float) -> tuple[Tensor, Tensor]:
    """Query rows pre-multiplied by the scale plus the dummy zero row [R+1, G*D]; K/V table [B*Hkv*Ns, l'*2D]."""
    B, Hkv, T, G, D = q.shape
    q_rows = torch.cat([q.reshape(B * Hkv * T, G * D) * scale, q.new_zeros(1, G * D)])
    return q_rows, kv.reshape(-1, sel_block * 2 * D)


@torch.library.custom_op("nsa::selected_fwd", mutates_args=())
def _selected_fwd(
    q: Tensor, kv: Tensor, idx: Tensor, valid: Tensor, sel_block: int, chunk: int, scale: float
) -> tuple[Tensor, Tensor]:
    B, Hkv, T, G, D = q.shape
    ns, n, P, R = kv.shape[2] // sel_block, idx.shape[-1], sel_block, B * Hkv * T
    acc = _acc(q.dtype)
    lane_row, bin_blk, pair_lane, nb = _selected_bins(idx, valid, sel_block)
    q_rows, kv_tab = _selected_prep(q, kv, sel_block, scale)
    # Pass A: the maximum logit of every lane, then of every query over its n pairs.
    lane_max = torch.full((nb * P + 1, G), float("-inf"), dtype=acc, device=q.device)
    for b0 in range(0, nb, chunk):
        b1 = min(nb, b0 + chunk)
        rows, blk = lane_row[b0 * P : b1 * P], bin_blk[b0:b1]
        qb = q_rows.index_select(0, rows).view(b1 - b0, P * G, D)
        kb = kv_tab.index_select(0, blk).view(b1 - b0, sel_block, 2 * D)[..., :D]
        s = torch.matmul(qb, kb.transpose(-1, -2)).view(b1 - b0, P, G, sel_block)
        ok = _causal_ok(rows, blk, T, ns, sel_block)
        lane_max[b0 * P : b1 * P] = (
            s.masked_fill_(~ok[:, :, None], float("-inf")).amax(-1).view(-1, G).to(acc)
        )
    m = lane_max[pair_lane].view(R, n, G).amax(1)
    m_ext = torch.cat([m, torch.full((1, G), float("inf"), dtype=acc, device=q.device)])
    # Pass B: exp(s - max) @ V and the row sums of exp(s - max), summed into query rows.
    num = torch.zeros(R + 1, G * D, dtype=acc, device=q.device)
    den = torch.zeros(R + 1, G, dtype=acc, device=q.device)
    for b0 in range(0, nb, chunk):
        b1 = min(nb, b0 + chunk)
        rows, blk = lane_row[b0 * P : b1 * P], bin_blk[b0:b1]
        qb = q_rows.index_select(0, rows).view(b1 - b0, P * G, D)
        g = kv_tab.index_select(0, blk).view(b1 - b0, sel_block, 2 * D)
        ok = _causal_ok(rows, blk, T, ns, sel_block)
        p = _shifted_logits(qb, g[..., :D], ok, m_ext.index_select(0, rows).view(b1 - b0, P, G)).exp_()
        den.scatter_add_(0, rows[:, None].expand(-1, G), p.view(-1, G, sel_block).sum(-1))
        o = torch.matmul(p.to(q.dtype), g[..., D:]).to(acc).view(-1, G * D)
        num.scatter_add_(0, rows[:, None].expand(-1, G * D), o)
    den = den[:R]
    out = (num[:R].view(R, G, D) / den[..., None]).to(q.dtype)
    return out.view(B, Hkv, T, G, D), (m + torch.log(den)).view(B, Hkv, T, G)


@_selected_fwd.register_fake
def _(q, kv, idx, valid, sel_block, chunk, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:4], dtype=_acc(q.dtype))


@torch.library.custom_op("nsa::selected_bwd", mutates_args=())
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
) -> tuple[Tensor, Tensor]:
    B, Hkv, T, G, D = q.shape
    ns, P, R = kv.shape[2] // sel_block, sel_block, B * Hkv * T
    acc = _acc(q.dtype)
    lane_row, bin_blk, _, nb = _selected_bins(idx, valid, sel_block)
    q_rows, kv_tab = _selected_prep(q, kv, sel_block, scale)
    inf = torch.full((1, G), float("inf"), dtype=acc, device=q.device)
    lse_rows = torch.cat([lse.reshape(R, G).to(acc), inf])
    do_rows = torch.cat([dout.reshape(R, G * D), dout.new_zeros(1, G * D)])
    # delta_t = rowsum(dO * O), the softmax-backward correction, for all rows at once.
    delta = (dout.to(acc) * out.to(acc)).sum(-1).reshape(R, G)
    delta = torch.cat([delta, torch.zeros_like(inf)])
    dq = torch.zeros(R + 1, G * D, dtype=acc, device=q.device)
    dkv = torch.zeros(kv_tab.shape[0], sel_block, 2 * D, dtype=acc, device=q.device)
    for b0 in range(0, nb, chunk):
        b1 = min(nb, b0 + chunk)
        k = b1 - b0
        rows, blk = lane_row[b0 * P : b1 * P], bin_blk[b0:b1]
        qb = q_rows.index_select(0, rows).view(k, P * G, D)
        g = kv_tab.index_select(0, blk).view(k, sel_block, 2 * D)
        kb, vb = g[..., :D], g[..., D:]
        ok = _causal_ok(rows, blk, T, ns, sel_block)
        p = _shifted_logits(qb, kb, ok, lse_rows.index_select(0, rows).view(k, P, G)).exp_()
        dob = do_rows.index_select(0, rows).view(k, P * G, D)
        pq = p.to(q.dtype)
        dv = torch.matmul(pq.transpose(-1, -2), dob)
        dp = torch.matmul(dob, vb.transpose(-1, -2)).to(acc).view(k, P, G, sel_block)
        ds = dp.sub_(delta.index_select(0, rows).view(k, P, G, 1)).view(k, P * G, sel_block).mul_(p)
        ds = ds.to(q.dtype)
        dq.scatter_add_(0, rows[:, None].expand(-1, G * D), torch.matmul(ds, kb).to(acc).view(-1, G * D))
        dkv.index_add_(0, blk, torch.cat([torch.matmul(ds.transpose(-1, -2), qb), dv], -1).to(acc))
    dq = (dq[:R] * scale).to(q.dtype)
    return dq.view_as(q), dkv.view_as(kv).to(kv.dtype)


@_selected_bwd.register_fake
def _(dout, q, kv, idx, valid, out, lse, sel_block, chunk, scale):
    return torch.empty_like(q), torch.empty_like(kv)


def _selected_setup(ctx, inputs, output) -> None:
    q, kv, idx, valid, sel_block, chunk, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, kv, idx, valid, out, lse)
    ctx.sel_block, ctx.chunk, ctx.scale = sel_block, chunk, scale


def _selected_backward(ctx, dout, _dlse):
    q, kv, idx, valid, out, lse = ctx.saved_tensors
    dq, dkv = torch.ops.nsa.selected_bwd(
        dout, q, kv, idx, valid, out, lse, ctx.sel_block, ctx.chunk, ctx.scale
    )
    return dq, dkv, None, None, None, None, None


torch.library.register_autograd("nsa::selected_fwd", _selected_backward, setup_context=_selected_setup)


def selected_attention(
    q: Tensor, k: Tensor, v: Tensor, idx: Tensor, valid: Tensor, *, sel_block: int, scale: float, chunk: int
) -> Tensor:
    """Selected branch: q [B,Hkv,T,G,D], k/v [B,Hkv,T,D], idx/valid [B,Hkv,T,n] -> [B,Hkv,T,G,D]."""
    T = q.shape[2]
    pad = -(-T // sel_block) * sel_block - T
    kv = F.pad(torch.cat([k, v], dim=-1), (0, 0, 0, pad))
    out, _ = torch.ops.nsa.selected_fwd(q.contiguous(), kv, idx, valid, sel_block, chunk, scale)
    return out
