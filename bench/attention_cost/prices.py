"""What a kernel costs on a GPU: the datasheets, the fitted prices of our kernel kinds and the
`Kernel` record that turns counts into time.

Owns the prices of bench/attention_model.py's cost model (the package's other modules count the
kernels' work; attention_model.py prints the rows). It must not count any kernel's structure, and
it imports nothing from nsa (no torch). The fitted tables of our kinds, one per GPU run, live in
fitted.py (constants and the measurements behind them); this module prices with them and
re-exports their names.

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
  per compiled configuration, priced from the measurements (fitted.py: H100_COST, H200_COST and
  H200_FINAL_COST, fitted by bench/attention_fit.py on bench/gpu/2026-11-26-h100-speed.json, for the
  kernels rewritten since on bench/gpu/2026-11-26-h200-speed-after.json, the selected reduction on
  bench/gpu/2026-11-26-h200-speed-final.json, the launch settings shipped on a proxy's word on the
  H100 run that measured them first, bench/gpu/2026-11-26c-h100-speed.json, H100C_COST; H100 and
  H200 share them): time = issued MMA FLOPs /
  (peak x eff) + SM cycles per program, per loop step, per token-step or per gathered byte /
  (SMs x clock), floored by DRAM, plus a serial tail and launches. Launch settings changed after
  the runs (ce226a4) are tags of a kind, each priced by one factor from the final kernel probe
  or a GPU-free proxy (CONFIG_FACTOR), until a run measures them (H100C_COST, `config_price`). On A100 (kind_cost; docs/attention.md "Which terms carry over to A100"):
  - the two kernels with a GPU-free time proxy calibrated on H200 points, the selection `cmp_sel32`
    and the key-major backward `sel_keys_bwd`, from their own sm_80 SASS (A100_SASS: the proxy's
    cycles an instruction and a shared-memory access, fitted on Hopper, times the launch's dynamic
    counts from bench/a100_proxy_sass.json, sass80.py), floored by DRAM and the tensor cores;
  - the other key-major kernels (`sel_keys_fwd`, `sel_dkdv`: the same walk of gathered rows against
    one block's keys, bound by their instruction stream on Hopper) by their Hopper fit carried over
    per SM cycle, times their sm_80 over sm_90 SASS cycles a step (A100_CARRY);
  - every other kind by the published calibration's efficiency of its generic kind (A100_KIND), its
    fitted cycle costs carried over per SM cycle. `Gpu.sass` False prices all of them this way (the
    pricing before 2026-11-26: the what-if "a100_published_eff").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from .balance import balance_factor
from .fitted import (  # the fitted tables, one per GPU run (fitted.py); importable from here as before
    CONFIG_FACTOR,
    H100_COST,
    H100C_COST,
    H200_COST,
    H200_FINAL_COST,
    KEYS_COST,
    SEL_WARPS,  # noqa: F401  (re-exported: bench/attention_model.py imports it from here)
)


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
    sass: bool = True  # A100: price the proxied and key-major kinds from sm_80 SASS (False: as published)


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
    "sel_keys_fwd": "gather_bwd", "sel_keys_bwd": "gather_bwd",  # as the key-major dK/dV they extend
    "cmp_sel32": "dense_fwd", "sel_fwd_merge": "memory", "sel_dq_merge": "memory",
    "sel_index": "memory",
}  # fmt: skip
# A100 from sm_80 SASS (module docstring): the kinds priced by a proxy (-> its constants in
# bench/a100_proxy_sass.json "fit") and the kinds whose Hopper fit carries over per SM cycle (their
# recorded sm_80 and sm_90 loop steps, priced by the key-major backward proxy's constants, give the
# ratio). Assumption (docs/attention.md): Ampere and Hopper SMs issue one warp instruction a cycle
# from each of 4 schedulers and serve 128 B of shared memory a cycle, so the fitted cycles carry over;
# sm_80's mma.sync (m16n8k16, 2048 FLOP an SM cycle, half Hopper's dense peak a cycle) is priced as
# an instruction of the stream, the tensor cores only as a floor.
A100_SASS = {"cmp_sel32": "select", "sel_keys_bwd": "keys_bwd"}
A100_CARRY = ("sel_keys_fwd", "sel_dkdv")
A100_SASS_FILE = Path(__file__).resolve().parent.parent / "a100_proxy_sass.json"


@lru_cache(maxsize=1)
def a100_record() -> dict:
    """bench/a100_proxy_sass.json (bench/a100_proxy.py records it)."""
    return json.loads(A100_SASS_FILE.read_text())


def sass_seconds(work: dict, proxy: str, gpu: Gpu) -> float:
    """A launch's time by a SASS proxy (bench/select_proxy.py, bench/keys_proxy.py): scheduler cycles
    of its warp instructions and shared-memory accesses at the proxy's fitted constants, over the
    GPU's SMs x 4 schedulers; the selection's latency bound where fewer than 3 warps share a
    scheduler (`lat` cycles between two instructions of one warp)."""
    f = a100_record()["fit"][proxy]
    unit = gpu.sms * 4 * gpu.clock
    t = (f["insn"] * work["warp_insns"] + f["smem"] * work["warp_smem"]) / unit
    if f.get("lat") and work["resident_warps"] < 12:
        t = max(t, f["lat"] * work["warp_insns"] / (work["resident_warps"] / 4) / unit)
    return t


def carry_key(kind: str) -> str:
    """The carry record of a kind: its own where its tags change the compiled step (the keys forward's
    mask-free walk, "sel_keys_fwd@64@free"), else its key's ("sel_dkdv@64")."""
    return kind if kind in a100_record()["carry"] else kind_parts(kind)[1]


