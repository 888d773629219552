"""The A100 work of the kernels priced from their own sm_80 SASS: dynamic warp-instruction and
shared-memory counts of `_cmp_select` and `_sel_bwd_keys_kernel` per launch.

Owns the counts from bench/a100_proxy_sass.json (recorded by bench/a100_proxy.py: each setting's
sm_80 SASS paths, registers and shared memory, the selection's merge rates per key tile, the sm_80
and sm_90 loop steps of the carried-over kernels, and the two proxies' fitted constants) and the
counts built from it the way bench/select_proxy.py and bench/keys_proxy.py count them: per
program the prologue and epilogue, per key tile (selection) or BR-row step (keys backward) the
loop's path, the selection's merge branches on the tiles that merge. Counts only (prices.py turns
them into time); a launch setting with no record gives None (prices.py then prices the kind as
before: the published efficiencies).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from .counts import Shape, _cmp_select_work, _sel_tiles
from .prices import A100_SASS_FILE, a100_record

# A100 SXM4 (sm_80): per SM 64 K registers (allocated per warp in 256s), 64 warps, 32 programs and
# 164 KB of shared memory (1 KB of it reserved per program), as bench/select_proxy.py's H200 limits.
SM80 = {"regs": 65536, "warps": 64, "blocks": 32, "smem": 167936}


def select_key(
    G: int, D: int, bt: int, warps: int, halves: int, maxnreg: int = 0, split: int = 0, shm: int = 0
) -> str:
    """A selection setting's record: tokens a tile, warps, halves, the register cap (if any), the
    split loop (select_split, if on) and Eq. 9's shared key without its gathers (select_shm, if on)."""
    return (
        f"G{G}xD{D}/bt{bt}/w{warps}/h{halves}"
        + (f"/r{maxnreg}" if maxnreg else "")
        + ("/split" if split else "")
        + ("/shm" if shm else "")
    )


def _launch_key(s: Shape, launch: dict, split: int) -> str:
    """The record of a launch's selection setting: select_shm read where the kernel runs it (the CUT
    loop, select_cut; compressed.py's kernel runs neither it nor the split without it)."""
    shm = launch.get("select_shm", 0) if launch.get("select_cut", 1) else 0
    bt, w, h = launch["bt_sel"], launch["warps_sel"], launch["halves_sel"]
    return select_key(s.G, s.D, bt, w, h, launch.get("maxnreg_sel", 0), split, shm)


def keys_key(G: int, D: int, st: dict) -> str:
    """st: BR_keys, warps_keys, stages_kv, pdq_bits, keys_div32, keys_dq_mma, keys_rowlim (selected.py
    `_config`'s names; keys_dq_mma False where absent: the converted store every run measured;
    keys_rowlim False where absent, and "/rl1" only where it applies, with keys_div32: the kernel's
    ROWLIM, selected_keys_bwd.py `rowlim`)."""
    rl = "/rl1" if st.get("keys_rowlim") and st["keys_div32"] else ""
    return (f"G{G}xD{D}/BR{st['BR_keys']}/w{st['warps_keys']}/s{st['stages_kv']}/pdq{st['pdq_bits']}"
            f"/div{int(bool(st['keys_div32']))}/dq{int(bool(st.get('keys_dq_mma', False)))}{rl}")  # fmt: skip


def resident_programs(registers: int, smem: int, warps: int, sm: dict = SM80) -> int:
    """Programs an A100 SM holds: bench/select_sass.py's occupancy rule, the proxies' own."""
    return _bench("select_sass").resident_programs(registers, smem, warps, sm)


def merge_rates(G: int, D: int, bt: int, halves: int, T: int, path: str = "") -> list[float] | None:
    """The share of key tiles on which each merge branch runs (bench/select_proxy.py's simulation on
    the GPU runs' inputs), interpolated in log T between the recorded points, held beyond them;
    `path` "interior" / "edge": of select_split's tiles of that kind (the edge's without tile 0)."""
    table = a100_record()["merge_rate"].get(f"G{G}xD{D}/bt{bt}/h{halves}" + (f"/{path}" if path else ""))
    if not table:
        return None
    pts = sorted((int(t), r) for t, r in table.items())
    if pts[0][0] >= T:
        return pts[0][1]
    for (t0, r0), (t1, r1) in itertools.pairwise(pts):
        if t1 >= T:
            w = math.log(T / t0) / math.log(t1 / t0)
            return [a + w * (b - a) for a, b in zip(r0, r1)]
    return pts[-1][1]


