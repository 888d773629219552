"""The selected branch's kernels, as nsa/attention/triton/selected.py launches them with forced blocks
(what NSAAttention passes): the query-major path (forced-block tiles, then token tiles over the other
blocks; dK/dV key-major) and, at G <= 8 (`fwd_keys` / `bwd_keys` of selected.py's `_config`), the
key-major path (FSA's loop order: every (query, block) pair, forced ones included, in full tiles of
(pair, head) rows against one block's keys, partial results merged after).

Owns `selected_kernels`: one `Kernel` record per launch of the branch, with its FLOPs, bytes, programs
and work counts; kernels.py's `ours` calls it. Counts only (prices: prices.py); no torch.
"""

from __future__ import annotations

import math

from .balance import segment_steps
from .counts import (
    Shape,
    _cfg,
    _p2,
    _per_sm,
    _seg_pairs,
    _sel_keys,
    _sel_steps,
    _tokens_per_tile,
    _valid_pairs,
)
from .prices import Kernel
from .sass80 import keys_bwd_work

# One step of the keys kernels on sm_90 (triton 3.6, M7C bf16, the shipped settings: the forward's
# 128 rows, the backward's 64), warp SASS and shared-memory accesses, as compiled (measured on CPU,
# bench/RESULTS.md "fwd8k", bench/fwd_gap.py --step-sass): the masked step, and the same step with its
# causal / range mask taken out (`ok`: the compare, the predicates kept in registers, P2R / ISETP.NE
# to restore them, the selects), what a step whose every row sees every key of its block needs. The
# forward's mask is 28 % of its step (1386 -> 1000), the backward's 13 % (535 -> 467).
STEP_SASS = {"fwd": ((1386, 40), (1000, 37)), "bwd": ((535, 32), (467, 32))}
KEYS_ISSUE, KEYS_SMEM = (
    2.865,
    7.751,
)  # bench/keys_proxy.py's issue+smem fit on both keys kernels (H200 cycles)
# The forward's step without any mask over the masked step (the keys proxy's terms): what the keys
# forward runs with fwd_forced_merge (FREE: no row of it sees its own block).
NOMASK = (STEP_SASS["fwd"][1][0] * KEYS_ISSUE + STEP_SASS["fwd"][1][1] * KEYS_SMEM) / (
    STEP_SASS["fwd"][0][0] * KEYS_ISSUE + STEP_SASS["fwd"][0][1] * KEYS_SMEM
)


