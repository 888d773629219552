"""Triton kernels of NSA's selected branch: `selected_attention`, a drop-in for the eager one.

Owns the backward's dK/dV kernel (key-major: one program per segment of the queries that chose one
selection block, found through the reverse index of selected_keys.py's `reverse_index`, no atomics),
the reduction of the segments' partial dK/dV, the launch configuration (`_config`, per arch) and the
launchers. With `forced_blocks=True` at G <= 8 (FSA's range) both directions run key-major:
selected_keys.py (`fwd_keys`: partials per (pair, key chunk) over the reverse index, then a
query-major merge; 4 kernels + 3 aten ops) and selected_keys_bwd.py (`bwd_keys`: delta, one kernel
writing dK/dV and per-pair dQ partials, a dQ merge, the dK/dV reduce). Otherwise the query-major
forward and dQ kernels of selected_query.py run: without `forced_blocks` one program per query token
over its whole table; with it the forced entries (block 0, the query's own block and the one before)
run first as dense row tiles (selected_forced.py) and the token tiles (TP tokens a program) add the
union of the other entries, then the key-major dK/dV kernel here. Nothing syncs with the device,
loops in Python over anything that grows with T, or builds a [T, T] tensor; the number of launches is
the same at every T (forward: 1 kernel, 2 with forced blocks, 4 + 3 aten ops key-major; backward: 3
kernels, 4 with forced blocks either way, 3 key-major when handed delta (gated.py's delta fold),
plus the index, 2 kernels + 3 aten ops, unless the key-major forward built it: its op returns the
index and autograd saves it for the backward op, which sorts only when handed none).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from nsa.attention.triton import cdiv, check_delta, device_arch, frozen_config, interpreting, next_pow2
from nsa.attention.triton.selected_forced import (
    _sel_forced_dq_kernel,
    _sel_forced_fwd_kernel,
    forced_rows_per_tile,
)
from nsa.attention.triton.selected_keys import (
    index_bounds,
    keys_forward,
    keys_fwd_gpucheck_rows,
    merge_tokens,
    reverse_index,
)
from nsa.attention.triton.selected_keys_bwd import (
    _dkdv_walk,
    keys_backward,
    keys_bwd_gpucheck_rows,
    keys_rows,
    pdq_dtype,
)
from nsa.attention.triton.selected_query import (
    TILE_ROWS,
    _sel_bwd_dq_kernel,
    _sel_bwd_dq_tok_kernel,
    _sel_fwd_kernel,
    _sel_fwd_tok_kernel,
    tokens_per_program,
)
from nsa.attention.triton.spec import GpuShape, KernelSpec

# Row reductions spelled as tl.reduce with triton's own combine functions: the same code as tl.max /
# tl.sum on the GPU, but the interpreter maps them straight to numpy instead of re-patching the
# language for a nested jit call (measured: about a third of the interpreted forward's time).
_max_combine = tl.standard._elementwise_max
_sum_combine = tl.standard._sum_combine


@triton.jit
def _sel_bwd_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, ORDER, START, SEG_END, PDK, PDV,
    T, NS, NK, NBLK, NSEARCH, S, sm_scale,
    G: tl.constexpr, D: tl.constexpr, LP: tl.constexpr,
    DP: tl.constexpr, BN: tl.constexpr, BR: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    # The key-major dK/dV of the query-major paths: selected_keys_bwd.py's `_dkdv_walk` (one program:
    # BN keys of one selection block against one segment of the pairs that listed it, partial dK/dV
    # per segment) without the dQ partials (WRITE_DQ off: PDQ and NP unused). A kernel of its own name
    # only so that profiles tell it from the key-major backward's `_sel_bwd_keys_kernel`.
    _dkdv_walk(
        Q, K, V, DO, LSE, DELTA, ORDER, START, SEG_END, PDK, PDV, PDK, T, NS, NK, 0, NBLK, NSEARCH, S,
        sm_scale, G, D, LP, DP, BN, BR, PREC, False, False,
    )  # fmt: skip


@triton.jit
def _sel_bwd_reduce_kernel(
    PDK, PDV, START, SEG_END, DK, DV,
    T, NS, S,
    D: tl.constexpr, LP: tl.constexpr, DP: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    # One program: BN keys of one block; sums the partials of the block's segments (contiguous, in
    # segment order, so the sum is deterministic) and writes dK/dV in the keys' dtype.
    blk = tl.program_id(0)
    nb = tl.program_id(1)
    bh = (blk // NS).to(tl.int64)
    j = blk % NS
    ns = (tl.load(START + blk + 1) - tl.load(START + blk) + S - 1) // S
    s0 = tl.load(SEG_END + blk) - ns
    n = tl.arange(0, BN)
    d = tl.arange(0, DP)
    dk = tl.zeros([BN, DP], tl.float32)
    dv = tl.zeros([BN, DP], tl.float32)
    for s in range(0, ns):
        poff = ((s0 + s).to(tl.int64) * LP + nb * BN + n)[:, None] * DP + d[None, :]
        pm = ((nb * BN + n) < LP)[:, None]
        dk += tl.load(PDK + poff, mask=pm, other=0.0)
        dv += tl.load(PDV + poff, mask=pm, other=0.0)
    kpos = j * LP + nb * BN + n
    km = (((nb * BN + n) < LP) & (kpos < T))[:, None] & (d < D)[None, :]
    off = (bh * T + kpos)[:, None] * D + d[None, :]
    tl.store(DK + off, dk.to(DK.dtype.element_ty), mask=km)
    tl.store(DV + off, dv.to(DV.dtype.element_ty), mask=km)


# ---------------------------------------------------------------------------------------------------
# Launch configuration: a pure function of the static shape (no autotune), shared by the launchers and
# gpucheck_specs so gpucheck compiles exactly what runs.


def _p2(x: int, lo: int = 16) -> int:
    return max(lo, next_pow2(x))


@frozen_config
def _config(G: int, D: int, LP: int, key_tile: int = 64, arch: int = 80) -> dict[str, int | bool]:
    """Tiles and warps (checked with ptxas for sm_80/sm_90 at head_dim 64 and 128: no spills).

    fwd_keys (G <= 8): the forced path's forward runs key-major (selected_keys.py). Its partials are
    transient but large: PO = nb*B*Hkv*T*n*G*D elements in q's dtype + PL in fp32 (nb = ceil(l'/BN)),
    1.66 GB at M7C 64k x 1 in bf16, freed when the forward returns. BR_f/warps_fk: the partials
    kernel's rows per step and warps; TM/RM/warps_m: the merge's tokens and rows (merge_tokens).

    GP: head rows padded to a tile (tl.dot needs >= 16); TP/RP: tokens and rows of a token tile
    (selected_query.py); BK/BN: keys per step (a selection block in
    steps of <= 64); BR: (pair, head) rows per step of the dK/dV kernel. The dK/dV kernel holds two
    fp32 [BN, D] accumulators: 4 warps (on an H200 its forward+backward took 15.2 ms instead of
    17.6 with 8 at M7C, 85 instead of 103 at G 16 x D 128: bench/kernel_probe.py; ptxas: 214-255
    registers, no spill), no software pipelining, and past head_dim 64 half the rows on sm_80 (with 2
    stages, or 64 rows at head_dim 128, ptxas spilled on sm_90), 128 rows at 8 warps on sm_90 (BR,
    below). dQ runs unpipelined too.

    bwd_keys (G <= 8, with forced blocks): the key-major backward of selected_keys_bwd.py instead of
    the forced dQ + token-tile dQ + dK/dV kernels. Memory: its dQ partials PDQ are
    nb*B*Hkv*T*n*G*D*2 bytes in 16-bit training (pdq_bits 16, the partials in q's dtype; x 4 in fp32
    or at pdq_bits 32; nb = ceil(l'/BN) = 1 on the GPU), allocated and freed inside the backward:
    1.6 GB per layer backward at M7C 64k x 1 (and at 8k x 8), against ~0.2 GB of scratch for the
    query-major dQ. Its keys kernel holds the dK/dV kernel's state plus a [BR, D] fp32 dQ
    product: BR = 64 at head_dim 64 (on sm_80 with keys_rowlim: without it 88-96 bytes spilled), 32 at 8
    warps past head_dim 64
    (with 4 warps it spilled on sm_80 even at BR = 16).
    """
    DP = _p2(D)
    TP = tokens_per_program(G)
    # The token tiles' branch-free loop (tok_pipe, below) ships where they run (G > 8: fwd_keys /
    # bwd_keys take G <= 8 key-major) on sm_90, on bench/gather_proxy.py's word (measured since: the H100
    # of 2026-11-26c ran the selected forward+backward at the paper's shape 8k x 2 in 16.61 ms with it,
    # 20.31 with the loop the GPUs measured before, 17.06 the best other build;
    # bench/gpu/2026-11-26c-h100-probe-queue.jsonl): its
    # SASS proxy (fitted on every measured token- and forced-tile build, all 217 points within 18 %,
    # each build held out within 20 %) prices tok_pipe 2 at 2 stages with the dQ at 2 warps at 0.862x
    # the token tiles' time at the paper shape, 8k and 64k on an H100 (forward 0.958, dQ 0.795;
    # 0.85 / 0.78 at G 16 x D 96 / 64); 3 stages no faster (1.01x: 3 programs an SM), tok_pipe 1
    # slower (1.15-1.22x). The loops are bound by shared-memory traffic and their own instruction
    # stream, not the gathers' latency (bench/RESULTS.md "tokgather"). sm_80 keeps the measured loop:
    # the proxy is not calibrated there. The measured loop is a bench/kernel_probe.py variant.
    pipe = 2 if arch >= 90 and G > 8 else 0
    # 4x the tokens at G = 6 (8 tokens, 48 of 64 rows) ran the selected forward+backward in 12.9 ms
    # instead of 15.2 at M7C 8k x 8 on an H200 (bench/kernel_probe.py), but the cost model, fitted on
    # that probe, prices it slower at B = 1 from 32k, where 8 tokens' random tables share fewer blocks
    # (0.83 vs 0.78 NSA/FA2 at 32k): not shipped until a long-T probe settles it. At G 16 x D 128 4x
    # was slower (90 vs 85 ms).
    cfg = {
        "GP": _p2(G),
        "DP": DP,
        # The forced split's query-major token tiles: TP tokens, RP = TP*G rows padded to 16.
        "TP": TP,
        "RP": _p2(TP * G, TILE_ROWS),
        "BK": min(key_tile, _p2(LP)),
        "BN": min(key_tile, _p2(LP)),
        # Past head_dim 64 on sm_90, 128 rows at 8 warps (warps_kv): the H100 of 2026-11-26c ran the
        # selected forward+backward at the paper's shape in 15.09 / 62.30 ms at 8k x 2 / 64k x 1 against
        # 16.66 / 64.26 with the 32 rows at 4 warps shipped before (bench/gpu/2026-11-26c-h100-probe-queue.jsonl,
        # the same process); the same 8 resident warps an SM and 16-21 % fewer SASS a FLOP
        # (bench/tiles_d128.py). ptxas: no spill on sm_90 at G 1/2/5/6/8/16 x D 96/128, triton 3.6 and
        # 3.9 (bench/RESULTS.md "flips"). Not on sm_80 (no A100 data; 48-80 B spilled at G 6 x D 96
        # there). The 32 rows at 4 warps are a probe variant (bench/kernel_probe.py). Confirmed at the
        # length between by the H100 of 2026-11-27: paper 32k x 1 forward+backward 30.99 ms against
        # 32.44 (bench/gpu/2026-11-27-h100-probe-queue.jsonl, step d128_sel, the same process).
        "BR": 128 if DP > 64 and arch >= 90 else 32 if DP > 64 else 64,
        # The query-major dQ kernels (the token tiles' and the any-table one): 2 warps where tok_pipe ships.
        # At 1 warp (token tiles: no dS / P conversion through shared memory, no cross-warp row
        # statistics) ptxas spills at D 128 and the proxy prices both kernels no faster ("tokshm").
        "warps_q": 2 if pipe else 4,
        "warps_kv": 8 if DP > 64 and arch >= 90 else 4,
        "stages_kv": 1,
        "warps_red": 8,
        "stages": 2,
        # The token-tile forward at head_dim > 64: with 2 stages ptxas spilled 4 bytes (G 1 x D 96 / 128,
        # G 6 x D 96; gpucheck --grid, triton 3.9); its K/V loads sit behind a branch per entry and are
        # not pipelined anyway.
        "stages_tok": 2 if DP <= 64 or pipe else 1,
        "warps_tok": 2 if DP > 64 or pipe else 4,
        # The token tiles' loop without a data-dependent branch (selected_query.py PIPE), so triton
        # pipelines the gathered K/V loads under stages_tok / stages_dq >= 2: 0 the branchy loop; 1
        # every (entry, key chunk) a step, the entries not taken masked (no loads, -inf logits / zero
        # dS); 2 a step per block of the tile's union (`_pipe_mode`: 1 where the tile has more than
        # 64 entries: n > 64 at G > 8, which no config uses; the proxy prices 1 slower than 0). 2 at
        # G > 8 on sm_90 (`pipe` above, with stages_tok / stages_dq 2 and warps_q 2); 0, the branchy
        # loop every GPU run measured, elsewhere (SASS: bench/tok_pipe_sass.py, bench/RESULTS.md).
        "tok_pipe": pipe,
        # The key-major forward (selected_keys.py) for the forced path at G <= 8 (FSA's range): the
        # query-major tiles pad G rows to 16 and re-read every block per token; at G >= 16 they are
        # full already and the partials would cost 16 x |q| (34 GB at the paper shape, 64k).
        # Partials: PO nb*B*Hkv*T*n*G*D elements in q's dtype + PL in fp32 (1/D of it), transient.
        "fwd_keys": G <= 8,
        # (pair, head) rows per step of _sel_fwd_keys_kernel: at M7C 8k x 8 on an H200 128 rows took the
        # selected forward to 3.20 ms from 4.05 with 64 (32: 6.64; bench/kernel_probe.py, bench/RESULTS.md);
        # ptxas: no spill at head_dim 64 on sm_80/sm_90, triton 3.6 and 3.9.
        "BR_f": 128 if DP <= 64 else 32,
        # The key-major forward's partial output stored in its product's own layout (selected_keys.py
        # `fwd_store_consts`, the keys backward's `keys_dq_mma` cut): bitwise the same PO; triton 3.6,
        # M7C, 40 -> 22 shared-memory accesses a 128-row step on sm_90 (80 -> 62 on sm_80) but SASS
        # 1386 -> 1374 (1448 -> 1474): short of the >= 15 % fewer instructions its uncalibrated
        # proxy asks for (bench/RESULTS.md "keysmem"). A probe switch, off.
        "keys_fwd_mma": False,
        "warps_fk": 4,
        "stages_fk": 1,
        "TM": merge_tokens(G, DP),  # tokens per merge program; RM = TM*G rows padded to a power of two
        "RM": next_pow2(merge_tokens(G, DP) * G),
        "warps_m": 8,
        # dQ holds the fp32 dq accumulator beside the forward's state: with 2 stages ptxas spilled
        # 4 bytes on sm_90 (gpucheck, --regAllocOptLevel=2); 2 where tok_pipe ships (no spill at 2
        # warps on triton 3.6 / 3.9: bench/RESULTS.md "tokgather").
        "stages_dq": 2 if pipe else 1,
        # The forced-block kernels (selected_forced.py): BM query rows per program, keys BK at a time.
        # 128 rows write the K/V stage once for twice the rows (0.79-0.86x the shared bytes a row) but
        # spill at 4 warps and hold 1 program an SM at 8; 2 / 8 warps at 64 rows price slower
        # (bench/gather_smem.py, bench/RESULTS.md "tokshm").
        "BM": forced_rows_per_tile(key_tile < 64),
        "warps_f": 4,
        "stages_f": 2,
        "stages_fdq": 1,
        # The key-major backward (selected_keys_bwd.py) with forced_blocks=True: FSA's range of groups.
        # Its dQ partials are nb*B*Hkv*T*n*G*D fp32 (nb = ceil(l'/BN), 1 on the GPU), transient: 3.2 GB
        # at M7C 64k x 1; at G 16 they would be 16 x |q| x 2, hence the old query-major dQ there.
        "bwd_keys": G <= 8,
        # The keys kernel holds the dK/dV kernel's two fp32 [BN, D] accumulators and a [BR, D] fp32 dQ
        # product per step: BR rows per step (checked with ptxas: no spills).
        # On sm_90 at head_dim 64, 64 rows: the selected forward+backward at M7C 8k x 8 on an H200 took
        # 10.20 ms instead of 13.69 with 32 (16: 13.23; 8 warps: 19.03; bench/kernel_probe.py). ptxas:
        # 244-252 registers at G 2-8 on sm_90; it spilled at G 1 on triton 3.6.
        # On sm_80 at head_dim <= 64, 64 rows too, with keys_rowlim (below; without it 88-96 B spilled):
        # the lead's call between two unmeasured settings (no A100 has run either; the 32 rows before
        # are priced by the same extrapolation) for the better-evidenced one. The H200 measured this
        # kernel at 64 over 32 rows 0.560 (8k) / 0.545 (64k) where the keys proxy priced 0.574;
        # bench/a100_proxy.py prices sm_80's 0.87x, 13-18 % below its calibrated instructions, where
        # a held-out check erred +8-9 % (slow: the safe side). Bitwise the same gradients; no spill at
        # G 1/2/5/6/8 x D 64, triton 3.6 / 3.9 (bench/RESULTS.md "a100keys", "a100ship").
        # selected_keys_bwd.keys_rows: 64 rows on sm_80 only with keys_rowlim, keys_div32 and
        # keys_dq_mma, else 32 without the limit (what the launcher, gpucheck and the model take).
        "BR_keys": 64 if DP <= 64 and (arch < 90 or G >= 2) else 32,
        # PDQ's bits (selected_keys_bwd.py `pdq_dtype`): 16, the partials in q's dtype when it is
        # bf16/fp16 (fp32 q keeps fp32); 32, fp32 partials (what every GPU run measured: the what-if
        # "pdq_fp32" and a bench/kernel_probe.py variant). 16 halves PDQ's bytes, written by the keys
        # kernel and read by the merge, which sums in fp32 either way: memory traffic, priced by the
        # model's fitted DRAM terms (NSA/FA2 at M7C 8k on an H100 1.23 -> 1.14). The cost: one more
        # rounding per partial; the H100 of 2026-11-26c ran the selected forward+backward at M7C 8k x 8 /
        # 64k x 1 in 6.40 / 6.60 ms at 16, 7.29 / 7.70 at 32 (bench/gpu/2026-11-26c-h100-probe-queue.jsonl);
        # bench/pdq_numerics.py measures dq's rms error vs float64 up 11-19 %
        # (bf16 0.27 -> 0.30 %), and the GPU suite's bound takes that term (gpusuite/bounds.py
        # `dq_parts_rounded`). ptxas: no spills, 6-78 registers fewer (bench/RESULTS.md "pdq16").
        "pdq_bits": 16,
        "warps_keys": 4 if DP <= 64 else 8,
        # The key-major kernels' rows in 32 bits (selected_keys_bwd.py `_pair_rows32`: the step index,
        # the token by a 32-bit multiply-high within the (batch, KV head), the partial row) and
        # the key mask folded into the causal test, instead of the int64 step index and
        # (pos // NK) % T the GPU runs measured: bitwise the same outputs and gradients (interpreter
        # test); ptxas: no spill. On by bench/keys_proxy.py's word, measured since (the H100 of
        # 2026-11-26c: the selected forward+backward at M7C 8k x 8 / 64k x 1 6.40 / 6.60 ms, off 8.18 /
        # 8.25; bench/gpu/2026-11-26c-h100-probe-queue.jsonl). The proxy: the keys backward at
        # M7C 8k x 8 on an H200 (triton 3.6 sm_90) 1406 -> 654 SASS a step, 4.29 -> 2.68 ms (4.53
        # measured at False); the forward 1682 -> 1386 SASS a step (bench/RESULTS.md "keysdiv").
        # False is a bench/kernel_probe.py variant.
        "keys_div32": True,
        # The keys backward's dQ partial stored in its product's own layout (selected_keys_bwd.py
        # `_store_rows_mma`: 8-byte stores, no round trip through shared memory) instead of converted
        # to a 16-byte-store layout first: the same values to the same addresses (interpreter test:
        # bitwise). bench/keys_proxy.py, M7C, triton 3.6 (bench/RESULTS.md "keysmem"): sm_80 511 -> 474
        # SASS and 84 -> 76 shared-memory accesses a step, A100 12.66 -> 11.55 ms at 8k x 8 (-8.8 %),
        # inside the proxy's calibrated range where the converted store was outside it; on by that
        # word, unmeasured. sm_90 654 -> 527 SASS and 40 -> 24 accesses (-28.5 % priced) but further
        # below the calibrated range than the shipped point: off there until a GPU measures it. The
        # other value is a bench/kernel_probe.py variant on either arch (gpucheck compiles both).
        "keys_dq_mma": arch < 90,
        # The keys kernel's key mask as one compare of a column against a per-row limit (selected_keys_bwd.py
        # ROWLIM, with keys_div32) instead of a per-column key position held across the loop: bitwise
        # the same gradients (interpreter test). What lets 64 rows a step fit sm_80's 255 registers
        # (with keys_dq_mma; the converted store still spills 48 B): on with them there at head_dim
        # <= 64 (BR_keys above). sm_90 keeps the mask every run measured (64 rows fit without it; +0-4
        # SASS a step with it). sm_80's 32 rows without it, shipped before, are the bench/kernel_probe.py
        # variant selected_keys_bwd.KEYS_BR32_SM80 (gpucheck: `_br32`; the model: `keys_rowlim_off`).
        "keys_rowlim": arch < 90 and DP <= 64,
        "BM_merge": 64 if DP <= 64 else 32,
        "warps_merge": 4,
        # The two merges (selected_keys.py `_fwd_merge_tiles`, selected_keys_bwd.py `_dq_merge_tiles`) with
        # the rows' table metadata loaded once as a [rows, NEP] tile and the partials' loads unrolled
        # (every address known up front) instead of the loops, which load IDX and VALID an entry and then
        # the partials they mask (the forward twice: a pass for the max lse, one for the sum): bitwise
        # the same out, lse and dQ (interpreter test). Off (the loops) on every arch: the H100 of
        # 2026-11-26c ran the selected forward at M7C 8k x 8 in 2.93-3.17 ms with the loops against
        # 3.11-3.34 with the tiles, at 64k x 1 3.17-3.59 against 3.41-3.52 (forward+backward 6.39 /
        # 6.49 against 6.93 / 6.59 in the same processes; bench/gpu/2026-11-26c-h100-probe-*.jsonl):
        # no gain anywhere, where they had shipped on a price the H100 did not bear out (the forward
        # merge at the dQ merge's 1.32x its datasheet DRAM time; its fit on the run: 1.74x). No A100
        # data either way. True is a bench/kernel_probe.py variant (gpucheck compiles both). The H100 of
        # 2026-11-27 again, forward+backward: loops 6.11 / 6.42 ms against tiles 6.52 / 6.45 at M7C 8k x 8 /
        # 64k x 1 (bench/gpu/2026-11-27-h100-probe-queue.jsonl, step merge_tiles, the same process).
        "merge_tiles": False,
        # The key-major forward's forced pairs (block 0, the token's own block and the one before) as
        # one dense causal pass that also merges the other pairs' partials (selected_keys.py
        # `_sel_fwd_forced_merge_kernel`, replacing `_sel_fwd_merge_kernel`: the forced pairs' partials
        # never cross DRAM), and the keys kernel over the other pairs alone, mask-free (FREE: each of
        # their rows sees the whole block; 1,386 -> 1,000 SASS a 128-row step on sm_90, triton 3.6,
        # bench/RESULTS.md "fwd8k"). Ships at G <= 8 (fwd_keys), head_dim <= 64, on sm_80 and sm_90 on the cost model's
        # price, UNMEASURED (bench/fwd_gap.py lever `fwd_forced_merge`: NSA fwd+bwd 3.5 / 3.9 / 3.2 %
        # faster at M7C 8k / 32k / 64k on an H100, 5.2 / 3.4 / 2.7 % on an A100); ptxas (M7C, triton
        # 3.6 / 3.9): the FREE keys kernel 166 / 167 registers on sm_90 (3 programs an SM where the
        # masked one's 184 hold 2), 186 / 190 on sm_80 (209 / 200), the merging pass 168, no spill
        # (bench/RESULTS.md "forcedmerge"). At head_dim <= 64 only: past it the merging pass holds the
        # forced pass's [64, 128] fp32 state beside a partial's rows and spilled 8 B on sm_80 at G 2 x
        # D 128 (255 registers, triton 3.9). False (the masked walk over every pair and the separate
        # merge, what every GPU run measured) is a bench/kernel_probe.py variant; what-if
        # `fwd_forced_merge_off`.
        "fwd_forced_merge": DP <= 64,
        # Their (entry, chunk) loads unrolled MU at a time (a step's loads in flight together; the
        # steps in a loop), the partials addressed by int32 offsets from a scalar pointer: ptxas, G
        # 1/2/5/6/8 x D 64/96/128, sm_80 / sm_90, triton 3.6 and 3.9, no spill at MU 4 (forward
        # 58-111 registers, dQ 64-137, 214 with fp32 partials). With int64 pointer tiles: all 16 at
        # once held up to 255 in the forward and spilled in the dQ merge everywhere on 3.6 (8-36 B;
        # 56 B-4.9 KB with fp32 partials); 2, 4 or 8 a step spilled 4 B-2.8 KB at some points
        # (bench/RESULTS.md "mergeone").
        "MU_m": 4,
        "MU_merge": 4,
        "BM_delta": 64,
        "warps_delta": 4,
        # The reverse index's segments (selected_keys.py `_seg_pairs`, one key-major program each): at
        # most B*Hkv*T*n / seg_target pairs (powers of two) besides T/4 clamped to [16, 2048]; 0, T/4
        # alone, what every GPU run measured (a bench/kernel_probe.py variant). Every run was at B*T =
        # 64k (2,300-9,000 programs); at B = 1 and 8k M7C's two sequences make 286 programs of S = 2048
        # whose 34 longest (block 0's 8, the early blocks' 26: 96 steps of 128 rows forward) run 2.1x the
        # even spread of 45 steps a program slot. At 512: S 512 at 8k x 1, 1024 at 16k x 1, unchanged at
        # B*T >= 32k; the keys kernels' schedule (bench/attention_cost/balance.py, its stretch fitted on
        # the H100 of 2026-11-26c's 8k x 8 / 16k x 4 points) prices NSA/FA2 at M7C 8k x 1 on an H100
        # 1.229 -> 1.071 (A100 1.732 -> 1.595), 16k 0.630 -> 0.614, 32k / 64k unchanged; 256 / 1024
        # (S 1024 / 256) price 1.098 / 1.104 at 8k (bench/attention_model.py `ours(seg_target=...)`;
        # bench/RESULTS.md "selkeys" has the two swapped, "review1" corrects). Measured since by the H100
        # of 2026-11-27 (bench/gpu/2026-11-27-h100-probe-queue.jsonl, step seg_target, the same process):
        # M7C 8k x 1 forward 0.70 ms / forward+backward 1.46 against 0.89 / 1.68 at T/4 alone, 16k x 1
        # 1.09 / 2.09 against 1.10 / 2.13, 8k x 8 (the same S, the control) 2.89 / 6.21 against 2.88 /
        # 6.13. A pair's
        # partials are the same computation at another row of another tile, dK/dV sums its segments'
        # fp32 partials in other groupings: equal to rounding (interpreter test). G > 8 (the query-major
        # dK/dV) keeps T/4: its price has no schedule.
        "seg_target": 512 if G <= 8 else 0,
    }
    # The keys backward's rows through the one rule of what fits (selected_keys_bwd.keys_rows).
    return keys_rows(cfg, arch)


# The probe variant of the token tiles' branch-free loop (bench/kernel_probe.py carries it): the
# union's blocks, 3 stages (the next step's K/V copies stay in flight while a step computes; with 2 a
# step waits for its own: bench/tok_pipe_sass.py). gpucheck compiles it beside the shipped loop where
# that is the branchy one (sm_80, G <= 8).
TOK_PIPE_PROBE = {"tok_pipe": 2, "stages_tok": 3, "stages_dq": 3}
# The union mode's [E, E] compare of a tile's E = TP*NKP entries spilled 240 B on sm_80 at E = 256
# (G 1: 16 tokens x 16 slots, triton 3.9); at 128 (G 2) it sat at 254-255 registers past head_dim 64
# on triton 3.6 (no spill yet); 64 and below (G >= 3) took at most 212 (bench/RESULTS.md).
_UNION_ENTRIES = 64


def _pipe_mode(cfg: dict, NKP: int) -> int:
    """The token tiles' PIPE for `cfg`'s tok_pipe and NKP slots a token: the union mode (2) only where
    the tile holds at most _UNION_ENTRIES entries, else every slot a step (1)."""
    mode = int(cfg["tok_pipe"])
    return 1 if mode == 2 and cfg["TP"] * NKP > _UNION_ENTRIES else mode


def _slots(NK: int) -> int:
    """NKP: a token's table entries padded to a power of two >= 16 (the token tiles hold their table).
    The floor keeps one compiled variant for every T: top_blocks lists min(n, blocks) entries, fewer
    than n at short T, and gpucheck compiles the model's n."""
    return _p2(NK, 16)


def _launch_config(G: int, D: int, LP: int, arch: int = 80) -> dict[str, int]:
    """The GPU config; the interpreter steps through keys 16 at a time (same code path), so the tests'
    small blocks also run the loops over several key steps and the dK/dV grid's split of a block."""
    return _config(G, D, LP, key_tile=16 if interpreting() else 64, arch=arch)


def _prec(dtype: torch.dtype) -> str:
    # fp32 inputs: tf32 tensor cores on the GPU; the interpreter only knows exact ("ieee") products.
    return "tf32" if dtype == torch.float32 and not interpreting() else "ieee"


def _builds_index(q: Tensor, sel_block: int, forced: bool) -> bool:
    """Whether the forward builds the reverse index (the key-major forward: forced blocks and the
    launch config's `fwd_keys`) and so hands it to the backward: the real op and its fake kernel ask
    the same config (a function of the static shape), so their outputs' shapes agree."""
    G, D = q.shape[3], q.shape[4]
    return forced and bool(_launch_config(G, D, sel_block, device_arch(q.device))["fwd_keys"])


def _no_index(device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """The forward's index outputs where it built none: empty int64 tensors (the backward builds it)."""
    return tuple(torch.empty(0, dtype=torch.int64, device=device) for _ in range(3))


@torch.library.custom_op("nsa_triton::selected_fwd", mutates_args=())
def _selected_fwd(
    q: Tensor, k: Tensor, v: Tensor, idx: Tensor, valid: Tensor, sel_block: int, scale: float, forced: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """out, lse and the reverse index (order, start, seg_end: selected_keys.reverse_index) where the
    key-major forward built it, else three empty int64 tensors. The index outputs are integer and not
    differentiable; the autograd function saves them for the backward, which then builds none."""
    B, Hkv, T, G, D = q.shape
    NK = idx.shape[-1]
    cfg = _launch_config(G, D, sel_block, device_arch(q.device))
    prec = _prec(q.dtype)
    valid8 = valid.view(torch.int8)
    out = torch.empty_like(q)
    lse = torch.empty(B, Hkv, T, G, dtype=torch.float32, device=q.device)
    if _builds_index(q, sel_block, forced):
        order, start, seg_end, _, _ = keys_forward(
            q, k, v, idx, valid8, out, lse, sel_block, scale, cfg, prec
        )
        return out, lse, order, start, seg_end
    if forced:
        of = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        lsef = torch.empty_like(lse)
        _sel_forced_fwd_kernel[(cdiv(T * G, cfg["BM"]), B * Hkv)](
            q, k, v, idx, valid8, of, lsef, T, NK, scale,
            G=G, D=D, LP=sel_block, DP=cfg["DP"], BM=cfg["BM"], BK=cfg["BK"], PREC=prec,
            num_warps=cfg["warps_f"], num_stages=cfg["stages_f"],
        )  # fmt: skip
        _sel_fwd_tok_kernel[(cdiv(T, cfg["TP"]), B * Hkv)](
            q, k, v, idx, valid8, out, lse, of, lsef, T, NK, scale,
            G=G, D=D, LP=sel_block, TP=cfg["TP"], RP=cfg["RP"], NKP=_slots(NK), DP=cfg["DP"], BK=cfg["BK"],
            PREC=prec, PIPE=_pipe_mode(cfg, _slots(NK)), num_warps=cfg["warps_tok"], num_stages=cfg["stages_tok"],
        )  # fmt: skip
        return out, lse, *_no_index(q.device)
    _sel_fwd_kernel[(T, B * Hkv)](
        q, k, v, idx, valid8, out, lse, T, NK, scale,
        G=G, D=D, LP=sel_block, GP=cfg["GP"], DP=cfg["DP"], BK=cfg["BK"], PREC=prec,
        num_warps=cfg["warps_q"], num_stages=cfg["stages"],
    )  # fmt: skip
    return out, lse, *_no_index(q.device)


@_selected_fwd.register_fake
def _(q, k, v, idx, valid, sel_block, scale, forced):
    B, Hkv, T = q.shape[:3]
    if _builds_index(q, sel_block, forced):
        nblk = B * Hkv * -(-T // sel_block)
        sizes = (B * Hkv * T * idx.shape[-1], nblk + 1, nblk)  # order, start, seg_end
        index = tuple(q.new_empty(n, dtype=torch.int64) for n in sizes)
    else:
        index = _no_index(q.device)
    return torch.empty_like(q), q.new_empty(q.shape[:4], dtype=torch.float32), *index


@torch.library.custom_op("nsa_triton::selected_bwd", mutates_args=())
def _selected_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    idx: Tensor,
    valid: Tensor,
    out: Tensor,
    lse: Tensor,
    order: Tensor,
    start: Tensor,
    seg_end: Tensor,
    sel_block: int,
    scale: float,
    forced: bool,
    delta: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv. (order, start, seg_end): the forward's reverse index, or empty tensors, where this
    op builds it (selected_keys.reverse_index: the same index, bit for bit). `delta`: rowsum(dout *
    out) in float32 [B, Hkv, T, G], already formed (the gate fold's kernel): with forced blocks no
    kernel reads out for it (key-major: no delta launch); the one-token dQ kernel (forced False)
    forms its own."""
    B, Hkv, T, G, D = q.shape
    BH, NK, LP = B * Hkv, idx.shape[-1], sel_block
    cfg = _launch_config(G, D, LP, device_arch(q.device))
    prec = _prec(q.dtype)
    valid8 = valid.view(torch.int8)
    dout = dout.contiguous()
    keys = forced and cfg["bwd_keys"]  # the key-major backward (selected_keys_bwd.py)
    check_delta("nsa_triton::selected_bwd", delta, BH * T * G, "[B, Hkv, T, G]")
    if keys:
        pdq_dtype(cfg, q.dtype)  # a bad pdq_bits (a probe's patched config) stops before any launch
    if order.numel() == 0:
        index = reverse_index(idx, valid8, LP, cfg["seg_target"])
    else:
        if order.shape != (BH * T * NK,) or start.shape != (BH * -(-T // LP) + 1,):
            raise ValueError(
                f"nsa_triton::selected_bwd: reverse index of shapes {tuple(order.shape)} / {tuple(start.shape)} "
                f"for a table {tuple(idx.shape)} at sel_block {LP}; pass the forward's index or empty tensors"
            )
        index = (order, start, seg_end, *index_bounds(BH, T, NK, LP, cfg["seg_target"]))
    if keys:
        # dQ from the dK/dV kernel's products, merged per token.
        dq, pdk, pdv = keys_backward(dout, q, k, v, idx, valid, out, lse, index, LP, scale, cfg, prec, delta)
        return (dq, *_reduce_dkdv(pdk, pdv, index[1], index[2], k, v, index[3], LP, cfg))
    dq = torch.empty_like(q)
    have_delta = forced and delta is not None
    if not have_delta:
        delta = torch.empty(B, Hkv, T, G, dtype=torch.float32, device=q.device)
    if forced:
        # Writes delta and the forced entries' dQ (fp32); the query-major dQ adds the rest and stores.
        dqf = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        _sel_forced_dq_kernel[(cdiv(T * G, cfg["BM"]), BH)](
            q, k, v, idx, valid8, out, dout, lse, delta, dqf, T, NK, scale,
            G=G, D=D, LP=LP, DP=cfg["DP"], BM=cfg["BM"], BK=cfg["BK"], PREC=prec, HAVE_DELTA=have_delta,
            num_warps=cfg["warps_f"], num_stages=cfg["stages_fdq"],
        )  # fmt: skip
        _sel_bwd_dq_tok_kernel[(cdiv(T, cfg["TP"]), BH)](
            q, k, v, idx, valid8, dout, lse, delta, dq, dqf, T, NK, scale,
            G=G, D=D, LP=LP, TP=cfg["TP"], RP=cfg["RP"], NKP=_slots(NK), DP=cfg["DP"], BK=cfg["BK"],
            PREC=prec, PIPE=_pipe_mode(cfg, _slots(NK)), num_warps=cfg["warps_q"], num_stages=cfg["stages_dq"],
        )  # fmt: skip
        del dqf  # consumed: its memory goes back to the allocator before the partials
    else:
        _sel_bwd_dq_kernel[(T, BH)](
            q, k, v, idx, valid8, out, dout, lse, delta, dq, T, NK, scale,
            G=G, D=D, LP=LP, GP=cfg["GP"], DP=cfg["DP"], BK=cfg["BK"], PREC=prec,
            num_warps=cfg["warps_q"], num_stages=cfg["stages_dq"],
        )  # fmt: skip
    order, start, seg_end, S, nseg = index
    ns = -(-T // LP)
    DP, BN = cfg["DP"], cfg["BN"]
    pdk = torch.empty(nseg, LP, DP, dtype=torch.float32, device=q.device)
    pdv = torch.empty_like(pdk)
    nb = cdiv(LP, BN)
    nsearch = (BH * ns).bit_length() + 1
    _sel_bwd_dkdv_kernel[(nseg, nb)](
        q, k, v, dout, lse, delta, order, start, seg_end, pdk, pdv, T, ns, NK, BH * ns, nsearch, S, scale,
        G=G, D=D, LP=LP, DP=DP, BN=BN, BR=cfg["BR"], PREC=prec,
        num_warps=cfg["warps_kv"], num_stages=cfg["stages_kv"],
    )  # fmt: skip
    dk, dv = _reduce_dkdv(pdk, pdv, start, seg_end, k, v, S, LP, cfg)
    return dq, dk, dv


def _reduce_dkdv(pdk, pdv, start, seg_end, k, v, S: int, LP: int, cfg: dict) -> tuple[Tensor, Tensor]:
    """dK and dV in the keys' dtype: each block's segment partials summed in segment order."""
    B, Hkv, T, D = k.shape
    ns, BN = -(-T // LP), cfg["BN"]
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    _sel_bwd_reduce_kernel[(B * Hkv * ns, cdiv(LP, BN))](
        pdk, pdv, start, seg_end, dk, dv, T, ns, S, D=D, LP=LP, DP=cfg["DP"], BN=BN,
        num_warps=cfg["warps_red"], num_stages=1,
    )  # fmt: skip
    return dk, dv


@_selected_bwd.register_fake
def _(dout, q, k, v, idx, valid, out, lse, order, start, seg_end, sel_block, scale, forced, delta=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, idx, valid, sel_block, scale, forced = inputs
    out, lse, order, start, seg_end = output
    # The forward's reverse index is saved with the activations (order: B*Hkv*T*n int64, 16.8 MB per
    # layer at M7C 64k x 1) so the backward does not sort again; under activation checkpointing the
    # recomputed forward saves its own, built from the recomputed table.
    ctx.mark_non_differentiable(order, start, seg_end)
    # No zero-filled gradients for the outputs nobody differentiates (lse, the index): a launch each.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(q, k, v, idx, valid, out, lse, order, start, seg_end)
    ctx.sel_block, ctx.scale, ctx.forced = sel_block, scale, forced


def _backward(ctx, dout, _dlse, _dorder, _dstart, _dseg_end):
    q, k, v, idx, valid, out, lse, order, start, seg_end = ctx.saved_tensors
    if dout is None:  # out itself was not used (only lse, say): its gradient is zero
        dout = torch.zeros_like(out)
    dq, dk, dv = torch.ops.nsa_triton.selected_bwd(
        dout, q, k, v, idx, valid, out, lse, order, start, seg_end, ctx.sel_block, ctx.scale, ctx.forced
    )
    return dq, dk, dv, None, None, None, None, None


torch.library.register_autograd("nsa_triton::selected_fwd", _backward, setup_context=_setup_context)


def selected_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    idx: Tensor,
    valid: Tensor,
    *,
    sel_block: int,
    scale: float,
    chunk: int | None = None,
    forced_blocks: bool = False,
) -> Tensor:
    """Selected branch: q [B,Hkv,T,G,D], k/v [B,Hkv,T,D], idx/valid [B,Hkv,T,n] -> [B,Hkv,T,G,D].

    Same semantics as `nsa.attention.selected.selected_attention` for any table: one softmax over the
    keys of every valid entry (an entry listed twice counts twice, as in the eager op), keys after the
    query masked, zeros for a query without any key. `chunk` (the eager op's CPU loop step) and
    `forced_blocks` (the eager op's sizing hint) are accepted and ignored: the kernels need neither, and
    a table without the forced blocks is still exact here (never NaN).
    """
    del chunk
    if q.device.type not in ("cuda", "meta") and not interpreting():
        raise ValueError(
            f"triton selected_attention: tensors on {q.device.type}; use CUDA (or meta) tensors, or set TRITON_INTERPRET=1"
        )
    dtype = q.dtype
    k, v = k.to(dtype).contiguous(), v.to(dtype).contiguous()
    idx, valid = idx.contiguous(), valid.contiguous()
    return torch.ops.nsa_triton.selected_fwd(
        q.contiguous(), k, v, idx, valid, sel_block, float(scale), bool(forced_blocks)
    )[0]


# ---------------------------------------------------------------------------------------------------
# gpucheck


def gpucheck_specs(shape: GpuShape, arch: int) -> list[KernelSpec]:
    """Every kernel this module launches for `shape` on sm_`arch`, with its launcher's exact settings."""
    G, D, LP = shape.group, shape.head_dim, shape.sel_block
    cfg = _config(G, D, LP, arch=arch)
    dt = shape.dtype
    prec = "tf32" if dt == "fp32" else "ieee"
    ptr, f32 = f"*{dt}", "*fp32"
    q_common = {"G": G, "D": D, "LP": LP, "GP": cfg["GP"], "DP": cfg["DP"], "BK": cfg["BK"], "PREC": prec}
    t_consts = {
        "G": G, "D": D, "LP": LP, "TP": cfg["TP"], "RP": cfg["RP"], "NKP": _slots(shape.n_sel), "DP": cfg["DP"],
        "BK": cfg["BK"], "PREC": prec, "PIPE": _pipe_mode(cfg, _slots(shape.n_sel)),
    }  # fmt: skip
    f_consts = {"G": G, "D": D, "LP": LP, "DP": cfg["DP"], "BM": cfg["BM"], "BK": cfg["BK"], "PREC": prec}
    fd_consts = {**f_consts, "HAVE_DELTA": False}

    def sig(names: dict[str, str], consts: dict) -> dict[str, str]:
        return {**names, **{c: "constexpr" for c in consts}}

    i32, i64, i8 = "i32", "*i64", "*i8"
    fwd_args = dict(
        Q=ptr, K=ptr, V=ptr, IDX=i64, VALID=i8, OUT=ptr, LSE=f32, T=i32, NK=i32, sm_scale="fp32"
    )  # fmt: skip
    tfwd_args = dict(
        Q=ptr, K=ptr, V=ptr, IDX=i64, VALID=i8, OUT=ptr, LSE=f32, OF=f32, LSEF=f32, T=i32, NK=i32, sm_scale="fp32"
    )  # fmt: skip
    dq_args = dict(
        Q=ptr, K=ptr, V=ptr, IDX=i64, VALID=i8, OUT=ptr, DO=ptr, LSE=f32, DELTA=f32, DQ=ptr,
        T=i32, NK=i32, sm_scale="fp32",
    )  # fmt: skip
    tdq_args = dict(
        Q=ptr, K=ptr, V=ptr, IDX=i64, VALID=i8, DO=ptr, LSE=f32, DELTA=f32, DQ=ptr, DQF=f32,
        T=i32, NK=i32, sm_scale="fp32",
    )  # fmt: skip
    ffwd_args = dict(Q=ptr, K=ptr, V=ptr, IDX=i64, VALID=i8, OF=f32, LSEF=f32, T=i32, NK=i32, sm_scale="fp32")
    fdq_args = dict(
        Q=ptr, K=ptr, V=ptr, IDX=i64, VALID=i8, OUT=ptr, DO=ptr, LSE=f32, DELTA=f32, DQF=f32,
        T=i32, NK=i32, sm_scale="fp32",
    )  # fmt: skip
    kv_consts = {"G": G, "D": D, "LP": LP, "DP": cfg["DP"], "BN": cfg["BN"], "BR": cfg["BR"], "PREC": prec}
    kv_args = dict(
        Q=ptr, K=ptr, V=ptr, DO=ptr, LSE=f32, DELTA=f32, ORDER=i64, START=i64, SEG_END=i64, PDK=f32, PDV=f32,
        T=i32, NS=i32, NK=i32, NBLK=i32, NSEARCH=i32, S=i32, sm_scale="fp32",
    )  # fmt: skip
    red_consts = {"D": D, "LP": LP, "DP": cfg["DP"], "BN": cfg["BN"]}
    red_args = dict(PDK=f32, PDV=f32, START=i64, SEG_END=i64, DK=ptr, DV=ptr, T=i32, NS=i32, S=i32)
    st = cfg["stages"]
    # NSAAttention passes forced_blocks=True: the forced kernels run, then the query-major token tiles
    # (selected_fwd / selected_bwd_dq). The one-token kernels (_any) serve any other table.
    rows = [
        ("selected_forced_fwd", _sel_forced_fwd_kernel, ffwd_args, f_consts, cfg["warps_f"], cfg["stages_f"]),
        ("selected_fwd", _sel_fwd_tok_kernel, tfwd_args, t_consts, cfg["warps_tok"], cfg["stages_tok"]),
        ("selected_fwd_any", _sel_fwd_kernel, fwd_args, q_common, cfg["warps_q"], st),
        # The key-major forward (fwd_keys, G <= 8: selected_keys.KEY_MAJOR_FWD); the two above run without it.
        *(keys_fwd_gpucheck_rows(cfg, G, D, LP, dt, prec, arch, shape.n_sel) if cfg["fwd_keys"] else ()),
        ("selected_forced_dq", _sel_forced_dq_kernel, fdq_args, fd_consts, cfg["warps_f"], cfg["stages_fdq"]),
        # handed the gate fold's delta (gated.FOLD_DELTA, shipped): no O tile, no delta store
        (
            "selected_forced_dq_delta",
            _sel_forced_dq_kernel,
            fdq_args,
            {**fd_consts, "HAVE_DELTA": True},
            cfg["warps_f"],
            cfg["stages_fdq"],
        ),
        ("selected_bwd_dq", _sel_bwd_dq_tok_kernel, tdq_args, t_consts, cfg["warps_q"], cfg["stages_dq"]),
        ("selected_bwd_dq_any", _sel_bwd_dq_kernel, dq_args, q_common, cfg["warps_q"], cfg["stages_dq"]),
        ("selected_bwd_dkdv", _sel_bwd_dkdv_kernel, kv_args, kv_consts, cfg["warps_kv"], cfg["stages_kv"]),
        ("selected_bwd_reduce", _sel_bwd_reduce_kernel, red_args, red_consts, cfg["warps_red"], 1),
    ]
    if cfg["bwd_keys"]:
        # G <= 8 with forced blocks: the key-major backward replaces selected_forced_dq, selected_bwd_dq
        # and selected_bwd_dkdv (still compiled: bwd_keys=False and forced_blocks=False run them); its
        # keys kernel and dQ merge also at pdq_bits 32 (`*_pdq32`, the measured path) in 16-bit dtypes.
        rows += keys_bwd_gpucheck_rows(cfg, G, D, LP, dt, prec, arch, shape.n_sel)
    if not cfg["tok_pipe"]:
        # The token tiles' branch-free loop as the probe runs it (TOK_PIPE_PROBE), where it is not shipped.
        pc = {**t_consts, "PIPE": _pipe_mode({**cfg, **TOK_PIPE_PROBE}, _slots(shape.n_sel))}
        wt, wq = cfg["warps_tok"], cfg["warps_q"]
        rows += [
            ("selected_fwd_pipe", _sel_fwd_tok_kernel, tfwd_args, pc, wt, TOK_PIPE_PROBE["stages_tok"]),
            ("selected_bwd_dq_pipe", _sel_bwd_dq_tok_kernel, tdq_args, pc, wq, TOK_PIPE_PROBE["stages_dq"]),
        ]
    return [KernelSpec(n, fn, sig(args, c), c, w, stg) for n, fn, args, c, w, stg in rows]
