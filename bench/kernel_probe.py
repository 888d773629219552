"""Where the NSA kernels' GPU time goes: each kernel family timed alone under launch-config variants.

Owns the GPU probe behind docs/attention.md's per-kernel fixes: the compressed forward's two kernels
(attention, selection) and its backward under other tile sizes, warps and stages, and the selected branch's
ops (forward, forward+backward) with one launch setting changed at a time from the shipped config
(`selected._launch_config`, patched for the probe only), and the window attention under other tiles
(`window._configs`: a variant's dict is merged into one kernel's), and q's RoPE with its three gradients summed
in the inverse rotation or by autograd (`fused.FUSE_Q_GRAD`), and the three branches with the gate mix, the gates
folded into their backwards' lse or three g * dO copies (`gated.FOLD_GATE`), their deltas written by the
fold's kernel or formed by each branch from its O (`gated.FOLD_DELTA`). CUDA only (`--dry-run` aside); one JSON
object a line: `{"probe", "shape", "T", "B", "variant", "ms"}`. It measures, it asserts nothing; the shipped
configs stay whatever the modules say. A variant's "shape" key runs it at that shape only (the
head_dim-128 candidates of bench/tiles_d128.py: "paper"); a value "rows:N" for BT / bt_dkv is N
(token, head) rows, N // GP tokens.

  python bench/kernel_probe.py                       # every probe, M7C and paper shapes
  python bench/kernel_probe.py --only cmp_fwd --shapes m7c:8192:8
  python bench/kernel_probe.py --dry-run --only cmp_bwd --shapes paper:8192:2 paper:32768:1   # no GPU
  python bench/kernel_probe.py --only selected --shapes m7c:8192:8 --match keys_div32 --match pdq_bits
  python bench/kernel_probe.py --only selected --shapes m7c:8192:8 m7c:65536:1 --match merge_tiles
  python bench/kernel_probe.py --only selected --shapes m7c:8192:1 m7c:16384:1 --match seg_target
  python bench/kernel_probe.py --only selected --shapes m7c:8192:8 m7c:65536:1 --match keys_rowlim   # A100
  python bench/kernel_probe.py --dry-run --arch 80 --only selected --shapes m7c:8192:8   # sm_80's configs
  python bench/kernel_probe.py --only rope --shapes paper:8192:8 m7c:8192:8 --match fuse_q_grad
  python bench/kernel_probe.py --only gate --shapes paper:8192:2 m7c:8192:8 --match fold_gate
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton

from nsa.attention.gpusuite.gpu import _nsa_core, _nsa_core_inputs, _time_cuda
from nsa.attention.triton import compressed as cmp
from nsa.attention.triton import device_arch, fused, gated
from nsa.attention.triton import selected as sel
from nsa.attention.triton import window as win
from nsa.attention.triton.selected_keys_bwd import KEYS_BR32_SM80, KEYS_BR64_ROWLIM, keys_rows

GEO = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
SHAPES = {"m7c": (2, 6, 64), "paper": (4, 16, 128)}  # (Hkv, G, D)


def _time(fn, iters: int = 5) -> float:
    return round(_time_cuda(fn, iters, warmup=1), 4)


def _inputs(B, T, Hkv, G, D):
    """q, compressed K/V and selected K/V as the suite's speed section makes them (bf16, CUDA)."""
    inp = _nsa_core_inputs(B, T, Hkv, G, D, GEO, "cuda", torch.bfloat16)
    return tuple(inp[k].detach() for k in ("q", "kc", "vc", "ks", "vs"))


