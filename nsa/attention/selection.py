"""Block selection for NSA: compressed-attention probabilities -> per-query table of selected blocks.

Owns Eq. 9 (mapping compression-block importance onto selection blocks), Eq. 10 (the sum over the
heads of a GQA group, done by the caller before this module) and Eq. 11 (top-n with the forced
initial and local blocks, and the deterministic tie-break). Everything here runs under no_grad on
detached float32 scores; it must never call `.item()` or otherwise sync with the device, and it must
never let a block that starts after the query be chosen.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# Bit pattern of float32 +inf: a forced block outranks every finite importance score.
_INF_BITS = 0x7F800000
_LOW32 = (1 << 32) - 1


def overlap_weights(block_len: int, block_stride: int, sel_block: int) -> list[int]:
    """Eq. 9 weights: w[u] = number of stride-sized sub-blocks that compressed block
    (r*j - (a-1) + u) shares with selection block j, where a = l/d and r = l'/d.

    The printed paper indexes p_cmp[(l'/d) j - m - n], m < l'/d, n < l/d. That also reduces to the
    identity for l = l' = d, and has the same weights, but for r = l'/d > 1 it sums the compressed
    blocks r*j - (r-1) - (a-1) .. r*j: it ends at the first compressed block starting in selection
    block j, so it points r - 1 compressed blocks (l' - d tokens, 3/4 of a block at the defaults) too
    early, mostly into block j - 1. The sum that counts overlap is over p_cmp[r*j + m - n].
    """
    a, r = block_len // block_stride, sel_block // block_stride
    k = a + r - 1
    return [min(u + 1, a, r, k - u) for u in range(k)]


def selection_block_scores(
    p_cmp: Tensor, block_len: int, block_stride: int, sel_block: int, n_sel_blocks: int
) -> Tensor:
    """Eq. 9: p_cmp [..., Nc] (zeros where not visible) -> p_slc [..., n_sel_blocks]."""
    w = overlap_weights(block_len, block_stride, sel_block)
    a, r, k = block_len // block_stride, sel_block // block_stride, len(w)
    need = (n_sel_blocks - 1) * r + k
    left = a - 1
    right = need - left - p_cmp.shape[-1]
    if right < 0:
        raise ValueError(
            f"p_cmp has {p_cmp.shape[-1]} compressed blocks, more than {n_sel_blocks} selection blocks cover"
        )
    padded = F.pad(p_cmp, (left, right))
    windows = padded.unfold(-1, k, r)  # [..., n_sel_blocks, k]
    return windows @ torch.tensor(w, dtype=p_cmp.dtype, device=p_cmp.device)


def top_blocks(scores: Tensor, t: Tensor, sel_block: int, n_sel: int) -> tuple[Tensor, Tensor]:
    """Eq. 11: choose min(n_sel, #blocks) selection blocks per query.

    scores: [..., C, Ns] float32 >= 0; t: [C] int64 query positions. Candidates are blocks j with
    j*l' <= t. Block 0 and the two local blocks (t // l' and the one before) are always taken and
    count towards n_sel. Ties in importance go to the more recent block (larger j): the int64 key
    (score bits << 32 | j) makes every key distinct, so topk is exact and deterministic.
    Returns (idx [..., C, k] int64, valid [..., C, k] bool); invalid slots hold idx 0.
    """
    ns = scores.shape[-1]
    j = torch.arange(ns, device=scores.device)
    cand = j[None, :] * sel_block <= t[:, None]
    jt = (t // sel_block)[:, None]
    forced = (j[None, :] == 0) | (j[None, :] == jt) | (j[None, :] == jt - 1)
    # Non-negative float32 bit patterns order like the floats; the mask drops the sign of -0.0.
    bits = scores.float().contiguous().view(torch.int32).to(torch.int64) & 0x7FFFFFFF
    bits = torch.where(forced, torch.full_like(bits, _INF_BITS), bits)
    key = (bits << 32) | j
    key = torch.where(cand, key, torch.full_like(key, -1))
    top, _ = key.topk(min(n_sel, ns), dim=-1)
    valid = top >= 0
    idx = torch.where(valid, top & _LOW32, torch.zeros_like(top))
    return idx, valid
