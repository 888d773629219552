"""What a kernel costs on a GPU: the datasheets, the fitted prices of our kernel kinds and the
`Kernel` record that turns counts into time.

Owns the prices of bench/attention_model.py's cost model (the package's other modules count the
kernels' work; attention_model.py prints the rows). It must not count any kernel's structure, and
it imports nothing from nsa (no torch).

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
# two-pass compressed forward (before 45bc233), and `sel_dkdv_w8`, the key-major dK/dV at 8 warps (before 4e22175).
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
# KEYS_COST: the kernels built after the runs above, fitted on the lead's H200 run of the integration
# build (bench/gpu/2026-11-26b-h200-speed-keys.json; RUN_BUILDS names its settings):
# - sel_keys_fwd / sel_keys_bwd: the key-major selected forward (selected_keys.py, 128 (pair, head)
#   rows a step at head_dim 64) and fused backward (selected_keys_bwd.py, 64 rows a step in that
#   run): the fitted MMA efficiency (0.156 / 0.143: the key-major dK/dV's 0.142, which priced them
#   before the run, within 10 %) plus the DRAM time of the partials they store inside the loop
#   (`dram`: x the datasheet bandwidth's time, 1 / DRAM_EFF; kept, not fitted: it grows with the same
#   (pair, head) rows as the MMAs, so a fit could not tell the two apart);
# - sel_fwd_merge / sel_dq_merge / sel_index: the forward's merge, the dQ merge and the forward's
#   sort-key kernel, DRAM time x a fitted factor (the forward merge reads each partial's lse twice in
#   two dependent passes: 1.70x the datasheet time; the dQ merge 1.32x; the 9 us index kernel 0.67x);
# - cmp_sel32: compressed_select.py's int32 top-n merge (the selection since 2026-11-26b), cycles a
#   program and per token per key tile as `cmp_sel`, at 4 warps and BTF tokens a tile; its launch
#   settings by CONFIG_FACTOR (below). Fitted on the keys run and the final build's run together
#   (2026-11-26b-h200-speed-final.json): the keys run alone gave 1094 cycles a program, which priced
#   the final build's M7C selection 1.32x short at 8k and 16k (short T: few key tiles a program).
KEYS_COST: dict[str, dict[str, float]] = {
    "sel_keys_fwd": {"eff": 0.156, "dram": 1.25},
    "sel_keys_bwd": {"eff": 0.143, "dram": 1.25},
    "sel_fwd_merge": {"dram": 1.70},
    "sel_dq_merge": {"dram": 1.32},
    "sel_index": {"dram": 0.673},
    "cmp_sel32": {"programs": 1343, "token_steps": 1065},
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
# - sel_keys_bwd@div32: the key-major backward's rows in 32 bits (selected.py `_config` keys_div32, shipped on
#   the proxy's word; measured since, H100C_COST below): bench/keys_proxy.py prices the kernel at 0.625x the
#   measured build (1406 -> 654 SASS a step, triton 3.6 sm_90; 2.680 / 4.285 ms at M7C 8k x 8, 2.803 / 4.484
#   at 32k x 2, 2.824 / 4.517 at 64k x 1; bench/RESULTS.md "keysdiv"). Outside the proxy's calibrated range
#   (0.50e9 warp instructions a launch against 0.87-1.79e9): the what-if `keys_div32_off` prices the measured
#   path beside it. The forward's cut (1682 -> 1386 a step) is not priced: its proxy does not calibrate.
# - cmp_sel32@cut / @cut_d128: the selection loop's integer work in 32 bits and hoisted (compressed.py
#   `_config` select_cut, shipped from G 3 on the proxy's word; measured since, H100C_COST below):
#   bench/select_proxy.py prices it at 0.886 / 0.878 / 0.873x the measured loop at M7C 8k x 8 / 32k / 64k (553
#   -> 431 SASS a key tile, 128 registers, triton 3.6 sm_90; geometric mean 0.879) and 0.936 / 0.933x at the
#   paper shape 32k / 64k (565 -> 460; 0.934), within its calibrated settings (bench/RESULTS.md "select_cut").
#   What-if `select_cut_off` prices the measured loop.
# - tok_fwd@pipe / tok_dq@pipe: the token tiles' branch-free loop (selected.py `_config` tok_pipe 2, 2 stages,
#   the dQ at 2 warps; shipped at G > 8 on sm_90 on the proxy's word; measured since, H100C_COST below):
#   bench/gather_proxy.py (a SASS proxy fitted on every measured token- and forced-tile build: 217 points
#   within 18 %, each build held out within 20 %) prices them at 0.958 / 0.795x the measured loop at the paper
#   shape (8k and 64k alike; bench/RESULTS.md "tokgather"). What-if `tok_pipe_off` prices the measured loop.
# - cmp_dkv@bn64 / cmp_dkv@bn64_d128 / cmp_dq@wg_d128: the compressed backward's tiles on sm_90 (compressed.py
#   `_config` flash_hopper, shipped on the proxy's word; measured since, H100C_COST below): dK/dV at 64 keys a
#   tile over 32 query rows (wgmma; unpipelined at head_dim 64), dQ past head_dim 64 at 128 rows x 32 keys, 8
#   warps, unpipelined (wgmma). bench/flash_proxy.py (the flash tiles' SASS proxy: 369 H100/H200 points of 30
#   settings within 29 %, each setting held out within 34 %) prices them at 0.56 / 0.53x the measured tile at
#   M7C 8k x 8 / 64k (16 query parts a key tile, split16), 0.49 / 0.46x and 0.47 / 0.41x at the paper shape;
#   each factor is that ratio over the model's own count of the new tile, geometric mean (`flash_proxy_ship.py
#   --factors`). What-if `flash_tiles_off` prices the measured tiles.
# - sel_fwd_merge@tiles / sel_dq_merge@tiles: the merges' metadata as one tile (selected.py `_config`
#   merge_tiles, bench/RESULTS.md "mergeone"), shipped on the lead's rule (the forward merge at the
#   dQ merge's 1.32x its DRAM time, was 1.70x) until the H100 of 2026-11-26c measured it no faster.
# The H100 of 2026-11-26c's probes (bench/gpu/2026-11-26c-h100-probe-*.jsonl, each setting in the same
# process as that run's build; derivations: bench/RESULTS.md "flips"), each the measured ratio to the
# kind that run measured: cmp_sel32@w1, 1 warp capped, M7C 64k 4.640 / 5.665 ms x @w2's (64k only);
# cmp_sel32@shm_d128, off since, 4.709 / 4.578 (paper 32k; the proxy's 0.836 before); cmp_dq@s2_d128,
# the backward 10.462 / 11.566 at paper 32k, all of it dQ's at its share of the run's (9.731 of 21.991
# ms); sel_dkdv@br128, fwd+bwd at paper 8k x 2 / 64k x 1 put on the kernel (6.710 / 27.764 ms in the
# run): 0.767 / 0.929; sel_fwd_merge@tiles, off since, six same-process forward pairs at M7C 8k / 64k
# on the run's merge (0.867 / 0.900 ms): 0.93-1.55 (noisy), the dQ merge's (+-0.3 ms on 0.55) no data.
CONFIG_FACTOR: dict[str, float] = {
    "cmp_sel@w2": SEL_WARPS[2], "cmp_sel@w4": SEL_WARPS[4], "cmp_sel@bt2": 0.899,
    "cmp_dkv@w4": 0.613, "tok_fwd@tp4": 1.451, "tok_dq@tp4": 1.387, "tok_fwd@w2": 0.618,
    "cmp_sel32@w2": 0.629, "cmp_sel32@w4": 1.0, "cmp_sel32@h2": 0.951, "cmp_sel32@bt2": 0.569,
    "cmp_sel32@bt4": 0.581, "sel_keys_bwd@br32": 1.744, "sel_keys_bwd@div32": 0.625,
    "cmp_sel32@cut": 0.879, "cmp_sel32@cut_d128": 0.934,
    "tok_fwd@pipe": 0.958, "tok_dq@pipe": 0.795,
    # bench/flash_proxy.py's tiles, shipped on sm_90 (below): dK/dV 64 keys (head_dim 64 / past it), dQ 128 rows
    "cmp_dkv@bn64": 0.545, "cmp_dkv@bn64_d128": 0.474, "cmp_dq@wg_d128": 0.465,
    # and the window's on sm_90 (wintiles): dQ 128 x 32 and dK/dV 128 rows past head_dim 64, dK/dV on 4 warps at 64
    "win_dq@wg_d128": 0.568, "win_dkdv@bm128_d128": 0.786, "win_dkdv@w4": 0.638,
    # the selection's Eq. 9 key without its gathers at the paper's shape (select_shm, off since: above),
    # and at M7C's with its interior tiles unmasked (select_split; shmsplit): the pair 0.869x, M7C 8k's
    "cmp_sel32@shm_d128": 4.709 / 4.5781, "cmp_sel32@shm": 0.925, "cmp_sel32@split": 0.939,
    # the 2026-11-26c H100's (above)
    "sel_fwd_merge@tiles": 1.27, "sel_dq_merge@tiles": 1.0,
    "cmp_dq@s2_d128": 1 - (1 - 10.4618 / 11.5659) / (9.731 / 21.991),
    "sel_dkdv@br128": math.sqrt((1 - (16.6562 - 15.0949) / 6.710) * (1 - (64.256 - 62.2955) / 27.764)),
}  # fmt: skip
# H100C_COST: launch settings shipped on a proxy's word (or a rule) that the H100 run of 2026-11-26c measured
# first (main at f72f66b, bench/gpu/2026-11-26c-h100-speed.json), fitted on it by bench/attention_fit.py where
# the old price (the kind's x the tags' CONFIG_FACTOR) missed it by more than 30 %, or by 15-25 % one way at
# every T. Keyed "base[@head_dim]@tag...": a kind with all of a key's tags takes its price (`config_price`),
# its other tags still by CONFIG_FACTOR. Read by every GPU as the H100's prices are (H200 shares them; A100
# takes its cycles and DRAM terms, so of these only the forward merge could move there, and merge_tiles ships
# off since the flips: the other tags are sm_90's). A tag priced here takes no CONFIG_FACTOR of its own
# (`config_price`: the forward merge's 1.27 above prices nothing while this table holds
# `sel_fwd_merge@tiles`). New over old price, per T 2k-64k, and why (bench/RESULTS.md "The cost model
# re-fitted on the H100 run of 2026-11-26c"):
# - the M7C selection (2 warps, 2 tokens, halves): x1.40-1.32. The H100 probe of this build: the cut
#   alone 0.98 (6.80 vs 6.93 ms, m7c 64k; proxy 0.879), shm + split 0.837 / 0.892 at 64k / 8k x 8
#   (proxy 0.869): the cut's proxy overclaimed; the rest is its H200-fitted price on the H100.
# - the compressed dQ tile past head_dim 64 (128 rows, 8 warps): x1.27-1.74; a program costs 10,200
#   cycles (the proxy priced its loop, 0.465x: H100 c / H200 050ce66 measured 0.71-0.55 at 8k-64k).
# - the compressed dK/dV at 64 keys in 16 parts: x1.84-1.07 (M7C), x1.47-1.27 (paper): each part's
#   prologue and fp32 partial (and the partial sum: 0.036 ms, was 0.013) a per-program cost the
#   MMA-only price lacked; past head_dim 64 the MMAs too (eff 0.36 for the proxy's 0.46).
# - the token tiles' branch-free loop (paper): fwd x0.85, dQ x0.73 (proxy 0.958 / 0.795 of the old
#   loop: it gained more; dQ H100 c / H200 050ce66 0.58-0.66).
# - the forward merge as one tile: x1.32 (the lead's rule took the dQ merge's 1.32x DRAM; it kept the
#   loops' 1.74x: H100 c / H200 050ce66 1.40-1.47, the DRAM ratio 1.43; the probe: off as fast).
# - the window dQ past head_dim 64: x1.25, not its tile (H100 c / H200 050ce66 0.55-0.58, the proxy's
#   0.568): win_dq's one price for both head_dims was 1.29-1.31x short at 128 on 050ce66's run too.
# - the window dK/dV on 4 warps at head_dim 64: x0.80 (the proxy's 0.638 for ~0.51).
# - the keys backward's 32-bit rows: x0.84-0.86 (the proxy's 0.625 outside its range; its partials'
#   DRAM time no longer scaled by the instruction cut. Probe: the branch 0.78 / 0.80 of 64-bit rows).
H100C_COST: dict[str, dict[str, float]] = {
    "cmp_sel32@cut@shm@split": {"programs": 1662, "token_steps": 1067},
    "cmp_dq@128@wg_d128": {"eff": 0.410, "programs": 10220},
    "cmp_dkv@bn64": {"eff": 0.239, "programs": 17850},
    "cmp_dkv@bn64_d128": {"eff": 0.2235, "programs": 38230},
    "tok_fwd@pipe": {"gather_bytes": 0.0527},
    "tok_dq@pipe": {"gather_bytes": 0.0349},
    "sel_fwd_merge@tiles": {"dram": 1.74},
    "win_dq@128@wg_d128": {"eff": 0.407},
    "win_dkdv@64@w4": {"eff": 0.383},
    "sel_keys_bwd@div32": {"eff": 0.331, "dram": 1.25},
}  # fmt: skip
CONFIG_FACTOR["cmp_sel32@w1"] = CONFIG_FACTOR["cmp_sel32@w2"] * 4.6404 / 5.665
# cmp_sel32@pair (select_pair, the what-if; unshipped, unmeasured): the 1-warp M7C kind's time x its sm_90 SASS a
# token a key tile, triton 3.6 (always-run part 0.91 / 0.88x interior / edge, merges 1.02x, merging 0.62-0.99 of
# the token tiles: 0.95-0.96 / 0.93-0.94x; bench/RESULTS.md "selpair"); issue-bound: half the L2 reads unpriced.
CONFIG_FACTOR["cmp_sel32@pair"] = 0.95
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


# The settings shipped after the last committed GPU run (bench/gpu/2026-11-26c-h100-speed.json, main
# at f72f66b), each at what that run measured: RUN_BUILDS pins them for it, and the what-if
# `measured_code_only` (bench/attention_model.py) takes them off, one list for both. That run measured
# all that shipped before it (its suite and its probes, bench/RESULTS.md "The H100 run of 2026-11-26c");
# what is listed are its probes' verdicts, flipped after it ("flips"). Below, the list it emptied:
# what the run before it (main at 050ce66) measured.
SINCE_LAST_RUN: dict[str, int | bool] = {
    # flipped after it on its probes (bench/RESULTS.md "flips") or shipped since, at its values
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
    # (SINCE_LAST_RUN first: a setting shipped after f72f66b is pinned at f72f66b's, also 050ce66's
    # unless _SINCE_050CE66 names it)
    "2026-11-26b-h200-speed-final.json": {**SINCE_LAST_RUN, "index_once": False, **_SINCE_050CE66},
    # main at f72f66b, all of _SINCE_050CE66 as shipped; the suite's core takes q as a leaf and calls
    # the branches and the gate mix one by one: autograd's sum of q's gradients, the gates unfolded
    # and each branch backward's own delta (the probes measured the fused and folded paths)
    "2026-11-26c-h100-speed.json": {
        **SINCE_LAST_RUN,
        # flipped back after it on its probes ("flips"): select_shm at the paper's shape, the merge tiles
        "select_shm": 1,
        "merge_tiles": True,
        "q_grad_fused": False,
        "gate_folded": False,
        "delta_folded": False,
    },
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


def config_price(kind: str) -> tuple[dict[str, float], float]:
    """A kind's fitted price before its tags (a measured configuration's, H100C_COST, or its key's)
    and the factor of the tags that price leaves to CONFIG_FACTOR."""
    cfg = measured_config(kind)
    if cfg is not None:
        return dict(H100C_COST[cfg]), config_factor(kind, kind_parts(cfg)[2])
    base, key, _ = kind_parts(kind)
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
    base, key, _ = kind_parts(kind)
    if base not in A100_KIND:
        return None
    fitted, f = config_price(kind)
    if f != 1.0:
        fitted = {t: (c / f if t == "eff" else c * f) for t, c in fitted.items()}
    if gpu.arch == "hopper":
        return fitted
    if gpu.sass and base in A100_SASS:
        return {"sass": A100_SASS[base]}
    ratio = carry_ratio(key) if gpu.sass and base in A100_CARRY else None
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
