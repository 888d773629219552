"""The fast NSA branch kernels in plain PyTorch: chunked over queries, no [T, T] tensor, no loop over
tokens, blocks or heads.

Owns the three attention computations of the default path, in the [B, Hkv, T, G, D] layout where the
G query heads of a GQA group sit next to each other so they share one gathered copy of their keys:
- `compressed_attention_and_selection`: SDPA over the causal prefix of compressed keys, per query
  chunk, plus the custom op `nsa::select_blocks` (no grad: group-summed probabilities -> table).
- `window_attention`: SDPA over (split+1) half-window key blocks with one shared band mask.
- `selected_attention`: custom ops `nsa::selected_fwd` / `nsa::selected_bwd` that gather each query's
  selected blocks chunk by chunk and recompute them in backward (only output and log-sum-exp saved).
Loops here run over query chunks only (T / chunk iterations). Nothing here may sync with the device.
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
        # Heads as SDPA heads (enable_gqa) so the [C, n_vis] mask broadcasts instead of being
        # repeated G times; autograd keeps one mask per chunk (G copies cost ~1.5 GB at T=32k).
        rows = q[:, :, r0:c1].permute(0, 1, 3, 2, 4).reshape(B, Hkv * G, c1 - r0, D)
        o = F.scaled_dot_product_attention(
            rows, kc[:, :, :n_vis], vc[:, :, :n_vis], attn_mask=vis, scale=scale, enable_gqa=True
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


def _selected_chunk_scores(
    q_c: Tensor, kg: Tensor, idx_c: Tensor, valid_c: Tensor, t: Tensor, sel_block: int, scale: float
) -> Tensor:
    """Masked float32 logits [B, Hkv, C, G, n*l'] of a query chunk against its gathered blocks."""
    s = torch.matmul(q_c, kg.transpose(-1, -2)).to(_acc(q_c.dtype)) * scale
    keypos = idx_c[..., None] * sel_block + torch.arange(sel_block, device=q_c.device)
    allowed = (keypos <= t[:, None, None]) & valid_c[..., None]
    allowed = allowed.flatten(-2)[..., None, :]
    return s.masked_fill(~allowed, float("-inf"))


# The selected branch is a pair of custom ops (forward, backward) with a registered autograd
# formula, flash-style: only the output and log-sum-exp are saved, the gathers are recomputed.
# K and V travel as one table kv [B, Hkv, Ns*l', 2D] so a selected block is one 32 KB row gather.
# Chunks are small on purpose: the gathered rows are used while still in cache (measured on the
# 2-core dev machine: chunk 8-16 several times faster than 128). As custom ops, torch.compile
# sees two opaque nodes instead of unrolling T/chunk loop iterations.


@torch.library.custom_op("nsa::selected_fwd", mutates_args=())
def _selected_fwd(
    q: Tensor, kv: Tensor, idx: Tensor, valid: Tensor, sel_block: int, chunk: int, scale: float
) -> tuple[Tensor, Tensor]:
    B, Hkv, T, G, D = q.shape
    ns = kv.shape[2] // sel_block
    n = idx.shape[-1]
    table = kv.reshape(B * Hkv * ns, sel_block * 2 * D)
    base = (torch.arange(B * Hkv, device=q.device) * ns).view(B, Hkv, 1, 1)
    out = torch.empty_like(q)
    lse = torch.empty(B, Hkv, T, G, dtype=_acc(q.dtype), device=q.device)
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        t = torch.arange(c0, c1, device=q.device)
        idx_c, valid_c = idx[:, :, c0:c1], valid[:, :, c0:c1]
        g = table.index_select(0, (idx_c + base).reshape(-1)).view(B, Hkv, c1 - c0, n * sel_block, 2 * D)
        s = _selected_chunk_scores(q[:, :, c0:c1], g[..., :D], idx_c, valid_c, t, sel_block, scale)
        m = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - m[..., None]).to(q.dtype)
        out[:, :, c0:c1] = torch.matmul(p, g[..., D:])
        lse[:, :, c0:c1] = m
    return out, lse


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
    B, Hkv, T, _, D = q.shape
    ns = kv.shape[2] // sel_block
    n = idx.shape[-1]
    acc = _acc(q.dtype)
    table = kv.reshape(B * Hkv * ns, sel_block * 2 * D)
    base = (torch.arange(B * Hkv, device=q.device) * ns).view(B, Hkv, 1, 1)
    dout = dout.contiguous()
    dq = torch.empty_like(q)
    dk = torch.zeros(B * Hkv * ns, sel_block * D, dtype=acc, device=q.device)
    dv = torch.zeros_like(dk)
    # delta_t = rowsum(dO * O), the softmax-backward correction, for all rows at once.
    delta = (dout.to(acc) * out.to(acc)).sum(-1, keepdim=True)
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        t = torch.arange(c0, c1, device=q.device)
        idx_c, valid_c = idx[:, :, c0:c1], valid[:, :, c0:c1]
        flat = (idx_c + base).reshape(-1)
        g = table.index_select(0, flat).view(B, Hkv, c1 - c0, n * sel_block, 2 * D)
        kg, vg = g[..., :D], g[..., D:]
        q_c, do_c = q[:, :, c0:c1], dout[:, :, c0:c1]
        s = _selected_chunk_scores(q_c, kg, idx_c, valid_c, t, sel_block, scale)
        p = torch.exp(s - lse[:, :, c0:c1, :, None])
        dp = torch.matmul(do_c, vg.transpose(-1, -2)).to(acc)
        ds = (p * (dp - delta[:, :, c0:c1]) * scale).to(q.dtype)
        dq[:, :, c0:c1] = torch.matmul(ds, kg)
        dk.index_add_(0, flat, torch.matmul(ds.transpose(-1, -2), q_c).reshape(-1, sel_block * D).to(acc))
        dv.index_add_(
            0, flat, torch.matmul(p.to(q.dtype).transpose(-1, -2), do_c).reshape(-1, sel_block * D).to(acc)
        )
    dkv = torch.cat([dk.view(B, Hkv, ns * sel_block, D), dv.view(B, Hkv, ns * sel_block, D)], dim=-1)
    return dq, dkv.to(kv.dtype)


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
