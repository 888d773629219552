"""The compressed branch and block selection of NSA in plain PyTorch, chunked over queries.

Owns `compressed_attention_and_selection`: attention over the causal prefix of compressed keys
[Eq. 7] and the custom op `nsa::select_blocks` (no grad: group-summed compressed probabilities ->
selection table [Eq. 8-11]). Layout [B, Hkv, T, G, D]: the G query heads of a GQA group sit next to
each other. Loops run over query chunks only; no [T, T] tensor; nothing may sync with the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nsa.attention.selection import selection_block_scores, top_blocks


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
