"""The cost model's key-major merges with their table metadata as one tile (bench/attention_cost
`merge_tiles`; selected.py `_config` "merge_tiles", selected_keys.py `_fwd_merge_tiles`,
selected_keys_bwd.py `_dq_merge_tiles`): shipped on the lead's rule (the forward merge at the
measured dQ merge's DRAM factor, 1.32x, was 1.70x), measured by the 2026-11-26c H100 run (H100C_COST:
the forward merge at 1.74x) and its probe (the forward no faster than the loops), so a probe variant
since: the loops ship again, on every arch. The tiles read PL and the table once, the dQ merge at its
own 1.32x and its bytes; nothing else moves. Every committed run's build before 2026-11-26c
(RUN_BUILDS), the what-if `merge_tiles_off` and the past builds keep the loops; that H100 run (and so
`measured_code_only`) measured the tiles. Pure arithmetic."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite import modelcheck

m = modelcheck.load_model()
MERGES = ("sel_fwd_merge", "sel_bwd_dq_merge")


def _kernels(T: int, s, **flags) -> dict:
    return {k.name: k for k in m.ours(T, s, **flags)}


def test_the_tiles_move_only_the_forward_merge_bytes_and_both_kinds() -> None:
    for cc in (80, 90):  # the loops ship on every arch
        assert m.shipped_launch(m.SHAPES["m7c"], cc)["merge_tiles"] is False
    f = m.CONFIG_FACTOR["sel_fwd_merge@tiles"]
    assert f == pytest.approx(1.27) and m.CONFIG_FACTOR["sel_dq_merge@tiles"] == 1.0
    for T in (8192, 65536):
        s = m.SHAPES["m7c"]
        # the separate forward merge runs behind the masked walk (fwd_forced_merge off; it ships on,
        # where merge_tiles moves only the dQ merge)
        on, off = (
            _kernels(T, s, merge_tiles=True, fwd_forced_merge=False),
            _kernels(T, s, fwd_forced_merge=False),
        )
        BH, G = s.B * s.Hkv, s.G
        prow = BH * m._valid_pairs(T, s) * G
        table = BH * T * min(s.n, -(-T // s.lp)) * 9
        assert off["sel_fwd_merge"].dram - on["sel_fwd_merge"].dram == pytest.approx(prow * 4 + table)
        assert on["sel_bwd_dq_merge"].dram == off["sel_bwd_dq_merge"].dram
        assert [on[n].kind for n in MERGES] == ["sel_fwd_merge@tiles", "sel_dq_merge@tiles"]
        assert [off[n].kind for n in MERGES] == ["sel_fwd_merge", "sel_dq_merge"]
        same = set(on) - set(MERGES)
        assert {n: (on[n].dram, on[n].kind) for n in same} == {n: (off[n].dram, off[n].kind) for n in same}
        for gname in ("A100", "H100", "H200"):
            gpu = m.GPUS[gname]
            # the tiles as the 2026-11-26c H100 run measured them (H100C_COST): the forward merge at
            # 1.74x its DRAM time (the rule priced it at the dQ merge's 1.32x), the dQ merge at 1.32x;
            # the loops at 1.70x / 1.32x
            for name, factor in zip(MERGES, (1.74, 1.32)):
                want = factor * on[name].dram / gpu.dram + m.LAUNCH_S
                assert on[name].time(gpu) == pytest.approx(want), (gname, name)
            loop = m.KEYS_COST["sel_fwd_merge"]["dram"] * off["sel_fwd_merge"].dram / gpu.dram + m.LAUNCH_S
            assert off["sel_fwd_merge"].time(gpu) == pytest.approx(loop), gname
            # the tiles' fewer bytes alone (the probe: tiles off as fast)
            assert 0.85 < on["sel_fwd_merge"].time(gpu) / off["sel_fwd_merge"].time(gpu) < 1.0
    paper = m.SHAPES["paper"]  # G 16: query-major, no merge either way
    assert (
        not set(MERGES) & set(_kernels(8192, paper))
        and _kernels(8192, paper).keys() == _kernels(8192, paper, merge_tiles=False).keys()
    )


def test_every_measured_build_keeps_the_loops() -> None:
    """Every run before 2026-11-26c ran the loops; that H100 run measured the tiles (merge_tiles as
    shipped at f72f66b), so its build prices them; `measured_code_only` and what ships take the loops
    (measured by the runs before it, and by its probe, as fast)."""
    s = m.SHAPES["m7c"]
    c_run = "2026-11-26c-h100-speed.json"
    builds = (*(b for r, b in m.RUN_BUILDS.items() if r != c_run), m.WHAT_IF["merge_tiles_off"])
    builds += (m.WHAT_IF["measured_code_only"],)
    for build in (*builds, {"before_ce226a4": True}, {"before_2930e5c": True}):
        ks = _kernels(8192, s, **build)
        assert not any(k.kind.endswith("@tiles") for k in ks.values()), build
    ks = _kernels(8192, s, **m.RUN_BUILDS[c_run])
    assert ks["sel_fwd_merge"].kind.endswith("@tiles") and ks["sel_bwd_dq_merge"].kind.endswith("@tiles")
    assert not any(k.kind.endswith("@tiles") for k in _kernels(8192, s).values())  # what ships: the loops
    assert m.WHAT_IF["before_this_session"]["merge_tiles"] is False
