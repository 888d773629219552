"""Error bounds for a bf16/fp16 attention kernel, derived from where the kernel rounds.

Owns `attention_bounds`: for one attention branch given as a dense visibility mask (small shapes
only: it builds [T*G, Tk] matrices per (batch, KV head)), the exact result in float64 and, per
element, how far a kernel that follows the flash recipe of this package may be from it. The kernels
(window, compressed, selected) take 16-bit inputs, compute logits, softmax and every accumulation in
float32, and round to the 16-bit type in exactly these places:
- forward: the probabilities before p @ V, and the output;
- backward: dS before dS @ K and dS^T @ Q, P before P^T @ dO, and dQ/dK/dV on store; delta =
  rowsum(dO * O) uses the rounded output O.
With u the unit roundoff of the type (2^-8 bf16, 2^-11 fp16), each rounding of a term x costs at most
u|x|, so (|.| elementwise, float32 arithmetic adds `slack`, far below u):
    |dO_|   <= u (P|V| + |O|)
    |ddelta| <= |dO| . bound(O)                          (rowwise)
    |ddQ|   <= u s |dS||K| + s |ddelta| P|K| + u|dQ|
    |ddK|   <= u s |dS|^T|Q| + s (P * |ddelta|)^T |Q| + u|dK|
    |ddV|   <= u P^T|dO| + u|dV|
(s = softmax scale). A kernel that rounds somewhere else, or computes a wrong value, breaks them.
It must not be loosened to make a kernel pass: a bound that fails is a finding.
"""

from __future__ import annotations

import torch
from torch import Tensor

UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}


def _rows(x: Tensor) -> Tensor:
    """[B, Hkv, T, G, D] -> [B, Hkv, T*G, D] (row t*G + g, as the kernels see the group)."""
    B, H, T, G, D = x.shape
    return x.reshape(B, H, T * G, D)


def attention_bounds(
    q: Tensor, k: Tensor, v: Tensor, dout: Tensor, visible: Tensor, scale: float, dtype: torch.dtype
) -> dict[str, tuple[Tensor, Tensor]]:
    """{"out"|"dq"|"dk"|"dv": (exact float64 value, elementwise bound)} for q [B,Hkv,T,G,D],
    k/v [B,Hkv,Tk,D], dout like q, visible [B,Hkv,T,Tk] bool (key j visible to token t; rows with no
    visible key give 0). Inputs are taken as the 16-bit kernel inputs (already rounded)."""
    u = UNIT_ROUNDOFF[dtype]
    B, H, T, G, D = q.shape
    q64, do64 = _rows(q.double()), _rows(dout.double())
    k64, v64 = k.double(), v.double()
    vis = visible.repeat_interleave(G, dim=2)  # [B, H, T*G, Tk]
    s = torch.einsum("bhrd,bhjd->bhrj", q64, k64) * scale
    s = s.masked_fill(~vis, float("-inf"))
    any_vis = vis.any(-1, keepdim=True)
    p = torch.where(any_vis, torch.softmax(torch.where(any_vis, s, 0.0), -1), 0.0)
    p = p.masked_fill(~vis, 0.0)
    o = p @ v64
    dp = do64 @ v64.transpose(-1, -2)
    delta = (do64 * o).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    dq = ds @ k64 * scale
    dk = ds.transpose(-1, -2) @ q64 * scale
    dv = p.transpose(-1, -2) @ do64

    # float32 arithmetic (logits, exp2, sums over <= Tk terms) on top of the 16-bit roundings.
    f32 = 2.0**-24 * (k.shape[2] + D + 16)
    b_o = (u + f32) * (p @ v64.abs() + o.abs())
    b_delta = (do64.abs() * b_o).sum(-1, keepdim=True)
    pk = p @ k64.abs()
    b_dq = (u + f32) * (ds.abs() @ k64.abs() * scale + dq.abs()) + scale * b_delta * pk
    b_dk = (u + f32) * (ds.abs().transpose(-1, -2) @ q64.abs() * scale + dk.abs())
    b_dk = b_dk + scale * (p * b_delta).transpose(-1, -2) @ q64.abs()
    b_dv = (u + f32) * (p.transpose(-1, -2) @ do64.abs() + dv.abs())
    # The float32 terms also meet cancellation in dP - delta: bound it by the magnitudes involved.
    mag = (do64.abs() @ v64.abs().transpose(-1, -2)) + (do64.abs() * o.abs()).sum(-1, keepdim=True)
    b_dq = b_dq + f32 * scale * ((p * mag) @ k64.abs())
    b_dk = b_dk + f32 * scale * ((p * mag).transpose(-1, -2) @ q64.abs())

    shape_q = (B, H, T, G, D)
    return {
        "out": (o.reshape(shape_q), b_o.reshape(shape_q)),
        "dq": (dq.reshape(shape_q), b_dq.reshape(shape_q)),
        "dk": (dk, b_dk),
        "dv": (dv, b_dv),
    }


def check(got: Tensor, want_and_bound: tuple[Tensor, Tensor]) -> dict:
    """Max abs / rel error of `got` against the exact value and whether every element is within bound."""
    want, bound = want_and_bound
    err = (got.detach().double() - want).abs()
    rel = err / want.abs().clamp_min(1e-30)
    over = err > bound
    return {
        "max_abs": float(err.max()) if err.numel() else 0.0,
        "max_rel": float(rel[want.abs() > bound].max()) if (want.abs() > bound).any() else 0.0,
        "max_err_over_bound": float((err / bound.clamp_min(1e-300)).max()) if err.numel() else 0.0,
        "within_bound": not bool(over.any()),
    }


def window_visible(T: int, window: int, device=None) -> Tensor:
    """[T, T] bool: token t sees keys (t - window, t]."""
    t = torch.arange(T, device=device)
    d = t[:, None] - t[None, :]
    return (d >= 0) & (d < window)


def compressed_visible(T: int, n_cmp: int, block_len: int, block_stride: int, device=None) -> Tensor:
    """[T, NC] bool: token t sees compressed key i once its block ended (i*d + l - 1 <= t)."""
    t = torch.arange(T, device=device)
    i = torch.arange(n_cmp, device=device)
    return (i[None, :] * block_stride + block_len - 1) <= t[:, None]


def selected_visible(idx: Tensor, valid: Tensor, T: int, sel_block: int) -> Tensor:
    """[B, Hkv, T, T] bool from a selection table: token t sees key j <= t when j's block is listed."""
    j = torch.arange(T, device=idx.device)
    blk = j // sel_block  # [T]
    hit = (idx[..., None] == blk) & valid[..., None]  # [B, H, T, n, Tk]
    t = torch.arange(T, device=idx.device)
    return hit.any(-2) & (j[None, :] <= t[:, None])