def carry_ratio(key: str) -> float | None:
    """sm_80 over sm_90 scheduler cycles of one loop step of a carried-over kind ("base@cfg"), both
    at the key-major backward proxy's constants; None: no record."""
    rec = a100_record()["carry"].get(key)
    if rec is None:
        return None
    f = a100_record()["fit"]["keys_bwd"]

    def cycles(step: dict) -> float:
        return f["insn"] * step["insns"] + f["smem"] * step["lds_sts"]

    return cycles(rec["80"]["step"]) / cycles(rec["90"]["step"])


# The settings shipped after the last committed GPU run (bench/gpu/2026-11-27-h100-speed.json, main
# at 301ad1f), each at what that run measured: RUN_BUILDS pins them for it, and the what-if
# `measured_code_only` (bench/attention_model.py) takes them off, one list for both. That run measured
# all that shipped before it (its suite and its probes, bench/gpu/2026-11-27-h100-probe-queue.jsonl);
# what is listed are its probes' verdicts, flipped after it (bench/RESULTS.md "selshm2"). Below, the
# lists it emptied: what the runs before it (main at f72f66b, 050ce66) measured.
# flipped after its second call's probes (bench/gpu/2026-11-27b-h100-probe-select.jsonl, main at b94bec6:
# paper_shm as shipped): select_tma at M7C's 1 warp and select_split at the paper's shape, on sm_90 ("flips2")
_SINCE_B94BEC6: dict[str, int | bool] = {"select_tma": 0, "paper_split": False}
# shipped after main at 8898d3c (the end of the session of 2026-11-27's H100), unmeasured: the key-major
# forward's merging forced pass and its mask-free keys walk (bench/RESULTS.md "forcedmerge")
_SINCE_8898D3C: dict[str, int | bool] = {"fwd_forced_merge": False}
SINCE_LAST_RUN: dict[str, int | bool] = {
    # flipped after it on its probes: select_shm at the paper's shape on sm_90
    "paper_shm": False,
    **_SINCE_B94BEC6,
    **_SINCE_8898D3C,
}  # fmt: skip
_SINCE_F72F66B: dict[str, int | bool] = {
    # flipped after the H100 of 2026-11-26c on its probes ("flips") or shipped since, at its values
    "select_one_warp": False, "cmp_dq_stages2": False, "dkdv_rows128": False,
    "seg_target": 0, "select_insert": 0,
}  # fmt: skip
_SINCE_050CE66: dict[str, int | bool] = {
    "keys_div32": False, "select_cut": 0, "tok_pipe": 0, "flash_tiles": False, "select_shm": 0, "select_split": 0,
    "pdq_bits": 32, "q_grad_fused": False, "gate_folded": False, "delta_folded": False, "merge_tiles": False,
}  # fmt: skip
# The kernel builds the committed GPU runs measured (flags of `ours`), by file name: a speed record
# does not name its kernels' launch settings, so a fit or a check of a committed run takes them from
# here; a run of the current kernels needs no entry (ours' defaults: what the code ships). Every run
# before 2026-11-26c stored the key-major backward's dQ partials in fp32 (pdq_bits 32) and ran the
# key-major merges' loops (merge_tiles False: the builds before ce226a4 or 2930e5c take it from their
# launch, counts.py `_launch_before_*`; 050ce66's entry pins it); the 2026-11-26c run measured both shipped.
RUN_BUILDS: dict[str, dict] = {
    "2026-11-26-h100-speed.json": {
        "split_cmp_fwd": False,
        "warps_dkdv": 8,
        "before_ce226a4": True,
        "pdq_bits": 32,
    },
    # before warps_sel 2 shipped at sm_90
    "2026-11-26-h200-speed-after.json": {"warps_sel": 4, "before_ce226a4": True, "pdq_bits": 32},
    # 76bdb6b's kernels: the selection at 2 warps for M7C and the paper shape, BTF tokens, the
    # compressed dK/dV at 8 warps, the base token tiles, their forward at 8 warps at head_dim 128
    "2026-11-26-h200-speed-final.json": {"before_ce226a4": True, "pdq_bits": 32},
    # the probes' base builds (bench/kernel_probe.py: each variant one setting changed from it)
    "2026-11-26-h200-probe-after.jsonl": {"warps_sel": 4, "before_ce226a4": True, "pdq_bits": 32},
    "2026-11-26-h200-probe-final.jsonl": {"before_ce226a4": True, "pdq_bits": 32},
    # main at 2b9778f: ce226a4's settings without its 4x token tiles, the selected branch query-major
    # (forced tiles + token tiles; the key-major kernels came after)
    "2026-11-26b-h200-speed-shipped.json": {
        "fwd_keys": False,
        "bwd_keys": False,
        "select_v0": True,
        "before_2930e5c": True,
        "pdq_bits": 32,
    },
    # the integration build of kfwd + kbwd + cmpsel (bench/RESULTS.md, 2026-11-26b): the keys
    # kernels at BR_f 128 / BR_keys 64, the int32 selection at v0's settings (before 2930e5c)
    "2026-11-26b-h200-speed-keys.json": {"before_2930e5c": True, "br_bwd_keys": 64, "pdq_bits": 32},
    "2026-11-26b-h200-probe-select.jsonl": {"before_2930e5c": True, "pdq_bits": 32},
    "2026-11-26b-h200-probe-keys-final.jsonl": {"before_2930e5c": True, "br_bwd_keys": 64, "pdq_bits": 32},
    # main at 050ce66: the keys kernels and the int32 selection at its chosen tiles; the backward still
    # sorted its own reverse index (int64 keys, ~16 aten ops; the builds before 2930e5c did too)
    # (and the key-major kernels' rows in int64: keys_div32 came after; the token tiles' branchy loop)
    # (and the compressed backward's and the window's tiles as every run measured them: flash_tiles
    # came after; and the selection's Eq. 9 gathers and its unsplit loop: select_shm and select_split
    # came after; and autograd's sum of q's three gradients: q_grad_fused came after; and the gate
    # mix's three g * dO copies: gate_folded came after; and each branch backward's own delta from its
    # O: delta_folded came after; and the merges' loops: merge_tiles came after)
    # (SINCE_LAST_RUN and _SINCE_F72F66B first: a setting shipped after f72f66b is pinned at
    # f72f66b's, also 050ce66's unless _SINCE_050CE66 names it)
    "2026-11-26b-h200-speed-final.json": {
        **SINCE_LAST_RUN,
        **_SINCE_F72F66B,
        "index_once": False,
        **_SINCE_050CE66,
    },
    # main at f72f66b, all of _SINCE_050CE66 as shipped; the suite's core takes q as a leaf and calls
    # the branches and the gate mix one by one: autograd's sum of q's gradients, the gates unfolded
    # and each branch backward's own delta (the probes measured the fused and folded paths)
    "2026-11-26c-h100-speed.json": {
        **SINCE_LAST_RUN,
        **_SINCE_F72F66B,
        # flipped back after it on its probes ("flips"): select_shm at the paper's shape, the merge tiles
        "select_shm": 1,
        "merge_tiles": True,
        "q_grad_fused": False,
        "gate_folded": False,
        "delta_folded": False,
    },
    # main at 301ad1f, all of _SINCE_F72F66B as shipped, the 16-bit dQ partials, the gate and delta
    # folds (its records name their core's path, `nsa_core`, which modelcheck.core_flags reads); the
    # core takes q as a leaf (autograd's sum); its probes' base build is the same
    "2026-11-27-h100-speed.json": {**SINCE_LAST_RUN, "q_grad_fused": False},
    "2026-11-27-h100-probe-queue.jsonl": {**SINCE_LAST_RUN, "q_grad_fused": False},
    # main at b94bec6 (select_shm on at the paper's shape): the lead's second call's two selection probes
    "2026-11-27b-h100-probe-select.jsonl": {**_SINCE_B94BEC6, **_SINCE_8898D3C, "q_grad_fused": False},
}


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
    steps: tuple = ()  # a key-major grid's steps a program (balance.py's factor replaces the waves')
    launches: int = 1
    extra: dict = field(default_factory=dict)
    work: dict = field(default_factory=dict)  # counts the fitted cycle costs apply to (COST)

    def time(self, gpu: Gpu) -> float:
        cost = kind_cost(self.kind, gpu)
        serial = 0.0
        if cost is not None and "sass" in cost and "warp_insns" not in self.work:
            cost = kind_cost(self.kind, replace(gpu, sass=False))  # no sm_80 record of this launch
        if cost is not None and "sass" in cost:
            # The proxy's time, floored by DRAM and by the tensor cores at the datasheet peak.
            eff = 1.0
            t = max(
                sass_seconds(self.work, cost["sass"], gpu),
                self.dram / (gpu.dram * DRAM_EFF),
                self.flops / gpu.peak,
            )
        elif cost is None:
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
        if self.steps:  # the programs' lengths scheduled on the SMs' slots (balance.py)
            t *= balance_factor(self.steps, slots, "fwd" if "_fwd" in self.kind else "bwd")
        elif self.flops and self.programs and waves < 8:  # a short grid idles SMs in its last wave
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


