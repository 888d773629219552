"""The fitted prices of our kernel kinds, one table per GPU run, each constant with the measurement
behind it (bench/attention_fit.py fits them; docs/attention.md "Time budget" says why each is what it
is). prices.py turns them into time (`kind_cost`, `config_price`) and re-exports every name here, so
`prices.H100_COST` and the like are these very dicts. Constants only: no counts, no pricing, no nsa.
The next GPU run's table goes in a module of its own beside this one.
"""

from __future__ import annotations

import math

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
# RUN_BUILDS' entry for it, prices.py): every kind whose kernel has not changed since, and the two that have
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
# cmp_sel32@shm_d128, off after it, 4.709 / 4.578 (paper 32k; the proxy's 0.836 before), on again since
# the H100 of 2026-11-27 measured it beside the insertion (below); cmp_dq@s2_d128,
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
    # fwd_forced_merge's mask-free keys walk: its step is priced in the kernel's FLOP term (NOMASK,
    # attention_cost/selected.py), the tag only picks its own sm_80 / sm_90 SASS ratio on A100 (prices.py
    # `kind_cost`, bench/a100_proxy.py CARRY)
    "sel_keys_fwd@free": 1.0,
    # bench/flash_proxy.py's tiles, shipped on sm_90 (below): dK/dV 64 keys (head_dim 64 / past it), dQ 128 rows
    "cmp_dkv@bn64": 0.545, "cmp_dkv@bn64_d128": 0.474, "cmp_dq@wg_d128": 0.465,
    # and the window's on sm_90 (wintiles): dQ 128 x 32 and dK/dV 128 rows past head_dim 64, dK/dV on 4 warps at 64
    "win_dq@wg_d128": 0.568, "win_dkdv@bm128_d128": 0.786, "win_dkdv@w4": 0.638,
    # the selection's Eq. 9 key without its gathers at the paper's shape (select_shm: on / off in the same
    # process on the H100 of 2026-11-27, beside select_insert 2 under the 168 cap, 0.7509 / 0.7962 ms at
    # 8k x 2 and 14.0094 / 14.4662 at 64k x 1, geometric mean; bench/gpu/2026-11-27-h100-probe-queue.jsonl.
    # The 2026-11-26c H100, before the insertion: 4.709 / 4.578 at 32k x 1), and at M7C's with its
    # interior tiles unmasked (select_split; shmsplit): the pair 0.869x, M7C 8k's
    "cmp_sel32@shm_d128": math.sqrt(0.7509 / 0.7962 * 14.0094 / 14.4662),
    "cmp_sel32@shm": 0.925, "cmp_sel32@split": 0.939,
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
# cmp_sel32@tma (select_tma, shipped at M7C's 1 warp on sm_90): M7C's 1-warp selection with its key tile as one
# bulk copy; the H100 of 2026-11-27 (its second call, bench/gpu/2026-11-27b-h100-probe-select.jsonl, the same
# process) ran it 3.8515 ms against 4.1458 with the pointer loads at M7C 64k x 1 (0.929; 8k unmeasured). Priced
# by its SASS alone before (7,648 / 8,123 = 0.942, triton 3.6; bench/RESULTS.md "selshm2"), "flips2".
CONFIG_FACTOR["cmp_sel32@tma"] = 3.8515 / 4.1458
# cmp_sel32@split_d128 (select_split at the paper's shape on sm_90, beside select_shm and select_insert 2): the same
# call ran the paper's selection at 64k x 1 in 12.7294 ms with it against 14.0155 without (0.908; 8k unmeasured).
CONFIG_FACTOR["cmp_sel32@split_d128"] = 12.7294 / 14.0155
