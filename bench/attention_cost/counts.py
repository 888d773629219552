"""What our kernels and the published ones do, counted from their launches: the layer's `Shape`,
tiles, programs, key steps and (query, block) pairs, and the launch settings the code ships.

Owns the structure that bench/attention_cost/kernels.py prices, written out from
nsa/attention/triton/*.py (compressed.py's and selected.py's `_config`, the kernels' grids): a change
of structure there must be mirrored here (docs/attention.md, "Time budget"). Pure arithmetic, no
prices, no torch.
"""

from __future__ import annotations

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


def shipped_launch(
    s: Shape, cc: int, before_ce226a4: bool = False, before_2930e5c: bool = False
) -> dict[str, int]:
    """The launch settings the model's kernels take from compressed.py's and selected.py's `_config`
    (a test holds them equal): the selection's warps and tokens a tile (`warps_sel`, `bt_sel`), the
    compressed dK/dV's warps, the token tiles' tokens (`tp`) and forward warps (`warps_tok`), and the
    selected branch's key-major forward and backward (`fwd_keys`, `bwd_keys`: G <= 8) with their
    tiles (`br_fwd_keys`, `br_bwd_keys`, `tm_merge`, `bm_merge`).
    Since ce226a4: the selection at 2 warps only at head_dim <= 64 (16 padded heads a token, or 8 on
    sm_90; 2 spilled at the paper's G 16 x D 128 on triton 3.6), 2 tokens a tile at 8 padded heads
    on sm_90 (M7C); dK/dV 4 warps; the token-tile forward 2 warps at head_dim > 64. (ce226a4 also
    took 4x the tokens at G 5-8, head_dim <= 64; taken back after this model priced it slower at
    B = 1 from 32k: the `token_tiles_x4` what-if.) before_ce226a4: the kernels of the final H200
    run (and of every earlier one but the selection's warps): 2 warps at 16 heads a token or 8 on sm_90 at head_dim <= 64,
    BTF tokens, dK/dV 8 warps, the base token tiles, the forward at 8 warps past head_dim 64.
    The selection kernel since 2026-11-26b is compressed_select.py's int32 merge (`select_v0` False;
    True: `_cmp_select_v0`, every run before); since 2930e5c it merges in halves at M7C on sm_90
    (`halves_sel`) and takes 4 tokens a tile at 16 heads a token past head_dim 64 (before_2930e5c: the
    int32 kernel at v0's settings, the first key-major run's build)."""
    c = _sel_tiles(s)
    gpf, small = c["GPF"], s.D <= 64
    base_tp = _tokens_per_tile(s.G)
    if before_ce226a4:
        return {
            "warps_sel": 2 if gpf >= 16 or (cc >= 90 and gpf == 8 and small) else 4,
            "bt_sel": c["BTF"], "warps_cmp_dkv": 8, "tp": base_tp, "warps_tok": 4 if small else 8,
            "fwd_keys": False, "bwd_keys": False, "br_fwd_keys": 64 if small else 32, "br_bwd_keys": 32,
            "tm_merge": max(1, (64 if small else 32) // s.G), "bm_merge": 64 if small else 32,
            "select_v0": True, "halves_sel": 0,
        }  # fmt: skip
    hopper_g8 = small and cc >= 90 and gpf == 8  # M7C on an H100/H200
    return {
        "warps_sel": 2 if small and (gpf >= 16 or (cc >= 90 and gpf == 8)) else 4,
        "bt_sel": 2 if hopper_g8 else (4 if gpf >= 16 and not small and not before_2930e5c else c["BTF"]),
        "select_v0": False,
        "halves_sel": 1 if not before_2930e5c and (c["BTF"] >= 8 or (not small and c["BTF"] >= 4) or hopper_g8) else 0,
        "warps_cmp_dkv": 4,
        "tp": base_tp,
        "warps_tok": 4 if small else 2,
        # the selected branch key-major at G <= 8 (FSA's range), forward and backward, and its tiles:
        # (pair, head) rows a step of the forward (BR_f) and of the fused backward (BR_keys), tokens a
        # forward merge program (TM), rows a dQ merge program (BM_merge)
        "fwd_keys": s.G <= 8,
        "bwd_keys": s.G <= 8,
        "br_fwd_keys": 128 if small else 32,
        "br_bwd_keys": 64 if small and cc >= 90 and s.G >= 2 else 32,  # 64 spills on sm_80, at G 1
        "tm_merge": max(1, (64 if small else 32) // s.G),
        "bm_merge": 64 if small else 32,
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