def config_factor(kind: str, skip: tuple[str, ...] | list[str] = ()) -> float:
    """The kind's time with its launch-setting tags (but `skip`) over its fitted price's (1 without)."""
    base, _, tags = kind_parts(kind)
    f = 1.0
    for tag in (t for t in tags if t not in skip):
        key = f"{base}@{tag}"
        if key not in CONFIG_FACTOR:
            priced = sorted(k for k in CONFIG_FACTOR if k.startswith(base + "@"))
            raise ValueError(f"{kind}: {key} is not priced (CONFIG_FACTOR has {priced})")
        f *= CONFIG_FACTOR[key]
    return f


def measured_config(kind: str) -> str | None:
    """The H100C_COST key a kind is priced by: its base (and head_dim, where the key names one), all
    of the key's tags among the kind's, the most tags; None: no measured configuration covers it."""
    base, key, tags = kind_parts(kind)
    keys = [c for c in H100C_COST if kind_parts(c)[1] in (base, key) and kind_parts(c)[0] == base]
    keys = [c for c in keys if set(kind_parts(c)[2]) <= set(tags)]
    return max(keys, key=lambda c: len(kind_parts(c)[2]), default=None)


def nearby_config(kind: str) -> tuple[str, list[str]] | None:
    """The H100C_COST key a kind lacks only some tags of (it has at least one other, and every
    missing one has its CONFIG_FACTOR) and those missing tags: the measured build with a setting
    turned off, as the what-ifs do (M7C's selection without select_split, or without select_shm).
    Its old price would be an older build's fit (the H200's, 1.32-1.40x short of the H100 for the
    selection) and undercut the measured configuration it is one switch away from. None: no such key."""
    base, key, tags = kind_parts(kind)
    near = []
    for c in H100C_COST:
        cbase, ckey, ctags = kind_parts(c)
        missing = [t for t in ctags if t not in tags]
        priced = all(f"{base}@{t}" in CONFIG_FACTOR for t in missing)
        if cbase == base and ckey in (base, key) and 0 < len(missing) < len(ctags) and priced:
            near.append((len(ctags) - len(missing), c, missing))
    return max(near)[1:] if near else None


