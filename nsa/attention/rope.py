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
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)


_TABLES: dict[tuple, tuple[Tensor, Tensor]] = {}
_TABLES_MAX = 16


def rope_tables(
    n: int,
    head_dim: int,
    theta: float,
    dtype: torch.dtype,
    device: torch.device,
    *,
    step: int = 1,
    offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """`rope_cos_sin` of positions offset + step*i, i < n, cached: every layer and step asks for the
    same tables, and forming them in float64 costs ~60 ms at T=16k on CPU.

    Not cached under torch.compile (traced as plain ops) nor in inference mode (inference tensors
    cannot later be saved for backward).
    """
    key = (n, head_dim, float(theta), dtype, torch.device(device), step, offset)
    hit = _TABLES.get(key)
    if hit is not None:
        return hit
    positions = torch.arange(n, device=device) * step + offset
    tables = rope_cos_sin(positions, head_dim, theta, dtype)
    if not torch.compiler.is_compiling() and not torch.is_inference_mode_enabled():
        if len(_TABLES) >= _TABLES_MAX:
            _TABLES.clear()
        _TABLES[key] = tables
    return tables


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` [..., T, H, D] (positions on dim -3) by tables [T, D]; at least float32 inside.

    The plain spelling, used by the reference and for half-precision inputs; the modules' float32
    path is `rope_to_layout`, the same rotation in fewer passes.
    """
    half = x.shape[-1] // 2
    xf = x.to(torch.promote_types(x.dtype, cos.dtype))
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    out = xf * cos[:, None, :] + rotated * sin[:, None, :]
    return out.to(x.dtype)


def _rotate_into(x: Tensor, cos: Tensor, sin: Tensor, out: Tensor) -> Tensor:
    """out = x*cos + rotate_half(x)*sin in three passes (no rotated copy); tables broadcast over x."""
    half = x.shape[-1] // 2
    torch.mul(x, cos, out=out)
    out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1.0)
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out


class _RopeToLayout(torch.autograd.Function):
    """apply_rope fused with a permute: written straight into the permuted layout, contiguous.

    Three passes forward and three backward (the inverse rotation, by -angle), instead of a rotated
    copy, three products and a layout copy; only the tables are saved.
    """

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, perm: tuple[int, ...]) -> Tensor:
        inv = tuple(perm.index(i) for i in range(len(perm)))
        out = x.new_empty([x.shape[p] for p in perm])
        _rotate_into(x, cos, sin, out.permute(inv))
        ctx.save_for_backward(cos, sin)
        ctx.perm, ctx.inv = perm, inv
        return out

    @staticmethod
    def backward(ctx, dout: Tensor) -> tuple[Tensor, None, None, None]:
        cos, sin = ctx.saved_tensors
        d = dout.permute(ctx.inv)  # indexed like x
        return (
            _rotate_into(d, cos, -sin, torch.empty(d.shape, dtype=d.dtype, device=d.device)),
            None,
            None,
            None,
        )


def rope_to_layout(x: Tensor, cos: Tensor, sin: Tensor, perm: tuple[int, ...]) -> Tensor:
    """`apply_rope(x, cos, sin).permute(perm).contiguous()`, with fewer passes over memory.

    x [B, T, H, D] or [B, T, Hkv, G, D] (positions on dim 1), tables [T, D]. Half-precision inputs take
    the plain path, which rotates in float32; so does torch.compile (dynamo refuses strided `out=`,
    and inductor fuses the plain spelling itself).
    """
    if x.dtype != cos.dtype or torch.compiler.is_compiling():
        return apply_rope(x.flatten(2, -2), cos, sin).view(x.shape).permute(perm).contiguous()
    shape = (cos.shape[0],) + (1,) * (x.dim() - 3) + (cos.shape[1],)
    return _RopeToLayout.apply(x, cos.view(shape), sin.view(shape), perm)
