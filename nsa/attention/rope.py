"""Rotary position embedding (RoPE) shared by every attention in `nsa.attention`.

Owns the rotate-half (GPT-NeoX / HF Llama) convention and the cos/sin tables for arbitrary integer
positions, so the selection/window keys (token positions) and the compressed keys (block-end
positions) are rotated by one definition. It must not know about branches or masks.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos/sin tables of shape [len(positions), head_dim] in float32 for integer `positions`."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got head_dim={head_dim}")
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    )
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` [..., T, H, D] (positions on dim -3) by tables [T, D]; computed in float32."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    out = xf * cos[:, None, :] + rotated * sin[:, None, :]
    return out.to(x.dtype)