def config_price(kind: str) -> tuple[dict[str, float], float]:
    """A kind's fitted price before its tags (a measured configuration's, H100C_COST, or its key's)
    and the factor of the tags that price leaves to CONFIG_FACTOR. A kind a setting or two short of a
    measured configuration (`nearby_config`) takes that measurement over its missing tags' factors."""
    cfg = measured_config(kind)
    if cfg is not None:
        return dict(H100C_COST[cfg]), config_factor(kind, kind_parts(cfg)[2])
    base, key, _ = kind_parts(kind)
    near = nearby_config(kind)
    if near is not None:
        cfg, missing = near
        off = math.prod(CONFIG_FACTOR[f"{base}@{t}"] for t in missing)
        return dict(H100C_COST[cfg]), config_factor(kind, kind_parts(cfg)[2]) / off
    table = {**H100_COST, **H200_COST, **H200_FINAL_COST, **KEYS_COST}
    return dict(table.get(key) or table.get(base, {})), config_factor(kind)


def warps_factor(kind: str) -> float:
    """The selection kernel's time at its warps over its 4-warp price (config_factor's warps part)."""
    return config_factor(kind)


def kind_cost(kind: str, gpu: Gpu) -> dict[str, float] | None:
    """The fitted cost of one of our kernel kinds on `gpu` (None: a generic kind, priced by EFF), its
    launch-setting tags applied: cycles x the factor everywhere, the efficiency / the factor on Hopper
    (on A100 the efficiency is the published calibration's, not our kernel's: left as it is). On A100
    (gpu.sass) {"sass": proxy} for A100_SASS's kinds (Kernel.time prices their SASS counts), and
    A100_CARRY's Hopper efficiency carried over per SM cycle / their SASS ratio a step."""
    base = kind_parts(kind)[0]
    if base not in A100_KIND:
        return None
    fitted, f = config_price(kind)
    if f != 1.0:
        fitted = {t: (c / f if t == "eff" else c * f) for t, c in fitted.items()}
    if gpu.arch == "hopper":
        return fitted
    if gpu.sass and base in A100_SASS:
        return {"sass": A100_SASS[base]}
    ratio = carry_ratio(carry_key(kind)) if gpu.sass and base in A100_CARRY else None
    if ratio:  # the Hopper fit per SM cycle: the same cycles a FLOP x the SASS ratio
        hopper = GPUS["H100"]
        per_cycle = (hopper.peak / (hopper.sms * hopper.clock)) / (gpu.peak / (gpu.sms * gpu.clock))
        return {**fitted, "eff": fitted["eff"] * per_cycle / ratio}
    cycles = {t: c for t, c in fitted.items() if t != "eff"}
    if base.startswith("sdpa"):  # FA2's published efficiency is its whole kernels' time, prologues included
        return {"eff": EFF[gpu.arch][A100_KIND[base]]}
    if "eff" not in fitted:  # the fitted cycles include its MMAs (the compressed forward, the gathers)
        return cycles
    return {"eff": EFF[gpu.arch][A100_KIND[base]], **cycles}


def total(ks: list[Kernel], gpu: Gpu, direction: str | None = None) -> float:
    return sum(k.time(gpu) for k in ks if direction in (None, k.direction))
