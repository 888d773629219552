"""What our kernels and the published ones do, counted from their launches: the layer's `Shape`,
tiles, programs, key steps and (query, block) pairs, and the launch settings the code ships.

Owns the structure that bench/attention_cost/kernels.py prices, written out from
nsa/attention/triton/*.py (the kernels' grids and loops): a change of structure there must be
mirrored here (docs/attention.md, "Time budget"). The launch settings of the shipped build are not
mirrored: `shipped_launch` and `_sel_tiles` call compressed.py's and selected.py's own `_config` and
window.py's `_configs` (`kernel_configs`, imported when first asked: those modules import torch and
triton), so a change of a `_config` reaches the model by itself; only the past builds the model
still prices keep their settings written out here. Pure arithmetic otherwise, no prices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


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


def _kernel_modules():
    """nsa/attention/triton's compressed, selected, selected_keys and window modules, imported when
    first asked (they import torch and triton; the rest of this package needs neither), or an
    ImportError that says what the model reads there and how to get it."""
    try:
        from nsa.attention.triton import compressed, selected, selected_keys, window
    except ImportError as e:
        raise ImportError(
            "bench/attention_cost: the model reads the shipped launch settings from "
            f"nsa/attention/triton/*.py's `_config`, which needs torch and triton ({e}); "
            "fix: run it with the project's venv (.venv/bin/python: the train and dev extras, or a CUDA torch)"
        ) from e
    return compressed, selected, selected_keys, window


def kernel_configs(s: Shape, cc: int) -> dict[str, dict]:
    """The kernels' own launch settings for shape `s` on sm_`cc` (80: A100, 90: H100/H200): compressed.py's
    `_config` (the compressed branch and the selection), selected.py's (at the GPU's key tile, 64
    keys a step; the interpreter's 16 are the tests') and window.py's `_configs` (the GPU's tiles)."""
    compressed, selected, _, window = _kernel_modules()
    return {
        "compressed": compressed._config(s.G, s.D, s.n, s.bl, s.d, s.lp, cc),
        "selected": selected._config(s.G, s.D, s.lp, key_tile=64, arch=cc),
        "window": window._configs(s.D, cc),
    }


def _sel_tiles(s: Shape, cc: int = 90) -> dict[str, int]:
    """The selection kernel's tile (compressed.py `_config`): BTF tokens x GPF padded heads as rows,
    key tiles of BJ selection blocks (BJ * RP compressed keys: 64 at l' / d = 4)."""
    c = kernel_configs(s, cc)["compressed"]
    return {k: c[k] for k in ("GPF", "BTF", "RP", "BJ")}


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


# The selection's one- and two-key insertion (compressed.py `_config` select_insert 1 / 2): the share of a
# token's key tiles where exactly one key enters its running top-16 (`ONE`), two (`TWO`), more (`MORE`), by
# eager's Eq. 9-11 on the GPU runs' inputs (M7C, bench/select_proxy.py's windows: 32 of 8 tokens, 1 sequence;
# bench/RESULTS.md "selinsert"), per T; and the kernel's SASS a token a key tile (sm_90, 1 warp, triton 3.6,
# the interior tiles' loop): always-run part 296.5 -> 299 (1) / 301 (2), a merge 310 -> 313, an insertion
# of one key 37, of two 76.
INSERT_ONE = {2048: 0.0, 4096: 0.0, 8192: 0.027, 16384: 0.114, 32768: 0.267, 65536: 0.286}
INSERT_TWO = {2048: 0.083, 4096: 0.042, 8192: 0.103, 16384: 0.161, 32768: 0.16, 65536: 0.125}
INSERT_MORE = {2048: 0.917, 4096: 0.958, 8192: 0.859, 16384: 0.654, 32768: 0.395, 65536: 0.218}
# The paper's shape (head_dim past 64; sm_90: 4 tokens a tile merged at once, 4 warps, the 168-register cap
# on triton 3.6): the paths go by the most keys entering one of the tile's 4 tokens, so the shares are of a
# program's key tiles (eager's, bench/select_proxy.py's windows: 256 of 8 tokens over the 4 KV heads, B 1,
# bench/RESULTS.md "paperins"): (none, one, two, more) per T; its SASS a key tile a warp (triton 3.6, sm_90):
# without the insertion (158 registers, uncapped) always-run 460, a merge 808; with 2 (capped) 534, a merge
# 897, an insertion of one key 37, of two 76; with 1 (capped) 531, 893, 38.
INSERT_PAPER = {
    8192: (0.0, 0.0004, 0.0352, 0.9644), 16384: (0.0009, 0.0214, 0.1059, 0.8718),
    32768: (0.0185, 0.1328, 0.2203, 0.6284), 65536: (0.0821, 0.2966, 0.2344, 0.3868),
}  # fmt: skip


def insert_factor(T: int, keys: int = 2, d128: bool = False) -> float:
    """The selection's SASS a token a key tile with select_insert `keys` (1 or 2) over without it at
    length T (the nearest tabulated T, by log2; the shares grow with T, so the ends hold past them);
    `d128`: the paper's shape's build (head_dim past 64, INSERT_PAPER), a key tile of its 4 tokens."""
    if d128:
        near = min(INSERT_PAPER, key=lambda t: abs(math.log2(t) - math.log2(max(T, 1))))
        _, one, two, more = INSERT_PAPER[near]
        new = 534 + 897 * more + 76 * two + 37 * one if keys == 2 else 531 + 893 * (two + more) + 38 * one
        return new / (460 + 808 * (one + two + more))
    near = min(INSERT_ONE, key=lambda t: abs(math.log2(t) - math.log2(max(T, 1))))
    one, two, more = INSERT_ONE[near], INSERT_TWO[near], INSERT_MORE[near]
    new = 299 + 313 * (two + more) + 37 * one if keys == 1 else 301 + 313 * more + 76 * two + 37 * one
    return new / (296.5 + 310 * (one + two + more))


@lru_cache(maxsize=256)
def _cmp_attn_work(T: int, s: Shape, BM: int, BN: int) -> dict[str, float]:
    """_cmp_fwd's structure for one (batch, KV head) since 45bc233: flash tiles of BM consecutive
    (token, head) rows (`bm_cmp_fwd`: 128 at head_dim <= 64, else 64), no padded heads, BN compressed
    keys a step (`bn_cmp_fwd`: 64 / 32) up to the tile's last token's visible keys. `keys`: the keys
    issued over all tiles."""
    nc = max(0, (T - s.bl) // s.d + 1)
    tiles = -(-T * s.G // BM)
    steps = 0
    for i in range(tiles):
        t_last = min((i * BM + BM - 1) // s.G, T - 1)
        n_vis = min(nc, (t_last - (s.bl - 1)) // s.d + 1) if t_last >= s.bl - 1 else 0
        steps += -(-n_vis // BN)
    return {"tiles": tiles, "steps": steps, "rows": BM, "keys": steps * BN}


def shipped_launch(
    s: Shape, cc: int, before_ce226a4: bool = False, before_2930e5c: bool = False
) -> dict[str, int]:
    """The launch settings of the model's kernels: the selection's warps and tokens a tile
    (`warps_sel`, `bt_sel`), its kernel (`select_v0`) and merge in halves (`halves_sel`), the
    compressed dK/dV's warps, the token tiles' tokens (`tp`) and forward warps (`warps_tok`), and the
    selected branch's key-major forward and backward (`fwd_keys`, `bwd_keys`) with their tiles
    (`br_fwd_keys`, `br_bwd_keys`, `tm_merge`, `bm_merge`; `merge_tiles`: the merges' metadata as one
    tile, False in the past builds) and the backward's dQ partials' bits
    (`pdq_bits`: 32, fp32; 16, bf16; the past builds' 32 where they do not say), the query-major dK/dV's rows a step
    (`br_dkdv`), the forced tiles' rows (`bm_forced`) and the keys a chunk (`bn_sel`); the
    compressed attention's tile (`bm_cmp_fwd` x `bn_cmp_fwd`), dQ's rows a tile and stages
    (`rows_cmp_dq`, `stages_cmp_dq`),
    dK/dV's keys a tile and parts (`bn_cmp_dkv`, `split_cmp_dkv`); the window's forward and dQ rows
    a tile (`bm_win_fwd`, `bm_win_dq`) and dK/dV's keys, rows and warps (`bn_win_dkdv`, `bm_win_dkdv`,
    `warps_win_dkdv`).
    The shipped build's are compressed.py's and selected.py's `_config` and window.py's `_configs`
    for sm_`cc` (kernel_configs), by construction. The past builds the model still prices (RUN_BUILDS, what-if rows) keep theirs,
    since the calibration reproduces measured runs of them: before_ce226a4, the kernels of the final
    H200 run (and of every earlier one but the selection's warps); before_2930e5c, the first
    key-major run's build (the int32 selection at v0's settings)."""
    if before_ce226a4:
        return _launch_before_ce226a4(s, cc)
    if before_2930e5c:
        return _launch_before_2930e5c(s, cc)
    cfg = kernel_configs(s, cc)
    c, sc, w = cfg["compressed"], cfg["selected"], cfg["window"]
    v0 = bool(c["select_v0"])  # the int64 merge kernel at its own shipped settings (the probe's)
    return {
        "warps_sel": c["warps_sel_v0"] if v0 else c["warps_sel"],
        "bt_sel": c["bt_sel_v0"] if v0 else c["bt_sel"],
        "select_v0": v0,
        "halves_sel": 0 if v0 else c["halves_sel"],
        "maxnreg_sel": 0 if v0 else c["maxnreg_sel"],  # its register cap (0: none)
        "select_cut": 0 if v0 else c["select_cut"],  # the loop's integer work in 32 bits, hoisted
        "select_shm": 0 if v0 else c["select_shm"],  # Eq. 9's shared key without the two gathers
        "select_split": 0 if v0 else c["select_split"],  # the interior key tiles without masks
        "select_pair": 0 if v0 else c["select_pair"],  # two token groups a program, one key tile load
        "select_insert": 0 if v0 else c["select_insert"],  # one entering key inserted, not merged
        "select_tma": 0 if v0 else c["select_tma"],  # the key tile as one bulk copy (TMA)
        "warps_cmp_dkv": c["warps_dkv"],
        "tp": sc["TP"],
        "warps_tok": sc["warps_tok"],
        "tok_pipe": sc["tok_pipe"],  # the token tiles' branch-free loop (0: the runs' branchy one)
        "fwd_keys": sc["fwd_keys"],
        "bwd_keys": sc["bwd_keys"],
        "br_fwd_keys": sc["BR_f"],
        "br_bwd_keys": sc["BR_keys"],
        "tm_merge": sc["TM"],
        "bm_merge": sc["BM_merge"],
        "merge_tiles": sc["merge_tiles"],  # the merges' metadata as one tile (False: the runs' loops)
        # the forward's forced pairs as one merging dense pass, the keys walk mask-free (False: the runs')
        "fwd_forced_merge": sc["fwd_forced_merge"],
        "pdq_bits": sc["pdq_bits"],
        "seg_target": sc["seg_target"],  # the index's segments: >= ~seg_target a launch (0: T/4 alone)
        # the keys kernel's other settings (the A100 prices look its sm_80 SASS up by them: sass80.py)
        "warps_keys": sc["warps_keys"],
        "stages_kv": sc["stages_kv"],
        "keys_div32": sc["keys_div32"],
        "keys_dq_mma": sc["keys_dq_mma"],
        "keys_rowlim": sc["keys_rowlim"],
        "br_dkdv": sc["BR"],
        "bm_forced": sc["BM"],
        "bn_sel": sc["BN"],
        "bm_cmp_fwd": c["bm_fwd"],
        "bn_cmp_fwd": c["bn_fwd"],
        "rows_cmp_dq": c["BT"] * c["GP"],
        "stages_cmp_dq": c["stages_dq"],
        "bn_cmp_dkv": c["bn_dkv"],
        "split_cmp_dkv": c["split_dkv"],
        "bm_win_fwd": w["fwd"]["BLOCK_M"],
        "bm_win_dq": w["dq"]["BLOCK_M"],
        "bn_win_dkdv": w["dkdv"]["BLOCK_N"],
        "bm_win_dkdv": w["dkdv"]["BLOCK_M"],
        "warps_win_dkdv": w["dkdv"]["num_warps"],
    }


def _tiles_of_the_runs(s: Shape) -> dict[str, int]:
    """The tiles of every build a committed run measured (unchanged from the first H100 run to
    2026-11-26b): selected.py's query-major dK/dV 64 (pair, head) rows a step (32 past head_dim 64),
    forced-block tiles of 64 rows, keys in chunks of min(64, l'); compressed.py's attention BM x BN
    (45bc233 on), 128 x 64 (64 x 32 past head_dim 64), its dQ tiles of BT x GP (token, head) rows,
    BT = 128 rows / GP (32 past head_dim 64) and at most 32 tokens, its dK/dV 32 keys a tile, each
    tile's queries in 8 parts; window.py's forward 128 rows, dQ 128 (64 past head_dim 64), dK/dV 64
    keys x 32 rows (32 x 64 past head_dim 64) at 8 warps."""
    gp, small = _p2(s.G), s.D <= 64
    return {
        "br_dkdv": 64 if small else 32, "bm_forced": 64, "bn_sel": min(64, _p2(s.lp)),
        "bm_cmp_fwd": 128 if small else 64, "bn_cmp_fwd": 64 if small else 32,
        "rows_cmp_dq": max(1, min(32, (128 if small else 32) // gp)) * gp, "bn_cmp_dkv": 32, "split_cmp_dkv": 8,
        "bm_win_fwd": 128, "bm_win_dq": 128 if small else 64, "bn_win_dkdv": 64 if small else 32,
        "bm_win_dkdv": 32 if small else 64, "warps_win_dkdv": 8,
    }  # fmt: skip


def _launch_before_ce226a4(s: Shape, cc: int) -> dict[str, int]:
    """The kernels of the final H200 run (2026-11-26-h200-speed-final.json): the selection (int64
    merge, `_cmp_select_v0`) at 2 warps at 16 heads a token or 8 on sm_90 at head_dim <= 64, BTF
    tokens a tile; dK/dV 8 warps; the base token tiles, their forward at 8 warps past head_dim 64; the
    selected branch query-major. ce226a4 then took the selection to 2 warps only at head_dim <= 64
    (2 spilled at the paper's G 16 x D 128 on triton 3.6), 2 tokens a tile at 8 padded heads on
    sm_90 (M7C), dK/dV to 4 warps and the token-tile forward to 2 warps past head_dim 64 (it also
    took 4x the tokens at G 5-8, head_dim <= 64; taken back after this model priced it slower at
    B = 1 from 32k: the `token_tiles_x4` what-if)."""
    gpf, small = max(2, _p2(s.G)), s.D <= 64
    return {
        "warps_sel": 2 if gpf >= 16 or (cc >= 90 and gpf == 8 and small) else 4,
        "bt_sel": max(1, min(8, 32 // gpf)), "warps_cmp_dkv": 8, "tp": _tokens_per_tile(s.G),
        "warps_tok": 4 if small else 8, "fwd_keys": False, "bwd_keys": False,
        "br_fwd_keys": 64 if small else 32, "br_bwd_keys": 32,
        "tm_merge": max(1, (64 if small else 32) // s.G), "bm_merge": 64 if small else 32, "merge_tiles": False,
        "select_v0": True, "halves_sel": 0, **_tiles_of_the_runs(s),
    }  # fmt: skip


def _launch_before_2930e5c(s: Shape, cc: int) -> dict[str, int]:
    """The first key-major run's build (2026-11-26b-h200-speed-keys.json): compressed_select.py's int32
    merge at `_cmp_select_v0`'s settings (2 warps at head_dim <= 64 with 16 heads a token or 8 on
    sm_90, 2 tokens a tile there, else BTF; never in halves), everything else as ce226a4 left it and
    the selected branch key-major at G <= 8. 2930e5c then merged in halves at M7C on sm_90 and took 4
    tokens a tile at 16 heads a token past head_dim 64."""
    gpf, small = max(2, _p2(s.G)), s.D <= 64
    hopper_g8 = small and cc >= 90 and gpf == 8  # M7C on an H100/H200
    return {
        "warps_sel": 2 if small and (gpf >= 16 or (cc >= 90 and gpf == 8)) else 4,
        "bt_sel": 2 if hopper_g8 else max(1, min(8, 32 // gpf)),
        "select_v0": False, "halves_sel": 0, "warps_cmp_dkv": 4, "tp": _tokens_per_tile(s.G),
        "warps_tok": 4 if small else 2, "fwd_keys": s.G <= 8, "bwd_keys": s.G <= 8,
        "br_fwd_keys": 128 if small else 32,
        "br_bwd_keys": 64 if small and cc >= 90 and s.G >= 2 else 32,  # 64 spills on sm_80, at G 1
        "tm_merge": max(1, (64 if small else 32) // s.G), "bm_merge": 64 if small else 32, "merge_tiles": False,
        **_tiles_of_the_runs(s),
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


def _seg_pairs(T: int, pairs: int = 0, target: int = 0) -> int:
    """(query, block) pairs a segment of the key-major selected kernels (one program each): the kernels'
    own rule, selected_keys.py's `_seg_pairs` (T/4, clamped to [16, 2048]; with selected.py `_config`'s
    seg_target, launch "seg_target", also at most the table's `pairs` / target; 0 in the past builds)."""
    return _kernel_modules()[2]._seg_pairs(T, pairs, target)


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
