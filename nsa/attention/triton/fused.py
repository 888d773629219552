"""Fused element-wise passes of NSAAttention on the GPU (Triton): RoPE into the kernels' layout, gate mix.

Owns `rope_to_layout` (drop-in for `nsa.attention.rope.rope_to_layout`: rotate and permute in one
read and one write, backward the rotation by -angle written back in the input layout),
`rope_q_fanout` (the same for q, one output per consumer branch: its backward sums their gradients
in float32 inside the inverse rotation, one kernel, where autograd would add them in q's dtype) and
`gate_mix` (drop-in for `nsa.attention.nsa._gate_mix`: Eq. 5's gated sum written into wo's
[B, T, H*D] layout in one pass; backward one pass producing the three branch gradients and the
gate gradient, whose row dots dy . o are summed in float32 in the kernel), and the op
`nsa::triton_gate_fold_bwd` (the gate mix's backward for gated.py, the gates folded into the
branches' lse: dy once in the branch kernels' layout, dg, lse - log2 g and, asked, each branch's
delta = rowsum(dy * o) in fp32). Shapes or dtypes these
kernels do not cover go to the eager functions. It must not know about the attention branches.
"""

from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl
from torch import Tensor

from nsa.attention.precision import autocast_off
from nsa.attention.rope import rope_to_layout as _eager_rope_to_layout
from nsa.attention.triton import cdiv, interpreting, next_pow2
from nsa.attention.triton.spec import GpuShape, KernelSpec

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# q's gradients summed inside RoPE's backward (`rope_q_fanout`); False: one output shared by the
# branches, autograd's two adds and the plain inverse rotation, the path every GPU run measured
# (a probe switch: read at each call).
FUSE_Q_GRAD = True
_Q_PERM = (0, 2, 1, 3, 4)  # q [B, T, Hkv, G, D] -> [B, Hkv, T, G, D]
_K_PERM = (0, 2, 1, 3)  # keys [B, N, Hkv, D] -> [B, Hkv, N, D]


# --------------------------------------------------------------------------------------- kernels
@triton.jit
def _rope_kernel(
    X, X2, X3, COS, SIN, Out, T, Hkv,
    sxb, sxt, sxh, sxr, sob, sot, soh, sor,
    R: tl.constexpr, HALF: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, NEG: tl.constexpr,
    NX: tl.constexpr,
):  # fmt: skip
    """out = x*cos + rotate_half(x)*(+-sin) over [BLOCK_T tokens, R heads x HALF pairs] of one (b, h).

    Strides of both sides are arguments: forward reads [B, T, Hkv, R, D] (any strides) and writes
    [B, Hkv, T, R, D]; backward (NEG: rotation by -angle) goes the other way. NX > 1: x is the sum
    X + X2 (+ X3), the gradients of q's consumers (same strides), added in float32 in that order
    before the rotation; X2 / X3 are not read past NX (any pointer may stand in for them).
    """
    bh = tl.program_id(1)
    b = (bh // Hkv).to(tl.int64)
    h = (bh % Hkv).to(tl.int64)
    t0 = tl.program_id(0) * BLOCK_T
    dt = tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_C)  # (head r, pair j) flattened: R need not be a power of two
    r = c // HALF
    j = c % HALF
    mask = (t0 + dt < T)[:, None] & (c < R * HALF)[None, :]
    # int64 only in the per-program base; offsets inside the tile stay int32 (fewer registers).
    x_base = X + (b * sxb + h * sxh + t0.to(tl.int64) * sxt)
    o_base = Out + (b * sob + h * soh + t0.to(tl.int64) * sot)
    x_off = dt[:, None] * sxt + (r * sxr + j)[None, :]
    o_off = dt[:, None] * sot + (r * sor + j)[None, :]
    tab = (t0 + dt)[:, None] * (2 * HALF) + j[None, :]
    x1 = tl.load(x_base + x_off, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_base + x_off + HALF, mask=mask, other=0.0).to(tl.float32)
    if NX >= 2:  # one writer per element, a fixed order: deterministic
        x2_base = X2 + (b * sxb + h * sxh + t0.to(tl.int64) * sxt)
        x1 += tl.load(x2_base + x_off, mask=mask, other=0.0).to(tl.float32)
        x2 += tl.load(x2_base + x_off + HALF, mask=mask, other=0.0).to(tl.float32)
    if NX >= 3:
        x3_base = X3 + (b * sxb + h * sxh + t0.to(tl.int64) * sxt)
        x1 += tl.load(x3_base + x_off, mask=mask, other=0.0).to(tl.float32)
        x2 += tl.load(x3_base + x_off + HALF, mask=mask, other=0.0).to(tl.float32)
    c1 = tl.load(COS + tab, mask=mask, other=0.0)
    c2 = tl.load(COS + tab + HALF, mask=mask, other=0.0)
    s1 = tl.load(SIN + tab, mask=mask, other=0.0)
    s2 = tl.load(SIN + tab + HALF, mask=mask, other=0.0)
    if NEG:
        s1 = -s1
        s2 = -s2
    tl.store(o_base + o_off, (x1 * c1 - x2 * s1).to(Out.dtype.element_ty), mask=mask)
    tl.store(o_base + o_off + HALF, (x2 * c2 + x1 * s2).to(Out.dtype.element_ty), mask=mask)


