"""The fast NSA branch kernels in plain PyTorch: chunked over queries, no [T, T] tensor, no loop over
tokens, blocks or heads.

Owns the three attention computations of the default path, in the [B, Hkv, T, G, D] layout where the
G query heads of a GQA group sit next to each other so they share one gathered copy of their keys:
- `compressed_attention_and_selection`: SDPA over the causal prefix of compressed keys, per query
  chunk, plus the custom op `nsa::select_blocks` (no grad: group-summed probabilities -> table).
- `window_attention`: SDPA over (split+1) half-window key blocks with one shared band mask.
- `selected_attention`: custom ops `nsa::selected_fwd` / `nsa::selected_bwd` that sort the (query,
  block) pairs by block into bins of l' queries sharing one block, attend bin chunk by bin chunk and
  recompute them in backward (only output and log-sum-exp saved).
Loops here run over query chunks or bin chunks only. Nothing here may sync with the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nsa.attention.selection import selection_block_scores, top_blocks


def _sdpa_grouped(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """q [..., C, G, D] against k/v [..., N, D] with mask [C, N]: all G heads of a group in one call."""
    *lead, c, g, d = q.shape
    rows = q.reshape(*lead, c * g, d)
    m = mask.repeat_interleave(g, dim=0)
    out = F.scaled_dot_product_attention(rows, k, v, attn_mask=m, scale=scale)
    return out.view(*lead, c, g, d)


def compressed_attention_and_selection(
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    *,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    scale: float,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Compressed branch output [B, Hkv, T, G, D] and the selection table (idx, valid) [B, Hkv, T, k].

    Compressed key i is visible to query t iff i*d + l - 1 <= t; a query that sees none gets zeros.
    """
    B, Hkv, T, G, D = q.shape
    nc = kc.shape[2]
    kx, vx = kc.repeat_interleave(G, dim=1), vc.repeat_interleave(G, dim=1)  # [B, Hkv*G, Nc, D]
    outs = []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        n_vis = min(nc, max(0, (c1 - block_len) // block_stride + 1))
        # Rows before the first complete block see nothing: they are zeros, never softmax(empty).
        r0 = min(c1, max(c0, block_len - 1))
        if n_vis == 0:
            outs.append(q.new_zeros(B, Hkv, c1 - c0, G, D))
            continue
        t = torch.arange(r0, c1, device=q.device)
        ends = torch.arange(n_vis, device=q.device) * block_stride + (block_len - 1)
        vis = ends[None, :] <= t[:, None]
        # Heads as SDPA heads so the [C, n_vis] mask broadcasts instead of being repeated G times
        # (autograd keeps one mask per chunk; G copies cost ~1.5 GB at T=32k). The few compressed
        # keys are expanded to all heads: the CPU kernel is much slower with enable_gqa=True.
        rows = q[:, :, r0:c1].permute(0, 1, 3, 2, 4).reshape(B, Hkv * G, c1 - r0, D)
        o = F.scaled_dot_product_attention(
            rows, kx[:, :, :n_vis], vx[:, :, :n_vis], attn_mask=vis, scale=scale
        )
        o = o.view(B, Hkv, G, c1 - r0, D).permute(0, 1, 3, 2, 4)
        outs.append(F.pad(o, (0, 0, 0, 0, r0 - c0, 0)))
    # Selection scores are float32 [C, G, n_vis] per chunk; 256 rows keep them cache-sized (measured
    # 0.66 s vs 1.06 s at T=16k for 1024 rows).
    idx, valid = torch.ops.nsa.select_blocks(
        q.detach(), kc.detach(), block_len, block_stride, sel_block, n_sel, scale, min(chunk, 256)
    )
    return torch.cat(outs, dim=2), idx, valid


@torch.library.custom_op("nsa::select_blocks", mutates_args=())
def _select_blocks(
    q: Tensor,
    kc: Tensor,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    scale: float,
    chunk: int,
) -> tuple[Tensor, Tensor]:
    """Eq. 8-11 per query chunk: float32 compressed probabilities, summed over the group -> top-n.

    A custom op so torch.compile sees one opaque node (no unrolled chunk loop, no graph break).
    """
    B, Hkv, T, _, _ = q.shape
    nc = kc.shape[2]
    ns = -(-T // sel_block)
    idxs, valids = [], []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        t = torch.arange(c0, c1, device=q.device)
        n_vis = min(nc, max(0, (c1 - block_len) // block_stride + 1))
        if n_vis == 0:
            p_grp = q.new_zeros(B, Hkv, c1 - c0, 1, dtype=torch.float32)
        else:
            ends = torch.arange(n_vis, device=q.device) * block_stride + (block_len - 1)
            vis = (ends[None, :] <= t[:, None])[None, None, :, None, :]
            s = torch.einsum("bhcgd,bhnd->bhcgn", q[:, :, c0:c1].float(), kc[:, :, :n_vis].float()) * scale
            p = torch.softmax(s.masked_fill(~vis, float("-inf")), dim=-1)
            p_grp = torch.where(vis, p, torch.zeros_like(p)).sum(dim=3)  # NaN rows -> 0; Eq. 10
        scores = selection_block_scores(p_grp, block_len, block_stride, sel_block, ns)
        idx, valid = top_blocks(scores, t, sel_block, n_sel)
        idxs.append(idx)
        valids.append(valid)
    return torch.cat(idxs, dim=2), torch.cat(valids, dim=2)


@_select_blocks.register_fake
def _(q, kc, block_len, block_stride, sel_block, n_sel, scale, chunk):
    B, Hkv, T = q.shape[:3]
    k = min(n_sel, -(-T // sel_block))
    return q.new_empty(B, Hkv, T, k, dtype=torch.int64), q.new_empty(B, Hkv, T, k, dtype=torch.bool)


def window_attention(q: Tensor, k: Tensor, v: Tensor, *, window: int, scale: float, split: int = 2) -> Tensor:
    """Sliding window: query t attends keys in (t - window, t]. q [B,Hkv,T,G,D], k/v [B,Hkv,T,D].

    Queries go in blocks of C = ceil(window / split); block b attends key blocks b-split..b, i.e.
    (split+1)*C keys of which ~window are in the band (split=2: 1.5x the minimal work, vs 2x for split=1).
    """
    B, Hkv, T, G, D = q.shape
    m = split
    c = -(-window // m)
    nb = -(-T // c)
    pad = nb * c - T
    # m zero blocks in front so every query block has m predecessors; they are masked out below.
    kb = F.pad(k, (0, 0, m * c, pad)).view(B, Hkv, nb + m, c, D)
    vb = F.pad(v, (0, 0, m * c, pad)).view(B, Hkv, nb + m, c, D)
    qb = F.pad(q, (0, 0, 0, 0, 0, pad)).view(B, Hkv, nb, c, G, D)
    kk = torch.cat([kb[:, :, i : i + nb] for i in range(m + 1)], dim=3)  # [B, Hkv, nb, (m+1)c, D]
    vv = torch.cat([vb[:, :, i : i + nb] for i in range(m + 1)], dim=3)
    i = torch.arange(c, device=q.device)[:, None]
    col = torch.arange((m + 1) * c, device=q.device)[None, :]
    # Query i of a block is at offset m*c + i in its key row: band is (m*c + i - window, m*c + i].
    band = (col <= m * c + i) & (col > m * c + i - window)
    head = min(nb, m)  # the first m query blocks also must not see the zero padding
    outs = []
    for b0, b1 in ((0, head), (head, nb)):
        if b1 <= b0:
            continue
        if b0 == 0:
            real = col + (torch.arange(b0, b1, device=q.device)[:, None, None] - m) * c >= 0
            mask = band[None] & real  # [b1, c, (m+1)c]
            mask = mask.repeat_interleave(G, dim=1)[None, None]
            rows = qb[:, :, b0:b1].reshape(B, Hkv, b1 - b0, c * G, D)
            o = F.scaled_dot_product_attention(
                rows, kk[:, :, b0:b1], vv[:, :, b0:b1], attn_mask=mask, scale=scale
            )
            outs.append(o.view(B, Hkv, b1 - b0, c, G, D))
        else:
            n = b1 - b0
            rows = qb[:, :, b0:b1].reshape(B, Hkv * n, c, G, D)
            o = _sdpa_grouped(
                rows,
                kk[:, :, b0:b1].reshape(B, Hkv * n, (m + 1) * c, D),
                vv[:, :, b0:b1].reshape(B, Hkv * n, (m + 1) * c, D),
                band,
                scale,
            )
            outs.append(o.view(B, Hkv, n, c, G, D))
    return torch.cat(outs, dim=2).reshape(B, Hkv, nb * c, G, D)[:, :, :T]


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
