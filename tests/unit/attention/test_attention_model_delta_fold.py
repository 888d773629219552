"""The cost model's branch deltas written by the gate fold's kernel (bench/attention_cost `delta_folded`;
nsa/attention/triton/gated.py, FOLD_DELTA): the gate kernel stores three fp32 deltas, the selected
key-major backward's `sel_bwd_delta` (2 activations + a delta, one launch) is gone, the compressed
and window dQ kernels and the query-major forced dQ read one activation (O) fewer; nothing else
moves. Every committed run's build (RUN_BUILDS), the what-if `delta_unfolded`, the past builds and
the unfolded gate mix (the GPU suite's core) keep the suite's path; `measured_code_only` the fold
(the 2026-11-26c H100 gate probe measured it). Pure arithmetic."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite import modelcheck

m = modelcheck.load_model()


def _bytes(T: int, s, **flags) -> dict[str, float]:
    return {k.name: k.dram for k in m.ours(T, s, **flags)}


def test_the_fold_moves_exactly_the_delta_bytes_and_launch() -> None:
    from nsa.attention.triton import gated

    assert gated.FOLD_DELTA is True
    for sname, s in m.SHAPES.items():
        T = 8192
        act = s.B * T * s.H * s.D * 2
        lse = s.B * T * s.H * 4
        on, off = _bytes(T, s), _bytes(T, s, delta_folded=False)
        assert on["gate_mix_bwd"] - off["gate_mix_bwd"] == 3 * lse
        assert off["cmp_bwd_dq"] - on["cmp_bwd_dq"] == act
        assert off["win_bwd_dq"] - on["win_bwd_dq"] == act
        if s.G <= 8:  # key-major: the delta kernel's launch is gone
            assert "sel_bwd_delta" not in on and off["sel_bwd_delta"] == 2 * act + lse
            changed = {"gate_mix_bwd", "cmp_bwd_dq", "win_bwd_dq"}
        else:  # query-major: the forced dQ reads no O
            assert set(on) == set(off) and off["sel_forced_dq"] - on["sel_forced_dq"] == act
            changed = {"gate_mix_bwd", "cmp_bwd_dq", "win_bwd_dq", "sel_forced_dq"}
        assert {n: b for n, b in on.items() if n not in changed} == {
            n: b for n, b in off.items() if n not in changed and n != "sel_bwd_delta"
        }, sname
        # M7C 8k: sel_bwd_delta's 25.6 MB and the two dQ kernels' 12.6 MB each, for 3 x 0.4 MB stored
        if sname == "m7c":
            saved = sum(off.values()) - sum(on.values())
            assert saved == pytest.approx(4 * act + lse - 3 * lse) and 49e6 < saved < 50e6


def test_every_measured_build_keeps_each_branch_delta() -> None:
    s = m.SHAPES["m7c"]
    unfolded = _bytes(8192, s, delta_folded=False)
    # (the runs before 2026-11-27: that H100's speed core ran the folds, its records say so, nsa_core)
    before = [b for r, b in m.RUN_BUILDS.items() if not r.startswith("2026-11-27")]
    for build in (*before, m.WHAT_IF["delta_unfolded"]):
        assert _bytes(8192, s, **build) == _bytes(8192, s, **{**build, "delta_folded": False}), build
    assert "sel_bwd_delta" in unfolded
    # the 2026-11-26c H100 gate probe measured the fold (fold_delta, 10.28 ms vs 10.28 at m7c 8k x 8)
    assert "sel_bwd_delta" not in _bytes(8192, s, **m.WHAT_IF["measured_code_only"])
    # the past builds and the gates unfolded (the suite core: the branches one by one) form their own
    for flags in ({"before_ce226a4": True}, {"before_2930e5c": True}, {"gate_folded": False}):
        assert _bytes(8192, s, **flags) == _bytes(8192, s, **flags, delta_folded=False), flags


def test_the_what_if_prices_the_measured_path_above_the_shipped_one_at_m7c() -> None:
    rows = {(r["what_if"], r["gpu"], r["shape"], r["T"]): r["fwd_bwd"] for r in m.what_if_rows([8192])}
    pred = {(r["gpu"], r["shape"], r["T"]): r["fwd_bwd"] for r in m.prediction_rows([8192])}
    for (gpu, shape, T), ratio in pred.items():
        if shape == "m7c":  # a launch and ~50 MB fewer
            assert rows[("delta_unfolded", gpu, shape, T)] > ratio, gpu
        else:  # G 16: the dQ kernels are priced by their MMAs (bytes a floor): only the stores show
            assert rows[("delta_unfolded", gpu, shape, T)] <= ratio + 0.002, gpu
