"""The kernels of one NSA layer as our triton backend launches them (`ours`) and of the baseline
(`flash2`): FLOPs issued (padded rows included) and useful, DRAM and L2 bytes, programs and the work
counts their prices apply to.

Owns the mapping from a `Shape` and T to a list of `Kernel` records; the counts come from counts.py,
the prices from prices.py. The kernel structure is written out here from nsa/attention/triton/*.py,
so a change of structure there must be mirrored here; the shipped launch settings are the kernels'
`_config`s' (counts.py `shipped_launch`).
"""

from __future__ import annotations

import math

from .counts import (
    Shape,
    _cfg,
    _cmp_attn_work,
    _cmp_keys,
    _cmp_select_work,
    _kernel_modules,
    _p2,
    _sel_tiles,
    _tiles_of_the_runs,
    insert_factor,
    shipped_launch,
)
from .prices import Kernel
from .sass80 import select_work
from .selected import selected_kernels


def _keys_rows_sm80(launch: dict, s: Shape, cc: int) -> dict:
    """The keys backward's br_bwd_keys and keys_rowlim as selected_keys_bwd.keys_rows (the launcher's
    rule of what fits sm_`cc`'s registers, through selected.py, which imports it) takes `launch`'s
    (the past builds' say no keys_rowlim: False, and no keys_div32 / keys_dq_mma: the measured paths)."""
    keys_rows = _kernel_modules()[1].keys_rows
    cfg = {
        "DP": _p2(s.D, 16), "BR_keys": launch["br_bwd_keys"], "keys_rowlim": launch.get("keys_rowlim", False),
        "keys_div32": launch.get("keys_div32", False), "keys_dq_mma": launch.get("keys_dq_mma", False),
    }  # fmt: skip
    fit = keys_rows(cfg, cc)
    return {"br_bwd_keys": fit["BR_keys"], "keys_rowlim": fit["keys_rowlim"]}


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
    before_2930e5c: bool = False,
    select_v0: bool | None = None,
    halves_sel: int | None = None,
    maxnreg_sel: int | None = None,
    br_fwd_keys: int | None = None,
    br_bwd_keys: int | None = None,
    bt_sel: int | None = None,
    warps_cmp_dkv: int | None = None,
    tp: int | None = None,
    warps_tok: int | None = None,
    fwd_keys: bool | None = None,
    bwd_keys: bool | None = None,
    index_once: bool | None = None,
    pdq_bits: int | None = None,
    keys_div32: bool | None = None,
    keys_dq_mma: bool | None = None,
    keys_rowlim: bool | None = None,
    select_cut: int | None = None,
    select_shm: int | None = None,
    select_split: int | None = None,
    select_pair: int | None = None,
    select_insert: int | None = None,
    select_tma: int | None = None,
    flash_tiles: bool | None = None,
    tok_pipe: int | None = None,
    q_grad_fused: bool | None = None,
    gate_folded: bool | None = None,
    delta_folded: bool | None = None,
    merge_tiles: bool | None = None,
    select_one_warp: bool | None = None,
    cmp_dq_stages2: bool | None = None,
    dkdv_rows128: bool | None = None,
    seg_target: int | None = None,
    paper_shm: bool | None = None,
    paper_split: bool | None = None,
    fwd_forced_merge: bool | None = None,
) -> list[Kernel]:
    """The triton backend as it stands (nsa/attention/triton/*.py), fwd and bwd, one layer.
    balanced_dkv=False the
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
    the counts. fwd_keys / bwd_keys (selected.py `_config`, G <= 8 since the key-major kernels; None:
    what the code ships, False with before_ce226a4): the selected branch's key-major forward /
    backward instead of the forced tiles and token tiles (selected.py: `selected_kernels`).
    select_v0 / halves_sel / before_2930e5c: the selection kernel (`shipped_launch`): `cmp_sel32`
    (the int32 merge) unless select_v0, tagged `@h2` when merged in halves; maxnreg_sel its register
    cap (it selects the sm_80 SASS the A100 price reads; Hopper's prices do not see it). index_once: the selected
    branch's reverse index built once a layer with int32 sort keys (the key-major forward's, handed to
    the backward); False: as every committed run measured it, the backward's own int64 sort in ~16
    aten ops (`selected_kernels`); None: what the code ships, False with before_ce226a4 or
    before_2930e5c (builds before it). pdq_bits: the key-major backward's dQ partials, 32 (fp32) or
    16 (bf16; selected.py `_config` "pdq_bits"); None: what the code ships. keys_div32: the key-major
    kernels' rows in 32 bits (selected.py `_config` "keys_div32", shipped since keysdiv on
    bench/keys_proxy.py's word; False: the int64 rows every committed run measured), the keys
    backward's kind tagged `@div32` on Hopper (CONFIG_FACTOR); None: what the code ships. select_cut:
    the selection loop's integer work in 32 bits and hoisted (compressed.py `_config` "select_cut",
    shipped from G 3 on bench/select_proxy.py's word; 0: the loop every run measured), tagged `@cut`
    (head_dim <= 64) / `@cut_d128` on Hopper; None: what the code ships. tok_pipe: the token tiles'
    branch-free loop (selected.py `_config` "tok_pipe", shipped at G > 8 on sm_90 on
    bench/gather_proxy.py's word; 0: the branchy loop every run measured), the token-tile kinds
    tagged `@pipe` (CONFIG_FACTOR); None: what the code ships. keys_dq_mma: the
    keys backward's dQ partial stored in its product's own layout (selected.py `_config`
    "keys_dq_mma", shipped on sm_80 since keysmem on bench/keys_proxy.py's word; False: the converted
    store every committed run measured); it selects the sm_80 SASS the A100 price reads, Hopper's
    prices do not see it; None: what the code ships. keys_rowlim: the keys backward's key mask as a
    per-row limit (selected.py `_config` "keys_rowlim", shipped with 64 rows a step on sm_80 at head_dim
    <= 64; False: sm_80's 32 rows without it before); it selects the sm_80 SASS the A100 price reads.
    On sm_80 the keys backward's rows go through selected_keys_bwd.keys_rows, the launcher's rule:
    a setting 64 rows do not fit (no keys_rowlim, keys_div32 or keys_dq_mma) is priced at the 32 rows
    without the limit it launches, never as a spilling 64. flash_tiles: the compressed
    dQ / dK/dV tiles shipped on sm_90 on bench/flash_proxy.py's word (compressed.py `_config`: dK/dV
    64 keys a tile, dQ 128 rows at 8 warps past head_dim 64), tagged `@bn64` / `@bn64_d128` /
    `@wg_d128` on Hopper (CONFIG_FACTOR: the proxy's time over the measured tile's); False: the tiles
    every GPU run measured (`_tiles_of_the_runs`); None: what the code ships. (It also covers the
    window's sm_90 tiles, `@wg_d128`, `@bm128_d128`, `@w4`.) select_shm: the selection's Eq. 9 shared
    key without its two gathers (compressed.py `_config` "select_shm", shipped on sm_90 with
    select_split at M7C's shape; at the paper's from bench/select_proxy.py's word until the H100 of
    2026-11-26c measured it slower there), tagged
    `@shm_d128` / `@shm`; 0: the loop every run measured; None: what the code ships. select_split:
    the selection's interior key tiles without masks or candidate logic (compressed.py `_config`
    "select_split", shipped with select_shm on sm_90 at M7C's shape on the proxy's word), tagged
    `@split` on Hopper; 0: the CUT loop every run's successor measured; None: what the code ships. q_grad_fused: q's three branch gradients summed in float32
    inside RoPE's backward, one kernel (fused.py `rope_q_fanout`, `FUSE_Q_GRAD`), priced by its DRAM
    bytes as every memory kernel; False: autograd's two adds (`q_grad_sum`) and the plain inverse
    rotation, as every committed run measured them; None: what the code ships, False with
    before_ce226a4 or before_2930e5c. gate_folded: the gates folded into the branch backwards' lse
    (gated.py, `FOLD_GATE`): the gate mix's backward (`_gate_fold_bwd`) writes dy once in the
    kernels' layout, dg and the three lse' (5 activation passes + the lse), priced by its DRAM bytes;
    False: three g * dO copies (8 passes), as every committed run measured it; None: what the code
    ships, False with before_ce226a4 or before_2930e5c. delta_folded (with gate_folded only: gated.py
    `FOLD_DELTA`): the fold kernel also stores the three branches' delta = rowsum(dO * O) (fp32), so
    the compressed and window dQ kernels read no O tile (one activation each; they load delta where
    they stored it, the same bytes, lse-sized traffic the model leaves out of their counts either
    way), the selected key-major backward runs no `sel_bwd_delta` (2 activations + its delta store
    and one launch) and the query-major forced dQ reads no O; False: each branch forms its own, as
    every committed run measured it; None: what the code ships, False with before_ce226a4 or
    before_2930e5c. merge_tiles: the key-major merges with the rows' table metadata as one tile and
    the partials' loads unrolled (selected.py `_config` "merge_tiles", shipped on the lead's pricing
    rule until the H100 of 2026-11-26c measured it no faster; a probe variant since): the forward
    merge reads PL and the table once and is tagged `@tiles` (priced by H100C_COST's fitted 1.74x its
    DRAM time on every GPU), the dQ merge `@tiles` at its own (1.0);
    False: the loops every committed run measured; None: what the code ships (False in the past
    builds, `shipped_launch`; False since the H100 of 2026-11-26c). The three settings that H100's
    probes measured faster, shipped after it on sm_90 (each priced by the measured ratio, CONFIG_FACTOR):
    select_one_warp: the selection at 1 warp a program under a register cap at M7C's shape
    (compressed.py `_config` one_warp), tagged `@w1`; False: the 2 warps uncapped that run measured.
    cmp_dq_stages2: the compressed dQ's 128-row tile past head_dim 64 at 2 stages, tagged `@s2_d128`;
    False: 1 stage, as that run measured it. dkdv_rows128: the query-major dK/dV past head_dim 64 at
    128 rows a step and 8 warps (selected.py `_config` BR / warps_kv), tagged `@br128`; False: 32 rows
    at 4 warps, as every run measured it (and the 8-warp builds before 4e22175, `warps_dkdv` 8).
    seg_target: the reverse index's segments at most B*Hkv*T*n / seg_target pairs besides T/4
    (selected.py `_config` "seg_target", shipped unmeasured; bench/attention_cost/balance.py prices
    the key-major grids' program lengths); 0: T/4 alone, as every run measured it.
    select_tma: the selection's key tile as one bulk copy through a tensor descriptor (compressed.py
    `_config` "select_tma", shipped at M7C's 1 warp on sm_90 since the H100 of 2026-11-27 measured it
    faster at 64k), tagged `@tma` on sm_90 at head_dim <= 64 (CONFIG_FACTOR: that probe's ratio); 0:
    the pointer loads every run measured; None: what the code ships.
    paper_shm: select_shm past head_dim 64 (compressed.py `_config` paper_shm: on sm_90 at the paper's
    shape, beside select_insert 2; flipped on after the H100 of 2026-11-27 measured it faster there),
    tagged `@shm_d128`; False: off there (a given select_shm is kept), as that run measured it.
    paper_split: select_split past head_dim 64 (compressed.py `_config`: on sm_90 at paper_shm's scope
    since the H100 of 2026-11-27's second call measured it faster at 64k), tagged `@split_d128`; False:
    off there (a given select_split is kept), as every run measured it. None: what the code ships.
    fwd_forced_merge: the key-major forward's forced pairs as one dense pass that merges the other
    pairs' partials, the keys kernel over those alone and mask-free (selected.py `_config`
    "fwd_forced_merge", shipped 2026-11-27 unmeasured); False: the masked walk over every pair and the
    separate merge every run measured."""
    launch = shipped_launch(s, cc, before_ce226a4, before_2930e5c)
    given = {
        "select_v0": select_v0,
        "halves_sel": halves_sel,
        "maxnreg_sel": maxnreg_sel,
        "br_fwd_keys": br_fwd_keys,
        "br_bwd_keys": br_bwd_keys,
        "warps_sel": warps_sel,
        "bt_sel": bt_sel,
        "warps_cmp_dkv": warps_cmp_dkv,
        "tp": tp,
        "warps_tok": warps_tok,
        "fwd_keys": fwd_keys,
        "bwd_keys": bwd_keys,
        "pdq_bits": pdq_bits,
        "keys_div32": keys_div32,
        "keys_dq_mma": keys_dq_mma,
        "keys_rowlim": keys_rowlim,
        "select_cut": select_cut,
        "select_shm": select_shm,
        "select_split": select_split,
        "select_pair": select_pair,
        "select_insert": select_insert,
        "select_tma": select_tma,
        "tok_pipe": tok_pipe,
        "merge_tiles": merge_tiles,
        "seg_target": seg_target,
        "fwd_forced_merge": fwd_forced_merge,
    }
    launch.update({f: v for f, v in given.items() if v is not None})
    if select_one_warp is False and warps_sel is None and launch["warps_sel"] == 1:  # 2 without one_warp
        launch.update(warps_sel=2, maxnreg_sel=0)
    if paper_shm is False and select_shm is None and s.D > 64:  # off past head_dim 64, as 2026-11-27's run
        launch["select_shm"] = 0
    if paper_split is False and select_split is None and s.D > 64:  # off past head_dim 64, as every run
        launch["select_split"] = 0
    if cmp_dq_stages2 is not None:
        launch["stages_cmp_dq"] = 2 if cmp_dq_stages2 else 1
    if (dkdv_rows128 is False or warps_dkdv == 8) and launch["br_dkdv"] == 128:
        launch["br_dkdv"] = 32  # the rows every run measured past head_dim 64
    if cc < 90 and launch["bwd_keys"]:  # the rows a step the launcher runs on sm_80 (keys_rows)
        launch.update(_keys_rows_sm80(launch, s, cc))
    # index_once, q_grad_fused, gate_folded and delta_folded came after the past builds: None is what
    # the code ships, False for those
    past = before_ce226a4 or before_2930e5c
    launch["index_once"] = not past if index_once is None else index_once
    q_grad_fused = not past if q_grad_fused is None else q_grad_fused
    gate_folded = not past if gate_folded is None else gate_folded
    # the deltas come from the fold kernel: without the fold (the branches one by one) each forms its own
    delta_folded = gate_folded and (not past if delta_folded is None else delta_folded)
    launch["delta_folded"] = delta_folded
    launch["cc"] = cc
    if flash_tiles is False:  # the compressed backward's tiles as every GPU run measured them
        runs = _tiles_of_the_runs(s)
        keys = ("rows_cmp_dq", "bn_cmp_dkv", "split_cmp_dkv", "bm_win_dq", "bn_win_dkdv", "bm_win_dkdv",
                "warps_win_dkdv")  # fmt: skip
        launch.update({k: runs[k] for k in keys})
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
    if q_grad_fused:
        # the keys' inverse rotations, and q's: its three branch gradients and the tables in, dx out
        # (the sum in float32 in registers: no q-sized tensor between them)
        ks.append(Kernel("rope_bwd", "fused", "bwd", "memory", dram=2 * 3 * kvb, launches=1))
        tables = 2 * T * D * 4  # cos, sin [T, D] float32
        ks.append(Kernel("rope_q_grad", "fused", "bwd", "memory", dram=4 * act + tables, launches=1))
    else:
        ks.append(Kernel("rope_bwd", "fused", "bwd", "memory", dram=2 * (act + 3 * kvb), launches=2))
    # Backward: dO, the gates and the three branch outputs in, three branch gradients and the gates'
    # out (until the H200 run the model counted 5 of these 8 activations: 1.26-1.30x off). Folded
    # (gate_folded): dy and the three outputs in, one dO out (the branches' backwards share it), and
    # the three branches' fp32 lse in and lse - log2 g out.
    gates = 2 * B * T * s.H * 3 * bf
    if gate_folded:
        lses = 2 * 3 * B * T * s.H * 4
        deltas = 3 * B * T * s.H * 4 if delta_folded else 0  # the branches' fp32 deltas (delta_folded)
        ks.append(Kernel("gate_mix_bwd", "fused", "bwd", "memory", dram=5 * act + gates + lses + deltas))
    else:
        ks.append(Kernel("gate_mix_bwd", "fused", "bwd", "memory", dram=8 * act + gates))
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
        aw = _cmp_attn_work(T, s, launch["bm_cmp_fwd"], launch["bn_cmp_fwd"])
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
        # select_pair (a what-if, priced where its SASS was counted: the CUT loop at 1 warp on sm_90,
        # M7C's; elsewhere, sm_80 and the paper shape's 4 warps among them, unpriced and left off): two
        # groups of bt tokens a program on one key tile load, the programs and their key tiles those
        # of 2 x bt tokens (half the L2 bytes), the merges per group; tagged `@pair` (CONFIG_FACTOR).
        priced = cc != 80 and launch.get("select_cut") and launch["warps_sel"] == 1
        pair = launch.get("select_pair", 0) if priced else 0
        sw = _cmp_select_work(T, s, 1, bt * (1 + pair))
        sel_rows, sel_progs = sw["rows"], BH * sw["tiles"]
        v0 = launch["select_v0"]  # the int64 merge (before 2026-11-26b) or compressed_select.py's int32 one
        tags = f"@w{launch['warps_sel']}" + (f"@bt{bt}" if bt != _sel_tiles(s)["BTF"] else "")
        tags += "@h2" if launch["halves_sel"] and not v0 else ""
        # the hoisted 32-bit loop (select_cut): the proxy's factor on Hopper; the A100 price reads the
        # setting's own sm_80 SASS (sass80.py, the split's two loops too), and its published-efficiency
        # what-if never had it. Inside it (the kernel runs neither without it): Eq. 9's shared key
        # without the gathers (select_shm, shipped on sm_90 at M7C's shape) and the interior key
        # tiles unmasked (select_split, shipped with select_shm there).
        if launch.get("select_cut") and not v0 and cc != 80:
            tags += "@cut" if D <= 64 else "@cut_d128"
            if launch.get("select_shm"):
                tags += "@shm" if D <= 64 else "@shm_d128"
            if launch.get("select_split"):
                tags += "@split" if D <= 64 else "@split_d128"
            if pair:
                tags += "@pair"
            # the key tile as one bulk copy (select_tma, shipped at M7C's 1 warp; sm_90 at head_dim <= 64, unpaired)
            if launch.get("select_tma") and D <= 64 and cc >= 90 and not pair:
                tags += "@tma"
        sunit = 2 * BH * sw["steps"] * sel_rows * sw["keys"] * D
        # select_insert (shipped at M7C's 1 warp and at the paper's 4 tokens merged at once on sm_90, priced
        # where counted: those two builds of the CUT loop): a tile's SASS x counts.insert_factor(T), on its
        # token steps
        paper_ins = cc != 80 and launch.get("select_cut") and D > 64 and bt == 4 and not launch["halves_sel"]
        ins = (
            insert_factor(T, launch["select_insert"], d128=D > 64)
            if (priced or paper_ins) and launch.get("select_insert")
            else 1.0
        )
        swork = {"programs": sel_progs, "token_steps": BH * sw["steps"] * sw["tokens"] * ins}
        if cc == 80:  # the A100 price: the kernel's own sm_80 SASS (sass80.py; none recorded: as published)
            swork.update(select_work(T, s, launch) or {})
        if not selection_free:
            ks.append(Kernel("cmp_select", "selection", "fwd", f"cmp_sel{'' if v0 else '32'}{tags}", sunit, cuse,
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
    dq_rows = launch["rows_cmp_dq"]  # BT x GP (token, head) rows: 128 at M7C, 32 at G 1
    bunit = 2 * BH * T * RB * ck * D
    dq_progs = BH * math.ceil(T * RB / dq_rows)
    # The proxy-shipped tiles (flash_tiles) on Hopper: the factor of bench/flash_proxy.py's time over the
    # measured tile's (CONFIG_FACTOR), past the model's own count of the new tile (programs, waves).
    measured = _tiles_of_the_runs(s)
    hopper_tile = cc != 80 and flash_tiles is not False
    dq_tag = "@wg_d128" if hopper_tile and D > 64 and dq_rows != measured["rows_cmp_dq"] else ""
    if dq_tag and launch.get("stages_cmp_dq") == 2:  # 2 stages (1 as the 2026-11-26c H100 measured it)
        dq_tag += "@s2_d128"
    o_read = 0 if delta_folded else act  # the dQ kernels' O tile, for delta (none handed the fold's)
    ks.append(Kernel("cmp_bwd_dq", "compressed", "bwd", f"cmp_dq@{_cfg(D)}{dq_tag}", 3 * bunit, 3 * cuse,
                     3 * act + o_read + 2 * BH * nc * D * bf, l2=dq_progs * ck * D * bf * 2,
                     programs=dq_progs, per_sm=1, work={"programs": dq_progs}))  # fmt: skip
    # dK/dV per tile of 32 compressed keys: tile i is seen by the queries after it, so tile 0 carries
    # T query rows while the last carries almost none. Each tile's query tiles are cut into SPLIT = 8
    # parts (one program each, fp32 partials summed in order by a second kernel), so the longest
    # program has 1/8 of tile 0's work; split=1 models the kernel before 2026-11-25.
    split = launch["split_cmp_dkv"] if balanced_dkv else 1
    bn_dkv = launch["bn_cmp_dkv"]
    dkv_tiles = BH * max(1, math.ceil(nc / bn_dkv))
    part = dkv_tiles * split * bn_dkv * D * 4 * 2 if split > 1 else 0
    if launch["warps_cmp_dkv"] not in (4, 8):
        raise ValueError(f"warps_cmp_dkv={launch['warps_cmp_dkv']}: priced at 8 (cmp_dkv) and 4 (@w4) only")
    dkv_tag = "@w4" if launch["warps_cmp_dkv"] == 4 else ""  # the prices were fitted at 8 warps
    if hopper_tile and bn_dkv != measured["bn_cmp_dkv"]:
        dkv_tag += "@bn64" if D <= 64 else "@bn64_d128"
    ks.append(Kernel("cmp_bwd_dkv", "compressed", "bwd", f"cmp_dkv@{_cfg(D)}{dkv_tag}", 4 * bunit, 4 * cuse,
                     2 * BH * nc * D * bf * 2 + 2 * part, l2=dkv_tiles * (T / 2) * RB * D * bf * 2,
                     programs=dkv_tiles * split, per_sm=2, crit=4 * 2 * T * RB * bn_dkv * D / split,
                     launches=1 + (split > 1), work={"programs": dkv_tiles * split}))  # fmt: skip
    ks += selected_kernels(T, s, launch, forced_tiles, token_tiles, selections, warps_dkdv)
    # Window: rows = tokens x G (no padding), keys = the band plus the tile overhang; tiles by head_dim
    # (window._configs, through `launch`: forward 128 rows x 64 / 32 keys, dQ 128 / 64 x 64, dK/dV
    # 64 / 32 keys; the overhang in `wk` is still the forward's at head_dim 64).
    wk = min(T, s.w + 128 / G + 64)
    wunit = 2 * BH * T * G * wk * D
    wuse = 2 * BH * T * G * min(T, s.w) * D
    wprog = BH * math.ceil(T * G / launch["bm_win_fwd"])
    ks.append(Kernel("win_fwd", "window", "fwd", f"win_fwd@{_cfg(D)}", 2 * wunit, 2 * wuse, 2 * act + 2 * kvb,
                     l2=wprog * wk * D * bf * 2, programs=wprog, per_sm=1, work={"programs": wprog}))  # fmt: skip
    # The proxy-shipped window tiles on Hopper (window.py `_configs`, flash_tiles): dQ past head_dim 64
    # at 128 rows x 32 keys, dK/dV past it at 128 rows, dK/dV at head_dim 64 on 4 warps; tagged for
    # CONFIG_FACTOR (bench/flash_proxy.py's time over the measured tile's, past the model's own count).
    wq_tag = "@wg_d128" if hopper_tile and D > 64 and launch["bm_win_dq"] != measured["bm_win_dq"] else ""
    wd_tag = "@w4" if hopper_tile and launch["warps_win_dkdv"] != measured["warps_win_dkdv"] else ""
    if hopper_tile and D > 64 and launch["bm_win_dkdv"] != measured["bm_win_dkdv"]:
        wd_tag += "@bm128_d128"
    wqprog = BH * math.ceil(T * G / launch["bm_win_dq"])  # 64 rows past head_dim 64 (the model had 128)
    ks.append(Kernel("win_bwd_dq", "window", "bwd", f"win_dq@{_cfg(D)}{wq_tag}", 3 * wunit, 3 * wuse, 3 * act + o_read + 2 * kvb,
                     l2=wqprog * wk * D * bf * 2, programs=wqprog, per_sm=1, work={"programs": wqprog}))  # fmt: skip
    wbn = launch["bn_win_dkdv"]
    wdk = min(T, s.w + wbn)
    wdprog = BH * math.ceil(T / wbn)
    ks.append(Kernel("win_bwd_dkdv", "window", "bwd", f"win_dkdv@{_cfg(D)}{wd_tag}", 4 * 2 * BH * T * G * wdk * D,
                     2 * wuse, 2 * act + 4 * kvb, l2=wdprog * wdk * G * D * bf * 2, programs=wdprog, per_sm=1,
                     work={"programs": wdprog}))  # fmt: skip
    # Autograd sums q's gradient from the three branches (each takes the same rotated q): two adds,
    # until RoPE's backward summed them (q_grad_fused).
    if not q_grad_fused:
        ks.append(Kernel("q_grad_sum", "fused", "bwd", "memory", dram=2 * 3 * act, launches=2))
    return ks
