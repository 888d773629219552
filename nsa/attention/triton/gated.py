"""The triton backend's three branches and Eq. 5's gate mix as one autograd node, the gates folded
into the branch backwards' lse (no scaled copies of dO).

Owns `gated_branches` (what NSAAttention's triton forward runs from its branch inputs and gates to
wo's input) and its probe switch FOLD_GATE. Every branch backward is linear in dO and sees it only
through P = exp2(s - lse) and delta = rowsum(dO * O): with dO_c = g_c * dO, P' = g_c * P =
exp2(s - (lse_c - log2 g_c)) and delta' = rowsum(dO * O_c) give the same dS = g_c * P * (dP - delta)
and dV = P'^T dO. So the backward runs one kernel (fused.py `nsa::triton_gate_fold_bwd`: dg, dy in
the kernels' layout once, the three lse' = lse - log2 g), then each branch's backward op on that one
dO with its lse': the branch kernels are the ones their own autograd runs (with FOLD_DELTA, below,
their variants handed delta). The gates must
be >= 0 (NSAAttention's are sigmoids): a negative gate has no lse'. It knows the branches only
through their registered ops (their `delta=` argument included), never their kernels.

delta' = rowsum(dO * O_c) is also dL/dg_c, which the fold kernel sums anyway (fp32): with FOLD_DELTA
it stores the three (fp32, each branch's lse layout) and hands each branch's backward op its own
(`delta=`), so no branch backward reads its O again: the compressed and window dQ kernels load no O
tile and store no delta, the selected key-major backward skips its delta kernel (one launch fewer a
layer), its query-major forced dQ kernel loads no O. The values are the ones those kernels form (the
same fp32 products and row sums; bit for bit under the interpreter where the sum is the same op).
"""

from __future__ import annotations

import torch
from torch import Tensor

# The ops this node calls are registered by their modules: imported for that.
import nsa.attention.triton.compressed
import nsa.attention.triton.fused
import nsa.attention.triton.selected
import nsa.attention.triton.window  # noqa: F401

# The gates folded into the lse (this module's node); False: the branch ops' own autograd and the
# gate mix writing three g * dO copies, the path every GPU run measured (a probe switch: read at each
# call, bench/kernel_probe.py --only gate). The H100 of 2026-11-27 at 64k x 1, forward+backward (step
# gate_fold, bench/gpu/2026-11-27-h100-probe-queue.jsonl, the same process): M7C 17.77 ms against 18.05
# unfolded and 18.25 with FOLD_DELTA off; the paper shape 150.90 against 150.35 / 151.34 (within 0.4 %).
FOLD_GATE = True
# The branches' delta written once by the fold kernel and passed to their backward ops (module
# docstring); False: each branch backward forms its own from its O, the path every GPU run measured
# (a probe switch: read at each backward, bench/kernel_probe.py --only gate).
FOLD_DELTA = True
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class _GatedBranches(torch.autograd.Function):
    """(q, q_sel, q_win, kc, vc, ks, vs, kw, vw, g) -> (y [B, T, H*D], idx, valid): the compressed
    branch with the selection, the selected and window branches and the gate mix, each the op its
    module registers; saves what those ops' own autograd saves. idx / valid are not differentiable."""

    @staticmethod
    def forward(ctx, q, q_sel, q_win, kc, vc, ks, vs, kw, vw, g, geo: tuple):
        block_len, block_stride, sel_block, n_sel, window, scale = geo
        o_c, idx, valid, lse_c = torch.ops.nsa_triton.compressed_fwd(
            q, kc, vc, block_len, block_stride, sel_block, n_sel, scale
        )
        # forced: the table comes from top_blocks, which always lists the forced blocks
        o_s, lse_s, order, start, seg_end = torch.ops.nsa_triton.selected_fwd(
            q_sel, ks, vs, idx, valid, sel_block, scale, True
        )
        o_w, lse_w = torch.ops.nsa.triton_window_fwd(q_win, kw, vw, window, scale)
        y = torch.ops.nsa.triton_gate_mix(g, o_c, o_s, o_w)
        ctx.mark_non_differentiable(idx, valid)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(
            q, q_sel, q_win, kc, vc, ks, vs, kw, vw, g, o_c, o_s, o_w, lse_c, lse_s, lse_w,
            idx, valid, order, start, seg_end,
        )  # fmt: skip
        ctx.geo = geo
        return y, idx, valid

    @staticmethod
    def backward(ctx, dy, _didx, _dvalid):
        if dy is None:  # y took no part in the loss
            return (None,) * 11
        q, q_sel, q_win, kc, vc, ks, vs, kw, vw, g, o_c, o_s, o_w, lse_c, lse_s, lse_w, *sel = (
            ctx.saved_tensors
        )
        idx, valid, order, start, seg_end = sel
        block_len, block_stride, sel_block, n_sel, window, scale = ctx.geo
        fold_delta = FOLD_DELTA
        dg, do, fl_c, fl_s, fl_w, *deltas = torch.ops.nsa.triton_gate_fold_bwd(
            dy.contiguous(), g, o_c, o_s, o_w, lse_c, lse_s, lse_w, fold_delta
        )
        de_c, de_s, de_w = deltas if fold_delta else (None, None, None)
        dq, dkc, dvc = torch.ops.nsa_triton.compressed_bwd(
            do, q, kc, vc, o_c, fl_c, block_len, block_stride, n_sel, sel_block, scale, de_c
        )
        dq_sel, dks, dvs = torch.ops.nsa_triton.selected_bwd(
            do, q_sel, ks, vs, idx, valid, o_s, fl_s, order, start, seg_end, sel_block, scale, True, de_s
        )
        dq_win, dkw, dvw = torch.ops.nsa.triton_window_bwd(do, q_win, kw, vw, o_w, fl_w, window, scale, de_w)
        # each q view gets its own branch's gradient: q's RoPE fan-out sums them (fused.py)
        return dq, dq_sel, dq_win, dkc, dvc, dks, dvs, dkw, dvw, dg, None


def gated_branches(
    inp: dict[str, Tensor],
    g: Tensor,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    window: int,
    *,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor] | None:
    """sum_c g_c * o_c [Eq. 5] as [B, T, H*D] and the selection table (idx, valid) from NSAAttention's
    branch inputs `inp` (q, q_sel, q_win [B, Hkv, T, G, D]; kc, vc, ks, vs, kw, vw [B, Hkv, N, D]) and
    the gates g [B, T, Hkv, G, 3] (>= 0), as one autograd node whose backward folds g into the
    branches' lse (module docstring).

    None where it does not apply, and the caller runs the branches and the gate mix one by one:
    FOLD_GATE off, or the tensors not all of one dtype among float32/float16/bfloat16 (g is cast to
    q's dtype first, as the gate mix's caller does).
    """
    q = inp["q"]
    names = ("q", "q_sel", "q_win", "kc", "vc", "ks", "vs", "kw", "vw")
    if not FOLD_GATE or q.dtype not in _DTYPES or any(inp[n].dtype != q.dtype for n in names):
        return None
    args = [inp[n].contiguous() for n in names]
    geo = (block_len, block_stride, sel_block, n_sel, window, float(scale))
    return _GatedBranches.apply(*args, g.to(q.dtype).contiguous(), geo)
