"""A per-kernel cost model of NSA attention on A100/H100/H200, calibrated on published GPU figures
and corrected by the GPU measurements of our kernels (H100 and H200, 2026-11-26): its rows.

Owns the `--model` output of bench/attention.py: calibration rows (the model reproducing published
NSA and FlashAttention-2 measurements at their shapes), prediction rows (our triton backend over
FlashAttention-2, fwd / bwd / fwd+bwd, A100, H100 and H200, M7C and the NSA paper's shape, with the
launch settings the code ships for each GPU's compute capability), miss, what-if, bound, budget and
per-kernel rows (FLOPs issued incl. padded rows, DRAM and L2 bytes incl. re-reads, programs, waves),
the A100 per-kernel prices beside the published pricing (`a100_rows`) and the op's scratch bytes. The model itself lives in the package beside it, bench/attention_cost/
(prices.py: datasheets and fitted prices; counts.py: the kernels' structure; kernels.py: our kernels
and FlashAttention-2 per launch; calibration.py: the published kernels); this module re-exports its
names, so `attention_model.X` is the one interface of bench/attention.py, bench/attention_fit.py,
nsa/attention/gpusuite/modelcheck.py and the tests (loaded by path once, as `attention_model`, by
modelcheck's `load_model`, or imported from beside bench/attention.py). It reads the shipped launch
settings from the kernels' own `_config` (counts.py `kernel_configs`: nsa/attention/triton, torch
and triton), and it loads its package by path, never by putting bench/ on sys.path (bench/ holds
modules named like the project's packages: launcher.py, data.py).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path


def _package():
    """bench/attention_cost, imported once by path (whoever loads this file: a script, the GPU suite
    by path, a test)."""
    name = "attention_cost"
    if name not in sys.modules:
        init = Path(__file__).resolve().parent / name / "__init__.py"
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)]
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


_package()
from attention_cost.balance import balance_factor  # noqa: E402
from attention_cost.calibration import NSA_PAPER, SCALABLE, calibration_rows, published_nsa  # noqa: E402
from attention_cost.counts import (  # noqa: E402
    SHAPES,
    Shape,
    _cfg,
    _cmp_attn_work,
    _cmp_keys,
    _cmp_select_work,
    _p2,
    _per_sm,
    _seg_pairs,
    _sel_keys,
    _sel_steps,
    _sel_tiles,
    _tokens_per_tile,
    _union_ratio,
    _valid_pairs,
    shipped_launch,
    shipped_warps_sel,
)
from attention_cost.kernels import flash2, ours  # noqa: E402
from attention_cost.prices import (  # noqa: E402
    A100_CARRY,
    A100_KIND,
    A100_SASS,
    ALU_EFF,
    CONFIG_FACTOR,
    DRAM_EFF,
    EFF,
    GPUS,
    H100_COST,
    H100C_COST,
    H200_COST,
    H200_FINAL_COST,
    KEYS_COST,
    LAUNCH_S,
    RUN_BUILDS,
    SEL_WARPS,
    SINCE_LAST_RUN,
    Gpu,
    Kernel,
    a100_record,
    carry_key,
    carry_ratio,
    config_factor,
    config_price,
    kind_cost,
    kind_parts,
    measured_config,
    nearby_config,
    total,
    warps_factor,
)

__all__ = [
    "A100_CARRY", "A100_KIND", "A100_SASS", "ALU_EFF", "CONFIG_FACTOR", "DRAM_EFF", "EFF", "GPUS", "H100C_COST", "H100_COST", "H200_COST",
    "H200_FINAL_COST", "KEYS_COST", "LAUNCH_S", "NSA_PAPER", "RUN_BUILDS", "SCALABLE", "SEL_WARPS", "SHAPES",
    "Gpu", "Kernel", "Shape", "_cfg", "_cmp_attn_work", "_cmp_keys", "_cmp_select_work", "_p2",
    "_per_sm", "_seg_pairs", "_sel_keys", "_sel_steps", "_sel_tiles", "_tokens_per_tile", "_union_ratio",
    "_valid_pairs", "a100_record", "balance_factor", "calibration_rows", "carry_key", "carry_ratio", "config_factor", "config_price", "flash2", "kind_cost",
    "kind_parts", "measured_config", "nearby_config", "ours", "published_nsa", "shipped_launch", "shipped_warps_sel", "total", "warps_factor",
]  # fmt: skip


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


def transient_bytes(
    T: int, s: Shape, fwd_keys: bool | None = None, bwd_keys: bool | None = None, pdq_bits: int | None = None
) -> int:
    """The largest scratch one NSA op holds beyond its inputs, outputs and saved tensors (triton
    backend, bf16; fwd_keys / bwd_keys: the selected branch's key-major forward / backward, pdq_bits:
    its backward's dQ partials, 32 fp32 or 16 bf16; None: what selected.py ships, G <= 8 and 16).
    Selection itself keeps nothing (until 2026-11-25 the forward kept float32 block scores
    [B, Hkv, T, ceil(T/l')], 512 MiB at 64k for M7C). The reverse index (selected_keys.py
    `reverse_index`): int32 sort keys and sorted keys (8 bytes an entry; cub's scratch not counted)
    while it sorts, then order (int64, 8 bytes an entry). Where the key-major forward builds it, order
    is that op's output, saved for the backward (bench/memory.py's meta kernels allocate it: counted
    there, not here), and the backward builds none; elsewhere the backward builds it and holds order
    as scratch. Query-major: forward, the forced-block state (fp32 output + lse per row, handed to the
    token tiles); backward, first the forced dQ part (fp32) + delta, freed before the index and the
    fp32 partial dK/dV per segment, held with delta. Key-major: forward, the partials PO (bf16 [nb,
    entries, G, D]) and PL (fp32 [nb, entries, G]), allocated for every table entry; backward, delta +
    the partial dK/dV + PDQ ([nb, entries, G, D] at pdq_bits / 8 bytes) while the keys kernel runs."""
    launch = shipped_launch(s, 90)
    fwd_keys = launch["fwd_keys"] if fwd_keys is None else fwd_keys
    bwd_keys = launch["bwd_keys"] if bwd_keys is None else bwd_keys
    pdq_bits = launch["pdq_bits"] if pdq_bits is None else pdq_bits
    BH = s.B * s.Hkv
    ns = -(-T // s.lp)
    npairs = BH * T * min(s.n, ns)
    seg = _seg_pairs(T, npairs, launch["seg_target"])  # the shipped segments (seg_target)
    nseg = BH * ns + math.ceil(npairs / seg)
    nb = -(-s.lp // launch["bn_sel"])  # key chunks of a block
    rows = BH * T * s.G
    state = rows * (s.D + 1) * 4
    part = 2 * nseg * s.lp * _p2(s.D, 16) * 4
    keys, order = 8 * npairs, 8 * npairs  # int32 sort keys + sorted keys; int64 order
    if fwd_keys:
        fwd = max(keys, nb * npairs * s.G * (s.D * 2 + 4))
    else:
        fwd = state
    # The backward's own index (none where the key-major forward handed its over): sort, then order.
    sort, held = (0, 0) if fwd_keys else (keys + order, order)
    if bwd_keys:
        bwd = 4 * rows + max(sort, held + part + nb * npairs * s.G * s.D * pdq_bits // 8)
    else:
        bwd = max(state + 4 * rows, 4 * rows + max(sort, held + part))
    return int(max(fwd, bwd))


WHAT_IF = {
    "unbalanced_cmp_dkv_before": {"balanced_dkv": False},  # the compressed dK/dV before its split
    # the selected branch query-major at every G (main at 2b9778f, before the key-major kernels), or
    # key-major in one direction only
    "query_major_selected": {"fwd_keys": False, "bwd_keys": False},
    "keys_forward_only": {"bwd_keys": False},
    # the fused key-major backward at 64 (pair, head) rows a step (the lead's probe: 1.24x faster
    # than 32; spills at G 1 on triton 3.6; shipped from G 2 on sm_90 and, with keys_rowlim, on sm_80)
    "keys_backward_64_rows": {"br_bwd_keys": 64},
    "keys_backward_only": {"fwd_keys": False},
    # the key-major backward's dQ partials in fp32, as every GPU run before 2026-11-26c measured them
    # (selected.py `_config` ships "pdq_bits" 16: q's 16-bit dtype, half PDQ's bytes in the keys kernel's
    # write and the dQ merge's read; priced by the fitted DRAM terms, no proxy)
    "pdq_fp32": {"pdq_bits": 32},
    # the key-major kernels' rows in 64 bits, as every GPU run before 2026-11-26c measured them (keys_div32
    # ships on the proxy's word: CONFIG_FACTOR "sel_keys_bwd@div32"): how much of the prediction rests on it
    "keys_div32_off": {"keys_div32": False},
    # the selection's loop as every GPU run before 2026-11-26c measured it (select_cut ships on the proxy's
    # word: CONFIG_FACTOR "cmp_sel32@cut"), and both proxy-shipped cuts off: the model of measured code only
    "select_cut_off": {"select_cut": 0},
    "proxy_cuts_off": {"keys_div32": False, "select_cut": 0},
    # the compressed backward's and the window's tiles as every GPU run before 2026-11-26c measured them
    # (flash_tiles ships on sm_90 on bench/flash_proxy.py's word: CONFIG_FACTOR "cmp_dkv@bn64", "@bn64_d128",
    # "cmp_dq@wg_d128", "win_dq@wg_d128", "win_dkdv@bm128_d128", "win_dkdv@w4")
    "flash_tiles_off": {"flash_tiles": False},
    "before_forced_tiles": {"forced_tiles": False},  # every entry query-major (before 2026-11-25)
    # the kernels of the first H100 run
    "before_split": {"split_cmp_fwd": False, "warps_dkdv": 8, "fwd_keys": False, "bwd_keys": False},
    "before_fold_selection": {"split_cmp_fwd": False, "fold_selection": False},  # a third pass too
    "before_unpadded_cmp_bwd": {"unpadded_cmp_bwd": False},  # G padded to 8 in the compressed bwd
    "before_token_tiles": {"token_tiles": False},  # one token a query-major program
    "shared_selections": {"selections": "shared"},  # adjacent tokens select the same blocks (best case)
    "selection_free": {"selection_free": True},  # the selection at no cost (a bound for its rewrite)
    "before_ce226a4": {"before_ce226a4": True, "pdq_bits": 32},  # the launch settings of the final H200 run
    # ce226a4's 4x token tiles (8 tokens at G 6, D 64), probed at 8k, B = 8 only (faster there); the
    # model prices them slower at B = 1 (fewer programs than slots) and at long T, so main ships 2
    "token_tiles_x4": {
        "tp": lambda s: _tokens_per_tile(s.G) * (4 if s.D <= 64 and 5 <= s.G <= 8 else 1),
        "fwd_keys": False,
        "bwd_keys": False,
    },
    "before_this_session": {
        "pdq_bits": 32,
        "q_grad_fused": False,
        "gate_folded": False,
        "delta_folded": False,
        "merge_tiles": False,
        "forced_tiles": False,
        "fold_selection": False,
        "unpadded_cmp_bwd": False,
        "split_cmp_fwd": False,
        "warps_dkdv": 8,
    },
    # the token tiles' loop as every GPU run before 2026-11-26c measured it (tok_pipe ships at G > 8 on sm_90
    # on bench/gather_proxy.py's word: CONFIG_FACTOR "tok_fwd@pipe" / "tok_dq@pipe")
    "tok_pipe_off": {"tok_pipe": 0},
    # the keys backward's dQ tile converted before its store, as every GPU run measured it (keys_dq_mma
    # ships on sm_80 on bench/keys_proxy.py's word, read from its sm_80 SASS; Hopper keeps it off)
    "keys_dq_mma_off": {"keys_dq_mma": False},
    # sm_80's keys backward before it shipped 64 rows a step with the per-row key limit (keys_rowlim,
    # on the lead's call, unmeasured: bench/RESULTS.md "a100ship"): without the limit 64 rows do not
    # fit sm_80, so the launcher's rule (selected_keys_bwd.keys_rows) runs its 32 rows; Hopper ships
    # it off already (its rows as shipped)
    "keys_rowlim_off": {"keys_rowlim": False},
    # the selection's Eq. 9 gathers as every GPU run before 2026-11-26c measured them (select_shm ships
    # with select_split at M7C's shape, on sm_90 measured by the 2026-11-26c H100, on sm_80 on
    # bench/a100_proxy.py's word; at the paper's shape on sm_90 since the 2026-11-27 H100 measured it faster)
    "select_shm_off": {"select_shm": 0},
    # select_shm off at the paper's shape alone, as the H100 of 2026-11-27 measured it (on since there,
    # on that run's probe: CONFIG_FACTOR "cmp_sel32@shm_d128")
    "paper_shm_off": {"paper_shm": False},
    # the selection's CUT loop without the interior tiles' split (select_split ships with select_shm at
    # M7C's shape on sm_90 and sm_80, above: CONFIG_FACTOR "cmp_sel32@split")
    "select_split_off": {"select_split": 0},
    # the selection's two token groups a program on one key tile load (compressed.py `_config` select_pair,
    # not shipped: spills on triton 3.9; Hopper only, sm_80 unpriced): CONFIG_FACTOR "cmp_sel32@pair"
    # (its price is the build's without select_insert, shipped since: that off beside it; the pair with it
    # spills 32 B under the cap)
    "select_pair": {"select_pair": 1, "select_insert": 0},
    # every entering tile merged, as the H100 of 2026-11-26c measured it (select_insert ships at M7C's 1
    # warp and the paper's 4 tokens at once on sm_90 on its SASS and the GPU runs' inputs' entry counts:
    # counts.insert_factor)
    "select_insert_off": {"select_insert": 0},
    # the selection's key tile by pointer loads, as every suite run measured it (compressed.py `_config`
    # select_tma, shipped at M7C's 1 warp on sm_90 since the H100 of 2026-11-27 measured it 0.929x at 64k):
    # CONFIG_FACTOR "cmp_sel32@tma"
    "select_tma_off": {"select_tma": 0},
    # the paper shape's selection without its split loop, as every suite run measured it (select_split on
    # there on sm_90 since the same call measured it 0.908x at 64k): CONFIG_FACTOR "cmp_sel32@split_d128"
    "paper_split_off": {"paper_split": False},
    # q's three branch gradients summed by autograd (two adds in q's dtype) and rotated back apart, as every
    # GPU run measured them (q_grad_fused shipped unmeasured, the 2026-11-26c rope probe measured it: priced
    # by its DRAM bytes)
    "q_grad_sum_unfused": {"q_grad_fused": False},
    # the gate mix's backward writing three g * dO copies for the branch backwards, as every GPU run measured
    # it (gate_folded shipped unmeasured, the 2026-11-26c gate probe measured it: the gates folded into their
    # lse, priced by its DRAM bytes)
    "gate_mix_unfolded": {"gate_folded": False},
    # each branch backward forming its own delta from its O (the selected key-major one in a kernel of its
    # own), as every GPU run before 2026-11-26c measured it (delta_folded shipped unmeasured, the 2026-11-26c
    # gate probe measured it: the gate fold's kernel writes the three deltas, priced by DRAM bytes;
    # gated.FOLD_DELTA)
    "delta_unfolded": {"delta_folded": False},
    # the key-major merges' loops, as every GPU run but 2026-11-26c's measured them: what ships again since
    # that H100 measured the tiles no faster (merge_tiles shipped unmeasured before it), so the same as
    # main's rows now; the tiles are `merge_tiles=True` (kind "sel_fwd_merge@tiles")
    "merge_tiles_off": {"merge_tiles": False},
    # the reverse index's segments of T/4 pairs (to 2048) alone, as every GPU run measured them: at B = 1
    # and 8k M7C's two sequences make 286 programs, the longest (block 0's, 96 steps forward) 2.1x the even
    # spread (seg_target ships unmeasured: the keys kernels' schedule, bench/attention_cost/balance.py)
    "seg_target_off": {"seg_target": 0},
    # the key-major forward's masked walk over every pair and its separate merge, as every GPU run measured
    # them (fwd_forced_merge ships unmeasured: the forced pairs as one merging dense pass, the walk mask-free)
    "fwd_forced_merge_off": {"fwd_forced_merge": False},
    # every change shipped since the last GPU run off (prices.py SINCE_LAST_RUN: the 2026-11-27 H100
    # measured all it held before; it holds the flips shipped after that run on its probes, at the
    # values the run measured; and sm_80's keys_dq_mma and 64 keys rows with keys_rowlim): the model
    # of the code the GPUs measured (on sm_80 the proxy-chosen selection settings stay: no A100 has
    # run any of the kernels)
    "measured_code_only": {**SINCE_LAST_RUN, "keys_rowlim": False, "keys_dq_mma": False},
}


# Not a build but a pricing: A100 as priced before 2026-11-26 (every kind of ours at the published
# efficiency of its generic kind, A100_KIND; prices.py), beside the sm_80 SASS prices the rows take.
A100_PUBLISHED = "a100_published_eff"


def what_if_rows(Ts: list[int]) -> list[dict]:
    """NSA/FA2 fwd+bwd if the kernels were restructured as named (modelled, not built), and A100
    priced as before (`a100_published_eff`)."""
    rows = []
    published = replace(GPUS["A100"], sass=False)
    for sname, shape in SHAPES.items():
        for T in Ts:
            ratio = total(ours_on(T, shape, published), published) / total(flash2(T, shape), published)
            rows.append({"what_if": A100_PUBLISHED, "gpu": "A100", "shape": sname, "T": T,
                         "fwd_bwd": round(ratio, 3)})  # fmt: skip
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


def a100_rows(Ts: list[int], shape_names=("m7c", "paper")) -> list[dict]:
    """Each of our kernels on A100 as priced (`priced_by`: "sass", its sm_80 SASS through its proxy;
    "carry", its Hopper fit per SM cycle x its sm_80 / sm_90 SASS a step; "published", the generic
    kind's published efficiency) beside the published pricing (`published_ms`, the what-if
    a100_published_eff's), and for the SASS-priced ones the tensor-core time at 312 TFLOP/s
    (`tensor_ms`: the proxy prices an mma.sync as one instruction of the stream; added in full,
    `sass_plus_tensor_ms`, it bounds the price from above)."""
    gpu = GPUS["A100"]
    published = replace(gpu, sass=False)
    rows = []
    for sname in shape_names:
        shape = SHAPES[sname]
        for T in Ts:
            for k in ours_on(T, shape, gpu):
                base = kind_parts(k.kind)[0]
                cost = kind_cost(k.kind, gpu) or {}
                if "sass" in cost and "warp_insns" in k.work:
                    by = "sass"
                elif base in A100_CARRY and "eff" in cost and carry_ratio(carry_key(k.kind)):
                    by = "carry"
                else:
                    by = "published"
                ms, pub = k.time(gpu) * 1e3, k.time(published) * 1e3
                r = {"a100_price": k.name, "shape": sname, "T": T, "kind": k.kind, "priced_by": by,
                     "ms": round(ms, 4), "published_ms": round(pub, 4),
                     "over_published": round(ms / pub, 3) if pub else None}  # fmt: skip
                if by == "sass":
                    tensor = k.flops / gpu.peak * 1e3
                    r.update(tensor_ms=round(tensor, 4), sass_plus_tensor_ms=round(ms + tensor, 4),
                             resident_warps=k.work["resident_warps"])  # fmt: skip
                if by == "carry":
                    r["sass_ratio"] = round(carry_ratio(carry_key(k.kind)), 3)
                rows.append(r)
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