def _cmp_launch(q, kc, vc, over: dict):
    """The compressed forward's two kernels with `over` applied to the shipped config: one run()."""
    B, Hkv, T, G, D = q.shape
    c = cmp._config(G, D, GEO["n_sel"], GEO["block_len"], GEO["block_stride"], GEO["sel_block"], 90)
    c = {**c, **{k: v for k, v in over.items() if k in c}}
    k = min(GEO["n_sel"], -(-T // GEO["sel_block"]))
    out = torch.empty_like(q)
    lse = torch.zeros(B, Hkv, T, G, dtype=torch.float32, device=q.device)
    idx = torch.empty(B, Hkv, T, k, dtype=torch.int64, device=q.device)
    valid = torch.empty(B, Hkv, T, k, dtype=torch.bool, device=q.device)
    geo = {"L": GEO["block_len"], "S": GEO["block_stride"], "PREC": "ieee"}
    qk = D**-0.5 * cmp._LOG2E

    def attend():
        cmp._cmp_fwd[(triton.cdiv(T * G, c["bm_fwd"]), B * Hkv)](
            q, kc, vc, out, lse, T, kc.shape[2], qk, G=G, D=D, DP=c["DP"], BM=c["bm_fwd"], BN=c["bn_fwd"],
            **geo, num_warps=c["warps_fwd"], num_stages=c["stages_fwd"],
        )  # fmt: skip

    def select():
        cmp.launch_select(c, q, kc, lse, idx, valid, GEO["block_len"], GEO["block_stride"], GEO["sel_block"], qk,
                          "ieee")  # fmt: skip

    attend()  # the selection reads the forward's row statistics
    return {"attend": attend, "select": select}[over["kernel"]]


# One launch setting changed at a time from the shipped config (compressed._config).
CMP_VARIANTS = [
    {"kernel": "attend"},
    {"kernel": "attend", "bm_fwd": 64},
    {"kernel": "select"},
    # (M7C ships 1 warp under a register cap on sm_90: the warps variants there run uncapped, as measured)
    {"kernel": "select", "warps_sel": 4, "maxnreg_sel": 0},
    {"kernel": "select", "warps_sel": 1, "maxnreg_sel": 0},
    {"kernel": "select", "bt_sel": 8},
    {"kernel": "select", "bt_sel": 2},
    # M7C on sm_90 at the shipped 1 warp under the cap: no spill on triton 3.6 (168 registers), 140 B
    # on 3.9 (cap 224; bench/select_sass.py --arch 90 --shape 6x64 --set bt_sel=4, 2026-11-26; at the
    # 2 warps shipped before, 12-24 B)
    {"kernel": "select", "bt_sel": 4},
    {"kernel": "select", "bt_sel": 4, "warps_sel": 4, "maxnreg_sel": 0},
    {"kernel": "select", "halves_sel": 1},
    {"kernel": "select", "halves_sel": 0},  # since 2026-11-26b M7C on sm_90 ships halves
    # 8 tokens a tile merged in halves: bench/select_proxy.py predicts the paper's shape 16 % faster
    # than shipped at 64k (208 registers, 2 warps a scheduler: outside its calibrated range).
    {"kernel": "select", "bt_sel": 8, "halves_sel": 1},
    # 1 warp a program under a 168-register cap (12 warps an SM, no spill on triton 3.6): the proxy
    # (bench/select_proxy.py) predicted M7C 28 % faster at 64k, like `warps_sel` 1 uncapped above; the
    # H100 of 2026-11-26c measured 4.64 ms against 5.67 at 2 warps (uncapped 4.75), and M7C ships it on
    # sm_90 (compressed._config one_warp; its cap 224 on triton 3.9). The 2 warps uncapped shipped
    # before (the 2026-11-26c run's) are the M7C variant; and 4 tokens a tile in halves at 2 warps
    # under the cap (5.27 ms there; 210 registers uncapped).
    {"kernel": "select", "warps_sel": 1, "maxnreg_sel": 168},
    {"kernel": "select", "shape": "m7c", "warps_sel": 2, "maxnreg_sel": 0},
    {"kernel": "select", "bt_sel": 4, "halves_sel": 1, "warps_sel": 2, "maxnreg_sel": 168},
    # The selection kernel before 2026-11-26b (compressed_select_v0.py) at its shipped settings, and
    # at 4 warps: the comparison of the int32 merge with the int64 one, in the same run.
    {"kernel": "select", "select_v0": 1},
    {"kernel": "select", "select_v0": 1, "warps_sel_v0": 4},
    # Head_dim-128 attention tile (bench/tiles_d128.py; ptxas: no spill on sm_80 / sm_90, triton 3.6
    # and 3.9, at G 16 x D 128 and the head_dim > 64 points of gpucheck's grid, G 8 x D 96, G 5 x D 128):
    # FlashAttention-2's forward tile, 128 rows x 64 keys at 8 warps (G 16 x D 128 on sm_90, triton
    # 3.6: 28 % fewer SASS a FLOP of the main loop than the shipped 64 x 32 at 4 warps, half the K/V
    # bytes a FLOP). 64 x 64 at 4 warps (20 % fewer) spills 12 B on sm_80 at G 1/2/5/6 x D 128.
    {"kernel": "attend", "shape": "paper", "bm_fwd": 128, "bn_fwd": 64, "warps_fwd": 8},
    # The selection's key-tile loop as the H200 measured it (2026-11-26b), before its integer work
    # went 32-bit and hoisted (select_cut, shipped from G 3; bench/select_proxy.py predicts the cut
    # 11-13 % faster at M7C 8k-64k, 6-7 % at the paper's shape; bench/RESULTS.md "selcut").
    {"kernel": "select", "select_cut": 0},
    # Eq. 9's shared key without the two [BT, BJ * RP] gathers (select_shm, a = 2 only; the same
    # tables): bench/select_proxy.py predicts M7C 7.5 / 9.4 % faster at 8k x 8 / 64k, the paper's shape
    # 16.7 % at 32k (shipped there on sm_90: the measured loop is the variant; RESULTS "selshm",
    # "shmpaper"). The CUT loop split into interior key tiles (no load mask, visibility compare or
    # candidate / forced keys) and edge tiles (select_split; the same tables): -6.3 / -13.6 % at M7C
    # 8k x 8 / 64k, -1.7 / -5.7 % at the paper's shape 8k / 64k ("selsplit"). The two ship as a pair
    # on sm_90 at M7C's shape (-13.1 / -21.2 %, "shmsplit"): each alone, and neither, are the variants.
    # The H100 of 2026-11-26c: the pair 1.067 / 5.69 ms at M7C 8k x 8 / 64k, neither 1.196 / 6.80. At
    # the paper's shape select_shm (shipped there on the proxy's word) measured slower: 4.71 ms against
    # 4.58 off at 32k x 1 (before the insertion); off after it, the H100 of 2026-11-27 measured it on
    # faster beside select_insert 2 (0.751 / 14.01 ms against 0.796 / 14.47 at 8k x 2 / 64k x 1): on
    # since, off (that run's build) is the variant. select_split at the paper's shape (beside select_shm
    # and the insertion): the H100 of 2026-11-27 ran it 12.73 ms against 14.02 without at 64k x 1
    # (bench/gpu/2026-11-27b-h100-probe-select.jsonl): on since, off (that run's build) is the variant.
    {"kernel": "select", "shape": "m7c", "select_shm": 0, "select_split": 0},
    {"kernel": "select", "shape": "m7c", "select_split": 0},
    {"kernel": "select", "shape": "m7c", "select_shm": 0},
    {"kernel": "select", "shape": "paper", "select_shm": 0},
    {"kernel": "select", "shape": "paper", "select_split": 0},
    # Two token groups of 2 a program at M7C's 1 warp (select_pair; the same tables; without select_insert,
    # beside which it spills 32 B under the cap, as priced): one key tile
    # load and one QK product for 4 tokens, half the L2 reads (17.4 -> 8.7 GB at 64k x 1), 0.91 / 0.88x
    # the SASS a token of the interior / edge tiles' always-run part, the merges 1.02x (triton 3.6 sm_90,
    # 168 registers under the cap, no spill; 3.9 spills: not shipped). The model prices it 0.94x at 64k
    # (the what-if `select_pair`, issue-bound; bench/RESULTS.md "selpair"): the GPU tells whether the L2
    # reads it halves cost more than the model's cycles say.
    {"kernel": "select", "shape": "m7c", "select_pair": 1, "select_insert": 0},
    # The one- and two-key insertion off (select_insert 2, shipped at M7C's 1 warp on sm_90 on the model's
    # price: 0.79 / 0.81 / 0.96x the selection at 64k / 32k / 8k; RESULTS "selinsert"): every entering
    # tile merged, as the H100 of 2026-11-26c measured it; and the one-key insertion alone (0.85 / 0.88 /
    # 1.00x).
    {"kernel": "select", "shape": "m7c", "select_insert": 0},
    {"kernel": "select", "shape": "m7c", "select_insert": 1},
    # At the paper's shape (select_insert 2 shipped on sm_90 under a 168-register cap on triton 3.6, the
    # model's price 0.76 / 0.89x the selection at 64k / 32k, 1.10x at 8k; RESULTS "paperins"): off and
    # uncapped, the build the H100 of 2026-11-26c measured (select_shm on, as shipped again since).
    {"kernel": "select", "shape": "paper", "select_insert": 0, "maxnreg_sel": 0},
    # M7C's key tile as one bulk copy through a tensor descriptor (select_tma; the same tables): the
    # kernel's sm_90 SASS 7,648 against 8,123 and 126 registers against the 168 cap (16 warps an SM
    # instead of 12) on triton 3.6 (RESULTS "selshm2"); the H100 of 2026-11-27 ran it 3.852 ms against
    # 4.146 with the pointer loads at M7C 64k x 1 (bench/gpu/2026-11-27b-h100-probe-select.jsonl): shipped
    # at M7C's 1 warp on sm_90 since, the pointer loads (that run's build) are the variant.
    {"kernel": "select", "shape": "m7c", "select_tma": 0},
]

# The compressed backward (dQ, dK/dV, the partial sum): keys of compressed._config; "x2" doubles one.
CMP_BWD_VARIANTS = [
    {},
    {"bn_dkv": 64},
    {"bt_dkv": "x2"},
    {"warps_dkv": 4},
    {"split_dkv": 4},
    {"split_dkv": 16},
    {"warps": "toggle"},
    # Head_dim-128 tiles (bench/tiles_d128.py, bench/RESULTS.md; ptxas: no spill on sm_80 / sm_90,
    # triton 3.6 and 3.9, at G 16 x D 128 and the head_dim > 64 points of gpucheck's grid, G 8 x D 96,
    # G 5 x D 128; G 16 x D 128 on sm_90, triton 3.6, SASS a FLOP of the main loop against the shipped
    # 32 x 32 at 4 warps): dQ 64 rows x 64 keys at 4 warps (-44 %, its products as wgmma) or 128 x 32
    # at 8 (-36 %, a quarter of the K/V bytes a FLOP); dK/dV 64 keys a tile unpipelined (-47 %;
    # `bn_dkv` 64 above is it with 2 stages, -41 %); then dQ and dK/dV together. (dK/dV at 128 keys
    # and 8 warps, -40 %, spills 12 B at G 5 x D 128 on sm_80 with triton 3.6.)
    {"shape": "paper", "BT": "rows:64", "bn_bwd": 64},
    # (bench/tiles_d128.py's 128 rows x 32 keys at 8 warps and 2 stages ships on sm_90 since the H100 of
    # 2026-11-26c measured it 10.46 ms against 11.57 at 1 stage, paper 32k x 1; the 1 stage shipped
    # before is the variant)
    {"shape": "paper", "BT": "rows:128", "warps": 8, "stages_dq": 1},
    {"shape": "paper", "bn_dkv": 64, "stages_dkv": 1},
    {"shape": "paper", "BT": "rows:64", "bn_bwd": 64, "bn_dkv": 64, "stages_dkv": 1},
    {"shape": "paper", "BT": "rows:128", "warps": 8, "bn_dkv": 64, "stages_dkv": 1},
    # The tiles every GPU run measured, since sm_90 ships bench/flash_proxy.py's (dK/dV 64 keys a tile,
    # at head_dim 64 over 32 rows unpipelined; dQ past head_dim 64 128 rows at 8 warps, unpipelined):
    # the probe measures the proxy's word against them (flash_proxy.py predicts the shipped dK/dV
    # 0.53-0.55x at M7C, 0.46-0.49x and the dQ 0.41-0.47x at the paper shape).
    {"shape": "m7c", "bt_dkv": "rows:64", "bn_dkv": 32, "stages_dkv": 2},
    {"shape": "paper", "bn_dkv": 32},
    {"shape": "paper", "BT": "rows:32", "warps": 4, "stages_dq": 2},
    {"shape": "paper", "BT": "rows:32", "warps": 4, "stages_dq": 2, "bn_dkv": 32},
]

# The selected ops; "TP": "x2" doubles the token tile's tokens (rows padded to a power of two).
SEL_VARIANTS = [
    {},
    {"fwd_keys": False, "bwd_keys": False},  # the query-major forward and dQ (forced + token tiles)
    {"fwd_keys": False},  # the key-major forward (selected_keys.py) off
    {"bwd_keys": False},  # the key-major backward (selected_keys_bwd.py) off
    {"BR_f": 64},
    {"BR_keys": 32},
    {"TP": "x2"},
    {"warps_tok": 2},
    {"warps_kv": 8},
    # The key-major backward's dQ partials in fp32 (pdq_bits 32: the path every GPU run measured)
    # instead of the shipped q's 16-bit dtype (bf16 here), which halves PDQ's bytes written by
    # _sel_bwd_keys_kernel and read by _sel_bwd_dq_merge_kernel (the model: bench/attention_model.py
    # what-if "pdq_fp32"; numerics: bench/pdq_numerics.py).
    {"pdq_bits": 32},
    # The key-major kernels' rows in 64 bits (keys_div32 False: the int64 step index and
    # (pos // NK) % T, the path every GPU run measured, compiled to the same SASS) instead of the
    # shipped 32-bit ones: the probe measures what bench/keys_proxy.py priced for the keys backward
    # (M7C 8k x 8, triton 3.6: 4.29 ms for the measured build, 4.53 measured; 2.68 at div32 with fp32
    # partials, 2.18 with pdq_bits 16) and the forward's 1682 -> 1386 SASS a step (bench/RESULTS.md
    # "keysdiv"). M7C only: the key-major kernels run at G <= 8. The second is the measured build's
    # keys backward on sm_90 (int64 rows, fp32 partials).
    {"shape": "m7c", "keys_div32": False},
    {"shape": "m7c", "keys_div32": False, "pdq_bits": 32},
    # The keys backward's dQ partial stored in its product's own layout (keys_dq_mma True: no round trip
    # through shared memory; shipped on sm_80 only) or converted to a 16-byte-store layout first (False:
    # the path every GPU run measured, the sm_90 default). bench/keys_proxy.py, M7C, triton 3.6: sm_90
    # 2.68 -> 1.92 ms at 8k x 8 (further outside its calibration than the shipped point), A100 12.66 ->
    # 11.55 (bench/RESULTS.md "keysmem"). The last one is the measured build on either arch.
    {"shape": "m7c", "keys_dq_mma": True},
    {"shape": "m7c", "keys_dq_mma": False},
    {"shape": "m7c", "keys_dq_mma": False, "keys_div32": False},
    # The key-major forward's partial output stored in its product's own layout (keys_fwd_mma, off):
    # triton 3.6, M7C, 18 fewer shared-memory accesses a 128-row step (40 -> 22 on sm_90), SASS about
    # the same (1386 -> 1374); its proxy does not calibrate (bench/RESULTS.md "keysmem").
    {"shape": "m7c", "keys_fwd_mma": True},
    # The keys backward's key mask as a per-row limit (keys_rowlim, selected_keys_bwd.py ROWLIM). sm_80
    # ships 64 rows a step with it at head_dim 64 (selected_keys_bwd.KEYS_BR64_ROWLIM; bench/a100_proxy.py
    # 0.87x its 32 rows before, outside the keys proxy's calibrated instructions: bench/RESULTS.md
    # "a100keys", "a100ship"): on an A100 the variant is sm_80's setting before (KEYS_BR32_SM80, 32 rows
    # without the limit), to be timed beside it; on an H100/H200 (64 rows already) the limit alone
    # (sm_90, triton 3.6, M7C: 535 -> 536 SASS a step, the same 32 shared accesses). A variant that
    # flips a switch sm_80's 64 rows need (keys_dq_mma, keys_div32) launches 32 rows there
    # (selected_keys_bwd.keys_rows: the row says so, "keys_rows").
    {"shape": "m7c", "arch": 80, **KEYS_BR32_SM80},
    {"shape": "m7c", "arch": 90, **KEYS_BR64_ROWLIM},
    # Head_dim 128: the query-major dK/dV kernel (`_sel_bwd_dkdv_kernel`) at 128 (pair, head) rows a
    # step and 8 warps (bench/tiles_d128.py; G 16 x D 128 on sm_90, triton 3.6: 16 % fewer SASS a
    # FLOP than 32 rows at 4 warps, the same 8 resident warps an SM) ships on sm_90 since the H100 of
    # 2026-11-26c measured the selected forward+backward 15.09 / 62.30 ms with it against 16.66 / 64.26
    # (paper 8k x 2 / 64k x 1): the 32 rows at 4 warps shipped before are the variant.
    {"shape": "paper", "BR": 32, "warps_kv": 4},
    # The token tiles' loop without `if take:` (tok_pipe; they run at G >= 9 as shipped: the paper
    # shape), so triton pipelines the gathered K/V loads (cp.async, bench/tok_pipe_sass.py): with 2
    # stages a step waits for its own loads (DEPBAR.LE 0), with 3 the next step's stay in flight while
    # it computes. 1: every table slot a step (the skipped ones masked); 2: the tile's union only
    # (selected.TOK_PIPE_PROBE, what gpucheck compiles). Run at paper:8192:2 and paper:32768:1
    # (--only selected --shapes paper:8192:2 paper:32768:1).
    {"shape": "paper", "tok_pipe": 1, "stages_tok": 2, "stages_dq": 2},
    {"shape": "paper", "tok_pipe": 1, "stages_tok": 3, "stages_dq": 3},
    # tok_pipe 2 at 2 stages ships at G > 8 on sm_90 (bench/gather_proxy.py) with the dQ at 2 warps:
    # this variant is it with the dQ at its measured 4 warps (the warps' part of the proxy's price).
    {"shape": "paper", "tok_pipe": 2, "stages_tok": 2, "stages_dq": 2, "warps_q": 4},
    {"shape": "paper", "tok_pipe": 2, "stages_tok": 3, "stages_dq": 3},
    # The measured loop (branchy, the dQ at 4 warps, 1 stage), since tok_pipe 2 ships at G > 8 on sm_90 on
    # bench/gather_proxy.py's word, NOT measured.
    {"shape": "paper", "tok_pipe": 0, "stages_tok": 1, "stages_dq": 1, "warps_q": 4},
    # The key-major merges' metadata as tiles (merge_tiles True: the rows' IDX / VALID / PL loaded once,
    # the partials' loads unrolled; bench/RESULTS.md "mergeone"), shipped on a pricing rule until the
    # H100 of 2026-11-26c measured the forward no faster (M7C 8k x 8: 3.11-3.34 ms against 2.93-3.17
    # with the loops that ship again): the forward row times `_sel_fwd_merge_kernel`'s change,
    # fwd+bwd minus it `_sel_bwd_dq_merge_kernel`'s (one switch flips both merges). M7C only: the
    # key-major kernels run at G <= 8. The second with the dQ merge's fp32 partials.
    {"shape": "m7c", "merge_tiles": True},
    {"shape": "m7c", "merge_tiles": True, "pdq_bits": 32},
    # The reverse index's segments of T/4 pairs (to 2048) alone (seg_target 0: what every GPU run measured)
    # instead of the shipped at most B*Hkv*T*n / 512 (selected.py `_config`; S 512 at M7C 8k x 1, 1024 at
    # 16k x 1, the same S at B*T >= 32k): shipped on the keys kernels' schedule (bench/attention_cost/
    # balance.py: at 8k x 1 the 34 longest of 286 programs run 2.1x the even spread), unmeasured. Run at
    # m7c:8192:1 and m7c:16384:1 (fwd: `_sel_fwd_keys_kernel`; fwd+bwd adds `_sel_bwd_keys_kernel` and the
    # reduce over 4x the segments).
    {"shape": "m7c", "seg_target": 0},
    # The key-major forward's forced pairs as one dense pass that merges the other pairs' partials, the
    # keys kernel over those alone without a mask (fwd_forced_merge; bench/RESULTS.md "forcedmerge"):
    # shipped 2026-11-27 on the cost model's price (NSA fwd+bwd 3.5 / 3.2 % faster at M7C 8k / 64k on an
    # H100, bench/fwd_gap.py lever `fwd_forced_merge`), unmeasured; the variant is the masked walk over
    # every pair and the separate merge every GPU run measured. The forward row times the change (the
    # backward is the same kernels either way).
    {"shape": "m7c", "fwd_forced_merge": False},
]


# The window kernels (window._configs: one dict a kernel, "fwd" / "dq" / "dkdv"; a variant's dict
# is merged into that kernel's). The tiles every GPU run measured, since sm_90 ships
# bench/flash_proxy.py's (bench/RESULTS.md "wintiles"; the proxy's shipped / measured: dQ past
# head_dim 64 0.57x, dK/dV past it 0.79x, dK/dV at head_dim 64 on 4 warps 0.64x).
WIN_VARIANTS = [
    {},
    {"shape": "paper", "dq": {"BLOCK_M": 64, "BLOCK_N": 64}},
    {"shape": "paper", "dkdv": {"BLOCK_M": 64}},
    {"shape": "m7c", "dkdv": {"num_warps": 8}},
]

# q's RoPE fan-out (fused.FUSE_Q_GRAD, shipped unmeasured): the three branch gradients summed in its
# backward's one kernel; False: autograd's two adds in q's dtype and the plain inverse rotation, the
# path every GPU run measured.
ROPE_VARIANTS = [{}, {"fuse_q_grad": False}]

# The gates folded into the branch backwards' lse (gated.FOLD_GATE, shipped unmeasured: one dO for the
# three branch backwards); False: the gate mix's backward writing three g * dO copies, the path every
# GPU run measured.
# The branches' delta written by the fold's kernel (gated.FOLD_DELTA, shipped unmeasured); False: each
# branch backward forms its own from its O (the selected key-major one in a kernel of its own), the
# path every GPU run measured. Each variant changes one switch from the shipped pair.
GATE_VARIANTS = [{}, {"fold_gate": False}, {"fold_delta": False}]


def _variants() -> dict[str, list[dict]]:
    """Each probe's variants, by the name --only takes (the probes run in this order by default);
    read at the call, so a list patched in the module (a test's misspelt variant) is the one used."""
    return {
        "cmp_fwd": CMP_VARIANTS,
        "cmp_bwd": CMP_BWD_VARIANTS,
        "selected": SEL_VARIANTS,
        "window": WIN_VARIANTS,
        "rope": ROPE_VARIANTS,
        "gate": GATE_VARIANTS,
    }


# Keys of a variant that select what runs rather than change the config: the forward probe's kernel,
# and the one shape a variant is for (its rows skipped at the others).
META = ("kernel", "shape", "arch")


def _runs_at(over: dict, name: str, match: list[str] | None = None, arch: int | None = None) -> bool:
    """The variant runs at shape `name`, on sm_`arch` where it names one ("arch": the probe's GPU, the
    dry run's --arch), and, under --match, names one of `match`'s keys or is a baseline (no key but
    META's: the shipped config, always timed beside the others in the same run)."""
    keys = set(over) - set(META)
    return (
        over.get("shape", name) == name
        and over.get("arch", arch) == arch
        and (not match or not keys or bool(keys & set(match)))
    )


def _apply(cfg: dict, over: dict, G: int) -> dict:
    out = dict(cfg)
    for k, v in over.items():
        if k == "TP":
            out["TP"] = cfg["TP"] * int(v[1:])
            out["RP"] = max(16, triton.next_power_of_2(out["TP"] * G))
        elif isinstance(v, str) and v.startswith("rows:"):  # BT tokens of GP heads: rows // GP
            out[k] = max(1, int(v[5:]) // cfg["GP"])
        elif v == "x2":
            out[k] = cfg[k] * 2
        elif v == "toggle":
            out[k] = 4 if cfg[k] == 8 else 8
        elif isinstance(v, dict) and k in cfg:  # a window kernel's dict: merged
            out[k] = {**cfg[k], **v}
        elif k in cfg:
            out[k] = v
    return out


# The compressed forward grows with T; the selected ops' time is flat in T at B*T = 64k tokens.
DEFAULT_SHAPES = {
    "cmp_fwd": ["m7c:8192:8", "m7c:65536:1", "paper:32768:2"],
    "cmp_bwd": ["m7c:65536:1", "paper:32768:2"],
    "selected": ["m7c:8192:8", "paper:8192:8"],
    "window": ["m7c:8192:8", "paper:8192:2"],
    "rope": ["m7c:8192:8", "paper:8192:8"],
    "gate": ["m7c:8192:8", "paper:8192:2"],
}


def probe_cmp(name, B, T, match=None):
    Hkv, G, D = SHAPES[name]
    q, kc, vc, _, _ = _inputs(B, T, Hkv, G, D)
    for over in CMP_VARIANTS:
        if not _runs_at(over, name, match):
            continue
        try:
            ms = _time(_cmp_launch(q, kc, vc, over))
        except Exception as e:  # a variant that does not compile (shared memory, registers) is a result
            ms = f"{type(e).__name__}: {str(e)[:200]}"
        yield {"probe": "cmp_fwd", "shape": name, "T": T, "B": B, "variant": over, "ms": ms}


def _time_patched(module, attr: str, patched, fwd, fwd_bwd) -> dict:
    """fwd and fwd+bwd ms with `module.attr` replaced by `patched` for the timing only (a variant
    that does not compile, shared memory or registers, is a result: its error)."""
    base = getattr(module, attr)
    setattr(module, attr, patched)
    try:
        return {"fwd_ms": _time(fwd), "fwd_bwd_ms": _time(fwd_bwd)}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    finally:
        setattr(module, attr, base)


def _switch_rows(probe: str, module, attr: str, variants, name, B, T, match, fwd, fwd_bwd, more=()):
    """The rows of a probe whose variants set module-level switches, `module.attr` (and those named
    in `more`), by their names in lower case (ROPE_VARIANTS' "fuse_q_grad", GATE_VARIANTS'
    "fold_gate" / "fold_delta"), each timed with them patched (a switch a variant does not name keeps
    its shipped value)."""
    for over in variants:
        if _runs_at(over, name, match):
            shipped = {extra: getattr(module, extra) for extra in more}
            try:  # the other switches set for this variant's timing, restored after it
                for extra, value in shipped.items():
                    setattr(module, extra, over.get(extra.lower(), value))
                value = over.get(attr.lower(), getattr(module, attr))
                row = _time_patched(module, attr, value, fwd, fwd_bwd)
            finally:
                for extra, value in shipped.items():
                    setattr(module, extra, value)
            yield {"probe": probe, "shape": name, "T": T, "B": B, "variant": over, **row}


def probe_sel(name, B, T, match=None):
    Hkv, G, D = SHAPES[name]
    q, kc, vc, ks, vs = _inputs(B, T, Hkv, G, D)
    scale = D**-0.5
    _, idx, valid = cmp.compressed_attention_and_selection(
        q, kc, vc, block_len=GEO["block_len"], block_stride=GEO["block_stride"],
        sel_block=GEO["sel_block"], n_sel=GEO["n_sel"], scale=scale,
    )  # fmt: skip
    leaves = [t.detach().clone().requires_grad_() for t in (q, ks, vs)]
    dout = torch.randn_like(q)
    base = sel._launch_config

    def fwd():
        return sel.selected_attention(*leaves, idx, valid, sel_block=GEO["sel_block"], scale=scale,
                                      forced_blocks=True)  # fmt: skip

    def fwd_bwd():
        torch.autograd.grad(fwd(), leaves, dout)

    arch = device_arch(q.device)
    for over in SEL_VARIANTS:
        if not _runs_at(over, name, match, arch):
            continue
        patched = lambda G, D, LP, *a, _o=over: _apply(base(G, D, LP, *a), _o, G)  # noqa: E731
        row = _time_patched(sel, "_launch_config", patched, fwd, fwd_bwd)
        yield {"probe": "selected", "shape": name, "T": T, "B": B, "variant": over,
               **_keys_rows_note(patched(G, D, GEO["sel_block"], arch), arch), **row}  # fmt: skip


def _keys_rows_note(cfg: dict, arch: int) -> dict:
    """{"keys_rows": the keys backward's rows and limit as launched} where the launcher's rule
    (selected_keys_bwd.keys_rows: what fits sm_`arch`) takes a variant's config to other rows, else {}."""
    fit = keys_rows(cfg, arch)
    if fit == cfg:
        return {}
    return {"keys_rows": {k: fit[k] for k in ("BR_keys", "keys_rowlim")}}


def probe_cmp_bwd(name, B, T, match=None):
    Hkv, G, D = SHAPES[name]
    q, kc, vc, _, _ = _inputs(B, T, Hkv, G, D)
    leaves = [t.detach().clone().requires_grad_() for t in (q, kc, vc)]
    kw = {k: GEO[k] for k in ("block_len", "block_stride", "sel_block", "n_sel")}
    out = cmp.compressed_attention_and_selection(*leaves, **kw, scale=D**-0.5)[0]
    dout = torch.randn_like(out)
    base = cmp._config
    for over in CMP_BWD_VARIANTS:
        if not _runs_at(over, name, match):
            continue
        cmp._config = lambda *a, _o=over, **k: _apply(base(*a, **k), _o, G)
        try:
            ms = _time(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True))
        except Exception as e:
            ms = f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            cmp._config = base
        yield {"probe": "cmp_bwd", "shape": name, "T": T, "B": B, "variant": over, "ms": ms}


def probe_window(name, B, T, match=None):
    """The window attention alone (forward, forward+backward) under each variant's tiles."""
    Hkv, G, D = SHAPES[name]
    q, _, _, ks, vs = _inputs(B, T, Hkv, G, D)
    leaves = [t.detach().clone().requires_grad_() for t in (q, ks, vs)]
    dout = torch.randn_like(q)
    base = win._configs

    def fwd():
        return win.window_attention(*leaves, window=GEO["window"], scale=D**-0.5)

    def fwd_bwd():
        torch.autograd.grad(fwd(), leaves, dout)

    for over in WIN_VARIANTS:
        if not _runs_at(over, name, match):
            continue
        patched = lambda *a, _o=over, **k: _apply(base(*a, **k), _o, G)  # noqa: E731
        row = _time_patched(win, "_configs", patched, fwd, fwd_bwd)
        yield {"probe": "window", "shape": name, "T": T, "B": B, "variant": over, **row}


def probe_rope(name, B, T, match=None):
    """q's RoPE (`fused.rope_q_fanout`, three consumers) forward, and forward + backward with three
    branch gradients, under FUSE_Q_GRAD as each variant sets it."""
    from nsa.attention.rope import rope_tables

    Hkv, G, D = SHAPES[name]
    x = torch.randn(B, T, Hkv, G, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cos, sin = rope_tables(T, D, 10000.0, torch.float32, torch.device("cuda"))
    douts = [torch.randn(B, Hkv, T, G, D, device="cuda", dtype=torch.bfloat16) for _ in range(3)]

    def fwd():
        return fused.rope_q_fanout(x, cos, sin, 3)

    def fwd_bwd():
        torch.autograd.grad(fwd(), x, douts)

    yield from _switch_rows("rope", fused, "FUSE_Q_GRAD", ROPE_VARIANTS, name, B, T, match, fwd, fwd_bwd)


def probe_gate(name, B, T, match=None):
    """The three branches and the gate mix (the suite's core inputs, q shared by the branches) forward,
    and forward + backward, under FOLD_GATE and FOLD_DELTA as each variant sets them (FOLD_GATE off: one
    op at a time, each branch forming its own delta)."""
    Hkv, G, D = SHAPES[name]
    inp = _nsa_core_inputs(B, T, Hkv, G, D, GEO, "cuda", torch.bfloat16)
    geo = tuple(GEO[k] for k in ("block_len", "block_stride", "sel_block", "n_sel", "window"))
    leaves = list(inp.values())
    dy = torch.randn(B, T, Hkv * G * D, device="cuda", dtype=torch.bfloat16)

    def fwd():
        branch = {**inp, "q_sel": inp["q"], "q_win": inp["q"]}
        mixed = gated.gated_branches(branch, inp["g"], *geo, scale=D**-0.5)
        return _nsa_core(inp, GEO, D**-0.5) if mixed is None else mixed[0]

    def fwd_bwd():
        torch.autograd.grad(fwd(), leaves, dy)

    yield from _switch_rows(
        "gate", gated, "FOLD_GATE", GATE_VARIANTS, name, B, T, match, fwd, fwd_bwd, more=("FOLD_DELTA",)
    )


def ncu_target(name, B, T):
    """One forward + backward of the compressed and selected ops (for ncu -k regex:...)."""
    Hkv, G, D = SHAPES[name]
    q, kc, vc, ks, vs = _inputs(B, T, Hkv, G, D)
    leaves = [t.requires_grad_() for t in (q, kc, vc, ks, vs)]
    scale = D**-0.5
    o, idx, valid = cmp.compressed_attention_and_selection(
        *leaves[:3], block_len=GEO["block_len"], block_stride=GEO["block_stride"],
        sel_block=GEO["sel_block"], n_sel=GEO["n_sel"], scale=scale,
    )  # fmt: skip
    o2 = sel.selected_attention(leaves[0], leaves[3], leaves[4], idx, valid, sel_block=GEO["sel_block"],
                                scale=scale, forced_blocks=True)  # fmt: skip
    (o.float().sum() + o2.float().sum()).backward()
    torch.cuda.synchronize()


def _shipped(probe: str, G: int, D: int, arch: int = 90) -> dict:
    """The config a probe's variants patch, as it runs on sm_`arch` (90: an H100/H200, 80: an A100)."""
    if probe == "selected":
        return sel._config(G, D, GEO["sel_block"], arch=arch)
    if probe == "window":
        return win._configs(D, arch)
    if probe == "rope":
        return {"fuse_q_grad": fused.FUSE_Q_GRAD}
    if probe == "gate":
        return {"fold_gate": gated.FOLD_GATE, "fold_delta": gated.FOLD_DELTA}
    return cmp._config(G, D, GEO["n_sel"], GEO["block_len"], GEO["block_stride"], GEO["sel_block"], arch)


def dry_run(
    probes: list[str], shapes: dict[str, list[str]], match: list[str] | None = None, arch: int = 90
) -> int:
    """Without a GPU: parse every name:T:B and apply every variant to the config it patches on
    sm_`arch`, one JSON row per (probe, shape, variant) with the keys it changes (the selected
    probe's as its launcher runs them: selected_keys_bwd.keys_rows); exit 2 when a shape does not
    parse or a variant names a key the config lacks (`_apply` would skip it silently: the probe
    would time the shipped setting under the variant's name)."""
    bad = 0
    for p in probes:
        for spec in shapes[p]:
            try:
                n, t, b = spec.split(":")
                (_, G, D), T, B = SHAPES[n], int(t), int(b)
            except (ValueError, KeyError):
                print(f"kernel_probe: --shapes {spec!r}: expected name:T:B, name one of {sorted(SHAPES)}",
                      file=sys.stderr)  # fmt: skip
                return 2
            base = _shipped(p, G, D, arch)
            for over in _variants()[p]:
                if not _runs_at(over, n, match, arch):
                    continue
                unknown = sorted(k for k in over if k not in base and k not in META)
                unknown += sorted(  # a window kernel's dict naming a key the kernel's tiles lack
                    f"{k}.{kk}" for k, v in over.items() if isinstance(v, dict) and k in base
                    for kk in v if kk not in base[k]
                )  # fmt: skip
                cfg = _apply(base, over, G)
                if p == "selected":
                    cfg = keys_rows(cfg, arch)
                changed = {k: cfg[k] for k in cfg if cfg[k] != base[k]}
                row = {"probe": p, "shape": n, "T": T, "B": B, "variant": over, "changes": changed}
                if unknown:
                    bad += 1
                    row["error"] = f"keys {unknown} not in the {p} config"
                print(json.dumps(row), flush=True)
    if bad:
        print(f'kernel_probe: {bad} variant(s) name keys the config lacks (see "error")', file=sys.stderr)
    return 2 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=tuple(_variants()), action="append")
    ap.add_argument("--shapes", nargs="*", help="name:T:B (names: m7c, paper); default: per probe, below")
    ap.add_argument("--ncu-target", help="name:T:B: run the ops once (for ncu) and exit")
    ap.add_argument(
        "--match", action="append", metavar="KEY",
        help="run only the variants that set KEY (repeatable), plus each probe's baseline (the shipped config)",
    )  # fmt: skip
    ap.add_argument(
        "--dry-run", action="store_true",
        help="no GPU: check the shapes parse and every variant applies; print what each changes",
    )  # fmt: skip
    ap.add_argument(
        "--arch", type=int, choices=(80, 90), default=90,
        help="with --dry-run: the GPU's compute capability the configs are taken for (80: A100; default 90)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    chosen = args.only or list(_variants())
    if args.match:  # a misspelt key would run the baselines alone, silently
        known = {k for p in chosen for over in _variants()[p] for k in over if k not in META}
        unknown = sorted(set(args.match) - known)
        if unknown:
            print(f"kernel_probe: --match {unknown}: no variant of {chosen} sets it; keys: {sorted(known)}",
                  file=sys.stderr)  # fmt: skip
            return 2
    if args.dry_run:
        return dry_run(chosen, {p: args.shapes or DEFAULT_SHAPES[p] for p in chosen}, args.match, args.arch)
    if not torch.cuda.is_available():
        print("kernel_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.ncu_target:
        n, t, b = args.ncu_target.split(":")
        ncu_target(n, int(b), int(t))
        return 0
    probes = {
        "cmp_fwd": probe_cmp, "cmp_bwd": probe_cmp_bwd, "selected": probe_sel, "window": probe_window,
        "rope": probe_rope, "gate": probe_gate,
    }  # fmt: skip
    for p in chosen:
        for spec in args.shapes or DEFAULT_SHAPES[p]:
            n, t, b = spec.split(":")
            for row in probes[p](n, int(b), int(t), args.match):
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
