"""A per-kernel cost model of NSA attention on A100/H100/H200, calibrated on published GPU figures
and corrected by the GPU measurements of our kernels (H100 and H200, 2026-11-26).

Owns the `--model` output of bench/attention.py: calibration rows (the model reproducing published
NSA and FlashAttention-2 measurements at their shapes), prediction rows (our triton backend over
FlashAttention-2, fwd / bwd / fwd+bwd, A100, H100 and H200, M7C and the NSA paper's shape, with the
launch settings the code ships for each GPU's compute capability) and per-kernel
rows (FLOPs issued incl. padded rows, DRAM and L2 bytes incl. re-reads, programs, waves). It imports
nothing from nsa (no torch): the kernel structure is written out here from nsa/attention/triton/*.py,
so a change of structure there must be mirrored here (docs/attention.md, "Time budget").

Two ways a kernel is priced:
- The published kernels (calibration only: `published_nsa`, `flash2(kind="fa2" | "dense")`) by
  generic kinds: time = max(FLOPs / (peak x EFF[kind]), DRAM bytes / (bw x 0.8), L2 bytes / L2 bw,
  scalar ops / (CUDA-core rate x 0.3)), stretched by wave quantisation and by the longest program,
  plus 4 us per launch. EFF: `fa2_fwd` / `fa2_bwd` FlashAttention-2's CUDA kernels (A100 0.55 / 0.45,
  FA2 paper, Dao 2023, arXiv 2307.08691, Fig. 4-6, the causal low end; H100 0.39 / 0.34, flash-attn on
  H800 from Scalable-Flash-NSA's README: 182.9 ms forward = 385 TFLOP/s, 523.7 ms backward = 336);
  `dense_fwd` / `dense_bwd` Triton flash-style tiles (A100 0.40 / 0.32, H100 as FA2, assumed);
  `gather_fwd` / `gather_bwd` query-major sparse tiles, fitted so the calibration rows come within
  +-30 % (printed beside the predictions).
- Our kernels (`ours`) and the baseline SDPA flash (`flash2(kind="sdpa")`) by their own kinds, one
  per compiled configuration, priced from the measurements (H100_COST, H200_COST and
  H200_FINAL_COST, fitted by bench/attention_fit.py on bench/gpu/2026-11-26-h100-speed.json, for the
  kernels rewritten since on bench/gpu/2026-11-26-h200-speed-after.json, the selected reduction on
  bench/gpu/2026-11-26-h200-speed-final.json; H100 and H200 share them): time = issued MMA FLOPs /
  (peak x eff) + SM cycles per program, per loop step, per token-step or per gathered byte /
  (SMs x clock), floored by DRAM, plus a serial tail and launches. Launch settings changed after
  the runs (ce226a4) are tags of a kind, each priced by one factor from the final kernel probe
  (CONFIG_FACTOR). On A100 the efficiencies stay the published calibration's (A100_KIND) and the
  cycle costs carry over per SM cycle (kind_cost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache


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
    clock: float  # SM clock under load (Hz): turns the fitted per-SM cycle costs (COST) into time
    regs_per_sm: int = 65536
    cc: int = 90  # compute capability: the kernels pick some launch settings by it (shipped_warps_sel)


# L2: A100's whitepaper gives 5120 B/clk of L2 read bandwidth (7.2 TB/s at 1.41 GHz); H100 SXM
# scaled by SM count and clock (132 SMs x 1.83 GHz vs 108 x 1.41: 1.6x). Both are peaks; the model
# takes 75 % of them (Chips and Cheese's H100 PCIe microbenchmark reached about that share).
GPUS: dict[str, Gpu] = {
    "A100": Gpu("A100-SXM4-80GB", "ampere", 312e12, 2.039e12, 0.75 * 7.2e12, 108, 19.5e12, 1.41e9, cc=80),
    # 1.98 GHz: the max SM clock the first GPU run's H100 reported (bench/gpu/*-h100-*.json, env).
    "H100": Gpu("H100-SXM5", "hopper", 989e12, 3.35e12, 0.75 * 11.5e12, 132, 67e12, 1.98e9),
    # H800: an H100 SXM with cut interconnect; same SMs, clocks, HBM3 (Scalable-Flash-NSA's GPU).
    "H800": Gpu("H800-SXM5", "hopper", 989e12, 3.35e12, 0.75 * 11.5e12, 132, 67e12, 1.98e9),
    # H200 SXM: H100's SMs, clocks, L2 and tensor peak with 4.8 TB/s HBM3e (datasheet). The H200 run
    # (bench/gpu/2026-11-26-h200-speed-after.json) agrees: 132 SMs at 1980 MHz max (its env), every
    # compute-bound kernel that did not change within 5 % of its H100 time from 8k up, and the
    # memory-bound gate mix at 0.70-0.73x of it (3.35 / 4.8 = 0.70).
    "H200": Gpu("H200-SXM", "hopper", 989e12, 4.8e12, 0.75 * 11.5e12, 132, 67e12, 1.98e9),
}

EFF: dict[str, dict[str, float]] = {
    "ampere": {"fa2_fwd": 0.55, "fa2_bwd": 0.45, "dense_fwd": 0.40, "dense_bwd": 0.32,
               "gather_fwd": 0.40, "gather_bwd": 0.11},
    "hopper": {"fa2_fwd": 0.39, "fa2_bwd": 0.34, "dense_fwd": 0.39, "dense_bwd": 0.34,
               "gather_fwd": 0.20, "gather_bwd": 0.17},
}  # fmt: skip
DRAM_EFF, ALU_EFF, LAUNCH_S = 0.8, 0.3, 4e-6

# Our own kernels' kinds, one per compiled configuration (the window and compressed kernels pick
# their tiles by head_dim <= 64 or not: "@64" and "@128" are different kernels), priced from GPU
# measurements (bench/attention_fit.py fits them, docs/attention.md "Time budget" says why each is
# what it is). Per kind: `eff`, the fraction of the bf16 tensor-core peak its issued MMAs run at,
# and SM cycles per unit of the kernel's work counts (Kernel.work): "programs" (a program's prologue
# and epilogue), "steps" (one iteration of its main loop beyond the MMAs), "token_steps" (per token
# per step: the selection's top-n merge), "gather_bytes" (per byte of K/V loaded by data-dependent
# block ids, unpipelined). Time = MMA time + cycles / (SMs x clock), floored by the DRAM time.
# H100 and H200 share these prices: same SMs, clocks, L2 and tensor peak (only DRAM differs, and
# the DRAM floor takes each GPU's own bandwidth).
# H100_COST: fitted on the first GPU run (H100, bench/gpu/2026-11-26-h100-speed.json, the kernels of
# RUN_BUILDS' entry for it): every kind whose kernel has not changed since, and the two that have
# (kept for that run's check and the `before_split` what-if): `cmp_fused` + `cmp_topn`, the fused
# two-pass compressed forward (before 45bc233), and `sel_dkdv_w8`, the key-major dK/dV at 8 warps
# (before 4e22175).
H100_COST: dict[str, dict[str, float]] = {
    "cmp_fused": {"programs": 4600, "steps": 2510},  # the fused forward (_cmp_select_work, 2 passes)
    "cmp_topn": {"token_steps": 1950},  # its top-n merge, per token per pass-2 step
    "cmp_dq@64": {"eff": 0.56, "programs": 5100},
    "cmp_dq@128": {"eff": 0.22, "programs": 1170},
    "cmp_dkv": {"eff": 0.134},
    "forced_fwd": {"eff": 0.169},
    "forced_dq": {"eff": 0.205},
    "tok_fwd": {"gather_bytes": 0.065},
    "tok_dq": {"gather_bytes": 0.060},
    "sel_dkdv_w8": {"eff": 0.083},
    "win_fwd@64": {"eff": 0.246},
    "win_fwd@128": {"eff": 0.423},
    "win_dq": {"eff": 0.29},
    "win_dkdv": {"eff": 0.196},
    "sdpa_fwd": {"eff": 0.34, "programs": 5300},
    "sdpa_bwd": {"eff": 0.31, "programs": 43300},
}  # fmt: skip
# H200_COST: the kernels that changed after the first run, fitted on the H200 run of the split
# forward (bench/gpu/2026-11-26-h200-speed-after.json; the H100 prices above predict that run's
# unchanged kernels: docs/attention.md "Time budget"): the compressed attention `_cmp_fwd` (a flash
# kernel: eff + a program's prologue), the selection `_cmp_select` (cycles per program and per token
# per key tile: latency-bound, its MMA inside the step cost; the price of its 4-warp build, other
# warp counts scaled by SEL_WARPS) and the key-major dK/dV at 4 warps.
H200_COST: dict[str, dict[str, float]] = {
    "cmp_attn@64": {"eff": 0.277, "programs": 2410},
    "cmp_attn@128": {"eff": 0.41, "programs": 1710},
    "cmp_sel": {"programs": 1420, "token_steps": 1310},  # at 4 warps
    "sel_dkdv": {"eff": 0.142},
}  # fmt: skip
# H200_FINAL_COST: fitted on the final H200 run (bench/gpu/2026-11-26-h200-speed-final.json), for the
# one family no earlier price reproduced: the selected dK/dV's partial sum `_sel_bwd_reduce`, its
# DRAM time (x the datasheet bandwidth's) plus a serial tail (SM cycles per byte the longest program
# sums alone: block 0's, listed by every token, ceil(T / S) segment partials of 2 x 64 x D fp32).
H200_FINAL_COST: dict[str, dict[str, float]] = {
    "sel_reduce": {"dram": 0.946, "serial_bytes": 0.0971},
}  # fmt: skip
# The selection kernel's time at `warps_sel` warps over its time at 4 (the H200 probe,
# bench/gpu/2026-11-26-h200-probe-after.jsonl: 2 warps 0.675 / 0.656 / 0.635 at M7C 8k / M7C 64k /
# paper 32k, the geometric mean here). One factor per setting, not a concurrency law: the top-n
# merge is latency-bound, so fewer warps a program let more programs share an SM, but each then
# does more per thread; 8 warps took 1.98 / 1.93 at M7C and 1.50 at the paper shape, which no one
# parameter of programs per SM reproduces (nothing ships 8 warps: not priced).
SEL_WARPS: dict[int, float] = {2: 0.655, 4: 1.0}
# Launch settings changed from the build a kind's price was fitted on (ce226a4, after the runs), as
# tags of the kind ("cmp_dkv@64@w4"): the kernel's time with the tag over its time without, the
# model's own structural change (programs, steps at the new tile) divided out. Each from
# bench/gpu/2026-11-26-h200-probe-final.jsonl (one setting changed from the final run's build;
# bench/attention_fit.py `config_factors`, the geometric mean over the probed points):
# - cmp_sel@w2 / @w4: SEL_WARPS (the earlier probe; the final probe's 2-over-4 ratios 0.64-0.66 agree).
# - cmp_sel@bt2: 2 tokens a selection tile (M7C on sm_90) instead of BTF = 4: 11.88 vs 13.38 ms at
#   M7C 64k, 2.05 vs 2.12 at 8k. The model's count gives twice the programs at the same token-steps
#   (slower by the prologues); measured faster: half the rows a program at 2 warps, less per thread.
# - cmp_dkv@w4: the compressed dK/dV at 4 warps instead of 8: the compressed backward 5.54 vs 7.84 ms
#   at M7C 64k, 40.45 vs 56.57 paper 32k; dQ unchanged, so dK/dV alone at ~0.6x.
# - tok_fwd@tp4 / tok_dq@tp4: the token tiles at 4x the tokens (G 5-8, head_dim 64: 8 tokens, 64
#   rows at G 6): selected fwd 4.50 vs 5.47 ms, fwd+bwd 12.86 vs 15.16 at M7C 8k. The model's union
#   of 8 random selections gives 0.56x the gathered bytes of 2 tokens' union at 8k; measured 0.81x
#   (fwd) and 0.76x (dQ): a step over 64 rows costs ~1.4x one over 16 (its MMAs and softmax are no
#   longer hidden behind the gathers). Probed at 8k only; at 64k the union saves only 12 %, so the
#   model prices the 4x tiles ~1.2x slower there than 2 tokens (not measured).
# - tok_fwd@w2: the token-tile forward at 2 warps where its price is at 8 (head_dim > 64): paper
#   8k fwd 20.58 vs 31.60 ms, fwd+bwd 74.30 vs 85.34 (the dQ kernel keeps 4 warps).
CONFIG_FACTOR: dict[str, float] = {
    "cmp_sel@w2": SEL_WARPS[2], "cmp_sel@w4": SEL_WARPS[4], "cmp_sel@bt2": 0.899,
    "cmp_dkv@w4": 0.613, "tok_fwd@tp4": 1.451, "tok_dq@tp4": 1.387, "tok_fwd@w2": 0.618,
}  # fmt: skip
# A100: the tensor-core efficiency of each kind stays the published calibration's (EFF["ampere"] of
# its generic kind: sm_80 runs these tiles as mma.sync, the instruction its peak is quoted for, so
# the Hopper shortfall below 64-row tiles does not carry over); the cycle costs carry over per SM
# cycle (latency- and CUDA-core-bound work: same instruction mix, ~same L2 latency in cycles), except
# for the baseline: FA2's published efficiency is its whole kernels' time.
A100_KIND = {
    "cmp_fused": "dense_fwd", "cmp_topn": "dense_fwd", "cmp_attn": "dense_fwd", "cmp_sel": "dense_fwd",
    "cmp_dq": "dense_bwd", "cmp_dkv": "dense_bwd",
    "forced_fwd": "dense_fwd", "forced_dq": "dense_bwd", "tok_fwd": "gather_fwd", "tok_dq": "gather_fwd",
    "sel_dkdv": "gather_bwd", "sel_dkdv_w8": "gather_bwd",
    "win_fwd": "dense_fwd", "win_dq": "dense_bwd", "win_dkdv": "dense_bwd",
    "sdpa_fwd": "fa2_fwd", "sdpa_bwd": "fa2_bwd", "sel_reduce": "memory",
}  # fmt: skip
# The kernel builds the committed GPU runs measured (flags of `ours`), by file name: a speed record
# does not name its kernels' launch settings, so a fit or a check of a committed run takes them from
# here; a run of the current kernels needs no entry (ours' defaults: what the code ships).
RUN_BUILDS: dict[str, dict] = {
    "2026-11-26-h100-speed.json": {"split_cmp_fwd": False, "warps_dkdv": 8, "before_ce226a4": True},
    # before warps_sel 2 shipped at sm_90
    "2026-11-26-h200-speed-after.json": {"warps_sel": 4, "before_ce226a4": True},
    # 76bdb6b's kernels: the selection at 2 warps for M7C and the paper shape, BTF tokens, the
    # compressed dK/dV at 8 warps, the base token tiles, their forward at 8 warps at head_dim 128
    "2026-11-26-h200-speed-final.json": {"before_ce226a4": True},
    # the probes' base builds (bench/kernel_probe.py: each variant one setting changed from it)
    "2026-11-26-h200-probe-after.jsonl": {"warps_sel": 4, "before_ce226a4": True},
    "2026-11-26-h200-probe-final.jsonl": {"before_ce226a4": True},
}


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
    work: dict = field(default_factory=dict)  # counts the fitted cycle costs apply to (COST)

    def time(self, gpu: Gpu) -> float:
        cost = kind_cost(self.kind, gpu)
        serial = 0.0
        if cost is None:
            eff = EFF[gpu.arch].get(self.kind, 1.0)
            t = max(
                self.flops / (gpu.peak * eff),
                self.dram / (gpu.dram * DRAM_EFF),
                self.l2 / gpu.l2,
                self.alu / (gpu.alu * ALU_EFF),
            )
        else:
            eff = cost.get("eff") or 1.0
            t = self.flops / (gpu.peak * eff) if cost.get("eff") else 0.0
            parallel = {
                f: c for f, c in cost.items() if f not in ("eff", "dram") and not f.startswith("serial_")
            }
            t += sum(self.work.get(f, 0.0) * c for f, c in parallel.items()) / (gpu.sms * gpu.clock)
            if "dram" in cost:  # a fitted DRAM time replaces the floor
                t += cost["dram"] * self.dram / gpu.dram
            else:
                t = max(t, self.dram / (gpu.dram * DRAM_EFF))
            # serial_*: cycles of the longest program alone on its SM after the rest (not / SMs)
            serial = (
                sum(self.work.get(f, 0.0) * c for f, c in cost.items() if f.startswith("serial_")) / gpu.clock
            )
        slots = gpu.sms * self.per_sm
        waves = math.ceil(self.programs / slots)
        if self.flops and self.programs and waves < 8:  # a short grid idles part of the GPU in its last wave
            t *= waves * slots / self.programs
        if self.crit:  # the longest program runs alone on its SM at the end
            t = max(t, self.crit / (gpu.peak * eff / gpu.sms))
        return t + serial + LAUNCH_S * self.launches

    def row(self, gpu: Gpu) -> dict:
        slots = gpu.sms * self.per_sm
        return {
            "kernel": self.name, "branch": self.branch, "dir": self.direction, "kind": self.kind,
            "gflop": round(self.flops / 1e9, 2), "gflop_useful": round(self.useful / 1e9, 2),
            "dram_mb": round(self.dram / 1e6, 1), "l2_mb": round(self.l2 / 1e6, 1),
            "programs": self.programs or None, "waves": round(self.programs / slots, 2) if self.programs else None,
            "ms": round(self.time(gpu) * 1e3, 4),
        }  # fmt: skip


def kind_parts(kind: str) -> tuple[str, str, list[str]]:
    """A kind's base, its price's key (base, or base@config where prices differ by head_dim) and its
    launch-setting tags: "cmp_dkv@64@w4" -> ("cmp_dkv", "cmp_dkv@64", ["w4"])."""
    base, *rest = kind.split("@")
    cfg = [p for p in rest if p.isdigit()]
    return base, base + "".join(f"@{c}" for c in cfg), [p for p in rest if not p.isdigit()]


def config_factor(kind: str) -> float:
    """The kind's time with its launch-setting tags over its fitted price's (1 without tags)."""
    base, _, tags = kind_parts(kind)
    f = 1.0
    for tag in tags:
        key = f"{base}@{tag}"
        if key not in CONFIG_FACTOR:
            priced = sorted(k for k in CONFIG_FACTOR if k.startswith(base + "@"))
            raise ValueError(f"{kind}: {key} is not priced (CONFIG_FACTOR has {priced})")
        f *= CONFIG_FACTOR[key]
    return f


def warps_factor(kind: str) -> float:
    """The selection kernel's time at its warps over its 4-warp price (config_factor's warps part)."""
    return config_factor(kind)


def kind_cost(kind: str, gpu: Gpu) -> dict[str, float] | None:
    """The fitted cost of one of our kernel kinds on `gpu` (None: a generic kind, priced by EFF), its
    launch-setting tags applied: cycles x the factor everywhere, the efficiency / the factor on Hopper
    (on A100 the efficiency is the published calibration's, not our kernel's: left as it is)."""
    base, key, _ = kind_parts(kind)
    if base not in A100_KIND:
        return None
    table = {**H100_COST, **H200_COST, **H200_FINAL_COST}
    fitted = dict(table.get(key) or table.get(base, {}))
    f = config_factor(kind)
    if f != 1.0:
        fitted = {t: (c / f if t == "eff" else c * f) for t, c in fitted.items()}
    if gpu.arch == "hopper":
        return fitted
    cycles = {t: c for t, c in fitted.items() if t != "eff"}
    if base.startswith("sdpa"):  # FA2's published efficiency is its whole kernels' time, prologues included
        return {"eff": EFF[gpu.arch][A100_KIND[base]]}
    if "eff" not in fitted:  # the fitted cycles include its MMAs (the compressed forward, the gathers)
        return cycles
    return {"eff": EFF[gpu.arch][A100_KIND[base]], **cycles}


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


def _cfg(D: int) -> str:
    """The compiled configuration a kernel kind picks by head_dim (tiles differ above 64)."""
    return "64" if D <= 64 else "128"


def _sel_tiles(s: Shape) -> dict[str, int]:
    """The selection kernel's tile (compressed.py `_config`): BTF tokens x GPF padded heads as rows,
    key tiles of BJ selection blocks (BJ * RP compressed keys: 64 at l' / d = 4)."""
    GPF = max(2, _p2(s.G))
    RP = _p2(s.lp // s.d)
    hmax = -(-(s.bl // s.d - 1) // (s.lp // s.d))
    return {
        "GPF": GPF,
        "BTF": max(1, min(8, 32 // GPF)),
        "RP": RP,
        "BJ": max(_p2(max(1, 64 // RP)), _p2(hmax)),
    }


@lru_cache(maxsize=256)
def _cmp_select_work(T: int, s: Shape, passes: int = 1, bt: int | None = None) -> dict[str, float]:
    """_cmp_select's structure for one (batch, KV head), as compressed.py launches it: ceil(T / bt)
    programs of bt tokens (`bt_sel`; None: BTF) x GPF rows; a program walks the key tiles up to its
    last token's selection block, one QK product, the group sum, Eq. 9 and the top-n merge each.
    `passes` = 2: the fused forward before 45bc233, whose pass 1 walked the same tiles for the row
    statistics (at BTF)."""
    c = _sel_tiles(s)
    BT, BJ = bt or c["BTF"], c["BJ"]
    steps = 0
    for j in range(-(-T // s.lp)):  # tiles whose last token lies in selection block j (BT divides l')
        tiles_j = -(-min(T, (j + 1) * s.lp) // BT) - -(-(j * s.lp) // BT)
        steps += passes * tiles_j * -(-(j + 1) // BJ)
    return {"tiles": -(-T // BT), "steps": steps, "tokens": BT, "rows": BT * c["GPF"], "keys": BJ * c["RP"]}


@lru_cache(maxsize=256)
def _cmp_attn_work(T: int, s: Shape) -> dict[str, float]:
    """_cmp_fwd's structure for one (batch, KV head) since 45bc233: flash tiles of BM consecutive
    (token, head) rows (128 at head_dim <= 64, else 64), no padded heads, BN compressed keys a step
    (64 / 32) up to the tile's last token's visible keys. `keys`: the keys issued over all tiles."""
    BM, BN = (128, 64) if s.D <= 64 else (64, 32)
    nc = max(0, (T - s.bl) // s.d + 1)
    tiles = -(-T * s.G // BM)
    steps = 0
    for i in range(tiles):
        t_last = min((i * BM + BM - 1) // s.G, T - 1)
        n_vis = min(nc, (t_last - (s.bl - 1)) // s.d + 1) if t_last >= s.bl - 1 else 0
        steps += -(-n_vis // BN)
    return {"tiles": tiles, "steps": steps, "rows": BM, "keys": steps * BN}


def shipped_launch(s: Shape, cc: int, before_ce226a4: bool = False) -> dict[str, int]:
    """The launch settings the model's kernels take from compressed.py's and selected.py's `_config`
    (a test holds them equal): the selection's warps and tokens a tile (`warps_sel`, `bt_sel`), the
    compressed dK/dV's warps, the token tiles' tokens (`tp`) and forward warps (`warps_tok`).
    Since ce226a4: the selection at 2 warps only at head_dim <= 64 (16 padded heads a token, or 8 on
    sm_90; 2 spilled at the paper's G 16 x D 128 on triton 3.6), 2 tokens a tile at 8 padded heads
    on sm_90 (M7C); dK/dV 4 warps; the token-tile forward 2 warps at head_dim > 64. (ce226a4 also
    took 4x the tokens at G 5-8, head_dim <= 64; taken back after this model priced it slower at
    B = 1 from 32k: the `token_tiles_x4` what-if.) before_ce226a4: the kernels of the final H200
    run (and of every earlier one but the selection's warps): 2 warps at 16 heads a token or 8 on sm_90 at head_dim <= 64,
    BTF tokens, dK/dV 8 warps, the base token tiles, the forward at 8 warps past head_dim 64."""
    c = _sel_tiles(s)
    gpf, small = c["GPF"], s.D <= 64
    base_tp = _tokens_per_tile(s.G)
    if before_ce226a4:
        return {
            "warps_sel": 2 if gpf >= 16 or (cc >= 90 and gpf == 8 and small) else 4,
            "bt_sel": c["BTF"], "warps_cmp_dkv": 8, "tp": base_tp, "warps_tok": 4 if small else 8,
        }  # fmt: skip
    return {
        "warps_sel": 2 if small and (gpf >= 16 or (cc >= 90 and gpf == 8)) else 4,
        "bt_sel": 2 if small and cc >= 90 and gpf == 8 else c["BTF"],
        "warps_cmp_dkv": 4,
        "tp": base_tp,
        "warps_tok": 4 if small else 2,
    }  # fmt: skip


def shipped_warps_sel(s: Shape, cc: int) -> int:
    """The selection kernel's warps as compressed.py `_config` picks them (shipped_launch)."""
    return shipped_launch(s, cc)["warps_sel"]


def _sel_steps(T: int, s: Shape, TP: int, shared: bool = False) -> float:
    """Expected key steps of the query-major selected kernels (forced split) for one (batch, KV head):
    per program of TP tokens, the distinct non-forced blocks of its tokens. Token t lists
    m = min(n - 3, C) of the C = t//l' - 2 candidate blocks (fewer than n - 3 below 16 blocks: the
    short-T correction the first GPU run showed, 0.72x the steps at 2k); random tables: the union
    of TP independent draws, C (1 - (1 - m/C)^TP); shared: m."""
    steps = 0.0
    for j in range(-(-T // s.lp)):  # programs whose first token lies in block j: the same C
        C = max(0, j - 2)
        m = min(s.n - 3, C)
        if m:
            programs = -(-min(T, (j + 1) * s.lp) // TP) - -(-(j * s.lp) // TP)
            steps += programs * (m if shared or TP == 1 else C * (1 - (1 - m / C) ** TP))
    return steps


def _valid_pairs(T: int, s: Shape) -> float:
    """(token, block) pairs of valid table entries for one (batch, KV head): min(n, t//l' + 1) each."""
    return float(sum(min(s.n, j + 1) * (min(T, (j + 1) * s.lp) - j * s.lp) for j in range(-(-T // s.lp))))


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


def flash2(T: int, s: Shape, kind: str = "sdpa") -> list[Kernel]:
    """FlashAttention-2, causal GQA: 2 GEMMs forward, 5 backward, over T/2 keys per query on average.
    kind "sdpa": PyTorch SDPA's flash backend, the baseline the predictions and the GPU suite compare
    against (H100: as measured, COST; A100: FA2's published efficiency); "fa2": flash-attn's CUDA
    kernels as published (the calibration's H800 rows); "dense": a Triton port (the NSA paper's)."""
    unit = 2 * s.B * s.H * T * (T / 2 + 64) * s.D  # one GEMM over the causal triangle (+ diagonal tiles)
    act = s.B * T * s.H * s.D * 2
    kv = s.B * T * s.Hkv * s.D * 2
    progs = s.B * s.H * math.ceil(T / 128)
    w = {"programs": progs}
    return [
        Kernel("flash2_fwd", "dense", "fwd", f"{kind}_fwd", 2 * unit, 2 * unit, 2 * act + 2 * kv, programs=progs, work=w),
        Kernel("flash2_bwd", "dense", "bwd", f"{kind}_bwd", 5 * unit, 5 * unit, 4 * act + 4 * kv, programs=progs, work=w),
    ]  # fmt: skip


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
    split_cmp_fwd: bool = True,
    selection_free: bool = False,
    cc: int = 90,
    warps_sel: int | None = None,
    warps_dkdv: int = 4,
    before_ce226a4: bool = False,
    bt_sel: int | None = None,
    warps_cmp_dkv: int | None = None,
    tp: int | None = None,
    warps_tok: int | None = None,
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
    same blocks: the best case). split_cmp_fwd (built, 45bc233) the compressed forward as two kernels,
    the flash attention `_cmp_fwd` and the selection `_cmp_select` at `warps_sel` warps (None: what
    compressed.py ships for compute capability `cc`); False: the fused two-pass kernel before it
    (fold_selection=False: with its older third pass). selection_free (not built): the selection at
    no cost, a bound for any rewrite of it. warps_dkdv: the key-major selected dK/dV's warps (4 since
    4e22175; 8 before). The launch settings of ce226a4 (`shipped_launch`: warps_sel, bt_sel,
    warps_cmp_dkv, tp, warps_tok; None: what the code ships for `cc`, or with before_ce226a4 what it
    shipped before) each change the kind's tags (CONFIG_FACTOR prices them) and, for bt_sel and tp,
    the counts."""
    launch = shipped_launch(s, cc, before_ce226a4)
    given = {
        "warps_sel": warps_sel,
        "bt_sel": bt_sel,
        "warps_cmp_dkv": warps_cmp_dkv,
        "tp": tp,
        "warps_tok": warps_tok,
    }
    launch.update({f: v for f, v in given.items() if v is not None})
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
    # Backward: dO, the gates and the three branch outputs in, three branch gradients and the gates'
    # out (until the H200 run the model counted 5 of these 8 activations: 1.26-1.30x off).
    ks.append(Kernel("gate_mix_bwd", "fused", "bwd", "memory", dram=8 * act + 2 * B * T * s.H * 3 * bf))
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
    ck = _cmp_keys(T, s)
    cuse = 2 * BH * T * G * (nc / 2) * D
    kcb = BH * nc * D * bf  # compressed keys (or values) of all KV heads
    lse = 4 * BH * T * G
    table = BH * T * k * 9  # int64 block ids + valid flags
    sw = _cmp_select_work(T, s, 1 if split_cmp_fwd else (2 if fold_selection else 3))
    sel_rows, BT = sw["rows"], sw["tokens"]
    sel_progs = BH * sw["tiles"]
    if split_cmp_fwd:
        # The attention (_cmp_fwd): one flash pass, QK + PV a key step over BM (token, head) rows of
        # no padding, 4 warps; priced as a flash kernel (eff + a program's prologue, cmp_attn).
        aw = _cmp_attn_work(T, s)
        aprog = BH * aw["tiles"]
        ks.append(Kernel("cmp_fwd", "compressed", "fwd", f"cmp_attn@{_cfg(D)}", 4 * BH * aw["rows"] * aw["keys"] * D,
                         2 * cuse, 2 * act + 2 * kcb + lse, l2=2 * aprog * (aw["keys"] / aw["tiles"]) * D * bf,
                         programs=aprog, per_sm=1, work={"programs": aprog}))  # fmt: skip
        # The selection (_cmp_select): per key tile of BJ * RP keys one QK product over BTF x GPF rows,
        # p = exp2(s - lse) from the attention's row statistics, the group sum, Eq. 9 and the top-n
        # merge of the running top-W for each half of the tokens: latency-bound CUDA-core and
        # shared-memory work that hides nothing at a few programs an SM, priced per program and per
        # token per key tile (cmp_sel, its MMA inside; the warps' factor SEL_WARPS). No V, no output.
        bt = launch["bt_sel"]
        sw = _cmp_select_work(T, s, 1, bt)
        sel_rows, sel_progs = sw["rows"], BH * sw["tiles"]
        tags = f"@w{launch['warps_sel']}" + (f"@bt{bt}" if bt != _sel_tiles(s)["BTF"] else "")
        sunit = 2 * BH * sw["steps"] * sel_rows * sw["keys"] * D
        swork = {"programs": sel_progs, "token_steps": BH * sw["steps"] * bt}
        if not selection_free:
            ks.append(Kernel("cmp_select", "selection", "fwd", f"cmp_sel{tags}", sunit, cuse,
                             act + kcb + lse + table, l2=BH * sw["steps"] * sw["keys"] * D * bf,
                             programs=sel_progs, work=swork))  # fmt: skip
    else:
        # The fused kernel before 45bc233 (its structure `_cmp_select_work` at 2 passes): per tile of
        # BTF tokens x GPF rows, pass 1 the row statistics (QK), pass 2 the output (QK, PV) and the
        # selection on the same p; fold_selection=False: the kernel before 2026-11-25, whose third
        # pass added one more QK product and read per key tile (1.5x the steps). Priced per tile and
        # per key step of either pass (cmp_fused) and per token per pass-2 step (cmp_topn: the merge).
        passes = 2 if fold_selection else 3
        cunit = 2 * BH * T * (sel_rows // BT) * ck * D
        ks.append(Kernel("cmp_fwd", "compressed", "fwd", f"cmp_fused@{_cfg(D)}", (passes + 1) * cunit, 3 * cuse,
                         2 * act + 2 * kcb + lse, l2=(passes + 1) * sel_progs * ck * D * bf, programs=sel_progs,
                         work={"programs": sel_progs, "steps": BH * sw["steps"]}))  # fmt: skip
        tokwork = {} if selection_free else {"token_steps": BH * sw["steps"] / passes * BT}
        ks.append(Kernel("cmp_fwd_topn", "selection", "fwd", "cmp_topn", dram=table, launches=0,
                         work=tokwork))  # fmt: skip
    # Backward: dQ (3 units) and dK/dV (4 units) over query tiles of consecutive (token, head) rows, no
    # padded heads (unpadded_cmp_bwd=False: G padded to GP, the kernels before 2026-11-25).
    RB = G if unpadded_cmp_bwd else _p2(G)
    dq_rows = 128 if D <= 64 else 32
    bunit = 2 * BH * T * RB * ck * D
    dq_progs = BH * math.ceil(T * RB / dq_rows)
    ks.append(Kernel("cmp_bwd_dq", "compressed", "bwd", f"cmp_dq@{_cfg(D)}", 3 * bunit, 3 * cuse,
                     4 * act + 2 * BH * nc * D * bf, l2=dq_progs * ck * D * bf * 2,
                     programs=dq_progs, per_sm=1, work={"programs": dq_progs}))  # fmt: skip
    # dK/dV per tile of 32 compressed keys: tile i is seen by the queries after it, so tile 0 carries
    # T query rows while the last carries almost none. Each tile's query tiles are cut into SPLIT = 8
    # parts (one program each, fp32 partials summed in order by a second kernel), so the longest
    # program has 1/8 of tile 0's work; split=1 models the kernel before 2026-11-25.
    split = 8 if balanced_dkv else 1
    dkv_tiles = BH * max(1, math.ceil(nc / 32))
    part = dkv_tiles * split * 32 * D * 4 * 2 if split > 1 else 0
    if launch["warps_cmp_dkv"] not in (4, 8):
        raise ValueError(f"warps_cmp_dkv={launch['warps_cmp_dkv']}: priced at 8 (cmp_dkv) and 4 (@w4) only")
    dkv_tag = "@w4" if launch["warps_cmp_dkv"] == 4 else ""  # the prices were fitted at 8 warps
    ks.append(Kernel("cmp_bwd_dkv", "compressed", "bwd", f"cmp_dkv@{_cfg(D)}{dkv_tag}", 4 * bunit, 4 * cuse,
                     2 * BH * nc * D * bf * 2 + 2 * part, l2=dkv_tiles * (T / 2) * RB * D * bf * 2,
                     programs=dkv_tiles * split, per_sm=2, crit=4 * 2 * T * RB * 32 * D / split,
                     launches=1 + (split > 1), work={"programs": dkv_tiles * split}))  # fmt: skip
    # Selected, forward and dQ: query-major, rows = TP tokens x G padded to 16, one 64-key step per
    # distinct block of the program's tokens; each step gathers that block's K and V (block ids from
    # the table: loads not pipelined across steps, priced per byte, kinds tok_fwd / tok_dq). dQ has
    # the forward's loop (no atomics) plus one more product per step.
    # keymajor (not built): FSA's order for both, rows = (pair, head) in full tiles of 64, a
    # statistics pass (QK) before the output pass (QK, PV), fp32 partial rows per pair reduced after;
    # priced as our key-major dK/dV (sel_dkdv), the same loop over gathered rows.
    SR = 64 if keymajor_sel else _p2(G, 16)
    TP = 1
    npairs = BH * _valid_pairs(T, s)
    one_token_steps = BH * T * _sel_keys(T, s) / s.lp  # every entry, one token a program
    if forced_tiles:
        # Forced blocks (3 per token once T >= 3 l'; all of them below) leave the query-major kernels:
        # those read only the other blocks, all whole; a dense kernel per 64 rows (tokens x G,
        # contiguous) runs block 0, the previous and the own block (causal) for the tile's tokens,
        # and hands its fp32 state (o, lse) to the gather kernel (DRAM write + read).
        # nsa/attention/triton/selected_forced.py: grid (ceil(T*G/64), BH), 4 warps; registers
        # (gpucheck, triton 3.9, G6 D64): forward 168 on sm_80 / 124 on sm_90, dQ 254 / 125.
        f = min(3, ns)
        fk = min(T, f * s.lp)
        fuse = 2 * BH * T * G * (fk - s.lp / 2) * D
        fissue = 2 * BH * math.ceil(T * G / 64) * 64 * fk * D
        fprog = BH * math.ceil(T * G / 64)
        fl2 = fprog * fk * D * bf * 2
        state = BH * T * G * (D + 1) * 4  # fp32 o + lse (forward), fp32 dQ part + delta (backward)
        ks.append(Kernel("sel_forced_fwd", "selected", "fwd", "forced_fwd", 2 * fissue, 2 * fuse,
                         act + state + BH * T * k * 9, l2=fl2, programs=fprog, per_sm=_per_sm(168, 128),
                         work={"programs": fprog}))  # fmt: skip
        ks.append(Kernel("sel_forced_dq", "selected", "bwd", "forced_dq", 3 * fissue, 3 * fuse,
                         3 * act + state + BH * T * k * 9, l2=fl2, programs=fprog, per_sm=_per_sm(254, 128),
                         work={"programs": fprog}))  # fmt: skip
        one_token_steps = BH * _sel_steps(T, s, 1)
    state_in = BH * T * G * (D + 1) * 4 if forced_tiles else 0  # the gather kernels resume from it
    suse = 2 * one_token_steps * G * s.lp * D
    if keymajor_sel:
        sunit = suse * (math.ceil(one_token_steps * G * s.lp / SR) * SR) / (one_token_steps * G * s.lp)
        partial = one_token_steps * G * (D + 2) * 4 * 2
        sl2 = one_token_steps * G * D * bf * 2
        fwd_units, dq_units, launches = 3, 3, 3
        kinds = (f"sel_dkdv@{_cfg(D)}",) * 2
        progs = math.ceil(one_token_steps * G * s.lp / 64 / 64)
        gathered = 0.0
    else:
        # Token tiles (forced path, nsa/attention/triton/selected_query.py): TP tokens a program
        # (TP*G <= 16 rows), one 64-key step per distinct non-forced block of the tile (random
        # selections: the expected union, _sel_steps; adjacent tokens selecting the same blocks: the
        # one-token count / TP). Each of the TP*n table entries costs a [16,16] compare.
        # Since ce226a4 (launch "tp"): 4x the tokens at G 5-8, head_dim <= 64 (8 tokens, 64 rows at G 6),
        # and the forward at 2 warps past head_dim 64 (launch "warps_tok"; priced at 8 there, 4 below).
        TP = launch["tp"] if forced_tiles and token_tiles else 1
        SR = _p2(TP * G, 16)
        steps = BH * _sel_steps(T, s, TP, selections == "shared") if forced_tiles else one_token_steps
        sunit = 2 * steps * SR * s.lp * D
        partial = 0
        sl2 = gathered = steps * s.lp * D * bf * 2
        fwd_units, dq_units, launches = 2, 3, 1
        mult = TP // _tokens_per_tile(G) if TP > 1 else 1
        tp_tag = f"@tp{mult}" if mult > 1 else ""
        w_base = 4 if D <= 64 else 8
        w_tag = "" if launch["warps_tok"] == w_base else f"@w{launch['warps_tok']}"
        kinds = (f"tok_fwd{tp_tag}{w_tag}", f"tok_dq{tp_tag}")
        progs = BH * math.ceil(T / TP)
    ks.append(Kernel("sel_fwd", "selected", "fwd", kinds[0], fwd_units * sunit, 2 * suse,
                     2 * act + 2 * kvb + BH * T * k * 9 + 4 * BH * T * G + partial + state_in, l2=sl2,
                     programs=progs, per_sm=_per_sm(96, 128), launches=launches,
                     work={"gather_bytes": gathered, "programs": progs}))  # fmt: skip
    ks.append(Kernel("sel_bwd_dq", "selected", "bwd", kinds[1], dq_units * sunit, 3 * suse,
                     4 * act + 2 * kvb + BH * T * k * 9 + partial + state_in, l2=sl2,
                     programs=progs, per_sm=_per_sm(98, 128), launches=launches - 1,
                     work={"gather_bytes": gathered, "programs": progs}))  # fmt: skip
    # Reverse index: one stable torch.sort of BH*T*k int64 keys (radix: ~8 passes over key + index),
    # searchsorted, cumsum and ~12 small ops.
    ks.append(Kernel("sel_reverse_index", "selected", "bwd", "memory", dram=BH * T * k * 256, launches=16))
    # dK/dV key-major: rows = (pair, head) of the valid pairs (min(n, t//l' + 1) a token), BR = 64 per
    # step (32 at head_dim > 64), full tiles for any G; each row's q and dO gathered by the sorted pair
    # list; partial dK/dV per segment in fp32, summed by the reduction kernel.
    BR = 32 if D > 64 else 64
    seg = min(2048, max(16, _p2(T) // 4))
    nseg = BH * ns + math.ceil(BH * T * k / seg)
    prow = npairs * G
    kunit = 2 * math.ceil(prow / BR) * BR * s.lp * D
    part = nseg * s.lp * _p2(D, 16) * 4 * 2
    if warps_dkdv not in (4, 8):
        raise ValueError(f"warps_dkdv={warps_dkdv}: priced at 4 (sel_dkdv) and 8 (sel_dkdv_w8) only")
    dkind = f"sel_dkdv{'_w8' if warps_dkdv == 8 else ''}@{_cfg(D)}"
    ks.append(Kernel("sel_bwd_dkdv", "selected", "bwd", dkind, 4 * kunit,
                     4 * 2 * prow * s.lp * D, 2 * kvb + part, l2=prow * D * bf * 2 + prow * 8, programs=nseg,
                     per_sm=1, work={"programs": nseg}))  # fmt: skip
    # The reduction: one program a (batch, KV head, block) sums its segments' partials in order; block
    # 0 is listed by every token, so its program alone sums ceil(T / seg) of them (the serial tail).
    tail = -(-T // seg) * 2 * s.lp * _p2(D, 16) * 4
    ks.append(Kernel("sel_bwd_reduce", "selected", "bwd", "sel_reduce", dram=part + 2 * kvb, programs=BH * ns,
                     work={"serial_bytes": tail}))  # fmt: skip
    # Window: rows = tokens x G (no padding), keys = the band plus the tile overhang; tiles by head_dim
    # (window._configs: forward 128 rows x 64 / 32 keys, dQ 128 / 64 x 64, dK/dV 64 / 32 keys).
    wk = min(T, s.w + 128 / G + 64)
    wunit = 2 * BH * T * G * wk * D
    wuse = 2 * BH * T * G * min(T, s.w) * D
    wprog = BH * math.ceil(T * G / 128)
    ks.append(Kernel("win_fwd", "window", "fwd", f"win_fwd@{_cfg(D)}", 2 * wunit, 2 * wuse, 2 * act + 2 * kvb,
                     l2=wprog * wk * D * bf * 2, programs=wprog, per_sm=1, work={"programs": wprog}))  # fmt: skip
    ks.append(Kernel("win_bwd_dq", "window", "bwd", f"win_dq@{_cfg(D)}", 3 * wunit, 3 * wuse, 4 * act + 2 * kvb,
                     l2=wprog * wk * D * bf * 2, programs=wprog, per_sm=1, work={"programs": wprog}))  # fmt: skip
    wbn = 64 if D <= 64 else 32
    wdk = min(T, s.w + wbn)
    wdprog = BH * math.ceil(T / wbn)
    ks.append(Kernel("win_bwd_dkdv", "window", "bwd", f"win_dkdv@{_cfg(D)}", 4 * 2 * BH * T * G * wdk * D,
                     2 * wuse, 2 * act + 4 * kvb, l2=wdprog * wdk * G * D * bf * 2, programs=wdprog, per_sm=1,
                     work={"programs": wdprog}))  # fmt: skip
    # Autograd sums q's gradient from the three branches (each takes the same rotated q): two adds.
    ks.append(Kernel("q_grad_sum", "fused", "bwd", "memory", dram=2 * 3 * act, launches=2))
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
        fa, ns = flash2(T, shape, "fa2"), published_nsa(T, shape, score_pass=True)
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


PREDICTED_GPUS = ("A100", "H100", "H200")


def ours_on(T: int, s: Shape, gpu: Gpu, **flags) -> list[Kernel]:
    """`ours` as the code builds it for `gpu` (launch settings picked by its compute capability)."""
    return ours(T, s, cc=gpu.cc, **flags)


def prediction_rows(Ts: list[int]) -> list[dict]:
    rows = []
    for gname in PREDICTED_GPUS:
        gpu = GPUS[gname]
        for sname, shape in SHAPES.items():
            for T in Ts:
                fa, ns = flash2(T, shape), ours_on(T, shape, gpu)
                r = {"prediction": "nsa_over_fa2", "gpu": gname, "shape": sname, "T": T}
                for d in ("fwd", "bwd", None):
                    r[d or "fwd_bwd"] = round(total(ns, gpu, d) / total(fa, gpu, d), 3)
                rows.append(r)
    return rows


def kernel_rows(Ts: list[int], shape_names=("m7c",), gpus=PREDICTED_GPUS) -> list[dict]:
    rows = []
    for gname in gpus:
        gpu = GPUS[gname]
        for sname in shape_names:
            shape = SHAPES[sname]
            for T in Ts:
                ks = ours_on(T, shape, gpu)
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
    for k in ours_on(T, shape, gpu):
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
    "before_split": {"split_cmp_fwd": False, "warps_dkdv": 8},  # the kernels of the first H100 run
    "before_fold_selection": {"split_cmp_fwd": False, "fold_selection": False},  # a third pass too
    "before_unpadded_cmp_bwd": {"unpadded_cmp_bwd": False},  # G padded to 8 in the compressed bwd
    "before_token_tiles": {"token_tiles": False},  # one token a query-major program
    "shared_selections": {"selections": "shared"},  # adjacent tokens select the same blocks (best case)
    "selection_free": {"selection_free": True},  # the selection at no cost (a bound for its rewrite)
    "before_ce226a4": {"before_ce226a4": True},  # the launch settings of the final H200 run
    # ce226a4's 4x token tiles (8 tokens at G 6, D 64), probed at 8k, B = 8 only (faster there); the
    # model prices them slower at B = 1 (fewer programs than slots) and at long T, so main ships 2
    "token_tiles_x4": {"tp": lambda s: _tokens_per_tile(s.G) * (4 if s.D <= 64 and 5 <= s.G <= 8 else 1)},
    "before_this_session": {
        "forced_tiles": False,
        "fold_selection": False,
        "unpadded_cmp_bwd": False,
        "split_cmp_fwd": False,
        "warps_dkdv": 8,
    },
}


def what_if_rows(Ts: list[int]) -> list[dict]:
    """NSA/FA2 fwd+bwd if the kernels were restructured as named (modelled, not built)."""
    rows = []
    for name, flags in WHAT_IF.items():
        for gname in PREDICTED_GPUS:
            gpu = GPUS[gname]
            for sname, shape in SHAPES.items():
                fl = {f: (v(shape) if callable(v) else v) for f, v in flags.items()}  # per-shape settings
                for T in Ts:
                    ratio = total(ours_on(T, shape, gpu, **fl), gpu) / total(flash2(T, shape), gpu)
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
        ks = ours_on(r["T"], shape, gpu)
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
