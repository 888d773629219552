"""Sliding-window branch on the GPU: a flash-attention kernel over the band (t - window, t] (Triton).

Owns `window_attention` (same arguments and results as `nsa.attention.window.window_attention`), its
three kernels (forward; backward dQ, which also forms delta = rowsum(dO * O) unless handed it;
backward dK/dV) and their launch configs. Queries are read as rows of the [T*G, D] matrix each (batch, KV head) already
is in the [B, Hkv, T, G, D] layout, so a tile holds all G heads of its tokens (no padding of G, any
G) and K/V are read once per tile for the whole group. It must not build a [T, T] tensor, use
atomics, or sync with the host; it knows nothing of the other branches.
"""

from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl
from torch import Tensor

from nsa.attention.precision import autocast_off
from nsa.attention.triton import cdiv, check_delta, device_arch, interpreting, next_pow2
from nsa.attention.triton.spec import GpuShape, KernelSpec

_LOG2E = 1.4426950408889634
_TL_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


# --------------------------------------------------------------------------------------- kernels
# Every loop over key tiles (forward, dQ) or query rows (dK/dV) runs in three phases: band edges
# with the mask, the tiles wholly inside the band for every row without it (most of the work at
# w=512), then the other edge. Softmax runs in the exp2 domain; lse is saved as log2.


