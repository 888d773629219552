"""The sliding-window branch of NSA: query t attends keys in (t - window, t], through SDPA on key blocks.

Owns `window_attention` in the [B, Hkv, T, G, D] query layout. No loop over tokens; no [T, T] tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _sdpa_grouped(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """q [..., C, G, D] against k/v [..., N, D] with mask [C, N]: all G heads of a group in one call."""
    *lead, c, g, d = q.shape
    rows = q.reshape(*lead, c * g, d)
    m = mask.repeat_interleave(g, dim=0)
    out = F.scaled_dot_product_attention(rows, k, v, attn_mask=m, scale=scale)
    return out.view(*lead, c, g, d)


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