def select_work(T: int, s: Shape, launch: dict) -> dict | None:
    """`_cmp_select`'s dynamic counts on sm_80 at the launch's tokens a tile, warps, halves, register
    cap, select_split and select_shm (None: no record of that setting): warp instructions, shared-memory accesses and MMAs of all
    programs, and the warps an SM holds."""
    bt, w, h = launch["bt_sel"], launch["warps_sel"], launch["halves_sel"]
    if launch.get("select_split") and launch.get("select_cut", 1) and not launch.get("select_v0"):
        return _split_select_work(T, s, launch)  # the split runs on the CUT loop only (compressed._split_of)
    rec = a100_record()["select"].get(_launch_key(s, launch, 0))
    rates = merge_rates(s.G, s.D, bt, h, T)
    if rec is None or rates is None or launch.get("select_v0"):
        return None
    sw = _cmp_select_work(T, s, 1, bt)
    p = rec["paths"]

    def per_seq(c: str) -> float:
        n = sw["tiles"] * (p["prologue"][c] + p["epilogue"][c]) + sw["steps"] * p["always"][c]
        return n + sum(r * sw["steps"] * b[c] for r, b in zip(rates, p["branches"]))

    n = s.B * s.Hkv * w
    res = resident_programs(rec["registers"], rec["smem"], w) * w
    return {"warp_insns": n * per_seq("insns"), "warp_smem": n * per_seq("lds_sts"),
            "warp_ldsm": n * per_seq("ldsm"), "warp_mma": n * per_seq("mma"), "resident_warps": res,
            "merge_rate": [round(r, 4) for r in rates]}  # fmt: skip


@lru_cache(maxsize=64)
def split_tiles(T: int, s: Shape, bt: int, bj: int) -> tuple[int, int, int]:
    """(programs, interior key tiles, edge key tiles but tile 0) of select_split's launch for one
    (batch, KV head): a program's interior tiles are [1, end), end by bench/select_proxy.py's
    `interior_end` (the kernel's `_interior_end`), exact."""
    sp = _bench("select_proxy")
    progs, n_int, n_edge = -(-T // bt), 0, 0
    for pid in range(progs):
        t0, t_last = pid * bt, min(pid * bt + bt - 1, T - 1)
        end = sp.interior_end(t0, t_last, bj, s.bl, s.d, s.lp)
        n_int += end - 1
        n_edge += -(-(t_last // s.lp + 1) // bj) - end
    return progs, n_int, n_edge


def _split_select_work(T: int, s: Shape, launch: dict) -> dict | None:
    """`select_work` for the split loop (select_split; the record's `paths["loops"]`, bench/select_sass.py
    `split_loops`): per program the code outside the loops (tile 0 and its merges among it), per
    interior and per edge tile its loop's always-run part, each loop's merges at its recorded rate."""
    bt, w, h = launch["bt_sel"], launch["warps_sel"], launch["halves_sel"]
    rec = a100_record()["select"].get(_launch_key(s, launch, 1))
    r_int, r_edge = (merge_rates(s.G, s.D, bt, h, T, path) for path in ("interior", "edge"))
    if rec is None or r_int is None or r_edge is None:
        return None
    p = rec["paths"]["loops"]
    inner, edge = p["loops"]
    progs, n_int, n_edge = split_tiles(T, s, bt, _sel_tiles(s)["BJ"])

    def per_seq(c: str) -> float:
        n = progs * p["once"][c] + n_int * inner["always"][c] + n_edge * edge["always"][c]
        n += sum(r * n_int * b[c] for r, b in zip(r_int, inner["branches"]))
        return n + sum(r * n_edge * b[c] for r, b in zip(r_edge, edge["branches"]))

    n = s.B * s.Hkv * w
    res = resident_programs(rec["registers"], rec["smem"], w) * w
    return {"warp_insns": n * per_seq("insns"), "warp_smem": n * per_seq("lds_sts"),
            "warp_ldsm": n * per_seq("ldsm"), "warp_mma": n * per_seq("mma"), "resident_warps": res,
            "merge_rate": [round(r, 4) for r in r_int]}  # fmt: skip


def keys_bwd_work(T: int, s: Shape, st: dict) -> dict | None:
    """`_sel_bwd_keys_kernel`'s dynamic counts on sm_80 at setting `st` (keys_key's names; None: no
    record): bench/keys_proxy.py's segments of the modelled reverse index (programs of the static grid,
    BR-row steps), prologue and epilogue a program, the loop's path a step."""
    rec = a100_record()["keys_bwd"].get(keys_key(s.G, s.D, st))
    if rec is None:
        return None
    sg = _bench("keys_proxy").segments(
        T, s.B, s.Hkv, s.G, st["BR_keys"], n=s.n, target=st.get("seg_target", 0)
    )
    p = rec["paths"]
    w = st["warps_keys"]

    def count(c: str) -> float:
        return w * (sg["programs"] * (p["prologue"][c] + p["epilogue"][c]) + sg["steps"] * p["step"][c])

    res = resident_programs(rec["registers"], rec["smem"], w)
    return {"warp_insns": count("insns"), "warp_smem": count("lds_sts"), "warp_ldsm": count("ldsm"),
            "warp_mma": count("mma"), "resident_warps": res * w, "resident_programs": res,
            "steps": sg["steps"], "programs": sg["programs"]}  # fmt: skip


def _bench(name: str):
    """bench/`name`.py (keys_proxy's modelled reverse index, `segments`; select_sass's occupancy rule),
    loaded once by path."""
    from nsa.attention.gpusuite.modelcheck import load_by_path

    return load_by_path(name, A100_SASS_FILE.parent / f"{name}.py")
