"""The cost model's key-major merges with their table metadata as one tile (bench/attention_cost
`merge_tiles`; selected.py `_config` "merge_tiles", selected_keys.py `_fwd_merge_tiles`,
selected_keys_bwd.py `_dq_merge_tiles`): a probe variant since the H100 of 2026-11-26c measured the
forward no faster with them (the loops ship again, on every arch), priced at that probe's ratio
(CONFIG_FACTOR "sel_fwd_merge@tiles" 1.27x the loop's fitted DRAM factor) with PL and the table read
once, the dQ merge at its own factor and bytes (no evidence either way); nothing else moves. Every
committed run's build before it (RUN_BUILDS), the what-ifs `merge_tiles_off` and `measured_code_only`
and the past builds keep the loops. Pure arithmetic."""

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
        on, off = _kernels(T, s, merge_tiles=True), _kernels(T, s)
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
            for name, kind in zip(MERGES, ("sel_fwd_merge", "sel_dq_merge")):  # the loops at 1.70x / 1.32x
                loop = m.KEYS_COST[kind]["dram"] * off[name].dram / gpu.dram + m.LAUNCH_S
                assert off[name].time(gpu) == pytest.approx(loop), (gname, name)
                tiles = (
                    m.KEYS_COST[kind]["dram"] * m.CONFIG_FACTOR[f"{kind}@tiles"] * on[name].dram / gpu.dram
                )
                assert on[name].time(gpu) == pytest.approx(tiles + m.LAUNCH_S), (gname, name)
            # the tiles' fewer bytes do not make up for their measured factor
            assert on["sel_fwd_merge"].time(gpu) > off["sel_fwd_merge"].time(gpu)
    paper = m.SHAPES["paper"]  # G 16: query-major, no merge either way
    assert (
        not set(MERGES) & set(_kernels(8192, paper))
        and _kernels(8192, paper).keys() == _kernels(8192, paper, merge_tiles=False).keys()
    )


def test_every_measured_build_keeps_the_loops() -> None:
    s = m.SHAPES["m7c"]
    builds = (*m.RUN_BUILDS.values(), m.WHAT_IF["merge_tiles_off"], m.WHAT_IF["measured_code_only"])
    for build in (*builds, {"before_ce226a4": True}, {"before_2930e5c": True}):
        ks = _kernels(8192, s, **build)
        assert not any(k.kind.endswith("@tiles") for k in ks.values()), build
    assert {"sel_fwd_merge", "sel_bwd_dq_merge"} <= set(_kernels(8192, s, **m.WHAT_IF["measured_code_only"]))
    assert not any(k.kind.endswith("@tiles") for k in _kernels(8192, s).values())  # what ships
    assert m.WHAT_IF["before_this_session"]["merge_tiles"] is False