@triton.jit
def _gate_rows(bh, T, Hkv, G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """Offsets of BLOCK_R rows (token t, head g) of one (b, h): in o [B, Hkv, T, G, D], in
    y [B, T, Hkv, G, D] and in the gates [B, T, Hkv, G, 3]; and the mask."""
    R = T * G
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, BLOCK_D)
    b = (bh // Hkv).to(tl.int64)
    h = bh % Hkv
    n = (b * T + rows // G) * Hkv * G + h * G + rows % G  # row of y and of g, as [B*T*Hkv*G]
    mask = (rows < R)[:, None] & (d < D)[None, :]
    o_off = bh.to(tl.int64) * R * D + rows[:, None] * D + d[None, :]
    return o_off, n[:, None] * D + d[None, :], n * 3, mask, rows < R


@triton.jit
def _gate_mix_fwd(
    Gt, OC, OS, OW, Y, T, Hkv,
    G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    o_off, y_off, g_off, mask, row_ok = _gate_rows(tl.program_id(1), T, Hkv, G, D, BLOCK_R, BLOCK_D)
    g0 = tl.load(Gt + g_off, mask=row_ok, other=0.0).to(tl.float32)
    g1 = tl.load(Gt + g_off + 1, mask=row_ok, other=0.0).to(tl.float32)
    g2 = tl.load(Gt + g_off + 2, mask=row_ok, other=0.0).to(tl.float32)
    y = g0[:, None] * tl.load(OC + o_off, mask=mask, other=0.0).to(tl.float32)
    y += g1[:, None] * tl.load(OS + o_off, mask=mask, other=0.0).to(tl.float32)
    y += g2[:, None] * tl.load(OW + o_off, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + y_off, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _gate_mix_bwd(
    Gt, OC, OS, OW, DY, DG, DOC, DOS, DOW, T, Hkv,
    G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    o_off, y_off, g_off, mask, row_ok = _gate_rows(tl.program_id(1), T, Hkv, G, D, BLOCK_R, BLOCK_D)
    dy = tl.load(DY + y_off, mask=mask, other=0.0).to(tl.float32)
    g0 = tl.load(Gt + g_off, mask=row_ok, other=0.0).to(tl.float32)
    g1 = tl.load(Gt + g_off + 1, mask=row_ok, other=0.0).to(tl.float32)
    g2 = tl.load(Gt + g_off + 2, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(DOC + o_off, (dy * g0[:, None]).to(DOC.dtype.element_ty), mask=mask)
    tl.store(DOS + o_off, (dy * g1[:, None]).to(DOS.dtype.element_ty), mask=mask)
    tl.store(DOW + o_off, (dy * g2[:, None]).to(DOW.dtype.element_ty), mask=mask)
    dg0 = tl.sum(dy * tl.load(OC + o_off, mask=mask, other=0.0).to(tl.float32), 1)
    dg1 = tl.sum(dy * tl.load(OS + o_off, mask=mask, other=0.0).to(tl.float32), 1)
    dg2 = tl.sum(dy * tl.load(OW + o_off, mask=mask, other=0.0).to(tl.float32), 1)
    tl.store(DG + g_off, dg0.to(DG.dtype.element_ty), mask=row_ok)
    tl.store(DG + g_off + 1, dg1.to(DG.dtype.element_ty), mask=row_ok)
    tl.store(DG + g_off + 2, dg2.to(DG.dtype.element_ty), mask=row_ok)


@triton.jit
def _fold_branch(
    Gt, Ob, Lb, Lb2, DG, Db, dy, o_off, l_off, g_off, mask, row_ok, C: tl.constexpr, DELTA: tl.constexpr
):  # fmt: skip
    """Branch C of `_gate_fold_bwd`: its gate gradient, its lse' and (DELTA) its delta."""
    dg = tl.sum(dy * tl.load(Ob + o_off, mask=mask, other=0.0).to(tl.float32), 1)
    tl.store(DG + g_off + C, dg.to(DG.dtype.element_ty), mask=row_ok)
    if DELTA:  # rowsum(dO * O_c) in fp32 before dg's rounding: the branch backward's own delta
        tl.store(Db + l_off, dg, mask=row_ok)
    g = tl.load(Gt + g_off + C, mask=row_ok, other=1.0).to(tl.float32)
    lse = tl.load(Lb + l_off, mask=row_ok, other=0.0)
    tl.store(Lb2 + l_off, tl.where(lse == float("-inf"), lse, lse - tl.log2(g)), mask=row_ok)


@triton.jit
def _gate_fold_bwd(
    Gt, OC, OS, OW, LC, LS, LW, DY, DG, DO, LC2, LS2, LW2, DC, DS, DW, T, Hkv,
    G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, DELTA: tl.constexpr,
):  # fmt: skip
    """The gate mix backward with the gates folded into the branches' lse: dO = dy once, in the
    kernels' layout (a copy: no g * dy rounding), dg_c = rowsum(dy * o_c) (float32) and, per branch,
    lse'_c = lse_c - log2(g_c) (base 2, [B, Hkv, T, G] rows): a branch backward run on dO with lse'_c
    sees P' = exp2(s - lse'_c) = g_c * P, so its dQ/dK/dV are those of g_c * dO. g_c = 0 gives
    lse' = +inf (P' = 0); a row without keys (lse -inf) keeps -inf, the kernels' "no key" mark.
    DELTA: also each rowsum(dO * o_c) in fp32 (DC / DS / DW, the lse rows' layout), which is the
    branch backward's delta on that dO (its dQ kernel then loads no O; unread when off)."""
    o_off, y_off, g_off, mask, row_ok = _gate_rows(tl.program_id(1), T, Hkv, G, D, BLOCK_R, BLOCK_D)
    dy = tl.load(DY + y_off, mask=mask, other=0.0)
    tl.store(DO + o_off, dy.to(DO.dtype.element_ty), mask=mask)
    dy = dy.to(tl.float32)
    # the lse rows: one int64 base per program, int32 offsets (int64 offsets spilled on sm_80, 3.6)
    base = tl.program_id(1).to(tl.int64) * T * G
    l_off = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    _fold_branch(
        Gt, OC, LC + base, LC2 + base, DG, DC + base, dy, o_off, l_off, g_off, mask, row_ok, 0, DELTA
    )
    _fold_branch(
        Gt, OS, LS + base, LS2 + base, DG, DS + base, dy, o_off, l_off, g_off, mask, row_ok, 1, DELTA
    )
    _fold_branch(
        Gt, OW, LW + base, LW2 + base, DG, DW + base, dy, o_off, l_off, g_off, mask, row_ok, 2, DELTA
    )


# -------------------------------------------------------------------------------------- launches
def _rope_config(r: int, head_dim: int, interp: bool = False) -> dict[str, int]:
    """~2k (token, pair) elements per program, 8 per thread: each loads two halves of x and four
    table slices, so larger tiles only cost registers (occupancy) in a bandwidth-bound pass."""
    block_c = next_pow2(r * (head_dim // 2))
    block_t = max(1, min(64, (1024 if interp else 2048) // block_c))
    warps = max(1, min(8, block_t * block_c // 256))
    return {"BLOCK_T": block_t, "BLOCK_C": block_c, "num_warps": warps, "num_stages": 1}


def _gate_config(head_dim: int) -> dict[str, int]:
    """Rows per program so one [rows, D] tile is ~2k elements (the backward holds dy and one o at once)."""
    block_d = next_pow2(head_dim)
    block_r = max(1, 2048 // block_d)
    return {"BLOCK_R": block_r, "BLOCK_D": block_d, "num_warps": 4, "num_stages": 1}


def _check_device(x: Tensor, what: str) -> None:
    if x.device.type not in ("cuda", "meta") and not interpreting():
        raise ValueError(
            f"nsa.attention.triton.fused.{what}: tensors on {x.device} need a CUDA device, or "
            "TRITON_INTERPRET=1 to run the kernels on the CPU (tests only)"
        )


def _launch_rope(
    x5: Tensor, cos: Tensor, sin: Tensor, out: Tensor, out_strides, neg: bool, more: tuple[Tensor, ...] = ()
) -> None:
    """x5 / out as [B, T, Hkv, R, D] index spaces (strides given in that order); `more`: up to two
    tensors with x5's strides summed into it (the backward of q's fan-out)."""
    B, T, Hkv, R, D = x5.shape
    cfg = _rope_config(R, D, interpreting())
    launch = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
    xs = x5.stride()
    x2, x3 = (*more, x5, x5)[:2]
    grid = (cdiv(T, cfg["BLOCK_T"]), B * Hkv)
    _rope_kernel[grid](
        x5, x2, x3, cos, sin, out, T, Hkv, xs[0], xs[1], xs[2], xs[3], *out_strides,
        R=R, HALF=D // 2, NEG=neg, NX=1 + len(more), **cfg, **launch,
    )  # fmt: skip


@torch.library.custom_op("nsa::triton_rope_to_layout", mutates_args=())
@autocast_off
def _rope_fwd_op(x5: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x5 [B, T, Hkv, R, D] (any strides, last dim contiguous) -> rotated [B, Hkv, T, R, D], contiguous."""
    B, T, Hkv, R, D = x5.shape
    out = x5.new_empty(B, Hkv, T, R, D)
    s = out.stride()
    _launch_rope(x5, cos, sin, out, (s[0], s[2], s[1], s[3]), neg=False)
    return out


@_rope_fwd_op.register_fake
def _(x5, cos, sin):
    B, T, Hkv, R, D = x5.shape
    return x5.new_empty(B, Hkv, T, R, D)


@torch.library.custom_op("nsa::triton_rope_from_layout", mutates_args=())
@autocast_off
def _rope_bwd_op(dout: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """dout [B, Hkv, T, R, D] -> dx [B, T, Hkv, R, D] contiguous, rotated by -angle."""
    B, Hkv, T, R, D = dout.shape
    dx = dout.new_empty(B, T, Hkv, R, D)
    _launch_rope(dout.transpose(1, 2), cos, sin, dx, dx.stride()[:4], neg=True)
    return dx


@_rope_bwd_op.register_fake
def _(dout, cos, sin):
    B, Hkv, T, R, D = dout.shape
    return dout.new_empty(B, T, Hkv, R, D)


def _rope_setup(ctx, inputs, output) -> None:
    _, cos, sin = inputs
    ctx.save_for_backward(cos, sin)


def _rope_backward(ctx, dout):
    cos, sin = ctx.saved_tensors
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    return torch.ops.nsa.triton_rope_from_layout(dout, cos, sin), None, None


torch.library.register_autograd("nsa::triton_rope_to_layout", _rope_backward, setup_context=_rope_setup)


@torch.library.custom_op("nsa::triton_rope_grad_sum", mutates_args=())
@autocast_off
def _rope_grad_sum_op(douts: list[Tensor], cos: Tensor, sin: Tensor) -> Tensor:
    """douts: 1-3 contiguous [B, Hkv, T, R, D] gradients of one rotated tensor -> dx [B, T, Hkv, R, D]
    contiguous: their sum (float32, in list order) rotated by -angle, in one pass."""
    B, Hkv, T, R, D = douts[0].shape
    dx = douts[0].new_empty(B, T, Hkv, R, D)
    first, *more = (d.transpose(1, 2) for d in douts)
    _launch_rope(first, cos, sin, dx, dx.stride()[:4], neg=True, more=tuple(more))
    return dx


@_rope_grad_sum_op.register_fake
def _(douts, cos, sin):
    B, Hkv, T, R, D = douts[0].shape
    return douts[0].new_empty(B, T, Hkv, R, D)


class _RopeFanOut(torch.autograd.Function):
    """The rotated q once, handed to its `n` consumers as `n` outputs (views of one tensor: no copy),
    so autograd gives each consumer's gradient to `backward` apart instead of summing them in q's
    dtype (n - 1 adds, each reading two and writing one q-sized tensor, each rounding); `backward`
    sums them in float32 inside the inverse rotation, one kernel. A consumer that gives no gradient
    (None) is left out of the sum."""

    @staticmethod
    def forward(ctx, x5: Tensor, cos: Tensor, sin: Tensor, n: int) -> tuple[Tensor, ...]:
        out = torch.ops.nsa.triton_rope_to_layout(x5, cos, sin)
        ctx.save_for_backward(cos, sin)
        ctx.set_materialize_grads(False)
        return tuple(out.view(out.shape) for _ in range(n))

    @staticmethod
    def backward(ctx, *douts: Tensor | None) -> tuple[Tensor | None, None, None, None]:
        cos, sin = ctx.saved_tensors
        present = [d.contiguous() for d in douts if d is not None]
        if not present:
            return None, None, None, None
        return torch.ops.nsa.triton_rope_grad_sum(present, cos, sin), None, None, None


def _covered(x: Tensor, cos: Tensor, sin: Tensor, perm: tuple[int, ...]) -> bool:
    T, D = x.shape[1], x.shape[-1]
    return (
        ((x.dim() == 5 and perm == _Q_PERM) or (x.dim() == 4 and perm == _K_PERM))
        and x.dtype in _DTYPES
        and cos.dtype == sin.dtype == torch.float32
        and tuple(cos.shape) == tuple(sin.shape) == (T, D)
        and cos.is_contiguous()
        and sin.is_contiguous()
        and D % 2 == 0
        and x.device == cos.device
        and not (cos.requires_grad or sin.requires_grad)  # the kernel gives no table gradients
    )


def rope_q_fanout(x: Tensor, cos: Tensor, sin: Tensor, n: int = 3) -> tuple[Tensor, ...]:
    """q [B, T, Hkv, G, D] rotated into [B, Hkv, T, G, D] (as `rope_to_layout` with perm (0, 2, 1, 3, 4)),
    as `n` (1-3) outputs, one per consumer: views of one tensor forward; backward one kernel sums the
    consumers' gradients in float32 and rotates the sum by -angle (`nsa::triton_rope_grad_sum`).

    What `rope_to_layout` does not cover takes the eager function, its one output given `n` times
    (autograd then sums the gradients, as before); so does everything with FUSE_Q_GRAD off (through
    `rope_to_layout`).
    """
    if not 1 <= n <= 3:
        raise ValueError(f"nsa.attention.triton.fused.rope_q_fanout: n={n} consumers; the kernel sums 1 to 3")
    if not FUSE_Q_GRAD:
        return (rope_to_layout(x, cos, sin, _Q_PERM),) * n
    if not _covered(x, cos, sin, _Q_PERM):
        return (_eager_rope_to_layout(x, cos, sin, _Q_PERM),) * n
    _check_device(x, "rope_q_fanout")
    return _RopeFanOut.apply(x if x.stride(-1) == 1 else x.contiguous(), cos, sin, n)


def rope_to_layout(x: Tensor, cos: Tensor, sin: Tensor, perm: tuple[int, ...]) -> Tensor:
    """`apply_rope(x, cos, sin).permute(perm).contiguous()` in one kernel (drop-in for the eager one).

    Covered: q [B, T, Hkv, G, D] with perm (0, 2, 1, 3, 4) and keys [B, N, Hkv, D] with (0, 2, 1, 3),
    x in float32/float16/bfloat16, tables [T, D] float32 (NSAAttention's, rotation in float32 as the
    eager path does). Anything else goes to the eager function.
    """
    perm = tuple(perm)
    if not _covered(x, cos, sin, perm):
        return _eager_rope_to_layout(x, cos, sin, perm)
    _check_device(x, "rope_to_layout")
    x5 = x if x.dim() == 5 else x.unsqueeze(3)
    if x5.stride(-1) != 1:
        x5 = x5.contiguous()
    out = torch.ops.nsa.triton_rope_to_layout(x5, cos, sin)
    return out if x.dim() == 5 else out.squeeze(3)


@torch.library.custom_op("nsa::triton_gate_mix", mutates_args=())
@autocast_off
def _gate_mix_op(g: Tensor, o_cmp: Tensor, o_sel: Tensor, o_win: Tensor) -> Tensor:
    B, Hkv, T, G, D = o_cmp.shape
    y = o_cmp.new_empty(B, T, Hkv * G * D)
    cfg = _gate_config(D)
    launch = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
    grid = (cdiv(T * G, cfg["BLOCK_R"]), B * Hkv)
    _gate_mix_fwd[grid](g, o_cmp, o_sel, o_win, y, T, Hkv, G=G, D=D, **cfg, **launch)
    return y


@_gate_mix_op.register_fake
def _(g, o_cmp, o_sel, o_win):
    B, Hkv, T, G, D = o_cmp.shape
    return o_cmp.new_empty(B, T, Hkv * G * D)


@torch.library.custom_op("nsa::triton_gate_mix_bwd", mutates_args=())
@autocast_off
def _gate_mix_bwd_op(
    dy: Tensor, g: Tensor, o_cmp: Tensor, o_sel: Tensor, o_win: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    B, Hkv, T, G, D = o_cmp.shape
    dg = torch.empty_like(g)
    d_o = [torch.empty_like(o_cmp) for _ in range(3)]
    cfg = _gate_config(D)
    launch = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
    grid = (cdiv(T * G, cfg["BLOCK_R"]), B * Hkv)
    _gate_mix_bwd[grid](g, o_cmp, o_sel, o_win, dy, dg, *d_o, T, Hkv, G=G, D=D, **cfg, **launch)
    return dg, d_o[0], d_o[1], d_o[2]


@_gate_mix_bwd_op.register_fake
def _(dy, g, o_cmp, o_sel, o_win):
    return torch.empty_like(g), torch.empty_like(o_cmp), torch.empty_like(o_cmp), torch.empty_like(o_cmp)


def _gate_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _gate_backward(ctx, dy):
    return torch.ops.nsa.triton_gate_mix_bwd(dy.contiguous(), *ctx.saved_tensors)


torch.library.register_autograd("nsa::triton_gate_mix", _gate_backward, setup_context=_gate_setup)


@torch.library.custom_op("nsa::triton_gate_fold_bwd", mutates_args=())
@autocast_off
def _gate_fold_bwd_op(
    dy: Tensor,
    g: Tensor,
    o_cmp: Tensor,
    o_sel: Tensor,
    o_win: Tensor,
    lse_cmp: Tensor,
    lse_sel: Tensor,
    lse_win: Tensor,
    with_delta: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """dy [B, T, H*D], g [B, T, Hkv, G, 3], o_* [B, Hkv, T, G, D], lse_*: the branches' base-2 lse
    (float32, contiguous, B*Hkv*T*G rows in o's row order) -> dg, dO [B, Hkv, T, G, D] (dy in o's
    layout), each lse - log2(g) and, with `with_delta`, each branch's delta rowsum(dO * o) (float32,
    lse's shape), else three empty tensors (`_gate_fold_bwd`). The backward of
    nsa.attention.triton.gated."""
    B, Hkv, T, G, D = o_cmp.shape
    lses = (lse_cmp, lse_sel, lse_win)
    dg, do = torch.empty_like(g), torch.empty_like(o_cmp)
    folded = [torch.empty_like(lse) for lse in lses]
    deltas = [torch.empty_like(lse) if with_delta else lse.new_empty(0) for lse in lses]
    cfg = _gate_config(D)
    launch = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
    grid = (cdiv(T * G, cfg["BLOCK_R"]), B * Hkv)
    # off: the folded lse stand in for the unread delta pointers (no allocation for them)
    dptr = deltas if with_delta else folded
    _gate_fold_bwd[grid](
        g, o_cmp, o_sel, o_win, *lses, dy, dg, do, *folded, *dptr, T, Hkv,
        G=G, D=D, DELTA=with_delta, **cfg, **launch,
    )  # fmt: skip
    return dg, do, *folded, *deltas


@_gate_fold_bwd_op.register_fake
def _(dy, g, o_cmp, o_sel, o_win, lse_cmp, lse_sel, lse_win, with_delta=False):
    lses = (lse_cmp, lse_sel, lse_win)
    deltas = (torch.empty_like(lse) if with_delta else lse.new_empty(0) for lse in lses)
    return torch.empty_like(g), torch.empty_like(o_cmp), *(torch.empty_like(lse) for lse in lses), *deltas


def gate_mix(g: Tensor, o_cmp: Tensor, o_sel: Tensor, o_win: Tensor) -> Tensor:
    """sum_c g_c * o_c [Eq. 5] as [B, T, H*D]; g [B, T, Hkv, G, 3], o_* [B, Hkv, T, G, D] (drop-in for
    `nsa.attention.nsa._gate_mix`). One pass forward, one backward; the sum runs in float32.

    Mixed dtypes or dtypes other than float32/float16/bfloat16 go to the eager function.
    """
    if not (g.dtype == o_cmp.dtype == o_sel.dtype == o_win.dtype) or g.dtype not in _DTYPES:
        # Imported here: nsa.py may import this module, and must be free to do so at its top.
        from nsa.attention.nsa import _gate_mix as eager_gate_mix

        return eager_gate_mix(g, o_cmp, o_sel, o_win)
    _check_device(o_cmp, "gate_mix")
    return torch.ops.nsa.triton_gate_mix(
        g.contiguous(), o_cmp.contiguous(), o_sel.contiguous(), o_win.contiguous()
    )


def _signature(
    fn, ptr: str, constexprs: dict, ints: tuple[str, ...], fp32_ptrs: tuple[str, ...] = ()
) -> dict:
    names = inspect.signature(fn.fn).parameters
    return {
        n: "constexpr" if n in constexprs else "i32" if n in ints else "*fp32" if n in fp32_ptrs else ptr
        for n in names
    }


def gpucheck_specs(shape: GpuShape, arch: int) -> list[KernelSpec]:
    """Every kernel of this module as NSAAttention launches it for `shape` (the same on sm_80 and sm_90:
    these passes are bandwidth-bound and need no arch-specific tiles)."""
    del arch
    ptr = "*" + shape.dtype
    strides = ("T", "Hkv", "sxb", "sxt", "sxh", "sxr", "sob", "sot", "soh", "sor")
    specs = []
    # rope_q_sum_bwd: the backward of q's fan-out (NSAAttention's q), its three gradients summed
    for name, r, direction, neg, nx in (
        ("rope_q", shape.group, "fwd", False, 1),
        ("rope_q", shape.group, "bwd", True, 1),
        ("rope_q", shape.group, "sum_bwd", True, 3),
        ("rope_k", 1, "fwd", False, 1),
        ("rope_k", 1, "bwd", True, 1),
    ):
        cfg = _rope_config(r, shape.head_dim)
        launch = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
        constexprs = {"R": r, "HALF": shape.head_dim // 2, "NEG": neg, "NX": nx, **cfg}
        sig = _signature(_rope_kernel, ptr, constexprs, strides, ("COS", "SIN"))
        specs.append(KernelSpec(f"{name}_{direction}", _rope_kernel, sig, constexprs, **launch))
    # gate_fold_bwd: the branches' lse, in and out, and their deltas (`_delta`: gated.FOLD_DELTA's
    # variant, shipped; without it the measured path)
    lses = ("LC", "LS", "LW", "LC2", "LS2", "LW2", "DC", "DS", "DW")
    for name, fn, more in (
        ("gate_mix_fwd", _gate_mix_fwd, {}),
        ("gate_mix_bwd", _gate_mix_bwd, {}),
        ("gate_fold_bwd", _gate_fold_bwd, {"DELTA": False}),
        ("gate_fold_bwd_delta", _gate_fold_bwd, {"DELTA": True}),
    ):
        cfg = _gate_config(shape.head_dim)
        launch = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
        constexprs = {"G": shape.group, "D": shape.head_dim, **cfg, **more}
        sig = _signature(fn, ptr, constexprs, ("T", "Hkv"), lses)
        specs.append(KernelSpec(name, fn, sig, constexprs, **launch))
    return specs
