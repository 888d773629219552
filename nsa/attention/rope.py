"""Rotary position embedding (RoPE) shared by every attention in `nsa.attention`.

Owns the rotate-half (GPT-NeoX / HF Llama) convention and the cos/sin tables for arbitrary integer
positions, so the selection/window keys (token positions) and the compressed keys (block-end
positions) are rotated by one definition. It must not know about branches or masks.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rope_cos_sin(
    positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """cos/sin tables of shape [len(positions), head_dim] for integer `positions`.

    Angles are formed in float64 (float32 loses ~1e-3 rad at position 32k) and returned in `dtype`.
    """
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got head_dim={head_dim}")
    exponent = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float64) / head_dim
    angles = positions.to(torch.float64)[:, None] * (1.0 / theta**exponent)[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` [..., T, H, D] (positions on dim -3) by tables [T, D]; at least float32 inside."""
    half = x.shape[-1] // 2
    xf = x.to(torch.promote_types(x.dtype, cos.dtype))
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    out = xf * cos[:, None, :] + rotated * sin[:, None, :]
    return out.to(x.dtype)