def forced_share(T: int, s: Shape) -> float:
    """The forced entries' share (block 0, the previous and the own block) of a sequence's valid
    (pair, head) rows: min(3, j + 1) of min(n, j + 1) entries for the tokens of block j."""
    blocks = [(j, min(T, (j + 1) * s.lp) - j * s.lp) for j in range(-(-T // s.lp))]
    return sum(min(3, j + 1) * t for j, t in blocks) / sum(min(s.n, j + 1) * t for j, t in blocks)


def selected_kernels(
    T: int,
    s: Shape,
    launch: dict,
    forced_tiles: bool = True,
    token_tiles: bool = True,
    selections: str = "random",
    warps_dkdv: int = 4,
) -> list[Kernel]:
    """The branch's launches, forward and backward, for one layer (see `ours` for the flags; `launch`
    is `shipped_launch`'s, with `fwd_keys` / `bwd_keys`, which apply with forced_tiles only, as
    selected.py takes the key-major path only with forced blocks)."""
    fwd_keys = forced_tiles and launch["fwd_keys"]
    bwd_keys = forced_tiles and launch["bwd_keys"]
    # delta handed in by the gate fold's kernel (kernels.py `delta_folded`): no O read for it
    folded = launch.get("delta_folded", False)
    B, G, D, BH = s.B, s.G, s.D, s.B * s.Hkv
    bf = 2
    act = B * T * s.H * D * bf
    kvb = BH * T * D * bf
    ns = -(-T // s.lp)
    k = min(s.n, ns)
    table = BH * T * k * 9  # int64 block ids + valid flags
    ks: list[Kernel] = []
    # Selected, forward and dQ: query-major, rows = TP tokens x G padded to 16, one 64-key step per
    # distinct block of the program's tokens; each step gathers that block's K and V (block ids from
    # the table: loads not pipelined across steps, priced per byte, kinds tok_fwd / tok_dq). dQ has
    # the forward's loop (no atomics) plus one more product per step.
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
        bmf = launch["bm_forced"]  # 64 rows (selected.py `_config` BM)
        fissue = 2 * BH * math.ceil(T * G / bmf) * bmf * fk * D
        fprog = BH * math.ceil(T * G / bmf)
        fl2 = fprog * fk * D * bf * 2
        state = BH * T * G * (D + 1) * 4  # fp32 o + lse (forward), fp32 dQ part + delta (backward)
        if not fwd_keys:
            ks.append(Kernel("sel_forced_fwd", "selected", "fwd", "forced_fwd", 2 * fissue, 2 * fuse,
                             act + state + table, l2=fl2, programs=fprog, per_sm=_per_sm(168, 128),
                             work={"programs": fprog}))  # fmt: skip
        if not bwd_keys:
            ks.append(Kernel("sel_forced_dq", "selected", "bwd", "forced_dq", 3 * fissue, 3 * fuse,
                             (2 if folded else 3) * act + state + table, l2=fl2, programs=fprog, per_sm=_per_sm(254, 128),
                             work={"programs": fprog}))  # fmt: skip
        one_token_steps = BH * _sel_steps(T, s, 1)
    state_in = BH * T * G * (D + 1) * 4 if forced_tiles else 0  # the gather kernels resume from it
    suse = 2 * one_token_steps * G * s.lp * D
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
    sl2 = gathered = steps * s.lp * D * bf * 2
    mult = TP // _tokens_per_tile(G) if TP > 1 else 1
    tp_tag = f"@tp{mult}" if mult > 1 else ""
    w_base = 4 if D <= 64 else 8
    w_tag = "" if launch["warps_tok"] == w_base else f"@w{launch['warps_tok']}"
    # tok_pipe (G > 8 on sm_90): the branch-free loop at 2 stages, its dQ at 2 warps, priced by
    # bench/gather_proxy.py's ratio to the measured loop (CONFIG_FACTOR "tok_fwd@pipe" / "tok_dq@pipe");
    # the past builds (RUN_BUILDS) have none.
    pipe_tag = "@pipe" if forced_tiles and launch.get("tok_pipe") else ""
    progs = BH * math.ceil(T / TP)
    if not fwd_keys:
        ks.append(Kernel("sel_fwd", "selected", "fwd", f"tok_fwd{tp_tag}{w_tag}{pipe_tag}", 2 * sunit, 2 * suse,
                         2 * act + 2 * kvb + table + 4 * BH * T * G + state_in, l2=sl2,
                         programs=progs, per_sm=_per_sm(96, 128),
                         work={"gather_bytes": gathered, "programs": progs}))  # fmt: skip
    if not bwd_keys:
        ks.append(Kernel("sel_bwd_dq", "selected", "bwd", f"tok_dq{tp_tag}{pipe_tag}", 3 * sunit, 3 * suse,
                         4 * act + 2 * kvb + table + state_in, l2=sl2,
                         programs=progs, per_sm=_per_sm(98, 128), launches=0,
                         work={"gather_bytes": gathered, "programs": progs}))  # fmt: skip
    # Reverse index (nsa/attention/triton/selected_keys.py `reverse_index`, the branch's only one):
    # `_sel_fwd_index_kernel` (each table entry's int32 sort key), one stable torch.sort of the int32
    # keys with their int64 positions (cub onesweep, 4 passes of 8 bits, each reading and writing key
    # + index: 96 bytes an entry; on the H200 at M7C 8k x 8 its 4 passes took 0.093 ms where the int64
    # sort the backward ran before took 8 passes, 0.215 ms: bench/gpu/2026-11-26b-h200-speed-final.json),
    # arange + searchsorted (3 launches: `sel_*reverse_index`), and `_sel_fwd_segs_kernel` (one
    # program: the segment ends). Built once a layer: by the key-major forward, whose op hands it to
    # the backward (`sel_reverse_index` 0 launches, 0 bytes), else by the backward.
    # Before (launch["index_once"] False: every committed run) the backward sorted its own int64 keys
    # (radix: ~8 passes over key + index, 256 bytes an entry) in ~16 aten ops.
    once = launch.get("index_once", True)
    index = BH * T * k * (96 if once else 256)
    entries = BH * T * k
    # Key-major walks (dK/dV, and with fwd_keys / bwd_keys the forward and the fused backward): rows =
    # (pair, head) of the valid pairs (min(n, t//l' + 1) a token), BR = 64 per step (32 at head_dim >
    # 64), full tiles for any G; each row's q (and dO) gathered by the sorted pair list; a program
    # per segment of <= seg pairs of one block x nb key chunks (nb = 1: BN = l' = 64).
    BR = launch["br_dkdv"]
    seg = _seg_pairs(T, BH * T * k, launch.get("seg_target", 0))
    nseg = BH * ns + math.ceil(BH * T * k / seg)
    nb = -(-s.lp // launch["bn_sel"])

    # The keys kernels' programs, scheduled (balance.py: a program walks one segment; at B = 1 and 8k
    # the few longest, block 0's and the early blocks', set the launch's time): 2 an SM (180-227
    # registers at 128 threads, sm_80 / sm_90).
    def steps(br: int) -> tuple[int, ...]:
        return segment_steps(T, BH, G, s.n, s.lp, br, seg, nseg) if nb == 1 else ()

    prow = npairs * G

    def unit(br: int) -> float:  # one GEMM over every row tile of br rows and the block's keys
        return 2 * math.ceil(prow / br) * br * s.lp * D

    kunit = unit(BR)
    useful = 2 * prow * s.lp * D
    part = nseg * s.lp * _p2(D, 16) * 4 * 2  # fp32 partial dK/dV per segment
    lse = 4 * BH * T * G
    if fwd_keys:
        # nsa/attention/triton/selected_keys.py: `_sel_fwd_keys_kernel` (grid (nseg, nb), BR_f rows a
        # step), per step s = q k^T, the chunk's softmax and o = p v (2 GEMMs), each row's normalised o
        # (q's dtype) and base-2 lse (fp32) stored as the pair's partial (PO, PL);
        # `_sel_fwd_merge_kernel` (grid (ceil(T / TM), BH)) reads, per (token, head) row in a fixed
        # order, every kept entry's PL twice (max, then weights) and PO once, and writes out and
        # lse. Priced as the key-major dK/dV (its fitted efficiency: the same walk of gathered rows
        # against one block's keys) plus the partials' DRAM time (written in the loop, not hidden:
        # `sel_keys_fwd`); the merge by DRAM.
        # Its reverse index (above; the backward's too): `_sel_fwd_index_kernel` reads idx and valid
        # and writes each entry's sort key (priced at 17 bytes an entry, as fitted: the key is int32),
        # torch.sort + arange + searchsorted, and `_sel_fwd_segs_kernel`.
        po = nb * prow * (D * bf + 4)
        ks.append(Kernel("sel_fwd_index", "selected", "fwd", "sel_index", dram=entries * 17,
                         programs=math.ceil(entries / 1024)))  # fmt: skip
        ks.append(Kernel("sel_fwd_reverse_index", "selected", "fwd", "memory", dram=index, launches=3))
        ks.append(Kernel("sel_fwd_segs", "selected", "fwd", "memory", dram=16 * BH * ns, programs=1))
        # fwd_forced_merge (selected.py `_config`, shipped 2026-11-27, unmeasured): the keys kernel walks
        # the non-forced pairs alone (a share 1 - f of the rows, their partials and gathers; the grid's
        # static bound unchanged, its spare programs exit), mask-free (NOMASK on its MMA-term: the
        # fitted efficiency's part, which the keys proxy says is issue); `_sel_fwd_forced_merge_kernel`
        # then runs the forced blocks as selected_forced.py's dense causal pass (its fitted kind
        # `forced_fwd`, at the 168 registers ptxas gives it) and reads the other partials as the merge
        # did (its fitted DRAM price, no launch of its own): `sel_fwd_forced_merge` + `_reads`, one
        # kernel (modelcheck's family `_sel_fwd_forced_merge`). The design and its lever: bench/RESULTS.md
        # "fwd8k", "forcedmerge".
        free = launch.get("fwd_forced_merge", False)
        f = forced_share(T, s) if free else 0.0
        steps_f = (
            segment_steps(T, BH, G, s.n, s.lp, launch["br_fwd_keys"], seg, nseg, forced=False)
            if free and nb == 1
            else steps(launch["br_fwd_keys"])
        )
        ks.append(Kernel("sel_fwd_keys", "selected", "fwd", f"sel_keys_fwd@{_cfg(D)}{'@free' if free else ''}",
                         2 * unit(launch["br_fwd_keys"]) * (1 - f) * (NOMASK if free else 1.0), 2 * useful * (1 - f),
                         act + 2 * kvb + (npairs * 8 + po) * (1 - f), l2=(prow * D * bf + npairs * 8) * (1 - f),
                         programs=nseg * nb, per_sm=2, work={"programs": nseg * nb}, steps=steps_f))  # fmt: skip
        # merge_tiles (selected.py `_config`, a probe variant since the H100 of 2026-11-26c measured it
        # no faster): the rows' metadata loaded once as a tile, PL once (its max and the weights from
        # the same tile), the PO loads unrolled: one read of PL and of the table instead of two, priced
        # by the kind "sel_fwd_merge@tiles" (H100C_COST: 1.74x its DRAM time, fitted on that run).
        # False: the two-pass loop every committed run but 2026-11-26c's measured, shipped again.
        if free:
            # the forced tiles' work and grid (above: fwd_keys implies forced_tiles), no state stored
            ks.append(Kernel("sel_fwd_forced_merge", "selected", "fwd", "forced_fwd", 2 * fissue, 2 * fuse,
                             act + table, l2=fl2, programs=fprog, per_sm=_per_sm(168, 128),
                             work={"programs": fprog}))  # fmt: skip
            # its one pass over the partials: each non-forced entry's PL once and PO once (an online
            # softmax from the forced state), the table once more, out and lse written
            ks.append(Kernel("sel_fwd_forced_merge_reads", "selected", "fwd", "sel_fwd_merge",
                             dram=(1 - f) * nb * prow * (D * bf + 4) + table + act + lse, launches=0,
                             programs=fprog))  # fmt: skip
        else:
            tiles = launch.get("merge_tiles", False)
            passes = 1 if tiles else 2
            ks.append(Kernel("sel_fwd_merge", "selected", "fwd", "sel_fwd_merge" + ("@tiles" if tiles else ""),
                             dram=nb * prow * (D * bf + passes * 4) + passes * table + act + lse,
                             programs=BH * math.ceil(T / launch["tm_merge"])))  # fmt: skip
    if bwd_keys:
        # nsa/attention/triton/selected_keys_bwd.py: `_sel_bwd_delta_kernel` (rowsum(dO * O), fp32),
        # then `_sel_bwd_keys_kernel`: the dK/dV kernel (at BR_keys rows a step: launch br_bwd_keys) plus
        # dq = (dS k) * scale per step (5 GEMMs) and
        # its fp32 store to PDQ at the pair's table position; the reduction of dK/dV as before; and
        # `_sel_bwd_dq_merge_kernel` (grid (ceil(T*G / BM), BH)): per (token, head) row the kept
        # entries' PDQ summed in a fixed order, dq stored (with merge_tiles the metadata as one tile,
        # the same bytes, kind tagged `@tiles` at its measured factor). Priced as the key-major dK/dV plus the
        # partials' DRAM time (`sel_keys_bwd`); delta and the merge by DRAM. PDQ's element: 4 bytes
        # (fp32, launch "pdq_bits" 32, what every run measured) or 2 (16: bf16, q's dtype), in the
        # keys kernel's write and the merge's read alike (the past builds say nothing: 32).
        pdq = nb * prow * D * (2 if launch.get("pdq_bits", 32) == 16 else 4)
        if not folded:  # else the gate fold's kernel wrote delta: no launch
            ks.append(Kernel("sel_bwd_delta", "selected", "bwd", "memory", dram=2 * act + lse,
                             programs=math.ceil(BH * T * G / 64)))  # fmt: skip
        ks.extend(_bwd_index(fwd_keys, index, entries, BH * ns, once))
        br_tag = "@br32" if launch["br_bwd_keys"] == 32 else ""  # priced at 64 rows a step (the run's)
        # The rows in 32 bits (keys_div32): a proxy's factor on Hopper (CONFIG_FACTOR); the A100 prices
        # read the setting's own sm_80 SASS instead, and its published-efficiency what-if never had it.
        if launch.get("keys_div32") and launch.get("cc") != 80:
            br_tag += "@div32"
        kwork = {"programs": nseg * nb}
        if launch.get("cc") == 80:  # the A100 price: the kernel's own sm_80 SASS (sass80.py)
            st = {"BR_keys": launch["br_bwd_keys"], "pdq_bits": launch.get("pdq_bits", 32),
                  "warps_keys": launch.get("warps_keys", 4 if D <= 64 else 8),
                  "stages_kv": launch.get("stages_kv", 1), "keys_div32": launch.get("keys_div32", False),
                  "keys_dq_mma": launch.get("keys_dq_mma", False),
                  "keys_rowlim": launch.get("keys_rowlim", False),
                  "seg_target": launch.get("seg_target", 0)}  # fmt: skip
            kwork.update(keys_bwd_work(T, s, st) or {})
        ks.append(Kernel("sel_bwd_keys", "selected", "bwd", f"sel_keys_bwd@{_cfg(D)}{br_tag}",
                         5 * unit(launch["br_bwd_keys"]), 5 * useful,
                         2 * act + 2 * kvb + 2 * lse + npairs * 8 + part + pdq,
                         l2=prow * D * bf * 2 + prow * 8, programs=nseg * nb, per_sm=2,
                         work=kwork, steps=steps(launch["br_bwd_keys"])))  # fmt: skip
    else:
        ks.extend(_bwd_index(fwd_keys, index, entries, BH * ns, once))
        # dK/dV key-major: partial dK/dV per segment in fp32, summed by the reduction kernel.
        if warps_dkdv not in (4, 8):
            raise ValueError(f"warps_dkdv={warps_dkdv}: priced at 4 (sel_dkdv) and 8 (sel_dkdv_w8) only")
        dkind = f"sel_dkdv{'_w8' if warps_dkdv == 8 else ''}@{_cfg(D)}"
        if BR == 128:  # 128 rows a step at 8 warps (sm_90 past head_dim 64; the runs' 32 at 4: untagged)
            dkind += "@br128"
        ks.append(Kernel("sel_bwd_dkdv", "selected", "bwd", dkind, 4 * kunit,
                         4 * useful, 2 * kvb + part, l2=prow * D * bf * 2 + prow * 8, programs=nseg,
                         per_sm=1, work={"programs": nseg}))  # fmt: skip
    # The reduction: one program a (batch, KV head, block) sums its segments' partials in order; block
    # 0 is listed by every token, so its program alone sums ceil(T / seg) of them (the serial tail).
    tail = -(-T // seg) * 2 * s.lp * _p2(D, 16) * 4
    ks.append(Kernel("sel_bwd_reduce", "selected", "bwd", "sel_reduce", dram=part + 2 * kvb, programs=BH * ns,
                     work={"serial_bytes": tail}))  # fmt: skip
    if bwd_keys:
        mprog = BH * math.ceil(T * G / launch["bm_merge"])
        mkind = "sel_dq_merge" + ("@tiles" if launch.get("merge_tiles") else "")
        ks.append(
            Kernel("sel_bwd_dq_merge", "selected", "bwd", mkind, dram=pdq + table + act, programs=mprog)
        )
    return ks


def _bwd_index(shared: bool, index: float, entries: int, nblk: int, once: bool = True) -> list[Kernel]:
    """The backward's reverse index: nothing where the key-major forward built it (its op returns the
    index, autograd saves it; the row stays, at 0 launches and 0 bytes), else `reverse_index` in the
    backward: the two small kernels, named as the kernels the profiler sees (`_sel_fwd_index_kernel`,
    `_sel_fwd_segs_kernel`), and the sort, arange and searchsorted (3 launches). once=False: the
    backward's own index before, 16 aten ops, whatever the forward built."""
    if not once:
        return [Kernel("sel_reverse_index", "selected", "bwd", "memory", dram=index, launches=16)]
    if shared:
        return [Kernel("sel_reverse_index", "selected", "bwd", "memory", dram=0, launches=0)]
    progs = math.ceil(entries / 1024)
    return [
        Kernel("sel_fwd_index", "selected", "bwd", "sel_index", dram=entries * 17, programs=progs),
        Kernel("sel_reverse_index", "selected", "bwd", "memory", dram=index, launches=3),
        Kernel("sel_fwd_segs", "selected", "bwd", "memory", dram=16 * nblk, programs=1),
    ]
