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
(s = softmax scale; every bound also gets UNDERFLOW of the type, for results below its normal
range). A kernel that rounds somewhere else, or computes a wrong value, breaks them. One more
rounding place is optional: the selected branch's key-major backward at `pdq_bits` 16 stores each
(token, entry, key chunk) dQ partial in the 16-bit type before its fp32 sum; each partial is s dS K
over disjoint keys, so those roundings add at most u s |dS||K| (+ u times dS's own error):
`dq_parts_rounded=True` adds that term, and only that.
It must not be loosened to make a kernel pass: a bound that fails is a finding.
"""

from __future__ import annotations

import torch
from torch import Tensor

UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
# Half the spacing of the subnormals: the absolute error of rounding a result below the normal range
# (fp16 products such as gate * dy reach it; bf16 has float32's range).
UNDERFLOW = {torch.bfloat16: 2.0**-134, torch.float16: 2.0**-25, torch.float32: 2.0**-150}


def _rows(x: Tensor) -> Tensor:
    """[B, Hkv, T, G, D] -> [B, Hkv, T*G, D] (row t*G + g, as the kernels see the group)."""
    B, H, T, G, D = x.shape
    return x.reshape(B, H, T * G, D)


def attention_bounds(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    visible,
    scale: float,
    dtype: torch.dtype,
    max_elems: int = 1 << 25,
    dq_parts_rounded: bool = False,
) -> dict[str, tuple[Tensor, Tensor]]:
    """{"out"|"dq"|"dk"|"dv": (exact float64 value, elementwise bound)} for q [B,Hkv,T,G,D],
    k/v [B,Hkv,Tk,D], dout like q. `visible(t0, t1)` gives the [B|1, Hkv|1, t1-t0, Tk] bool mask of
    tokens t0..t1-1 (key j visible to token t; rows with no visible key give 0); a tensor is sliced.
    Inputs are taken as the 16-bit kernel inputs (already rounded). Tokens go in chunks so that a
    [chunk*G, Tk] float64 matrix has at most `max_elems` elements (T = 8k at G = 16 fits a GPU).
    `dq_parts_rounded`: dQ is a fp32 sum of partials over disjoint keys, each rounded to `dtype` first
    (the module docstring)."""
    if isinstance(visible, Tensor):
        mask = visible
        visible = lambda t0, t1: mask[:, :, t0:t1]  # noqa: E731
    u = UNIT_ROUNDOFF[dtype]
    B, H, T, G, D = q.shape
    Tk = k.shape[2]
    k64, v64 = k.double(), v.double()
    ka, va = k64.abs(), v64.abs()
    f32 = 2.0**-24 * (Tk + D + 16)  # float32 arithmetic (logits, exp2, sums over <= Tk terms)
    ue = u + f32
    tiny = UNDERFLOW[dtype]
    parts: dict[str, list[Tensor]] = {n: [] for n in ("out", "b_out", "dq", "b_dq")}
    dk = torch.zeros_like(k64)
    b_dk = torch.zeros_like(k64)
    dv = torch.zeros_like(v64)
    b_dv = torch.zeros_like(v64)
    step = max(1, max_elems // max(1, G * Tk))
    for t0 in range(0, T, step):
        t1 = min(T, t0 + step)
        q64 = _rows(q[:, :, t0:t1].double())
        do64 = _rows(dout[:, :, t0:t1].double())
        vis = visible(t0, t1).expand(B, H, t1 - t0, Tk).repeat_interleave(G, dim=2)
        s = (q64 @ k64.transpose(-1, -2) * scale).masked_fill(~vis, float("-inf"))
        any_vis = vis.any(-1, keepdim=True)
        p = torch.where(any_vis, torch.softmax(torch.where(any_vis, s, 0.0), -1), 0.0).masked_fill(~vis, 0.0)
        del s
        o = p @ v64
        delta = (do64 * o).sum(-1, keepdim=True)
        ds = p * (do64 @ v64.transpose(-1, -2) - delta)
        dq = ds @ k64 * scale
        dk += ds.transpose(-1, -2) @ q64 * scale
        dv += p.transpose(-1, -2) @ do64
        b_o = ue * (p @ va + o.abs()) + tiny
        b_delta = (do64.abs() * b_o).sum(-1, keepdim=True)
        # float32 cancellation in dP - delta, bounded by the magnitudes involved.
        mag = do64.abs() @ va.transpose(-1, -2) + (do64.abs() * o.abs()).sum(-1, keepdim=True)
        pe = scale * (p * (b_delta + f32 * mag))  # error of dS not from its own rounding
        dsa = ds.abs() * scale
        dsk, pek = dsa @ ka, pe @ ka
        b_dq = ue * (dsk + dq.abs()) + pek + tiny
        if dq_parts_rounded:  # sum over the partials of u |partial|, each partial's error included
            b_dq += ue * (dsk + pek)
        qa = q64.abs()
        b_dk += ue * (dsa.transpose(-1, -2) @ qa) + pe.transpose(-1, -2) @ qa
        b_dv += ue * (p.transpose(-1, -2) @ do64.abs())
        for name, val in (("out", o), ("b_out", b_o), ("dq", dq), ("b_dq", b_dq)):
            parts[name].append(val.reshape(B, H, t1 - t0, G, D))
    b_dk += ue * dk.abs() + tiny
    b_dv += ue * dv.abs() + tiny
    cat = {n: torch.cat(v, dim=2) for n, v in parts.items()}
    return {
        "out": (cat["out"], cat["b_out"]),
        "dq": (cat["dq"], cat["b_dq"]),
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
