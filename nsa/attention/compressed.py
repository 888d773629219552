"""The compressed branch and block selection of NSA: custom ops `nsa::compressed_fwd/bwd`, chunked over queries.

Owns `compressed_attention_and_selection`: attention over the causal prefix of compressed keys
[Eq. 7] and, from the same float32 probabilities, the selection table [Eq. 8-11]. Layout
[B, Hkv, T, G, D]: the G query heads of a GQA group sit next to each other, so a query chunk of one
KV head is one [C*G, D] matrix (a view, no copy). Loops run over query chunks only; no [T, T]
tensor; nothing may sync with the device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nsa.attention.precision import acc_dtype as _acc
from nsa.attention.precision import autocast_off
from nsa.attention.selection import top_blocks

# Query rows per chunk on top of the caller's `chunk`, CPU: the float32 [Hkv, C*G, n_vis] probabilities
# of a chunk stay cache-sized (measured on the 2-core dev VM, see docs/attention.md).
_MAX_ROWS = 128
# CUDA: the cost of a chunk is its ~30 kernel launches, not cache misses, so a chunk is as many rows as
# keep its float32 probabilities within this many bytes (the backward holds ~3 such tensors): one chunk
# up to T ~ 16k at the M7C shape, ~25 at 64k (B=1). Not measured on a GPU.
_CUDA_CHUNK_BYTES = 512 << 20


def _max_rows(q: Tensor, nc: int) -> int:
    """Row limit of one chunk on q's device (see _MAX_ROWS and _CUDA_CHUNK_BYTES)."""
    if q.device.type != "cuda":
        return _MAX_ROWS
    B, Hkv, _, G, _ = q.shape
    return max(_MAX_ROWS, _CUDA_CHUNK_BYTES // (4 * B * Hkv * G * max(nc, 1)))


def _low_precision_gemms(q: Tensor) -> bool:
    """GEMMs in q's half dtype with float32 accumulation and float32 results (CUDA), instead of float32
    GEMMs on upcast copies (CPU, where half GEMMs are not faster and the CPU numbers were measured).
    Softmax, statistics and gradient sums stay float32 either way."""
    return q.device.type == "cuda" and q.dtype in (torch.bfloat16, torch.float16)


def _bmm(a: Tensor, b: Tensor, out_dtype: torch.dtype) -> Tensor:
    """bmm with the result in `out_dtype` (float32 from half operands: accumulated in float32, never
    rounded to half in between). CUDA and meta have it as one op; the CPU fallback serves the tests
    that force the low-precision path there."""
    if a.dtype == out_dtype:
        return torch.bmm(a, b)
    if a.device.type == "cpu":
        return torch.bmm(a.to(out_dtype), b.to(out_dtype))
    return torch.bmm(a, b, out_dtype=out_dtype)


def _chunks(T: int, nc: int, block_len: int, block_stride: int, chunk: int):
    """(c0, c1, r0, n_full, n_vis) per query chunk [c0, c1).

    Rows before r0 see no compressed token; every row of [r0, c1) sees keys [0, n_full) and row t
    sees key i iff i*d + l - 1 <= t, so only the keys [n_full, n_vis) need a mask.
    """
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        n_vis = min(nc, max(0, (c1 - block_len) // block_stride + 1))
        r0 = min(c1, max(c0, block_len - 1))
        n_full = min(n_vis, max(0, (r0 - block_len) // block_stride + 1))
        yield c0, c1, r0, n_full, n_vis


def _probs(
    qc: Tensor, kc: Tensor, r0: int, c1: int, n_full: int, block_len: int, block_stride: int
) -> Tensor:
    """Softmax of the chunk's logits [BH, C*G, n_vis] in qc's accumulation dtype: qc [BH, C*G, D] (pre-scaled), kc [BH, n_vis, D]."""
    BH, CG, _ = qc.shape
    n_vis = kc.shape[1]
    s = _bmm(qc, kc.transpose(1, 2), torch.promote_types(qc.dtype, torch.float32))
    if n_full < n_vis:
        t = torch.arange(r0, c1, device=qc.device)
        ends = torch.arange(n_full, n_vis, device=qc.device) * block_stride + (block_len - 1)
        hidden = (ends[None, :] > t[:, None])[:, None, :]  # [C, 1, n_part]
        C = c1 - r0
        s.view(BH, C, CG // C, n_vis)[..., n_full:].masked_fill_(hidden, float("-inf"))
    # Every row sees key 0 (rows before r0 are cut off), so no row is all -inf.
    return torch.softmax(s, dim=-1)


def _eq9_scores(
    p_grp: Tensor, n_vis: int, block_len: int, block_stride: int, sel_block: int, ns: int
) -> Tensor:
    """Eq. 9 on [..., n_vis] group-summed probabilities -> [..., ns] selection-block scores (float32).

    p_slc[j] = sum_{m<r} sum_{n<a} p[r*j + m - n] (a = l/d, r = l'/d): first a running box of a
    compressed blocks, then sums over r consecutive entries (a reshape) — a - 1 strided adds instead of
    an unfold + dot, which becomes a batched matmul of many tiny copies.
    """
    a, r = block_len // block_stride, sel_block // block_stride
    buf = p_grp.new_zeros(*p_grp.shape[:-1], ns * r + a - 1)
    buf[..., a - 1 : a - 1 + n_vis] = p_grp
    box = buf[..., a - 1 :].clone() if a > 1 else buf
    for n in range(1, a):
        box += buf[..., a - 1 - n : a - 1 - n + ns * r]
    return box.view(*box.shape[:-1], ns, r).sum(-1)


def _forward(
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    scale: float,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per query chunk: logits once, float32 softmax, output p @ vc and the selection table [Eq. 8-11].

    Returns out [B, Hkv, T, G, D] (zeros for rows that see no compressed token), idx and valid
    [B, Hkv, T, min(n_sel, Ns)]. The backward recomputes the probabilities (nothing else is saved).
    """
    B, Hkv, T, G, D = q.shape
    nc, BH = kc.shape[2], B * Hkv
    ns = -(-T // sel_block)
    k = min(n_sel, ns)
    acc = _acc(q.dtype)
    gemm = q.dtype if _low_precision_gemms(q) else acc
    qr, kr, vr = q.reshape(BH, T * G, D), kc.reshape(BH, nc, D).to(gemm), vc.reshape(BH, nc, D).to(gemm)
    out = torch.empty(BH, T * G, D, dtype=q.dtype, device=q.device)
    idx = torch.empty(BH, T, k, dtype=torch.int64, device=q.device)
    valid = torch.empty(BH, T, k, dtype=torch.bool, device=q.device)
    first = min(T, block_len - 1)
    out[:, : first * G].zero_()
    for c0, c1, r0, n_full, n_vis in _chunks(T, nc, block_len, block_stride, chunk):
        C = c1 - r0
        t = torch.arange(c0, c1, device=q.device)
        ns_c = (c1 - 1) // sel_block + 1  # no block after the chunk's last query is a candidate
        if C == 0 or n_vis == 0:
            scores = q.new_zeros(BH, c1 - c0, ns_c, dtype=torch.float32)
        else:
            rows = slice(r0 * G, c1 * G)
            qs = qr[:, rows].to(gemm) * scale  # scaling the [C*G, D] rows, not the [C*G, n_vis] logits
            p = _probs(qs, kr[:, :n_vis], r0, c1, n_full, block_len, block_stride)
            if gemm == q.dtype:
                torch.bmm(p.to(gemm), vr[:, :n_vis], out=out[:, rows])
            else:
                out[:, rows].copy_(torch.bmm(p, vr[:, :n_vis]))
            p_grp = p.view(BH, C, G, n_vis).sum(2).float()  # Eq. 10, in float32 for every input dtype
            scores = _eq9_scores(p_grp, n_vis, block_len, block_stride, sel_block, ns_c)
            if r0 > c0:  # rows that see no compressed token score 0 everywhere
                scores = torch.cat([scores.new_zeros(BH, r0 - c0, ns_c), scores], dim=1)
        top, ok = top_blocks(scores, t, sel_block, n_sel)
        kc_ = top.shape[-1]
        idx[:, c0:c1, :kc_] = top
        valid[:, c0:c1, :kc_] = ok
        if kc_ < k:
            idx[:, c0:c1, kc_:] = 0
            valid[:, c0:c1, kc_:] = False
    return out.view(B, Hkv, T, G, D), idx.view(B, Hkv, T, k), valid.view(B, Hkv, T, k)


@torch.library.custom_op("nsa::compressed_fwd", mutates_args=())
@autocast_off
def _compressed_fwd(
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    scale: float,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """`_forward` as one opaque node for torch.compile (no unrolled chunk loop, no graph break)."""
    return _forward(q, kc, vc, block_len, block_stride, sel_block, n_sel, scale, chunk)


@_compressed_fwd.register_fake
def _(q, kc, vc, block_len, block_stride, sel_block, n_sel, scale, chunk):
    B, Hkv, T = q.shape[:3]
    k = min(n_sel, -(-T // sel_block))
    idx = q.new_empty(B, Hkv, T, k, dtype=torch.int64)
    return torch.empty_like(q), idx, q.new_empty(B, Hkv, T, k, dtype=torch.bool)


@torch.library.custom_op("nsa::compressed_bwd", mutates_args=())
@autocast_off
def _compressed_bwd(
    dout: Tensor,
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    out: Tensor,
    block_len: int,
    block_stride: int,
    scale: float,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Flash-style backward: per chunk recompute p, then dV += p^T dO, dS = p * (dO V^T - rowsum(dO*O)),
    dQ = dS K * scale, dK += dS^T Q * scale. Gradients go straight into preallocated outputs."""
    B, Hkv, T, G, D = q.shape
    nc, BH = kc.shape[2], B * Hkv
    acc = _acc(q.dtype)
    gemm = q.dtype if _low_precision_gemms(q) else acc
    qr, kr, vr = q.reshape(BH, T * G, D), kc.reshape(BH, nc, D).to(gemm), vc.reshape(BH, nc, D).to(gemm)
    dor, outr = dout.reshape(BH, T * G, D), out.reshape(BH, T * G, D)
    dq = torch.empty(BH, T * G, D, dtype=q.dtype, device=q.device)
    dk = torch.zeros(BH, nc, D, dtype=acc, device=q.device)
    dv = torch.zeros(BH, nc, D, dtype=acc, device=q.device)
    first = min(T, block_len - 1)
    dq[:, : first * G].zero_()
    for _, c1, r0, n_full, n_vis in _chunks(T, nc, block_len, block_stride, chunk):
        if c1 == r0 or n_vis == 0:
            continue
        rows = slice(r0 * G, c1 * G)
        qs, do = qr[:, rows].to(gemm) * scale, dor[:, rows].to(gemm)
        p = _probs(qs, kr[:, :n_vis], r0, c1, n_full, block_len, block_stride)
        delta = (do.to(acc) * outr[:, rows].to(acc)).sum(-1, keepdim=True)
        ds = _bmm(do, vr[:, :n_vis].transpose(1, 2), acc).sub_(delta).mul_(p)
        if gemm == acc:
            dv[:, :n_vis].baddbmm_(p.transpose(1, 2), do)
            dk[:, :n_vis].baddbmm_(ds.transpose(1, 2), qs)
        else:  # half operands, float32 sums: the products come out float32 and are added
            pg, ds = p.to(gemm), ds.to(gemm)
            dv[:, :n_vis] += _bmm(pg.transpose(1, 2), do, acc)
            dk[:, :n_vis] += _bmm(ds.transpose(1, 2), qs, acc)
        if acc == q.dtype:
            torch.bmm(ds, kr[:, :n_vis], out=dq[:, rows]).mul_(scale)
        else:
            dq[:, rows].copy_(_bmm(ds, kr[:, :n_vis], acc).mul_(scale))
    return dq.view_as(q), dk.view_as(kc).to(kc.dtype), dv.view_as(vc).to(vc.dtype)


@_compressed_bwd.register_fake
def _(dout, q, kc, vc, out, block_len, block_stride, scale, chunk):
    return torch.empty_like(q), torch.empty_like(kc), torch.empty_like(vc)


def _compressed_setup(ctx, inputs, output) -> None:
    q, kc, vc, block_len, block_stride, _, _, scale, chunk = inputs
    out, _, _ = output
    ctx.save_for_backward(q, kc, vc, out)
    ctx.args = (block_len, block_stride, scale, chunk)


def _compressed_backward(ctx, dout, _didx, _dvalid):
    q, kc, vc, out = ctx.saved_tensors
    dq, dk, dv = torch.ops.nsa.compressed_bwd(dout.contiguous(), q, kc, vc, out, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None


torch.library.register_autograd("nsa::compressed_fwd", _compressed_backward, setup_context=_compressed_setup)


def compressed_attention_and_selection(
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    *,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    scale: float,
    chunk: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Compressed branch output [B, Hkv, T, G, D] and the selection table (idx, valid) [B, Hkv, T, k].

    Compressed key i is visible to query t iff i*d + l - 1 <= t; a query that sees none gets zeros.
    `chunk` caps the query rows per loop step below the device's own limit (None: no cap).
    """
    limit = _max_rows(q, kc.shape[2])
    rows = max(1, min(chunk, limit) if chunk is not None else limit)
    return torch.ops.nsa.compressed_fwd(
        q.contiguous(),
        kc.contiguous(),
        vc.contiguous(),
        block_len,
        block_stride,
        sel_block,
        n_sel,
        scale,
        rows,
    )


@torch.library.custom_op("nsa::select_blocks", mutates_args=())
@autocast_off
def _select_blocks(
    q: Tensor,
    kc: Tensor,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    scale: float,
    chunk: int,
) -> tuple[Tensor, Tensor]:
    """The selection table alone (Eq. 8-11), for callers without compressed values; no grad."""
    vc = torch.zeros_like(kc)
    _, idx, valid = _forward(q, kc, vc, block_len, block_stride, sel_block, n_sel, scale, chunk)
    return idx, valid


@_select_blocks.register_fake
def _(q, kc, block_len, block_stride, sel_block, n_sel, scale, chunk):
    B, Hkv, T = q.shape[:3]
    k = min(n_sel, -(-T // sel_block))
    return q.new_empty(B, Hkv, T, k, dtype=torch.int64), q.new_empty(B, Hkv, T, k, dtype=torch.bool)
