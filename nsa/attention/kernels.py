"""The fast NSA branch kernels in plain PyTorch: chunked over queries, no [T, T] tensor, no loop over
tokens, blocks or heads.

Owns the three attention computations of the default path, in the [B, Hkv, T, G, D] layout where the
G query heads of a GQA group sit next to each other so they share one gathered copy of their keys:
- `compressed_attention_and_selection`: SDPA over the causal prefix of compressed keys, per query
  chunk, plus (no_grad) the group-summed probabilities -> selected-block table (selection.py).
- `window_attention`: SDPA over pairs of window-sized key blocks with one shared band mask.
- `selected_attention`: a custom autograd Function that gathers each query's selected blocks chunk by
  chunk and recomputes them in backward (flash-style: only the output and log-sum-exp are saved).
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
    ns = -(-T // sel_block)
    device = q.device
    outs, idxs, valids = [], [], []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        t = torch.arange(c0, c1, device=device)
        n_vis = min(nc, max(0, (c1 - block_len) // block_stride + 1))
        # Rows before the first complete block see nothing: they are zeros, never softmax(empty).
        r0 = min(c1, max(c0, block_len - 1))
        if n_vis == 0:
            outs.append(q.new_zeros(B, Hkv, c1 - c0, G, D))
            p_grp = q.new_zeros(B, Hkv, c1 - c0, 1, dtype=torch.float32)
        else:
            k_vis, v_vis = kc[:, :, :n_vis], vc[:, :, :n_vis]
            ends = torch.arange(n_vis, device=device) * block_stride + (block_len - 1)
            vis = ends[None, :] <= t[:, None]  # [C, n_vis]
            q_rows = q[:, :, r0:c1]
            o = _sdpa_grouped(q_rows, k_vis, v_vis, vis[r0 - c0 :], scale)
            outs.append(F.pad(o, (0, 0, 0, 0, r0 - c0, 0)))
            with torch.no_grad():
                s = torch.einsum("bhcgd,bhnd->bhcgn", q[:, :, c0:c1].float(), k_vis.float()) * scale
                s = s.masked_fill(~vis[None, None, :, None, :], float("-inf"))
                p = torch.softmax(s, dim=-1)
                p = torch.where(vis[None, None, :, None, :], p, torch.zeros_like(p))  # NaN rows -> 0
                p_grp = p.sum(dim=3)  # Eq. 10: the group shares one importance vector
        with torch.no_grad():
            scores = selection_block_scores(p_grp, block_len, block_stride, sel_block, ns)
            idx, valid = top_blocks(scores, t, sel_block, n_sel)
        idxs.append(idx)
        valids.append(valid)
    return torch.cat(outs, dim=2), torch.cat(idxs, dim=2), torch.cat(valids, dim=2)


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


class _SelectedAttention(torch.autograd.Function):
    """Attention of each query over its own selected blocks (keys after t masked), flash-style.

    K and V travel as one table kv [B, Hkv, Ns*l', 2D] so each selected block is one 32 KB row
    gather. Chunks are small on purpose: the gathered rows are used while still in cache (measured:
    chunk 128 was several times slower than 8-32 on the 2-core dev machine).
    """

    @staticmethod
    def forward(ctx, q, kv, idx, valid, sel_block: int, chunk: int, scale: float):  # type: ignore[override]
        B, Hkv, T, G, D = q.shape
        ns = kv.shape[2] // sel_block
        n = idx.shape[-1]
        table = kv.view(B * Hkv * ns, sel_block * 2 * D)
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
        ctx.save_for_backward(q, kv, idx, valid, out, lse)
        ctx.sel_block, ctx.chunk, ctx.scale = sel_block, chunk, scale
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, kv, idx, valid, out, lse = ctx.saved_tensors
        sel_block, chunk, scale = ctx.sel_block, ctx.chunk, ctx.scale
        B, Hkv, T, _, D = q.shape
        ns = kv.shape[2] // sel_block
        n = idx.shape[-1]
        acc = _acc(q.dtype)
        table = kv.view(B * Hkv * ns, sel_block * 2 * D)
        base = (torch.arange(B * Hkv, device=q.device) * ns).view(B, Hkv, 1, 1)
        dout = dout.contiguous()
        dq = torch.empty_like(q)
        dtable = torch.zeros(B * Hkv * ns, sel_block * 2 * D, dtype=acc, device=q.device)
        # delta_t = rowsum(dO * O), the softmax-backward correction, for all rows at once.
        delta = (dout.to(acc) * out.to(acc)).sum(-1, keepdim=True)
        for c0 in range(0, T, chunk):
            c1 = min(T, c0 + chunk)
            c = c1 - c0
            t = torch.arange(c0, c1, device=q.device)
            idx_c, valid_c = idx[:, :, c0:c1], valid[:, :, c0:c1]
            flat = (idx_c + base).reshape(-1)
            g = table.index_select(0, flat).view(B, Hkv, c, n * sel_block, 2 * D)
            kg, vg = g[..., :D], g[..., D:]
            q_c, do_c = q[:, :, c0:c1], dout[:, :, c0:c1]
            s = _selected_chunk_scores(q_c, kg, idx_c, valid_c, t, sel_block, scale)
            p = torch.exp(s - lse[:, :, c0:c1, :, None])
            dp = torch.matmul(do_c, vg.transpose(-1, -2)).to(acc)
            ds = (p * (dp - delta[:, :, c0:c1]) * scale).to(q.dtype)
            dq[:, :, c0:c1] = torch.matmul(ds, kg)
            dg = torch.cat(
                [
                    torch.matmul(ds.transpose(-1, -2), q_c),
                    torch.matmul(p.to(q.dtype).transpose(-1, -2), do_c),
                ],
                dim=-1,
            )
            dtable.index_add_(0, flat, dg.reshape(-1, sel_block * 2 * D).to(acc))
        return dq, dtable.to(kv.dtype).view_as(kv), None, None, None, None, None


def selected_attention(
    q: Tensor, k: Tensor, v: Tensor, idx: Tensor, valid: Tensor, *, sel_block: int, scale: float, chunk: int
) -> Tensor:
    """Selected branch: q [B,Hkv,T,G,D], k/v [B,Hkv,T,D], idx/valid [B,Hkv,T,n] -> [B,Hkv,T,G,D]."""
    T = q.shape[2]
    pad = -(-T // sel_block) * sel_block - T
    kv = F.pad(torch.cat([k, v], dim=-1), (0, 0, 0, pad))
    return _SelectedAttention.apply(q.contiguous(), kv, idx, valid, sel_block, chunk, scale)