@triton.jit
def _fwd_tiles(
    acc, l_i, m_i, q, k_ptr, v_ptr, t_row, lo, hi, T, W, qk_scale,
    MASK: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    offs_d = tl.arange(0, BLOCK_D)
    for n0 in range(lo, hi, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        kv_mask = (cols[:, None] < T) & (offs_d[None, :] < D)
        k = tl.load(k_ptr + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        if MASK:
            band = (cols[None, :] <= t_row[:, None]) & (cols[None, :] > t_row[:, None] - W)
            s = tl.where(band, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PREC)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _key_phases(r0, T, W, G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Key-tile bounds [lo, b) masked, [b, c) unmasked, [c, end) masked for rows r0..r0+BLOCK_M."""
    t_lo = r0 // G
    t_hi = tl.minimum((r0 + BLOCK_M - 1) // G, T - 1)
    lo = (tl.maximum(t_lo - W + 1, 0) // BLOCK_N) * BLOCK_N
    end = tl.cdiv(t_hi + 1, BLOCK_N) * BLOCK_N
    # Unmasked: tile starts at or after every row's first key and ends at or before every row's token.
    full_lo = tl.maximum(lo, tl.cdiv(tl.maximum(t_hi - W + 1, 0), BLOCK_N) * BLOCK_N)
    full_hi = ((t_lo + 1) // BLOCK_N) * BLOCK_N
    b = tl.minimum(full_lo, end)
    c = tl.maximum(b, tl.minimum(full_hi, end))
    return lo, b, c, end


@triton.jit
def _window_fwd(
    Q, K, V, Out, LSE, qk_scale, T, W,
    G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(1).to(tl.int64)
    R = T * G
    r0 = tl.program_id(0) * BLOCK_M
    rows = r0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = rows < R
    # Padding rows past T*G act as the last token, so every row has a key and no row is empty.
    t_row = tl.minimum(rows // G, T - 1)
    q_ptr = Q + bh * R * D
    k_ptr = K + bh * T * D
    v_ptr = V + bh * T * D
    io_mask = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(q_ptr + rows[:, None] * D + offs_d[None, :], mask=io_mask, other=0.0)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    # Finite start: a tile masked out for a row leaves it untouched (no -inf - -inf).
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    lo, b, c, end = _key_phases(r0, T, W, G, BLOCK_M, BLOCK_N)
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, t_row, lo, b, T, W, qk_scale,
                               True, D, BLOCK_D, BLOCK_N, PREC)  # fmt: skip
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, t_row, b, c, T, W, qk_scale,
                               False, D, BLOCK_D, BLOCK_N, PREC)  # fmt: skip
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, t_row, c, end, T, W, qk_scale,
                               True, D, BLOCK_D, BLOCK_N, PREC)  # fmt: skip
    out = acc / l_i[:, None]
    tl.store(
        Out + bh * R * D + rows[:, None] * D + offs_d[None, :], out.to(Out.dtype.element_ty), mask=io_mask
    )
    tl.store(LSE + bh * R + rows, m_i + tl.math.log2(l_i), mask=row_ok)


@triton.jit
def _dq_tiles(
    dq, q, do, lse, delta, k_ptr, v_ptr, t_row, lo, hi, T, W, qk_scale,
    MASK: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    offs_d = tl.arange(0, BLOCK_D)
    for n0 in range(lo, hi, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        kv_mask = (cols[:, None] < T) & (offs_d[None, :] < D)
        k = tl.load(k_ptr + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + cols[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        p = tl.math.exp2(tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale - lse[:, None])
        if MASK:
            band = (cols[None, :] <= t_row[:, None]) & (cols[None, :] > t_row[:, None] - W)
            p = tl.where(band, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PREC)
    return dq


@triton.jit
def _window_bwd_dq(
    Q, K, V, Out, DO, LSE, DELTA, DQ, qk_scale, scale, T, W,
    G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PREC: tl.constexpr, HAVE_DELTA: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(1).to(tl.int64)
    R = T * G
    r0 = tl.program_id(0) * BLOCK_M
    rows = r0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = rows < R
    t_row = tl.minimum(rows // G, T - 1)
    io_mask = row_ok[:, None] & (offs_d[None, :] < D)
    io = bh * R * D + rows[:, None] * D + offs_d[None, :]
    q = tl.load(Q + io, mask=io_mask, other=0.0)
    do = tl.load(DO + io, mask=io_mask, other=0.0)
    if HAVE_DELTA:  # formed by the gate fold's kernel (gated.FOLD_DELTA): O is not read
        delta = tl.load(DELTA + bh * R + rows, mask=row_ok, other=0.0)
    else:
        # This kernel owns its rows, so it forms delta for them; the dK/dV kernel (launched after) reads it.
        o = tl.load(Out + io, mask=io_mask, other=0.0)
        delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
        tl.store(DELTA + bh * R + rows, delta, mask=row_ok)
    lse = tl.load(LSE + bh * R + rows, mask=row_ok, other=0.0)
    k_ptr = K + bh * T * D
    v_ptr = V + bh * T * D
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    lo, b, c, end = _key_phases(r0, T, W, G, BLOCK_M, BLOCK_N)
    dq = _dq_tiles(dq, q, do, lse, delta, k_ptr, v_ptr, t_row, lo, b, T, W, qk_scale,
                   True, D, BLOCK_D, BLOCK_N, PREC)  # fmt: skip
    dq = _dq_tiles(dq, q, do, lse, delta, k_ptr, v_ptr, t_row, b, c, T, W, qk_scale,
                   False, D, BLOCK_D, BLOCK_N, PREC)  # fmt: skip
    dq = _dq_tiles(dq, q, do, lse, delta, k_ptr, v_ptr, t_row, c, end, T, W, qk_scale,
                   True, D, BLOCK_D, BLOCK_N, PREC)  # fmt: skip
    tl.store(DQ + io, (dq * scale).to(DQ.dtype.element_ty), mask=io_mask)


@triton.jit
def _dkdv_tiles(
    dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, cols, lo, hi, R, W, qk_scale,
    MASK: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    offs_d = tl.arange(0, BLOCK_D)
    for r0 in range(lo, hi, BLOCK_M):
        rows = r0 + tl.arange(0, BLOCK_M)
        row_ok = rows < R
        io_mask = row_ok[:, None] & (offs_d[None, :] < D)
        q = tl.load(q_ptr + rows[:, None] * D + offs_d[None, :], mask=io_mask, other=0.0)
        do = tl.load(do_ptr + rows[:, None] * D + offs_d[None, :], mask=io_mask, other=0.0)
        lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
        delta = tl.load(delta_ptr + rows, mask=row_ok, other=0.0)
        # Transposed tiles ([keys, rows]) so dK/dV accumulate without transposing the big operands.
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q), input_precision=PREC) * qk_scale - lse[None, :])
        if MASK:
            t_row = rows // G
            band = (cols[:, None] <= t_row[None, :]) & (cols[:, None] > t_row[None, :] - W) & row_ok[None, :]
            p_t = tl.where(band, p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PREC)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=PREC)
    return dk, dv


@triton.jit
def _window_bwd_dkdv(
    Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, scale, T, W,
    G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(1).to(tl.int64)
    R = T * G
    n0 = tl.program_id(0) * BLOCK_N
    cols = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (cols[:, None] < T) & (offs_d[None, :] < D)
    kv = bh * T * D + cols[:, None] * D + offs_d[None, :]
    k = tl.load(K + kv, mask=kv_mask, other=0.0)
    v = tl.load(V + kv, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    # Rows (token t, head g) that see a key of this tile: n0 <= t < n0 + BLOCK_N - 1 + W. They are
    # walked in BLOCK_M-row tiles from row n0*G; the middle tiles (n0+BLOCK_N-1 <= t < n0+W) see
    # every key of the tile and skip the mask.
    r_start = n0 * G
    n_tiles = tl.cdiv(tl.minimum(T, n0 + BLOCK_N - 1 + W) * G - r_start, BLOCK_M)
    i1 = tl.minimum(tl.cdiv((BLOCK_N - 1) * G, BLOCK_M), n_tiles)
    i2 = tl.maximum(i1, tl.minimum((tl.minimum(T, n0 + W) * G - r_start) // BLOCK_M, n_tiles))
    q_ptr = Q + bh * R * D
    do_ptr = DO + bh * R * D
    lse_ptr = LSE + bh * R
    delta_ptr = DELTA + bh * R
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, cols, r_start,
                         r_start + i1 * BLOCK_M, R, W, qk_scale, True, G, D, BLOCK_D, BLOCK_M, PREC)  # fmt: skip
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, cols, r_start + i1 * BLOCK_M,
                         r_start + i2 * BLOCK_M, R, W, qk_scale, False, G, D, BLOCK_D, BLOCK_M, PREC)  # fmt: skip
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, cols, r_start + i2 * BLOCK_M,
                         r_start + n_tiles * BLOCK_M, R, W, qk_scale, True, G, D, BLOCK_D, BLOCK_M, PREC)  # fmt: skip
    tl.store(DK + kv, (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + kv, dv.to(DV.dtype.element_ty), mask=kv_mask)


# -------------------------------------------------------------------------------------- launches
def _precision(dtype: torch.dtype) -> str:
    """fp32 dots run as tf32 on the GPU (as the trainer allows for eager matmuls); exact in the interpreter."""
    return "tf32" if dtype == torch.float32 and not interpreting() else "ieee"


def _configs(head_dim: int, arch: int, interp: bool = False) -> dict[str, dict[str, int]]:
    """Tiles and launch settings per kernel, from the head dim and the arch (80 = A100, 90 = H100).

    BLOCK_M counts query rows (token x head), BLOCK_N keys. Chosen so nothing spills and shared memory
    fits at head_dim 64 and 128 (docs/attention.md); the interpreter uses small tiles of the same code
    so the tests cross every phase boundary at tiny T.
    """
    if interp:
        return {
            "fwd": {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1},
            "dq": {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1},
            "dkdv": {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1},
        }
    big = head_dim > 64
    hopper = arch >= 90
    stages = 3 if hopper else 2
    # dK/dV: at 64 rows x 128 keys (D 64) and 64 x 64 (D 128) ptxas used all 255 registers and
    # spilled 8-32 B on sm_80 (triton 3.6 and 3.9; also at head_dim 96 on sm_90). 32 x 64 (D 64,
    # ~180 registers) and 64 x 32 (D > 64, ~180) leave headroom on both archs (gpucheck --grid).
    # Shipped on sm_90 on a proxy's word, measured since: the H100 of 2026-11-26c ran the window
    # forward+backward at M7C 8k x 8 in 1.89 ms against 2.49 with the dK/dV at the 8 warps measured
    # before, at the paper's 8k x 2 in 4.55 against 5.53 with dQ's 64 x 64 tile and 5.43 with dK/dV's
    # 64 rows (bench/gpu/2026-11-26c-h100-probe-queue.jsonl)
    # (bench/flash_proxy.py, calibrated on 369 H100/H200
    # points of the flash tiles, these kernels' measured settings among them: all within 29 %, each
    # setting held out within 34 %; bench/RESULTS.md "wintiles"): dQ past head_dim 64 at 128 rows x 32
    # keys (0.57x the measured 64 x 64), dK/dV past head_dim 64 at 128 rows (0.79x), dK/dV at head_dim
    # 64 on 4 warps (0.64x: 3 programs an SM instead of 1). No spill over gpucheck's grid on sm_90,
    # triton 3.6 and 3.9. What every GPU run measured (and sm_80 keeps) is a probe variant
    # (bench/kernel_probe.py --only window).
    return {
        "fwd": {"BLOCK_M": 128, "BLOCK_N": 32 if big else 64, "num_warps": 8, "num_stages": stages},
        "dq": {
            "BLOCK_M": 128 if hopper or not big else 64,
            "BLOCK_N": 32 if hopper and big else 64,
            "num_warps": 8,
            "num_stages": stages,
        },
        "dkdv": {
            "BLOCK_M": (128 if hopper else 64) if big else 32,
            "BLOCK_N": 32 if big else 64,
            "num_warps": 4 if hopper and not big else 8,
            "num_stages": stages,
        },
    }


def _block_d(head_dim: int) -> int:
    """head_dim padded to a power of two >= 16 (tl.dot's smallest K); the columns past it are masked."""
    return max(16, next_pow2(head_dim))


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.device.type not in ("cuda", "meta") and not interpreting():
        raise ValueError(
            f"nsa.attention.triton.window: tensors on {q.device} need a CUDA device, or TRITON_INTERPRET=1 "
            "to run the kernels on the CPU (tests only)"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _TL_TYPES:
        raise ValueError(
            f"nsa.attention.triton.window: q/k/v dtypes {q.dtype}/{k.dtype}/{v.dtype} must be one of "
            "float32, float16, bfloat16 and equal"
        )


def _launch_meta(head_dim: int, device: torch.device) -> dict[str, dict[str, int]]:
    return _configs(head_dim, device_arch(device), interpreting())


def _split(cfg: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    tiles = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N")}
    return tiles, {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}


@torch.library.custom_op("nsa::triton_window_fwd", mutates_args=())
@autocast_off
def _window_fwd_op(q: Tensor, k: Tensor, v: Tensor, window: int, scale: float) -> tuple[Tensor, Tensor]:
    """Output [B, Hkv, T, G, D] and the log2-sum-exp of each row [B, Hkv, T*G] (float32)."""
    B, Hkv, T, G, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, Hkv, T * G, dtype=torch.float32, device=q.device)
    tiles, launch = _split(_launch_meta(D, q.device)["fwd"])
    grid = (cdiv(T * G, tiles["BLOCK_M"]), B * Hkv)
    _window_fwd[grid](
        q, k, v, o, lse, scale * _LOG2E, T, window,
        G=G, D=D, BLOCK_D=_block_d(D), PREC=_precision(q.dtype), **tiles, **launch,
    )  # fmt: skip
    return o, lse


@_window_fwd_op.register_fake
def _(q, k, v, window, scale):
    B, Hkv, T, G, _ = q.shape
    return torch.empty_like(q), q.new_empty(B, Hkv, T * G, dtype=torch.float32)


@torch.library.custom_op("nsa::triton_window_bwd", mutates_args=())
@autocast_off
def _window_bwd_op(
    do: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    window: int,
    scale: float,
    delta: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """dQ (and delta) first, then dK/dV: two launches, no atomics (each program owns its outputs).
    `delta`: rowsum(dO * o) in float32, lse's shape, already formed (the gate fold's kernel): the dQ
    kernel then reads it instead of o."""
    B, Hkv, T, G, D = q.shape
    meta = _launch_meta(D, q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    have_delta = check_delta("nsa::triton_window_bwd", delta, lse.numel(), "lse's")
    if delta is None:
        delta = torch.empty_like(lse)
    bd, prec = _block_d(D), _precision(q.dtype)
    tiles, launch = _split(meta["dq"])
    _window_bwd_dq[(cdiv(T * G, tiles["BLOCK_M"]), B * Hkv)](
        q, k, v, o, do, lse, delta, dq, scale * _LOG2E, scale, T, window,
        G=G, D=D, BLOCK_D=bd, PREC=prec, HAVE_DELTA=have_delta, **tiles, **launch,
    )  # fmt: skip
    tiles, launch = _split(meta["dkdv"])
    _window_bwd_dkdv[(cdiv(T, tiles["BLOCK_N"]), B * Hkv)](
        q, k, v, do, lse, delta, dk, dv, scale * _LOG2E, scale, T, window,
        G=G, D=D, BLOCK_D=bd, PREC=prec, **tiles, **launch,
    )  # fmt: skip
    return dq, dk, dv


@_window_bwd_op.register_fake
def _(do, q, k, v, o, lse, window, scale, delta=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output) -> None:
    q, k, v, window, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.args = (window, scale)


def _backward(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.nsa.triton_window_bwd(do.contiguous(), q, k, v, o, lse, *ctx.args)
    return dq, dk, dv, None, None


torch.library.register_autograd("nsa::triton_window_fwd", _backward, setup_context=_setup)


def window_attention(
    q: Tensor, k: Tensor, v: Tensor, *, window: int, scale: float, split: int | None = None
) -> Tensor:
    """Sliding window: query t attends keys in (t - window, t]. q [B,Hkv,T,G,D], k/v [B,Hkv,T,D].

    Same results as `nsa.attention.window.window_attention`; `split` is the eager path's knob and is
    ignored (the kernel visits only the key tiles that meet the band).
    """
    del split
    if window < 1:
        raise ValueError(f"nsa.attention.triton.window: window={window} must be >= 1")
    _check(q, k, v)
    o, _ = torch.ops.nsa.triton_window_fwd(
        q.contiguous(), k.contiguous(), v.contiguous(), window, float(scale)
    )
    return o


def _signature(fn, ptr: str, constexprs: dict) -> dict[str, str]:
    """Triton types of `fn`'s arguments: statistics are float32, T and W int32, other tensors `ptr`."""
    scalars = {"LSE": "*fp32", "DELTA": "*fp32", "qk_scale": "fp32", "scale": "fp32", "T": "i32", "W": "i32"}
    names = inspect.signature(fn.fn).parameters
    return {n: "constexpr" if n in constexprs else scalars.get(n, ptr) for n in names}


def gpucheck_specs(shape: GpuShape, arch: int) -> list[KernelSpec]:
    """The three kernels as `window_attention` launches them for `shape` on `arch` (80 or 90), and the
    dQ kernel handed its delta (`window_bwd_dq_delta`: the gate fold's, gated.FOLD_DELTA)."""
    cfg = _configs(shape.head_dim, arch)
    common = {
        "G": shape.group,
        "D": shape.head_dim,
        "BLOCK_D": _block_d(shape.head_dim),
        "PREC": "tf32" if shape.dtype == "fp32" else "ieee",
    }
    specs = []
    for name, fn, key, more in (
        ("window_fwd", _window_fwd, "fwd", {}),
        ("window_bwd_dq", _window_bwd_dq, "dq", {"HAVE_DELTA": False}),
        ("window_bwd_dq_delta", _window_bwd_dq, "dq", {"HAVE_DELTA": True}),
        ("window_bwd_dkdv", _window_bwd_dkdv, "dkdv", {}),
    ):
        tiles, launch = _split(cfg[key])
        constexprs = {**common, **tiles, **more}
        signature = _signature(fn, "*" + shape.dtype, constexprs)
        specs.append(KernelSpec(name=name, fn=fn, signature=signature, constexprs=constexprs, **launch))
    return specs
