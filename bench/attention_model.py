"""A per-kernel cost model of NSA attention on A100/H100, calibrated on published GPU figures.

Owns the `--model` output of bench/attention.py: calibration rows (the model reproducing published
NSA and FlashAttention-2 measurements at their shapes), prediction rows (our triton backend over
FlashAttention-2, fwd / bwd / fwd+bwd, A100 and H100, M7C and the NSA paper's shape) and per-kernel
rows (FLOPs issued incl. padded rows, DRAM and L2 bytes incl. re-reads, programs, waves). It imports
nothing from nsa (no torch): the kernel structure is written out here from nsa/attention/triton/*.py,
so a change of structure there must be mirrored here (docs/attention.md, "Time budget").

The model, per kernel: time = max(FLOPs / (peak x eff[kind]), DRAM bytes / (bw x 0.8), L2 bytes /
L2 bw, scalar ops / (CUDA-core rate x 0.3)), stretched by wave quantisation and by the longest
program when one program's work exceeds the even share (the compressed dK/dV kernel), plus 4 us per
launch. `eff[kind]` is the fraction of the bf16 tensor-core peak a kind of kernel reaches when it
is compute-bound:
- `fa2_fwd` / `fa2_bwd`: FlashAttention-2's CUDA kernels (the baseline: PyTorch SDPA, flash-attn).
  A100: 0.55 / 0.45 (FlashAttention-2 paper, Dao 2023, arXiv 2307.08691, Fig. 4-6: 50-73 % forward,
  40-63 % backward of 312 TFLOPS; the causal low end). H100: 0.39 / 0.34, FlashAttention-2 on H800 as
  measured by Scalable-Flash-NSA's README (64k, 64 heads, head_dim 128: 182.9 ms forward = 385
  TFLOP/s, 523.7 ms backward = 336 TFLOP/s).
- `dense_fwd` / `dense_bwd`: Triton flash-style tiles (full rows, streaming keys: our window and
  compressed kernels, the Triton FlashAttention-2 the NSA paper compares against). A100 0.40 / 0.32
  (assumed below CUDA FA2; only the ratio to the sparse kinds enters the paper's calibration), H100
  as FA2 (assumed; Triton uses Hopper's wgmma, FA2 does not).
- `gather_fwd` / `gather_bwd`: query-major sparse tiles (per token, keys of chosen blocks): fitted
  so the calibration rows come within +-30 % (printed beside the predictions). Our selected dQ
  takes `gather_fwd` (the forward's loop, no atomics), our key-major dK/dV `gather_bwd` (fitted on
  published backwards that include their dK/dV): the model's largest uncertainty.
- scalar work (top-n) at 0.3 of the CUDA-core rate; DRAM at 0.8 of its peak; L2 at the rate below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gpu:
    """Datasheet figures: dense bf16 tensor FLOP/s, DRAM B/s, SM count, fp32/int32 CUDA-core op/s."""

    name: str
    arch: str  # "ampere" | "hopper": selects the efficiency table
    peak: float
    dram: float
    l2: float  # achievable L2 read bandwidth (see L2_NOTE)
    sms: int
    alu: float
    regs_per_sm: int = 65536


# L2: A100's whitepaper gives 5120 B/clk of L2 read bandwidth (7.2 TB/s at 1.41 GHz); H100 SXM
# scaled by SM count and clock (132 SMs x 1.83 GHz vs 108 x 1.41: 1.6x). Both are peaks; the model
# takes 75 % of them (Chips and Cheese's H100 PCIe microbenchmark reached about that share).
GPUS: dict[str, Gpu] = {
    "A100": Gpu("A100-SXM4-80GB", "ampere", 312e12, 2.039e12, 0.75 * 7.2e12, 108, 19.5e12),
    "H100": Gpu("H100-SXM5", "hopper", 989e12, 3.35e12, 0.75 * 11.5e12, 132, 67e12),
    # H800: an H100 SXM with cut interconnect; same SMs, clocks, HBM3 (Scalable-Flash-NSA's GPU).
    "H800": Gpu("H800-SXM5", "hopper", 989e12, 3.35e12, 0.75 * 11.5e12, 132, 67e12),
    # H200 SXM: H100's SMs and clocks with 4.8 TB/s HBM3e (one of the GPUs the project is lent).
    "H200": Gpu("H200-SXM", "hopper", 989e12, 4.8e12, 0.75 * 11.5e12, 132, 67e12),
}

EFF: dict[str, dict[str, float]] = {
    "ampere": {"fa2_fwd": 0.55, "fa2_bwd": 0.45, "dense_fwd": 0.40, "dense_bwd": 0.32,
               "gather_fwd": 0.40, "gather_bwd": 0.11},
    "hopper": {"fa2_fwd": 0.39, "fa2_bwd": 0.34, "dense_fwd": 0.39, "dense_bwd": 0.34,
               "gather_fwd": 0.20, "gather_bwd": 0.17},
}  # fmt: skip
DRAM_EFF, ALU_EFF, LAUNCH_S = 0.8, 0.3, 4e-6


@dataclass(frozen=True)
class Shape:
    """One attention layer: batch, query heads, KV heads, head_dim and NSA's l, d, l', n, w."""

    name: str
    B: int
    H: int
    Hkv: int
    D: int
    bl: int = 32  # l, compression block length
    d: int = 16
    lp: int = 64
    n: int = 16
    w: int = 512

    @property
    def G(self) -> int:
        return self.H // self.Hkv


SHAPES = {"m7c": Shape("m7c", 1, 12, 2, 64), "paper": Shape("paper", 1, 64, 4, 128)}


@dataclass
class Kernel:
    """One launch: FLOPs issued (padded rows included) and useful, DRAM and L2 bytes, grid, occupancy."""

    name: str
    branch: str  # compressed | selection | selected | window | fused | dense
    direction: str  # fwd | bwd
    kind: str  # dense_fwd | dense_bwd | gather_fwd | gather_bwd | memory | scalar
    flops: float = 0.0
    useful: float = 0.0
    dram: float = 0.0
    l2: float = 0.0
    alu: float = 0.0
    programs: int = 0  # 0: a bandwidth-bound grid the model does not size (waves not counted)
    per_sm: int = 1  # resident programs per SM (registers / shared memory)
    crit: float = 0.0  # FLOPs of the longest program (load imbalance)
    launches: int = 1
    extra: dict = field(default_factory=dict)

    def time(self, gpu: Gpu) -> float:
        eff = EFF[gpu.arch].get(self.kind, 1.0)
        t = max(
            self.flops / (gpu.peak * eff),
            self.dram / (gpu.dram * DRAM_EFF),
            self.l2 / gpu.l2,
            self.alu / (gpu.alu * ALU_EFF),
        )
        slots = gpu.sms * self.per_sm
        waves = math.ceil(self.programs / slots)
        if self.flops and self.programs and waves < 8:  # a short grid idles part of the GPU in its last wave
            t *= waves * slots / self.programs
        if self.crit:  # the longest program runs alone on its SM at the end
            t = max(t, self.crit / (gpu.peak * eff / gpu.sms))
        return t + LAUNCH_S * self.launches

    def row(self, gpu: Gpu) -> dict:
        slots = gpu.sms * self.per_sm
        return {
            "kernel": self.name, "branch": self.branch, "dir": self.direction, "kind": self.kind,
            "gflop": round(self.flops / 1e9, 2), "gflop_useful": round(self.useful / 1e9, 2),
            "dram_mb": round(self.dram / 1e6, 1), "l2_mb": round(self.l2 / 1e6, 1),
            "programs": self.programs or None, "waves": round(self.programs / slots, 2) if self.programs else None,
            "ms": round(self.time(gpu) * 1e3, 4),
        }  # fmt: skip


def _p2(x: int, lo: int = 1) -> int:
    return max(lo, 1 << max(0, x - 1).bit_length())


def _per_sm(regs: int, threads: int, gpu_regs: int = 65536, cap: int = 16) -> int:
    return max(1, min(cap, gpu_regs // (regs * threads)))


def _sel_keys(T: int, s: Shape) -> float:
    """Keys each query's selected blocks give on average, in whole l'-blocks (the kernels step over
    the own block's keys up to the query only, but in tiles of l')."""
    nl = s.n * s.lp
    short = min(T, nl)
    return (short * (short / 2 + s.lp / 2) + max(0, T - nl) * nl) / T


def _cmp_keys(T: int, s: Shape, tile: int = 64) -> float:
    """Compressed keys a query tile visits on average (visible prefix, rounded up to a key tile)."""
    nc = max(0, (T - s.bl) // s.d + 1)
    return min(nc, nc / 2 + tile / 2)


def _tokens_per_tile(G: int) -> int:
    """Tokens a query-major selected program holds: the largest power of two with TP * G <= 16."""
    return max(1, 1 << max(0, (16 // G).bit_length() - 1)) if G <= 16 else 1


def _union_ratio(T: int, s: Shape, TP: int) -> float:
    """Expected key steps of TP-token tiles over one token a program, for tables whose tokens pick
    their n - 3 non-forced blocks independently and uniformly among blocks 1 .. t//l' - 2 (the
    union of TP draws of m from C: C (1 - (1 - m/C)^TP)). Matches the count of
    bench/selected_key_steps.py on top_blocks over random scores (0.849 at G = 6, 8k)."""
    if TP == 1:
        return 1.0
    num = den = 0.0
    for t0 in range(0, T, TP):
        C = max(0, t0 // s.lp - 2)
        m = min(s.n - 3, C)
        if m:
            num += C * (1 - (1 - m / C) ** TP)
            den += TP * m
    return num / den if den else 1.0


def flash2(T: int, s: Shape, kind: str = "fa2") -> list[Kernel]:
    """FlashAttention-2, causal GQA: 2 GEMMs forward, 5 backward, over T/2 keys per query on average.
    kind "fa2": the CUDA kernels (flash-attn, PyTorch SDPA); "dense": a Triton port (the NSA paper's)."""
    unit = 2 * s.B * s.H * T * (T / 2 + 64) * s.D  # one GEMM over the causal triangle (+ diagonal tiles)
    act = s.B * T * s.H * s.D * 2
    kv = s.B * T * s.Hkv * s.D * 2
    progs = s.B * s.H * math.ceil(T / 128)
    return [
        Kernel(
            "flash2_fwd", "dense", "fwd", f"{kind}_fwd", 2 * unit, 2 * unit, 2 * act + 2 * kv, programs=progs
        ),
        Kernel(
            "flash2_bwd", "dense", "bwd", f"{kind}_bwd", 5 * unit, 5 * unit, 4 * act + 4 * kv, programs=progs
        ),
    ]


def ours(
    T: int,
    s: Shape,
    balanced_dkv: bool = True,
    keymajor_sel: bool = False,
    forced_tiles: bool = True,
    fold_selection: bool = True,
    unpadded_cmp_bwd: bool = True,
    token_tiles: bool = True,
    selections: str = "random",
) -> list[Kernel]:
    """The triton backend as it stands (nsa/attention/triton/*.py), fwd and bwd, one layer.
    keymajor_sel models a restructure that is not built (what-if rows); balanced_dkv=False the
    compressed dK/dV kernel as it was before it was split (for comparison); forced_tiles (built,
    2026-11-25) the selected branch's forced blocks (block 0, the own and the previous block) as dense
    tiles of 64 rows, the query-major kernels skipping them (False: the kernels before); fold_selection
    (built, 2026-11-25) the top-n inside the compressed forward's second pass (False: a third pass
    with its own QK product); unpadded_cmp_bwd (built, 2026-11-25) the compressed backward's query
    tiles without padded heads; token_tiles (built, 2026-11-25) several tokens per query-major program
    over the union of their blocks, whose size depends on the tables: `selections` "random" (each token
    independent: the worst case, what the predictions use) or "shared" (adjacent tokens select the
    same blocks: the best case)."""
    B, G, D, BH = s.B, s.G, s.D, s.B * s.Hkv
    bf = 2
    act = B * T * s.H * D * bf
    kvb = BH * T * D * bf
    nc = max(0, (T - s.bl) // s.d + 1)
    ns = -(-T // s.lp)
    k = min(s.n, ns)
    ks: list[Kernel] = []
    # Fused RoPE into the kernels' layouts (q and 3 branches' keys), then the gated sum.
    ks.append(Kernel("rope_fwd", "fused", "fwd", "memory", dram=2 * (act + 3 * kvb), launches=2))
    ks.append(Kernel("gate_mix_fwd", "fused", "fwd", "memory", dram=4 * act + B * T * s.H * 3 * bf))
    ks.append(Kernel("rope_bwd", "fused", "bwd", "memory", dram=2 * (act + 3 * kvb), launches=2))
    ks.append(Kernel("gate_mix_bwd", "fused", "bwd", "memory", dram=5 * act + 2 * B * T * s.H * 3 * bf))
    # Compression MLP (cuBLAS GEMMs l*D -> 2D -> D for keys and values): small.
    mlp = 2 * 2 * BH * nc * (s.bl * D * 2 * D + 2 * D * D)
    ks.append(
        Kernel("cmp_mlp_fwd", "compressed", "fwd", "dense_fwd", mlp, mlp, 4 * kvb, programs=10**4, launches=6)
    )
    ks.append(
        Kernel(
            "cmp_mlp_bwd",
            "compressed",
            "bwd",
            "dense_bwd",
            2 * mlp,
            2 * mlp,
            8 * kvb,
            programs=10**4,
            launches=10,
        )
    )
    # Compressed attention + selection, one kernel: rows = BT tokens x G padded to GPF; pass 1 (QK for
    # the statistics), pass 2 (QK again, PV, and on the same float32 probabilities the selection: Eq.
    # 10 group sum, Eq. 9 shifts, a running top-n merged in two halves of the tile's tokens). Per
    # visible key tile: 3 GEMM units, 3 tile reads (K, K, V) from L2. One 8-warp block per SM (218-240
    # registers at G = 6). fold_selection=False: the kernel before 2026-11-25, whose pass 3 issued a
    # fourth QK product and a fourth read (its passes 1-2 were 3 units too; the model said 2 until then).
    GP = _p2(G)
    GPF = max(2, GP)
    BT = max(1, min(8, 32 // GPF))  # the forward's tile: 32 rows, <= 8 tokens (docs/attention.md)
    ck = _cmp_keys(T, s)
    cunit = 2 * BH * T * GPF * ck * D
    cuse = 2 * BH * T * G * (nc / 2) * D
    ctiles = BH * math.ceil(T / BT)
    ckl2 = ctiles * ck * D * bf
    ks.append(Kernel("cmp_fwd", "compressed", "fwd", "dense_fwd", 3 * cunit, 3 * cuse,
                     2 * act + 2 * BH * nc * D * bf + 4 * BH * T * G, l2=3 * ckl2, programs=ctiles, per_sm=1,
                     crit=3 * 2 * BT * GPF * nc * D))  # fmt: skip
    # Top-n: a running top-W per token, rank merges on [BT, W, BJ] tiles (about 4 integer ops per
    # compared pair, W pairs per candidate block), plus Eq. 9's shifts (~4 x l'/d per block); inside
    # pass 2 it adds CUDA-core work only (no launch, no GEMM, no read of its own).
    W = max(16, _p2(s.n))
    ks.append(Kernel("cmp_fwd_topn", "selection", "fwd", "dense_fwd", 0 if fold_selection else cunit, 0,
                     BH * T * k * 9, l2=0 if fold_selection else ckl2,
                     alu=BH * T * ns * (W * 4 + 4 * s.lp // s.d), programs=ctiles, per_sm=1,
                     launches=0))  # fmt: skip
    # Backward: dQ (3 units) and dK/dV (4 units) over query tiles of consecutive (token, head) rows, no
    # padded heads (unpadded_cmp_bwd=False: G padded to GP, the kernels before 2026-11-25).
    RB = G if unpadded_cmp_bwd else GP
    dq_rows = 128 if D <= 64 else 32
    bunit = 2 * BH * T * RB * ck * D
    ks.append(Kernel("cmp_bwd_dq", "compressed", "bwd", "dense_bwd", 3 * bunit, 3 * cuse,
                     4 * act + 2 * BH * nc * D * bf, l2=BH * math.ceil(T * RB / dq_rows) * ck * D * bf * 2,
                     programs=BH * math.ceil(T * RB / dq_rows), per_sm=1))  # fmt: skip
    # dK/dV per tile of 32 compressed keys: tile i is seen by the queries after it, so tile 0 carries
    # T query rows while the last carries almost none. Each tile's query tiles are cut into SPLIT = 8
    # parts (one program each, fp32 partials summed in order by a second kernel), so the longest
    # program has 1/8 of tile 0's work; split=1 models the kernel before 2026-11-25.
    split = 8 if balanced_dkv else 1
    dkv_tiles = BH * max(1, math.ceil(nc / 32))
    part = dkv_tiles * split * 32 * D * 4 * 2 if split > 1 else 0
    ks.append(Kernel("cmp_bwd_dkv", "compressed", "bwd", "dense_bwd", 4 * bunit, 4 * cuse,
                     2 * BH * nc * D * bf * 2 + 2 * part, l2=dkv_tiles * (T / 2) * RB * D * bf * 2,
                     programs=dkv_tiles * split, per_sm=2, crit=4 * 2 * T * RB * 32 * D / split,
                     launches=1 + (split > 1)))  # fmt: skip
    # Selected, forward and dQ: one program per (token, batch x KV head); rows = G heads padded to 16;
    # each token reads its own k blocks of l' keys (K and V) through L2. dQ has the forward's loop
    # structure (query-major, no atomics) and takes the forward's efficiency.
    # keymajor (not built): FSA's order for both, rows = (pair, head) in full tiles of 64, a
    # statistics pass (QK) before the output pass (QK, PV), fp32 partial rows per pair reduced after.
    SR = 64 if keymajor_sel else _p2(G, 16)
    TP = 1
    keys = _sel_keys(T, s)
    npairs = BH * T * k
    if forced_tiles:
        # Forced blocks (3 per token once T >= 3 l'; all of them below) leave the query-major kernels:
        # those read only the k - f other blocks, all whole; a dense kernel per 64 rows (tokens x G,
        # contiguous) runs block 0, the previous and the own block (causal) for the tile's tokens,
        # and hands its fp32 state (o, lse) to the gather kernel (DRAM write + read).
        # nsa/attention/triton/selected_forced.py: grid (ceil(T*G/64), BH), 4 warps; registers
        # (gpucheck, triton 3.9, G6 D64): forward 168 on sm_80 / 124 on sm_90, dQ 254 / 125.
        f = min(3, ns)
        keys = (k - f) * s.lp
        fk = min(T, f * s.lp)
        fuse = 2 * BH * T * G * (fk - s.lp / 2) * D
        fissue = 2 * BH * math.ceil(T * G / 64) * 64 * fk * D
        fprog = BH * math.ceil(T * G / 64)
        fl2 = fprog * fk * D * bf * 2
        state = BH * T * G * (D + 1) * 4  # fp32 o + lse (forward), fp32 dQ part + delta (backward)
        ks.append(Kernel("sel_forced_fwd", "selected", "fwd", "dense_fwd", 2 * fissue, 2 * fuse,
                         act + state + BH * T * k * 9, l2=fl2, programs=fprog, per_sm=_per_sm(168, 128)))  # fmt: skip
        ks.append(Kernel("sel_forced_dq", "selected", "bwd", "dense_bwd", 3 * fissue, 3 * fuse,
                         3 * act + state + BH * T * k * 9, l2=fl2, programs=fprog, per_sm=_per_sm(254, 128)))  # fmt: skip
    state_in = BH * T * G * (D + 1) * 4 if forced_tiles else 0  # the gather kernels resume from it
    suse = 2 * BH * T * G * keys * D
    if keymajor_sel:
        sunit = suse * (math.ceil(npairs * G / SR) * SR) / (npairs * G)
        partial = npairs * G * (D + 2) * 4 * 2
        sl2 = npairs * G * D * bf * 2
        fwd_units, dq_units, launches = 3, 3, 3
    else:
        # Token tiles (forced path, nsa/attention/triton/selected_query.py): TP tokens a program
        # (TP*G <= 16 rows), one 64-key step per distinct non-forced block of the tile: steps and L2
        # reads = `union` x one token a program (random selections: _union_ratio; adjacent tokens
        # selecting the same blocks: 1/TP). Each of the TP*n table entries costs a [16,16] compare.
        TP = _tokens_per_tile(G) if forced_tiles and token_tiles else 1
        union = _union_ratio(T, s, TP) if selections == "random" else 1 / TP
        sunit = 2 * BH * T * SR * keys * D * union
        partial = 0
        sl2 = BH * T * keys * D * bf * 2 * union
        fwd_units, dq_units, launches = 2, 3, 1
    progs = math.ceil(npairs * G / 64) if keymajor_sel else BH * math.ceil(T / TP)
    scan = BH * T * k * 16 * 16 if TP > 1 else 0
    ks.append(Kernel("sel_fwd", "selected", "fwd", "gather_fwd", fwd_units * sunit, 2 * suse,
                     2 * act + 2 * kvb + BH * T * k * 9 + 4 * BH * T * G + partial + state_in, l2=sl2,
                     alu=scan, programs=progs, per_sm=_per_sm(96, 128), launches=launches))  # fmt: skip
    ks.append(Kernel("sel_bwd_dq", "selected", "bwd", "gather_fwd", dq_units * sunit, 3 * suse,
                     4 * act + 2 * kvb + BH * T * k * 9 + partial + state_in, l2=sl2,
                     alu=scan, programs=progs, per_sm=_per_sm(98, 128), launches=launches - 1))  # fmt: skip
    # Reverse index: one stable torch.sort of BH*T*k int64 keys (radix: ~8 passes over key + index),
    # searchsorted, cumsum and ~12 small ops.
    ks.append(Kernel("sel_reverse_index", "selected", "bwd", "memory", dram=npairs * 16 * 2 * 8, launches=16))
    # dK/dV key-major: rows = (pair, head), BR = 64 per step, full tiles for any G; each row's q and dO
    # come from L2; partial dK/dV per segment in fp32, summed by the reduction kernel.
    BR = 32 if D > 64 else 64
    seg = min(2048, max(16, _p2(T) // 4))
    nseg = BH * ns + math.ceil(npairs / seg)
    prow = npairs * G
    kunit = 2 * math.ceil(prow / BR) * BR * s.lp * D
    part = nseg * s.lp * _p2(D, 16) * 4 * 2
    ks.append(Kernel("sel_bwd_dkdv", "selected", "bwd", "gather_bwd", 4 * kunit, 4 * 2 * prow * s.lp * D,
                     2 * kvb + part, l2=prow * D * bf * 2 + prow * 8, programs=nseg, per_sm=1))  # fmt: skip
    ks.append(Kernel("sel_bwd_reduce", "selected", "bwd", "memory", dram=part + 2 * kvb, programs=BH * ns))
    # Window: rows = tokens x G (no padding), keys = the band plus the tile overhang.
    wk = min(T, s.w + 128 / G + 64)
    wunit = 2 * BH * T * G * wk * D
    wuse = 2 * BH * T * G * min(T, s.w) * D
    wprog = BH * math.ceil(T * G / 128)
    ks.append(Kernel("win_fwd", "window", "fwd", "dense_fwd", 2 * wunit, 2 * wuse, 2 * act + 2 * kvb,
                     l2=wprog * wk * D * bf * 2, programs=wprog, per_sm=1))  # fmt: skip
    ks.append(Kernel("win_bwd_dq", "window", "bwd", "dense_bwd", 3 * wunit, 3 * wuse, 4 * act + 2 * kvb,
                     l2=wprog * wk * D * bf * 2, programs=wprog, per_sm=1))  # fmt: skip
    wdk = min(T, s.w + 64)
    ks.append(Kernel("win_bwd_dkdv", "window", "bwd", "dense_bwd", 4 * 2 * BH * T * G * wdk * D, 2 * wuse,
                     2 * act + 4 * kvb, l2=BH * math.ceil(T / 64) * wdk * G * D * bf * 2,
                     programs=BH * math.ceil(T / 64), per_sm=1))  # fmt: skip
    return ks


def published_nsa(T: int, s: Shape, score_pass: bool) -> list[Kernel]:
    """The structure the NSA paper and Scalable-Flash-NSA describe, at G >= 16 (full tiles): compressed
    attention plus a score pass and a top-n kernel, group-centric query-major selected attention, a
    flash-style window; backward = 2.5x each forward's GEMMs. Used only for calibration."""
    B, G, D, BH = s.B, s.G, s.D, s.B * s.Hkv
    nc = max(0, (T - s.bl) // s.d + 1)
    ns = -(-T // s.lp)
    act = B * T * s.H * D * 2
    kvb = BH * T * D * 2
    cunit = 2 * BH * T * G * (nc / 2) * D
    sunit = 2 * BH * T * G * _sel_keys(T, s) * D
    wunit = 2 * BH * T * G * min(T, s.w) * D
    score = 4 * BH * T * ns
    rows = BH * math.ceil(T * G / 128)
    return [
        Kernel("cmp_fwd", "compressed", "fwd", "dense_fwd", (2 + score_pass) * cunit, 2 * cunit, 2 * act, programs=rows),
        Kernel("topn", "selection", "fwd", "scalar", dram=2 * score, alu=BH * T * ns * 16 * 4, programs=rows),
        Kernel("sel_fwd", "selected", "fwd", "gather_fwd", 2 * sunit, 2 * sunit, 2 * act + 2 * kvb,
               l2=BH * T * _sel_keys(T, s) * D * 4, programs=BH * T, per_sm=4),
        Kernel("win_fwd", "window", "fwd", "dense_fwd", 2 * wunit, 2 * wunit, 2 * act + 2 * kvb, programs=rows),
        Kernel("cmp_bwd", "compressed", "bwd", "dense_bwd", 5 * cunit, 5 * cunit, 4 * act, programs=rows, launches=2),
        Kernel("sel_bwd", "selected", "bwd", "gather_bwd", 5 * sunit, 5 * sunit, 4 * act + 4 * kvb,
               l2=2 * BH * T * _sel_keys(T, s) * D * 4, programs=BH * T, per_sm=4, launches=2),
        Kernel("win_bwd", "window", "bwd", "dense_bwd", 5 * wunit, 5 * wunit, 4 * act + 4 * kvb, programs=rows, launches=2),
    ]  # fmt: skip


def total(ks: list[Kernel], gpu: Gpu, direction: str | None = None) -> float:
    return sum(k.time(gpu) for k in ks if direction in (None, k.direction))


# Published figures (what the calibration reproduces), with where they come from.
# NSA paper (Yuan et al. 2025, arXiv 2502.11089, Sec. 5.1, Fig. 6): Triton NSA kernel vs Triton
# FlashAttention-2 on A100, GQA group 16 (64 heads, 4 KV heads; head_dim taken as 128), speedups.
NSA_PAPER = {
    "gpu": "A100",
    "shape": Shape("nsa_paper_a100", 1, 64, 4, 128),
    "fwd": {8192: 2.1, 16384: 3.8, 32768: 6.3, 65536: 9.0},
    "bwd": {8192: 1.1, 16384: 2.0, 32768: 3.4, 65536: 6.0},
}
# Scalable-Flash-NSA README (github.com/mdy666/Scalable-Flash-Native-Sparse-Attention, benchmark
# tables): H800, 64 heads, 4 KV heads, head_dim 128, l=32, d=16, l'=64, n=16; milliseconds.
SCALABLE = {
    "gpu": "H800",
    "shape": Shape("scalable_h800", 1, 64, 4, 128),
    "nsa_fwd": {4096: 1.370, 8192: 2.630, 16384: 5.660, 32768: 13.237, 65536: 34.162, 131072: 101.123},
    "nsa_bwd": {4096: 2.772, 8192: 5.571, 16384: 12.322, 32768: 28.960, 65536: 73.689, 131072: 213.904},
    "fa2_fwd": {4096: 0.826, 8192: 3.055, 16384: 11.677, 32768: 46.912, 65536: 182.879, 131072: 774.342},
    "fa2_bwd": {4096: 2.503, 8192: 9.009, 16384: 33.972, 32768: 131.634, 65536: 523.686, 131072: 2068.492},
}


def calibration_rows() -> list[dict]:
    rows = []

    def add(source: str, gpu: str, shape: Shape, T: int, what: str, published: float, predicted: float):
        rows.append({
            "calibration": f"{source}/{what}", "gpu": gpu, "shape": f"H{shape.H}/Hkv{shape.Hkv}/D{shape.D}",
            "T": T, "published": published, "predicted": round(predicted, 3),
            "error": round(predicted / published - 1, 3),
        })  # fmt: skip

    p = NSA_PAPER
    gpu, shape = GPUS[p["gpu"]], p["shape"]
    for T in p["fwd"]:
        fa, ns = flash2(T, shape, "dense"), published_nsa(T, shape, score_pass=False)
        for d in ("fwd", "bwd"):
            add(
                "nsa_paper_fig6",
                p["gpu"],
                shape,
                T,
                f"speedup_{d}",
                p[d][T],
                total(fa, gpu, d) / total(ns, gpu, d),
            )
    c = SCALABLE
    gpu, shape = GPUS[c["gpu"]], c["shape"]
    for T in c["nsa_fwd"]:
        fa, ns = flash2(T, shape), published_nsa(T, shape, score_pass=True)
        for d in ("fwd", "bwd"):
            add(
                "scalable_flash_nsa",
                c["gpu"],
                shape,
                T,
                f"nsa_ms_{d}",
                c[f"nsa_{d}"][T],
                total(ns, gpu, d) * 1e3,
            )
            add(
                "scalable_flash_nsa",
                c["gpu"],
                shape,
                T,
                f"fa2_ms_{d}",
                c[f"fa2_{d}"][T],
                total(fa, gpu, d) * 1e3,
            )
    return rows


def prediction_rows(Ts: list[int]) -> list[dict]:
    rows = []
    for gname in ("A100", "H100"):
        gpu = GPUS[gname]
        for sname, shape in SHAPES.items():
            for T in Ts:
                fa, ns = flash2(T, shape), ours(T, shape)
                r = {"prediction": "nsa_over_fa2", "gpu": gname, "shape": sname, "T": T}
                for d in ("fwd", "bwd", None):
                    r[d or "fwd_bwd"] = round(total(ns, gpu, d) / total(fa, gpu, d), 3)
                rows.append(r)
    return rows


def kernel_rows(Ts: list[int], shape_names=("m7c",), gpus=("A100", "H100")) -> list[dict]:
    rows = []
    for gname in gpus:
        gpu = GPUS[gname]
        for sname in shape_names:
            shape = SHAPES[sname]
            for T in Ts:
                ks = ours(T, shape)
                t_all = total(ks, gpu)
                for k in ks:
                    r = {"kernel_model": k.name, "gpu": gname, "shape": sname, "T": T, **k.row(gpu)}
                    r["share"] = round(k.time(gpu) / t_all, 3)
                    del r["kernel"]
                    rows.append(r)
    return rows


def branch_budget(T: int, shape: Shape, gpu: Gpu) -> dict[str, float]:
    """Milliseconds per branch (fwd + bwd) of our kernels, their total and FlashAttention-2's."""
    out: dict[str, float] = {}
    for k in ours(T, shape):
        out[k.branch] = out.get(k.branch, 0.0) + k.time(gpu) * 1e3
    out["nsa_total"] = sum(out.values())
    out["fa2_total"] = total(flash2(T, shape), gpu) * 1e3
    return {b: round(v, 3) for b, v in out.items()}


def transient_bytes(T: int, s: Shape) -> int:
    """The largest scratch one NSA op holds beyond its inputs, outputs and saved tensors (triton
    backend). Forward: the selected branch's forced-block state (fp32 output + lse per row, handed to
    the query-major kernel); selection itself keeps nothing (until 2026-11-25 the forward kept float32
    block scores [B, Hkv, T, ceil(T/l')], 512 MiB at 64k for M7C). Backward: first the forced dQ part
    (fp32) + delta, freed before the reverse index (sort keys, order, sorted keys: 3 x 8 bytes per
    pair; cub's scratch not counted) and the fp32 partial dK/dV per segment, held with delta."""
    BH = s.B * s.Hkv
    ns = -(-T // s.lp)
    npairs = BH * T * min(s.n, ns)
    seg = min(2048, max(16, _p2(T) // 4))
    nseg = BH * ns + math.ceil(npairs / seg)
    rows = BH * T * s.G
    state = rows * (s.D + 1) * 4
    index = 3 * 8 * npairs + 2 * nseg * s.lp * _p2(s.D, 16) * 4 + 4 * rows
    return int(max(state, state + 4 * rows, index))


WHAT_IF = {
    "unbalanced_cmp_dkv_before": {"balanced_dkv": False},  # the compressed dK/dV before its split
    "keymajor_selected": {"keymajor_sel": True},  # FSA's loop order for the selected fwd and dQ
    "before_forced_tiles": {"forced_tiles": False},  # every entry query-major (before 2026-11-25)
    "before_fold_selection": {"fold_selection": False},  # the compressed forward's third pass
    "before_unpadded_cmp_bwd": {"unpadded_cmp_bwd": False},  # G padded to 8 in the compressed bwd
    "before_token_tiles": {"token_tiles": False},  # one token a query-major program
    "shared_selections": {"selections": "shared"},  # adjacent tokens select the same blocks (best case)
    "before_this_session": {"forced_tiles": False, "fold_selection": False, "unpadded_cmp_bwd": False},
}


def what_if_rows(Ts: list[int]) -> list[dict]:
    """NSA/FA2 fwd+bwd if the kernels were restructured as named (modelled, not built)."""
    rows = []
    for name, flags in WHAT_IF.items():
        for gname in ("A100", "H100"):
            for sname, shape in SHAPES.items():
                for T in Ts:
                    ratio = total(ours(T, shape, **flags), GPUS[gname]) / total(flash2(T, shape), GPUS[gname])
                    rows.append(
                        {"what_if": name, "gpu": gname, "shape": sname, "T": T, "fwd_bwd": round(ratio, 3)}
                    )
    return rows


TARGETS = {8192: 1.0, 32768: 0.35, 65536: 0.2}  # issue 20: NSA / FA2, fwd + bwd


def _useful_units(T: int, s: Shape) -> dict[str, float]:
    """FLOPs of one causal-masked GEMM over each branch's keys, useful rows and keys only."""
    BH, G, D = s.B * s.Hkv, s.G, s.D
    nc = max(0, (T - s.bl) // s.d + 1)
    return {
        "selected": 2 * BH * T * G * _sel_keys(T, s) * D,
        "compressed": 2 * BH * T * G * (nc / 2) * D,
        "window": 2 * BH * T * G * min(T, s.w) * D,
    }


def ideal_time(T: int, s: Shape, gpu: Gpu, selected: str = "gather") -> float:
    """A lower bound on any NSA built from the model's kernel kinds: each branch's useful FLOPs only
    (no padded rows, no L2 or DRAM time, no selection cost, no launches, no memory-bound ops),
    2 GEMM units forward and 5 backward (FlashAttention-2's count: no recompute beyond its own), the
    selected branch at the `gather` efficiencies (the published sparse kernels') or, if a structure
    ran it as full dense tiles, at the `dense` ones; compressed and window at `dense`."""
    e, u = EFF[gpu.arch], _useful_units(T, s)
    dense = u["compressed"] + u["window"]
    t = 2 * dense / e["dense_fwd"] + 5 * dense / e["dense_bwd"]
    t += 2 * u["selected"] / e[f"{selected}_fwd"] + 5 * u["selected"] / e[f"{selected}_bwd"]
    return t / gpu.peak


def needed_gather_bwd(T: int, s: Shape, gpu: Gpu) -> float | None:
    """The sparse backward efficiency (fraction of peak) the ideal NSA needs to meet the target at T
    with everything else as in `ideal_time` (gather forward); None if no efficiency suffices."""
    e, u = EFF[gpu.arch], _useful_units(T, s)
    dense = u["compressed"] + u["window"]
    rest = (
        2 * dense / e["dense_fwd"] + 5 * dense / e["dense_bwd"] + 2 * u["selected"] / e["gather_fwd"]
    ) / gpu.peak
    room = TARGETS[T] * total(flash2(T, s), gpu) - rest
    return round(5 * u["selected"] / (gpu.peak * room), 3) if room > 0 else None


def bound_rows(Ts: list[int]) -> list[dict]:
    """How close any structure of these kernel kinds can get: the ideal NSA over FlashAttention-2,
    with the selected branch at the sparse (`gather`) or at the dense efficiencies, and the sparse
    backward efficiency the target needs (the calibrated one beside it)."""
    rows = []
    for gname in ("A100", "H100"):
        gpu = GPUS[gname]
        for sname, shape in SHAPES.items():
            for T in Ts:
                fa = total(flash2(T, shape), gpu)
                rows.append({
                    "bound": "ideal_nsa_over_fa2", "gpu": gname, "shape": sname, "T": T,
                    "selected_gather": round(ideal_time(T, shape, gpu, "gather") / fa, 3),
                    "selected_dense": round(ideal_time(T, shape, gpu, "dense") / fa, 3),
                    "target": TARGETS.get(T),
                    "gather_bwd_needed": needed_gather_bwd(T, shape, gpu) if T in TARGETS else None,
                    "gather_bwd_calibrated": EFF[gpu.arch]["gather_bwd"],
                })  # fmt: skip
    return rows


def miss_rows(Ts: list[int]) -> list[dict]:
    """Each prediction that misses its target, with the kernel and the branch that cost the most."""
    rows = []
    for r in prediction_rows([T for T in Ts if T in TARGETS]):
        if r["fwd_bwd"] <= TARGETS[r["T"]]:
            continue
        gpu, shape = GPUS[r["gpu"]], SHAPES[r["shape"]]
        ks = ours(r["T"], shape)
        t_all = total(ks, gpu)
        worst = max(ks, key=lambda k: k.time(gpu))
        branches = branch_budget(r["T"], shape, gpu)
        del branches["nsa_total"], branches["fa2_total"]
        branch = max(branches, key=branches.get)
        rows.append({
            "miss": "nsa_over_fa2", "gpu": r["gpu"], "shape": r["shape"], "T": r["T"],
            "fwd_bwd": r["fwd_bwd"], "target": TARGETS[r["T"]],
            "largest_kernel": worst.name, "kernel_share": round(worst.time(gpu) / t_all, 3),
            "largest_branch": branch, "branch_share": round(branches[branch] / 1e3 / t_all, 3),
        })  # fmt: skip
    return rows
