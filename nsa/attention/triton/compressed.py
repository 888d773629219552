"""Triton kernels of NSA's compressed branch with block selection [Eq. 7-11]: two kernels forward,
three backward, at every T.

Owns `compressed_attention_and_selection`, a drop-in for `nsa.attention.compressed`'s function
(same arguments, layouts, dtypes and results, selection tables identical to eager's including the
tie-break), the launch configs and `gpucheck_specs`. Forward: `_cmp_fwd` is the compressed attention
alone, flash-style in one pass over tiles of consecutive (token, head) rows, writing the output and
the row log-sum-exp; `_cmp_select` (compressed_select.py) then takes one (batch, KV head, token
tile) with all G heads of each token as rows, recomputes each key tile's final probabilities from
that log-sum-exp (1 QK product a tile), sums them over the group [Eq. 10], maps them onto float32
selection-block scores [Eq. 9] and keeps a running top-n per token [Eq. 11]. (Until 2026-11-26 the
selection rode in the attention's second pass; on the first GPU its top-n merge held that kernel at
one 8-warp program per SM and cost 5x the attention: bench/RESULTS.md.) No [T, T/d] or [T, T/l']
tensor exists: selection needs the tile's registers only. Backward is flash-style from the saved
row statistics, its query tiles (token, head) rows without padding. It must not sync with the
device, loop on the host over T, or autotune (docs/attention.md)."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from nsa.attention.triton import cdiv, check_delta, device_arch, frozen_config, interpreting
from nsa.attention.triton.compressed_select import _cmp_select
from nsa.attention.triton.compressed_select_v0 import _cmp_select_v0
from nsa.attention.triton.spec import GpuShape, KernelSpec
from nsa.versions import release

_LOG2E = math.log2(math.e)
_TL = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@triton.jit
def _row_tile(pid_t, T, NC, G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr,
              L: tl.constexpr, S: tl.constexpr):  # fmt: skip
    """A tile of BM consecutive (token, head) rows of the [T * G] rows (the attention kernels' tiles):
    their offsets, tokens and validity, the [BM, DP] offsets and mask into a [T * G, D] tensor, and
    how many compressed keys the tile's last token sees."""
    row_off = pid_t * BM + tl.arange(0, BM)
    tq = row_off // G
    row_ok = row_off < T * G
    dcol = tl.arange(0, DP)
    qoff = row_off[:, None] * D + dcol[None, :]
    qmask = row_ok[:, None] & (dcol < D)[None, :]
    t_last = tl.minimum((pid_t * BM + BM - 1) // G, T - 1)
    n_vis = tl.where(t_last >= L - 1, tl.minimum(NC, (t_last - (L - 1)) // S + 1), 0)
    return row_off, tq, row_ok, dcol, qoff, qmask, n_vis


@triton.jit
def _key_step(K, V, kb, q, tq, dcol, NC, qk_scale, D: tl.constexpr, BN: tl.constexpr, L: tl.constexpr,
              S: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """One step of the attention kernels over compressed keys [kb * BN, kb * BN + BN): the keys and
    values, the scaled logits of the tile's rows and which (row, key) pairs are causally visible
    (rows past T * G are the caller's to mask)."""
    key = kb * BN + tl.arange(0, BN)
    key_ok = key < NC
    kmask = key_ok[:, None] & (dcol < D)[None, :]
    koff = key[:, None] * D + dcol[None, :]
    k = tl.load(K + koff, mask=kmask, other=0.0)
    v = tl.load(V + koff, mask=kmask, other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
    vis = key_ok[None, :] & (key[None, :] * S + (L - 1) <= tq[:, None])
    return k, v, s, vis


@triton.jit
def _cmp_fwd(
    Q,
    K,
    V,
    Out,
    LSE,
    T,
    NC,
    qk_scale,
    G: tl.constexpr,
    D: tl.constexpr,
    DP: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    L: tl.constexpr,
    S: tl.constexpr,
    PREC: tl.constexpr,
):
    """The compressed attention alone, flash-style in one pass: output and row log-sum-exp (log2).

    A tile is BM consecutive (token, head) rows of the [T * G] rows, as in dQ: no padded heads."""
    pid_t = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    # 64-bit offsets only in the scalar bases: per-element int64 pointer math costs registers.
    Q += bh * T * G * D
    Out += bh * T * G * D
    LSE += bh * T * G
    K += bh * NC * D
    V += bh * NC * D
    row_off, tq, row_ok, dcol, qoff, qmask, n_vis = _row_tile(pid_t, T, NC, G, D, DP, BM, L, S)
    q = tl.load(Q + qoff, mask=qmask, other=0.0)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, DP], tl.float32)
    for kb in range(0, tl.cdiv(n_vis, BN)):
        _, v, s, vis = _key_step(K, V, kb, q, tq, dcol, NC, qk_scale, D, BN, L, S, PREC)
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
        m_i = m_new
    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    out = tl.where(seen[:, None], acc / l_safe[:, None], 0.0)
    tl.store(Out + qoff, out.to(Out.dtype.element_ty), mask=qmask)
    tl.store(LSE + row_off, tl.where(seen, m_i + tl.log2(l_safe), 0.0), mask=row_ok)


@triton.jit
def _cmp_bwd_dq(
    Q,
    K,
    V,
    Out,
    DO,
    LSE,
    DELTA,
    DQ,
    T,
    NC,
    qk_scale,
    scale,
    G: tl.constexpr,
    GP: tl.constexpr,
    D: tl.constexpr,
    DP: tl.constexpr,
    BT: tl.constexpr,
    BN: tl.constexpr,
    L: tl.constexpr,
    S: tl.constexpr,
    PREC: tl.constexpr,
    HAVE_DELTA: tl.constexpr,
):
    """dQ per query tile; also writes delta = rowsum(dO * out) for the dK/dV kernel that runs next,
    unless HAVE_DELTA: then delta was formed before (the gate fold's kernel) and Out is not read.

    A tile is BM = BT * GP consecutive (token, head) rows of the [T * G] rows, not BT tokens padded to
    GP heads: no group sum here, so nothing needs a token's heads in one tile, and at G = 6 a quarter
    of the rows (and of the three products) was padding."""
    BM: tl.constexpr = BT * GP
    pid_t = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * T * G * D
    Out += bh * T * G * D
    DO += bh * T * G * D
    DQ += bh * T * G * D
    LSE += bh * T * G
    DELTA += bh * T * G
    K += bh * NC * D
    V += bh * NC * D
    row_off, tq, row_ok, dcol, qoff, qmask, n_vis = _row_tile(pid_t, T, NC, G, D, DP, BM, L, S)
    q = tl.load(Q + qoff, mask=qmask, other=0.0)
    do = tl.load(DO + qoff, mask=qmask, other=0.0)
    if HAVE_DELTA:
        delta = tl.load(DELTA + row_off, mask=row_ok, other=0.0)
    else:
        o = tl.load(Out + qoff, mask=qmask, other=0.0)
        delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)
        tl.store(DELTA + row_off, delta, mask=row_ok)
    lse = tl.load(LSE + row_off, mask=row_ok, other=0.0)

    dq = tl.zeros([BM, DP], tl.float32)
    for kb in range(0, tl.cdiv(n_vis, BN)):
        k, v, s, vis = _key_step(K, V, kb, q, tq, dcol, NC, qk_scale, D, BN, L, S, PREC)
        p = tl.where(row_ok[:, None] & vis, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    tl.store(DQ + qoff, (dq * scale).to(DQ.dtype.element_ty), mask=qmask)


@triton.jit
def _cmp_bwd_dkv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    PDK,
    PDV,
    T,
    NC,
    qk_scale,
    scale,
    G: tl.constexpr,
    GP: tl.constexpr,
    D: tl.constexpr,
    DP: tl.constexpr,
    BT: tl.constexpr,
    BN: tl.constexpr,
    L: tl.constexpr,
    S: tl.constexpr,
    SPLIT: tl.constexpr,
    PREC: tl.constexpr,
):
    """Partial dK, dV of one compressed-key tile over one SPLIT-th of the query tiles that see it
    (fp32, [B*Hkv, key tiles, SPLIT, BN, DP]; no atomics). Key tile 0 is seen by every query and the
    last by almost none: split, no program carries more than 1/SPLIT of the longest tile's work.
    Query tiles are BM = BT * GP consecutive (token, head) rows, unpadded, as in `_cmp_bwd_dq`."""
    BM: tl.constexpr = BT * GP
    pid_n = tl.program_id(0) // SPLIT
    part = tl.program_id(0) % SPLIT
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * T * G * D
    DO += bh * T * G * D
    LSE += bh * T * G
    DELTA += bh * T * G
    K += bh * NC * D
    V += bh * NC * D
    key = pid_n * BN + tl.arange(0, BN)
    key_ok = key < NC
    dcol = tl.arange(0, DP)
    dmask = dcol < D
    koff = key[:, None] * D + dcol[None, :]
    k = tl.load(K + koff, mask=key_ok[:, None] & dmask[None, :], other=0.0)
    v = tl.load(V + koff, mask=key_ok[:, None] & dmask[None, :], other=0.0)
    kend = key * S + (L - 1)  # first query that sees each key

    rows = tl.arange(0, BM)
    dk = tl.zeros([BN, DP], tl.float32)
    dv = tl.zeros([BN, DP], tl.float32)
    first = (pid_n * BN * S + (L - 1)) * G // BM  # the tile of the first row that sees the key tile
    n_tiles = tl.maximum(tl.cdiv(T * G, BM) - first, 0)
    lo = first + (part * n_tiles) // SPLIT
    hi = first + ((part + 1) * n_tiles) // SPLIT
    for tb in range(lo, hi):
        row_off = tb * BM + rows
        tq = row_off // G
        row_ok = row_off < T * G
        qoff = row_off[:, None] * D + dcol[None, :]
        q = tl.load(Q + qoff, mask=row_ok[:, None] & dmask[None, :], other=0.0)
        do = tl.load(DO + qoff, mask=row_ok[:, None] & dmask[None, :], other=0.0)
        lse = tl.load(LSE + row_off, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + row_off, mask=row_ok, other=0.0)
        st = tl.dot(k, tl.trans(q), input_precision=PREC) * qk_scale
        vis = key_ok[:, None] & row_ok[None, :] & (kend[:, None] <= tq[None, :])
        pt = tl.where(vis, tl.exp2(st - lse[None, :]), 0.0)
        dv += tl.dot(pt.to(do.dtype), do, input_precision=PREC)
        dpt = tl.dot(v, tl.trans(do), input_precision=PREC)
        dst = pt * (dpt - delta[None, :])
        dk += tl.dot(dst.to(q.dtype), q, input_precision=PREC)
    n = tl.arange(0, BN)
    poff = ((bh * tl.num_programs(0) + pid_n * SPLIT + part) * BN + n)[:, None] * DP + dcol[None, :]
    tl.store(PDK + poff, dk * scale)
    tl.store(PDV + poff, dv)


@triton.jit
def _cmp_bwd_dkv_sum(
    PDK,
    PDV,
    DK,
    DV,
    NC,
    D: tl.constexpr,
    DP: tl.constexpr,
    BN: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """dK, dV of one key tile: its SPLIT partials summed in order (deterministic), in the keys' dtype."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    n = tl.arange(0, BN)
    dcol = tl.arange(0, DP)
    dk = tl.zeros([BN, DP], tl.float32)
    dv = tl.zeros([BN, DP], tl.float32)
    for part in range(0, SPLIT):
        poff = ((bh * tl.num_programs(0) + pid_n) * SPLIT + part) * BN
        off = (poff + n)[:, None] * DP + dcol[None, :]
        dk += tl.load(PDK + off)
        dv += tl.load(PDV + off)
    key = pid_n * BN + n
    m = (key < NC)[:, None] & (dcol < D)[None, :]
    koff = (bh * NC + key)[:, None] * D + dcol[None, :]
    tl.store(DK + koff, dk.to(DK.dtype.element_ty), mask=m)
    tl.store(DV + koff, dv.to(DV.dtype.element_ty), mask=m)


def _pow2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def _split_of(c: dict) -> int:
    """The selection's SPLIT constexpr: `select_split` on the CUT loop only (the kernel asserts CUT >=
    SPLIT), so turning select_cut off (the loop the GPU measured, a probe variant) needs no second flip."""
    return c["select_split"] if c["select_cut"] else 0


def _pair_of(c: dict) -> int:
    """The selection's PAIR constexpr: `select_pair` on the CUT loop only (the kernel asserts CUT >=
    PAIR), as `_split_of`."""
    return c["select_pair"] if c["select_cut"] else 0


def _insert_of(c: dict) -> int:
    """The selection's INSERT constexpr: `select_insert` on the CUT loop only (the kernel asserts CUT
    >= INSERT), as `_split_of`."""
    return c["select_insert"] if c["select_cut"] else 0


def _tma_of(c: dict, dtype: torch.dtype, D: int, block_stride: int, sel_block: int) -> int:
    """The selection's TMA constexpr: `select_tma` where the kernel can take its key tile as one bulk
    copy (the CUT loop, one token group a program, 16-bit keys, head_dim a power of two >= 16, r = l'/d
    unpadded: the tile is BJ * r whole rows of K, contiguous; the kernel asserts it)."""
    ok = c["select_cut"] and not _pair_of(c) and dtype in (torch.bfloat16, torch.float16)
    ok = ok and c["DP"] == D and c["RP"] == sel_block // block_stride
    return c.get("select_tma", 0) if ok else 0


def _one_warp_cap() -> int:
    """The selection's register cap at 1 warp a program (`_config` one_warp; ptxas .maxnreg), per
    triton: 168 on 3.6 (the GPU images'; what the H100 measured: 12 warps an SM, no spill at G 5/6/8 x
    D 48/64 on sm_90), 224 on 3.9 (236 registers uncapped; capped at 168 it spilled 1096-1184 B, at
    216 / 220 60-124 B; at 224 none, 221-224 registers, 9 warps an SM; bench/RESULTS.md "flips").
    The versions between are unchecked and taken as 3.9."""
    return 168 if release(triton.__version__) < (3, 7) else 224


def _paper_insert_cap() -> int:
    """The selection's register cap at the paper's shape on sm_90 with select_insert (`_config`
    paper_insert; ptxas .maxnreg), per triton: 168 on 3.6 (the GPU images'; 201 uncapped, 8 warps an SM
    instead of the 12 of the build without it at 158; capped 168, no spill at G 9/12/16 x D 96/128: 12
    warps), none on 3.9 (capped at 168 it spilled 12 B at G 12/16 x D 96/128; uncapped 184-229, no
    spill, 8 warps an SM against 16 without the insertion at 128: unpriced there, its SASS not split by
    bench/select_sass.py). bench/RESULTS.md "paperins"."""
    return 168 if release(triton.__version__) < (3, 7) else 0


# keyed on the triton version too: `_one_warp_cap` reads it
@frozen_config(extra=lambda: triton.__version__)
def _config(
    group: int, head_dim: int, n_sel: int, block_len: int, block_stride: int, sel_block: int, arch: int = 80
):
    """Tile sizes and launch settings from the static geometry and the arch (80 = A100, 90 = H100),
    never from T."""
    gp = _pow2(group)
    a, r = block_len // block_stride, sel_block // block_stride
    rp = _pow2(r)
    hmax = -(-(a - 1) // r)
    # BJ selection blocks per key tile: >= 64 keys for tl.dot, and wide enough that Eq. 9's reach
    # back (hmax blocks) stays within the previous tile.
    bj = max(_pow2(max(1, 64 // rp)), _pow2(hmax))
    # Query rows (tokens x padded G) per dQ tile; chosen so that nothing spills on sm_80/sm_90
    # (ptxas -v, docs/attention.md). On sm_90 past head_dim 64: 128 rows (flash_hopper, below).
    big = head_dim > 64
    flash_hopper = arch >= 90  # the compressed backward's tiles bench/flash_proxy.py priced (below)
    rows = 128 if not big or flash_hopper else 32
    bt = max(1, min(32, rows // gp))
    # The selection kernel holds the top-n merge of its tokens (the int64 merge of _cmp_select_v0): 32
    # rows and at most 8 tokens per tile (G = 1 pads to 2 rows a token for tl.dot's 16). ptxas on sm_80
    # spilled with 64 rows (G = 6: 8 tokens, 472 B) and with 16 tokens (G = 1), and with 128 rows.
    gpf = max(2, gp)
    btf = max(1, min(8, 32 // gpf))
    hopper_g8 = head_dim <= 64 and arch >= 90 and gpf == 8  # M7C on an H100/H200
    # M7C on an A100 (sm_80, G 5-8 at head_dim <= 64): the selection at BTF = 4 tokens a tile, merged
    # in halves, 2 warps under a 168-register cap. Proxy-chosen, unmeasured (no A100 has run it):
    # bench/a100_proxy.py prices it from its sm_80 SASS 29-32 % faster than 4 warps merged at once
    # (M7C 8k / 32k / 64k x 1: 0.20 / 2.77 / 10.07 ms against 0.28 / 3.97 / 14.89 on triton 3.6, the
    # GPU images'; 31-34 % on 3.9), at 12 warps an SM as the shipped one (issue-bound, where the
    # proxy is calibrated). ptxas sm_80: 168 registers capped / 204 uncapped on 3.6, 164 / 168 on
    # 3.9, no spill at G 5-8 (bench/RESULTS.md, branch a100).
    ampere_g8 = head_dim <= 64 and arch == 80 and gpf == 8
    # M7C on an H100/H200 at head_dim 33-64: the selection with Eq. 9's shared key without its gathers
    # (select_shm) and its interior key tiles unmasked (select_split), a pair on the proxy's word
    # (the two settings' comments below); on an A100 too (ampere_g8: at its own tokens, warps, halves
    # and cap), on bench/a100_proxy.py's word (bench/RESULTS.md "a100shm").
    shm_split = (hopper_g8 or ampere_g8) and head_dim > 32 and a == 2
    # The selection at 1 warp a program under a register cap at shm_split's scope on sm_90: on the H100
    # of 2026-11-26c (triton 3.6) it ran M7C 64k x 1 in 4.64 ms against 5.67 at the 2 warps shipped
    # before (1 warp uncapped 4.75; bench/gpu/2026-11-26c-h100-probe-queue.jsonl, the same process).
    # Measured at 64k only then; the H100 of 2026-11-27 (bench/gpu/2026-11-27-h100-probe-queue.jsonl,
    # step select_warps, the same process, with select_insert 2 shipped since): shipped 0.986 / 2.739 ms
    # at M7C 8k x 8 / 32k x 2 (its variant 0.982 / 2.746), 1 warp uncapped 0.981 / 2.689, 2 warps
    # uncapped 1.032 / 2.800, 4 tokens in halves at 2 warps capped 1.016 / 2.650 (within 3 % either
    # way: kept), 4 warps 1.305 / 3.651. The cap:
    # `_one_warp_cap`. Not on sm_80 (ampere_g8 keeps its 2 warps in
    # halves under 168 registers, which bench/a100_proxy.py priced; 1 warp there is unpriced).
    one_warp = shm_split and arch >= 90
    # The paper's shape on an H100/H200 (G 9-16, head_dim 65-128: 4 tokens a tile merged at once, 4
    # warps): the one- and two-key insertion under `_paper_insert_cap` (select_insert's comment).
    paper_insert = arch >= 90 and gpf == 16 and 64 < head_dim <= 128
    # select_shm at the same scope (a = 2: the kernel asserts it), with the insertion, under its cap: the
    # H100 of 2026-11-27 (triton 3.6) ran the paper's selection at 8k x 2 / 64k x 1 in 0.751 / 14.01 ms
    # with it against 0.796 / 14.47 without (bench/gpu/2026-11-27-h100-probe-queue.jsonl, step
    # select_shm, the same process; select_shm's comment).
    paper_shm = paper_insert and a == 2
    sel_cap = (
        168 if ampere_g8 else _one_warp_cap() if one_warp else _paper_insert_cap() if paper_insert else 0
    )
    # dQ: 8 warps for 128-row tiles; 4 for 32 rows (D > 64 on sm_80), where 8 warps left ptxas at 128
    # registers and spilling (G 16, D 96 on sm_80). Past head_dim 64 the 32 x 32 tile the GPUs measured
    # runs its products as mma.sync on sm_90 (fitted efficiency 0.22 against head_dim 64's 0.56 on
    # 128 x 64 wgmma tiles). On sm_90: 128 rows x 32 keys at 8 warps (bench/flash_proxy.py's tile,
    # "flashproxy"), at 2 stages: the H100 of 2026-11-26c ran the compressed backward (dQ + dK/dV) at
    # the paper's shape 32k x 1 in 10.46 ms with it against 11.57 unpipelined (stages_dq 1, shipped
    # before on the proxy's word) and 15.06 with the 32-row tile the GPUs measured before
    # (bench/gpu/2026-11-26c-h100-probe-queue.jsonl, the same process). ptxas: no spill at G
    # 1/2/5/6/8/16 x D 96/128 on sm_90, triton 3.6 and 3.9 (bench/RESULTS.md "flips"). Both others
    # are probe variants (bench/kernel_probe.py); sm_80 keeps the 32-row tile (no A100 data). Confirmed
    # at 8k and 64k by the H100 of 2026-11-27: 2.35 / 39.88 ms at paper 8k x 2 / 64k x 1 against 2.54 /
    # 44.21 at 1 stage and 2.73 / 57.93 with the 32-row tile (bench/gpu/2026-11-27-h100-probe-queue.jsonl,
    # step stages_dq, the same process).
    warps = 8 if bt * gp >= 64 else 4
    bn_bwd = 64 if not big else 32
    # dK/dV: [BN, D] accumulators over query tiles of 64 rows x 32 keys (32 rows past head_dim 64: with
    # 64, ptxas spilled 8-12 B at G 16 x D 128 and G 2 x D 96 on sm_90), as the GPUs measured them and
    # sm_80 keeps. On sm_90 (shipped on a proxy's word, measured since): 64 keys a tile, its products wgmma
    # (two wgmma waits a query tile at 4 warps; the 8-warp 64-key tile the H200 probed waited after
    # each of 36 and ran 0.94x), 32 rows, unpipelined at head_dim 64 (stages_dkv 1); bench/flash_proxy.py
    # prices it 0.55 / 0.53x the measured 4-warp tile at M7C 8k / 64k and 0.49 / 0.46x at the paper
    # shape; ptxas: no spill over gpucheck's grid and G 5 / 8 on sm_90, triton 3.6 and 3.9. The H100
    # of 2026-11-26c ran the compressed backward at M7C 64k x 1 in 4.10 ms with the sm_90 tiles against
    # 5.79 with the ones the GPUs measured before (bench/gpu/2026-11-26c-h100-probe-queue.jsonl).
    bt_dkv = max(1, (32 if flash_hopper else 64 if not big else 32) // gp)
    bn_dkv = 64 if flash_hopper else 32
    warps_sel = 2 if (head_dim <= 64 and (gpf >= 16 or (arch >= 90 and gpf == 8))) or ampere_g8 else 4
    return {
        # 4 warps: the compressed backward took 5.5 ms instead of 7.8 with 8 at M7C 64k, 40.5 instead of
        # 56.6 at the paper's shape at 32k (H200, bench/kernel_probe.py).
        "warps_dkv": 4,
        "GP": gp,
        "GPF": gpf,
        "BTF": btf,
        # head_dim padded to a power of two >= 16 (tl.arange and tl.dot need it); masked columns.
        "DP": max(16, _pow2(head_dim)),
        "RP": rp,
        "BJ": bj,
        "BT": bt,
        "warps": warps,
        "bn_bwd": bn_bwd,
        "bt_dkv": bt_dkv,
        "bn_dkv": bn_dkv,
        # dK/dV: each key tile's queries in SPLIT parts (partials summed in order by a second kernel):
        # without it tile 0 carried all T queries alone (the longest program bounded the kernel). 16
        # where sm_90's 64-key tile halves the key tiles at head_dim 64: at 8 the M7C launch at 8k x 1
        # fills one wave with half the programs, each walking twice the query tiles, and
        # bench/flash_proxy.py prices it 1.10x the measured 32-key tile there (16: 0.56x; at 64k and
        # at B 8 within 2 % of 8). Past head_dim 64, 16 prices 1 % slower (more programs, same waves).
        "split_dkv": 16 if flash_hopper and not big else 8,
        "W": max(16, _pow2(n_sel)),  # running top-n width of the selection kernel: >= n
        # The selection's a - 1 keys a block shares with earlier blocks [Eq. 9], padded (gathered).
        "SP": _pow2(max(1, a - 1)),
        # The selection's top-n merged for the tile's tokens in two halves, one after the other: only
        # where merged at once it spilled or nearly (ptxas: 8 B at G 6 x D 96 on sm_90 with 4 tokens a
        # tile, 8-12 B at G 1 x D 64 on sm_80 with 8, triton 3.6), as halves cost 4x the barriers. On
        # sm_90 at M7C (2 tokens a tile, 2 warps) halves ran the selection at 64k in 7.00 ms instead
        # of 7.36 on an H200 (bench/kernel_probe.py, 2026-11-26b; ptxas: no spill, triton 3.6 and 3.9).
        "halves_sel": 1 if btf >= 8 or (head_dim > 64 and btf >= 4) or hopper_g8 or ampere_g8 else 0,
        # A register cap for the selection (ptxas .maxnreg; 0: none). Shipped on sm_80 at M7C (ampere_g8:
        # 4 tokens in halves at 2 warps, 12 warps an SM instead of 8 uncapped) and on sm_90 at M7C's
        # 1 warp a program (one_warp, `_one_warp_cap`: 168 on triton 3.6, 224 on 3.9), and at the paper's
        # shape on sm_90 with the insertion (paper_insert, `_paper_insert_cap`: 168 on 3.6, none on 3.9).
        # 4 tokens a tile in halves capped at 168 (210 registers uncapped) is a probe variant (5.27 ms at M7C 64k).
        "maxnreg_sel": sel_cap,
        # 1: launch `_cmp_select_v0` (compressed_select_v0.py, the kernel before 2026-11-26b) at its own
        # shipped settings instead, for the GPU probe's comparison (bench/kernel_probe.py).
        "select_v0": 0,
        # 1: `_cmp_select`'s loop with its integer work in 32 bits and hoisted (CUT; the same tables
        # bit for bit): 15-24 % fewer SASS a key tile, bench/select_proxy.py -11 to -13 % at M7C 8k-64k
        # on an H200 (paper shape -6 %), no spill and no point with fewer warps an SM over gpucheck's
        # grid on triton 3.6 and 3.9, sm_80 and sm_90 (bench/RESULTS.md "selcut"). The H100 of
        # 2026-11-26c: M7C 64k x 1 5.73 ms against 6.93 with it off (select_split off with it), the
        # paper's 32k x 1 4.82 against 4.92 (bench/gpu/2026-11-26c-h100-probe-queue.jsonl). Not at
        # 1-2 heads a token (gpf 2): there triton 3.9 spilled 12 B on sm_90 (D 64) and took 140
        # registers on sm_80 (D 96, 12 warps an SM instead of 16). 0: the loop the H200 measured
        # (2026-11-26b; the same SASS as before), a probe variant (bench/kernel_probe.py).
        "select_cut": 0 if gpf <= 2 else 1,
        # 1: `_cmp_select`'s CUT loop with Eq. 9's shared key (a = l/d = 2 only; the kernel asserts it)
        # taken without the two [BT, BJ * RP] gathers: each block's last key's group sum by a masked sum,
        # rotated one block on by one [BT, BJ] gather, the first block's carried (the same tables bit
        # for bit). M7C on sm_90 (triton 3.6): 39 -> 24 shared-memory accesses and 431 -> 426 SASS a
        # key tile; bench/select_proxy.py -7.5 / -9.4 % at M7C 8k / 64k, -16.7 % at the paper's shape
        # at 32k (bench/RESULTS.md "selshm"). Shipped on sm_90 at 5-8 heads a token at head_dim 33-64
        # (M7C's) with select_split beside it (`shm_split`, below), where the H100 of 2026-11-26c
        # measured the pair faster: 1.067 / 5.69 ms at M7C 8k x 8 / 64k x 1 against 1.196 / 6.80 without
        # either, 1.211 / 6.35 without select_shm (bench/gpu/2026-11-26c-h100-probe-since.jsonl); on
        # sm_80 at M7C's shape too, on bench/a100_proxy.py's word, unmeasured (`shm_split`; RESULTS
        # "a100shm"). At 16 heads a token past head_dim 64 (the paper's shape) on sm_90 (`paper_shm`,
        # the insertion's scope; the split stays off there): shipped on the proxy's word first, off
        # after the H100 of 2026-11-26c ran the selection at 32k x 1 in 4.71 ms with it and 4.58
        # without (before the insertion; "flips"), on again since the H100 of 2026-11-27 measured it
        # faster beside select_insert 2 under the 168 cap: 0.751 / 14.01 ms at 8k x 2 / 64k x 1
        # against 0.796 / 14.47 off (bench/gpu/2026-11-27-h100-probe-queue.jsonl, the same process;
        # bench/RESULTS.md "selshm2"). sm_80 at the paper's shape is unpriced. 0 at the paper's
        # shape (the build that run measured) is a probe variant (bench/kernel_probe.py).
        "select_shm": 1 if shm_split or paper_shm else 0,
        # 1: `_cmp_select`'s CUT loop split (select_cut 1 only; the kernel asserts it): the key tiles
        # where every key is visible to every token of the program, every block a candidate and none
        # forced run without the key-range load mask, the visibility compares and selects and the
        # candidate / forced keys (the same tables bit for bit); tile 0 and the causal edge keep them
        # (bench/RESULTS.md "selsplit"). Shipped with select_shm on sm_90 at 5-8 heads a token at
        # head_dim 33-64 (M7C's; `shm_split`, the lead's call, RESULTS "shmsplit"), on the proxy's
        # word and measured since (the H100 of 2026-11-26c: M7C 8k x 8 / 64k x 1 1.067 / 5.69 ms with
        # the pair, 1.104 / 5.90 without the split; select_shm's comment): bench/select_proxy.py prices the pair 0.869 / 0.788x the shipped loop
        # at M7C 8k / 64k on triton 3.6 (alone 0.937 / 0.864, select_shm alone 0.925 / 0.906); 96
        # registers and 20 warps an SM instead of 128 and 16 on 3.6, 162-164 and 12 warps as before on
        # 3.9; no spill at G 5-8 x head_dim 32 / 64 on either. Not at head_dim <= 32 (3.9: 14 -> 12
        # warps an SM), nor alone: 6.3 % at M7C 8k, short of the 8 % asked. The H100 measured the pair
        # 0.89 / 0.84x the CUT loop at M7C 8k x 8 / 64k (2026-11-26c, bench/gpu/2026-11-26c-h100-
        # probe-since.jsonl). ALSO ON sm_80 AT G 5-8 x head_dim 33-64 (ampere_g8: 4 tokens in halves,
        # 2 warps, 168-register cap) ON bench/a100_proxy.py's WORD, UNMEASURED (no A100 has run it):
        # its sm_80 SASS (triton 3.6) prices the pair 0.855 / 0.816 / 0.807x the CUT loop at M7C 8k /
        # 32k / 64k x 1 (0.165 / 2.106 / 7.509 ms against 0.193 / 2.580 / 9.305, the model's A100
        # rows; alone at 8k: select_split 0.94x, select_shm 0.93x); 168 registers under the cap, 12
        # warps an SM and no spill as the CUT loop, G 5-8 x head_dim 48 / 64, triton 3.6 and 3.9
        # (bench/RESULTS.md "a100shm").
        # At the paper's shape on sm_90 (`paper_shm`'s scope: 9-16 heads a token, head_dim 65-128, a = 2,
        # beside select_shm and select_insert 2): on since the H100 of 2026-11-27 (triton 3.6) ran the
        # paper's selection at 64k x 1 in 12.73 ms with it against 14.02 without (0.908x;
        # bench/gpu/2026-11-27b-h100-probe-select.jsonl, the same process; 8k unmeasured). ptxas sm_90
        # with it at G 16/12/9 x D 128 and G 16 x D 96: triton 3.6 128 registers under the 168 cap (129 at
        # G 16 x D 128 without it: 16 warps an SM instead of 12), triton 3.9 uncapped 139 / 147 / 144 / 138
        # (136-141 without: 12 warps an SM either way), no spill on either (bench/RESULTS.md "flips2";
        # "selshm2" had 168 / 189 with it). sm_80 at the paper's shape is unpriced.
        # 0: the CUT loop as it is (at the paper's shape the build that run measured, a probe variant).
        "select_split": 1 if shm_split or paper_shm else 0,
        # 1: `_cmp_select`'s CUT loop over two groups of bt_sel tokens a program (PAIR; the kernel
        # asserts CUT): one key tile load and one QK product over both groups' rows, each group's
        # merges on its own (the same tables bit for bit; tests/.../test_compressed_select_pair.py).
        # Half the programs' key tile loads (the model's 17.4 GB of L2 reads at M7C 64k to 8.7). At
        # M7C's 1 warp on sm_90 (triton 3.6, under the 168 cap): 168 registers, no spill at G 5/6/8 x
        # D 64 (20 B at D 48), 6850 SASS in the loops for 4 tokens against 3759 for 2 (0.911x a
        # token; 0.81-0.95x by path); on triton 3.9 (cap 224) it spills 3580 B (2708 uncapped, 255
        # registers): not shipped, a probe variant (bench/kernel_probe.py) and a what-if of the model
        # (`select_pair`; bench/RESULTS.md "selpair").
        "select_pair": 0,
        # 1 / 2: `_cmp_select`'s merges take the one-key insertion where no token of the group has two keys
        # entering, and (2) the two-key one where none has three (INSERT, `_merge_or_insert`; the CUT loop
        # only, the kernel asserts it; the same tables bit for bit, tests/.../test_compressed_select_insert.py):
        # 37 / 76 SASS for the 310-351 of a merge, for 2.5-6.5 more a token a key tile (sm_90, 1 warp,
        # triton 3.6). On the GPU runs' inputs (M7C, a token's tile: bench/RESULTS.md "selinsert") one key
        # enters 29 / 27 / 11 / 3 % of the token tiles at 64k / 32k / 16k / 8k, two 13 / 16 / 16 / 10 %,
        # more 22 / 40 / 65 / 86 %: the model prices the selection 0.79 / 0.81 / 0.89 / 0.96x with 2
        # (bench/attention_cost/counts.py `insert_factor`). Shipped at 2 at M7C's 1 warp on sm_90 (one_warp)
        # on that price, UNMEASURED: 168 registers under the cap and no spill at G 5/6/8 x D 48/64 on triton
        # 3.6; on 3.9 193-199 registers (221-224 without), no spill. sm_80 (ampere_g8: 4 tokens in halves,
        # 2 warps) unpriced: 1 compiles unspilled on 3.6, but to 8304 SASS for 4534; off there.
        # At the paper's shape on sm_90 (paper_insert: 4 tokens merged at once, 4 warps; the paths by the
        # most keys entering one of the 4 tokens) also 2, on the model's price, UNMEASURED: sm_90, triton 3.6
        # under the 168 cap, always-run 460 -> 534 SASS a tile a warp, merge 808 -> 897, insertion 37 / 76;
        # on the GPU runs' inputs (4-token groups, bench/RESULTS.md "paperins") one / two / more keys enter
        # 30 / 23 / 39 % of the tiles at 64k, 13 / 22 / 63 % at 32k, 0 / 4 / 96 % at 8k: 0.76 / 0.89 /
        # 1.05 / 1.10x the selection at 64k / 32k / 16k / 8k (`insert_factor`; the proxy's cycles
        # 0.78 / 0.91, 12 warps an SM either way).
        # Measured since by the H100 of 2026-11-27 (bench/gpu/2026-11-27-h100-probe-queue.jsonl, step
        # select_insert, the same process; ms, shipped vs 1 / 0): M7C 8k x 8 0.998 vs 0.966 / 0.980, 32k x 2
        # 2.725 vs 2.702 / 2.721, 64k x 1 4.074 vs 4.181 / 4.537 (within 1-3 % at 8k-32k, 0.90x at 64k:
        # kept); the paper's 8k x 2 0.799 vs 0.723 off and uncapped, 64k x 1 14.53 vs 17.28 (the model
        # priced 1.05 / 0.76x, measured 1.10 / 0.84x: kept, the 64k target's length).
        # 0: every entering tile merged (the path the H100 of 2026-11-26c measured), 1: a probe variant each.
        "select_insert": 2 if one_warp or paper_insert else 0,
        # 1: `_cmp_select`'s key tile as one bulk copy through a tensor descriptor (TMA, sm_90; `_tma_of`:
        # the CUT loop unpaired, 16-bit keys, head_dim a power of two, r = l'/d unpadded) instead of a
        # 64-bit pointer and a mask an element: at M7C's 1 warp on sm_90 (triton 3.6) `_load_k` is ~183-212
        # of the loop's SASS a key tile (the pointers' arithmetic 97, the masked load 68); the tables are
        # the same bit for bit (tests/.../test_compressed_select_tma.py). ptxas sm_90, G 6/5/8 x D 64: 126 /
        # 126 / 124 registers on triton 3.6 against 168 (the cap; 16 warps an SM instead of 12), 168 /
        # 168 / 167 on 3.9 against 193-199 (under its 224 cap), no spill (bench/RESULTS.md "selshm2").
        # Shipped at M7C's 1 warp on sm_90 (one_warp; `_tma_of` decides per launch) since the H100 of
        # 2026-11-27 (triton 3.6) ran M7C's selection at 64k x 1 in 3.852 ms with it against 4.146
        # without (0.929x; bench/gpu/2026-11-27b-h100-probe-select.jsonl, the same process). Unmeasured
        # at 8k x 8; off at the paper's shape (4 warps a program there: unmeasured, unpriced). 0: the
        # pointer loads that run measured, a probe variant (bench/kernel_probe.py).
        "select_tma": 1 if one_warp else 0,
        # The selection kernel: its top-n merge is latency-bound, so fewer warps a program (more
        # programs per SM) ran it faster on an H200 (bench/kernel_probe.py, 2026-11-26): M7C at 64k
        # 39.1 / 20.2 / 13.3 ms with 8 / 4 / 2 warps (and 11.9 with 2 warps and 2 tokens a tile), the
        # paper's shape at 32k 34.3 / 22.8 / 14.5. 2 warps only where ptxas keeps it unspilled
        # (gpucheck --grid, triton 3.6 and 3.9): head_dim 64 with 16 heads a token, or 8 on sm_90;
        # 2 spilled 4-200 B at G 1, 2, 6 on sm_80 and at head_dim > 64 (G 16 x D 128 too, 8 B), so 4 there,
        # but at G 5-8 x head_dim <= 64 on sm_80 merged in halves under a 168-register cap (ampere_g8),
        # and at M7C's shape on sm_90 1 warp under a cap (one_warp, above).
        "warps_sel": 1 if one_warp else warps_sel,
        # 4 tokens a tile at 16 heads a token past head_dim 64: the paper's shape at 32k x 2 took 9.28 ms
        # instead of 16.20 with 2 (8: 10.85) on an H200 (bench/kernel_probe.py, 2026-11-26b); measured
        # on sm_90 only, shipped on sm_80 too (the same K tile serves twice the tokens; ptxas: 164-168
        # registers, no spill at G 12/16 x D 96/128 on sm_80 and sm_90, triton 3.6 and 3.9).
        "bt_sel": 2 if hopper_g8 else (4 if gpf >= 16 and head_dim > 64 else btf),
        # `_cmp_select_v0`'s settings as shipped with it (the probe's comparison).
        "warps_sel_v0": 2 if head_dim <= 64 and (gpf >= 16 or (arch >= 90 and gpf == 8)) else 4,
        "bt_sel_v0": 2 if head_dim <= 64 and arch >= 90 and gpf == 8 else btf,
        # The attention forward: flash tiles of (token, head) rows as dQ's, BN keys a step. Past head_dim
        # 64, FlashAttention-2's 128 x 64 at 8 warps compiles without spills (28 % fewer SASS a FLOP on
        # sm_90, bench/tiles_d128.py): a probe variant; 64 x 32 at 4 warps is what the GPU measured.
        "bm_fwd": 128 if head_dim <= 64 else 64,
        "bn_fwd": 64 if head_dim <= 64 else 32,
        "warps_fwd": 4,
        # Software-pipelining stages of the attention, dQ and dK/dV key (query) loops: 2, as every GPU
        # run measured (dQ's 128-row tile on sm_90 too: above); keys for bench/tiles_d128.py and the
        # probe's candidates (bench/kernel_probe.py).
        "stages_fwd": 2,
        "stages_dq": 2,
        "stages_dkv": 1 if flash_hopper and not big else 2,
    }


def _prec(dtype: torch.dtype) -> str:
    return "tf32" if dtype == torch.float32 and not interpreting() else "ieee"


def _check_device(x: Tensor) -> None:
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"nsa.attention.triton.compressed: tensors on {x.device.type} need TRITON_INTERPRET=1 "
            "(the triton backend runs on CUDA; use backend='eager' on CPU)"
        )


def launch_select(
    c: dict,
    q: Tensor,
    kc: Tensor,
    lse: Tensor,
    idx: Tensor,
    valid: Tensor,
    block_len: int,
    block_stride: int,
    sel_block: int,
    qk_scale: float,
    prec: str,
) -> None:
    """The selection kernel of config `c` (`_cmp_select`, or `_cmp_select_v0` where c["select_v0"])
    writing the table idx/valid [B, Hkv, T, k] from q, the compressed keys and the row log-sum-exp."""
    B, Hkv, T, G, D = q.shape
    args = (q, kc, lse, idx, valid, T, kc.shape[2], -(-T // sel_block), idx.shape[-1], qk_scale)
    geo = {"G": G, "GP": c["GPF"], "D": D, "DP": c["DP"], "BJ": c["BJ"], "RP": c["RP"], "W": c["W"],
           "L": block_len, "S": block_stride, "LS": sel_block, "PREC": prec}  # fmt: skip
    if c["select_v0"]:
        _cmp_select_v0[(cdiv(T, c["bt_sel_v0"]), B * Hkv)](
            *args, BT=c["bt_sel_v0"], **geo, num_warps=c["warps_sel_v0"], num_stages=2
        )
        return
    pair = _pair_of(c)
    tma = _tma_of(c, q.dtype, D, block_stride, sel_block)
    if tma:  # the keys as a [B * Hkv * Nc, D] tensor descriptor, a key tile a block (`_load_k`)
        from triton.tools.tensor_descriptor import TensorDescriptor

        keys = TensorDescriptor.from_tensor(kc.reshape(-1, D), [c["BJ"] * c["RP"], c["DP"]])
        args = (q, keys, *args[2:])
    _cmp_select[(cdiv(T, c["bt_sel"] * (1 + pair)), B * Hkv)](
        *args, BT=c["bt_sel"], SP=c["SP"], HALVES=c["halves_sel"], CUT=c["select_cut"], SHM=c["select_shm"], SPLIT=_split_of(c), PAIR=pair, INSERT=_insert_of(c), TMA=tma, **geo, num_warps=c["warps_sel"],
        num_stages=2, **({"maxnreg": c["maxnreg_sel"]} if c["maxnreg_sel"] else {}),
    )  # fmt: skip


@torch.library.custom_op("nsa_triton::compressed_fwd", mutates_args=())
def _fwd(
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Output, selection table and the row log-sum-exp (log2 domain) saved for the backward."""
    _check_device(q)
    B, Hkv, T, G, D = q.shape
    nc = kc.shape[2]
    k = min(n_sel, -(-T // sel_block))
    c = _config(G, D, n_sel, block_len, block_stride, sel_block, device_arch(q.device))
    out = torch.empty_like(q)
    lse = torch.empty(B, Hkv, T, G, dtype=torch.float32, device=q.device)
    idx = torch.empty(B, Hkv, T, k, dtype=torch.int64, device=q.device)
    valid = torch.empty(B, Hkv, T, k, dtype=torch.bool, device=q.device)
    prec = _prec(q.dtype)
    _cmp_fwd[(cdiv(T * G, c["bm_fwd"]), B * Hkv)](
        q, kc, vc, out, lse, T, nc, scale * _LOG2E,
        G=G, D=D, DP=c["DP"], BM=c["bm_fwd"], BN=c["bn_fwd"], L=block_len, S=block_stride, PREC=prec,
        num_warps=c["warps_fwd"], num_stages=c["stages_fwd"],
    )  # fmt: skip
    launch_select(c, q, kc, lse, idx, valid, block_len, block_stride, sel_block, scale * _LOG2E, prec)
    return out, idx, valid, lse


@_fwd.register_fake
def _(q, kc, vc, block_len, block_stride, sel_block, n_sel, scale):
    B, Hkv, T, G, _ = q.shape
    k = min(n_sel, -(-T // sel_block))
    return (
        torch.empty_like(q),
        q.new_empty(B, Hkv, T, k, dtype=torch.int64),
        q.new_empty(B, Hkv, T, k, dtype=torch.bool),
        q.new_empty(B, Hkv, T, G, dtype=torch.float32),
    )


@torch.library.custom_op("nsa_triton::compressed_bwd", mutates_args=())
def _bwd(
    dout: Tensor,
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
    out: Tensor,
    lse: Tensor,
    block_len: int,
    block_stride: int,
    n_sel: int,
    sel_block: int,
    scale: float,
    delta: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """dQ (and delta) per query tile, then dK/dV per compressed-key tile: two launches. `delta`:
    rowsum(dout * out) in float32 [B, Hkv, T, G], already formed (the gate fold's kernel): the dQ
    kernel then reads it instead of out."""
    B, Hkv, T, G, D = q.shape
    nc = kc.shape[2]
    # the arch's tiles (the forward's rule): sm_90 runs other dQ / dK/dV tiles than sm_80 (_config)
    c = _config(G, D, n_sel, block_len, block_stride, sel_block, device_arch(q.device))
    dq = torch.empty_like(q)
    dk = torch.empty_like(kc)
    dv = torch.empty_like(vc)
    have_delta = check_delta("nsa_triton::compressed_bwd", delta, B * Hkv * T * G, "[B, Hkv, T, G]")
    if delta is None:
        delta = torch.empty(B, Hkv, T, G, dtype=torch.float32, device=q.device)
    prec = _prec(q.dtype)
    geo = {"G": G, "GP": c["GP"], "D": D, "DP": c["DP"], "L": block_len, "S": block_stride, "PREC": prec}
    _cmp_bwd_dq[(cdiv(T * G, c["BT"] * c["GP"]), B * Hkv)](
        q, kc, vc, out, dout, lse, delta, dq, T, nc, scale * _LOG2E, scale,
        BT=c["BT"], BN=c["bn_bwd"], **geo, HAVE_DELTA=have_delta, num_warps=c["warps"], num_stages=c["stages_dq"],
    )  # fmt: skip
    # One program even when there is no compressed key (T < l): the launch count never depends on T.
    ntile, split, bn = cdiv(max(nc, 1), c["bn_dkv"]), c["split_dkv"], c["bn_dkv"]
    pdk = torch.empty(B * Hkv, ntile, split, bn, c["DP"], dtype=torch.float32, device=q.device)
    pdv = torch.empty_like(pdk)
    _cmp_bwd_dkv[(ntile * split, B * Hkv)](
        q, kc, vc, dout, lse, delta, pdk, pdv, T, nc, scale * _LOG2E, scale,
        BT=c["bt_dkv"], BN=bn, SPLIT=split, **geo, num_warps=c["warps_dkv"], num_stages=c["stages_dkv"],
    )  # fmt: skip
    _cmp_bwd_dkv_sum[(ntile, B * Hkv)](
        pdk, pdv, dk, dv, nc, D=D, DP=c["DP"], BN=bn, SPLIT=split, num_warps=4, num_stages=1
    )  # fmt: skip
    return dq, dk, dv


@_bwd.register_fake
def _(dout, q, kc, vc, out, lse, block_len, block_stride, n_sel, sel_block, scale, delta=None):
    return torch.empty_like(q), torch.empty_like(kc), torch.empty_like(vc)


def _setup(ctx, inputs, output) -> None:
    q, kc, vc, block_len, block_stride, sel_block, n_sel, scale = inputs
    out, _, _, lse = output
    ctx.save_for_backward(q, kc, vc, out, lse)
    ctx.args = (block_len, block_stride, n_sel, sel_block, scale)


def _backward(ctx, dout, _didx, _dvalid, _dlse):
    q, kc, vc, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.nsa_triton.compressed_bwd(dout.contiguous(), q, kc, vc, out, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None


torch.library.register_autograd("nsa_triton::compressed_fwd", _backward, setup_context=_setup)


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

    Same contract as `nsa.attention.compressed.compressed_attention_and_selection`; `chunk` (the
    eager CPU knob) is accepted and ignored.
    """
    del chunk
    out, idx, valid, _ = torch.ops.nsa_triton.compressed_fwd(
        q.contiguous(), kc.contiguous(), vc.contiguous(), block_len, block_stride, sel_block, n_sel, scale
    )
    return out, idx, valid


def gpucheck_specs(shape: GpuShape, arch: int) -> list[KernelSpec]:
    """The five kernels as launched for `shape` on sm_`arch` (the dQ kernel with and without a
    precomputed delta: six specs)."""
    dt = shape.dtype
    c = _config(
        shape.group, shape.head_dim, shape.n_sel, shape.block_len, shape.block_stride, shape.sel_block, arch
    )
    prec = "tf32" if dt == "fp32" else "ieee"
    geo = {
        "G": shape.group,
        "GP": c["GP"],
        "D": shape.head_dim,
        "DP": c["DP"],
        "L": shape.block_len,
        "S": shape.block_stride,
        "PREC": prec,
    }
    fwd_sig = {
        "Q": f"*{dt}", "K": f"*{dt}", "V": f"*{dt}", "Out": f"*{dt}", "LSE": "*fp32", "T": "i32", "NC": "i32",
        "qk_scale": "fp32",
    }  # fmt: skip
    fwd_const = {k: geo[k] for k in ("G", "D", "DP", "L", "S", "PREC")}
    fwd_const.update(BM=c["bm_fwd"], BN=c["bn_fwd"])
    sel_sig = {
        "Q": f"*{dt}", "K": f"*{dt}", "LSE": "*fp32", "IDX": "*i64", "VALID": "*i1", "T": "i32", "NC": "i32",
        "NS": "i32", "K_SEL": "i32", "qk_scale": "fp32",
    }  # fmt: skip
    sel_const = {
        **geo,
        "GP": c["GPF"],
        "BT": c["bt_sel"],
        "BJ": c["BJ"],
        "RP": c["RP"],
        "SP": c["SP"],
        "W": c["W"],
        "HALVES": c["halves_sel"],
        "CUT": c["select_cut"],
        "SHM": c["select_shm"],
        "SPLIT": _split_of(c),
        "PAIR": _pair_of(c),
        "INSERT": _insert_of(c),
        "LS": shape.sel_block,
    }
    # select_tma: K a tensor descriptor of key-tile blocks (launch_select's, at 16-bit keys)
    kdt = torch.float32 if dt == "fp32" else torch.bfloat16
    sel_tma = _tma_of(c, kdt, shape.head_dim, shape.block_stride, shape.sel_block)
    sel_const["TMA"] = sel_tma
    if sel_tma:
        sel_sig["K"] = f"tensordesc<{dt}[{c['BJ'] * c['RP']}, {c['DP']}]>"
    dq_sig = {
        "Q": f"*{dt}", "K": f"*{dt}", "V": f"*{dt}", "Out": f"*{dt}", "DO": f"*{dt}", "LSE": "*fp32",
        "DELTA": "*fp32", "DQ": f"*{dt}", "T": "i32", "NC": "i32", "qk_scale": "fp32", "scale": "fp32",
    }  # fmt: skip
    dkv_sig = {
        "Q": f"*{dt}", "K": f"*{dt}", "V": f"*{dt}", "DO": f"*{dt}", "LSE": "*fp32", "DELTA": "*fp32",
        "PDK": "*fp32", "PDV": "*fp32", "T": "i32", "NC": "i32", "qk_scale": "fp32", "scale": "fp32",
    }  # fmt: skip
    sum_sig = {"PDK": "*fp32", "PDV": "*fp32", "DK": f"*{dt}", "DV": f"*{dt}", "NC": "i32"}
    split = {"SPLIT": c["split_dkv"]}
    sum_const = {"D": shape.head_dim, "DP": c["DP"], "BN": c["bn_dkv"], **split}
    specs = [
        ("compressed_fwd", _cmp_fwd, fwd_sig, fwd_const, c["warps_fwd"], c["stages_fwd"]),
        ("compressed_select", _cmp_select, sel_sig, sel_const, c["warps_sel"], 2),
        (
            "compressed_bwd_dq", _cmp_bwd_dq, dq_sig, {**geo, "BT": c["BT"], "BN": c["bn_bwd"], "HAVE_DELTA": False},
            c["warps"], c["stages_dq"],
        ),
        # handed the gate fold's delta (gated.FOLD_DELTA, shipped): no O tile, no delta store
        (
            "compressed_bwd_dq_delta", _cmp_bwd_dq, dq_sig,
            {**geo, "BT": c["BT"], "BN": c["bn_bwd"], "HAVE_DELTA": True}, c["warps"], c["stages_dq"],
        ),
        (
            "compressed_bwd_dkv", _cmp_bwd_dkv, dkv_sig, {**geo, "BT": c["bt_dkv"], "BN": c["bn_dkv"], **split},
            c["warps_dkv"], c["stages_dkv"],
        ),
        ("compressed_bwd_dkv_sum", _cmp_bwd_dkv_sum, sum_sig, sum_const, 4, 1),
    ]  # fmt: skip
    out = []
    for name, fn, sig, const, warps, stages in specs:
        full = {**sig, **{k: "constexpr" for k in const}}
        cap = c["maxnreg_sel"] if fn is _cmp_select else 0  # the launcher's (`_cmp_select` launch above)
        out.append(KernelSpec(name, fn, full, const, num_warps=warps, num_stages=stages, maxnreg=cap))
    return out
