"""The cost model's gate mix backward with the gates folded into the branch backwards' lse
(bench/attention_cost/kernels.py `gate_folded`; nsa/attention/triton/gated.py, FOLD_GATE): priced by
its DRAM bytes (dy and the three outputs in, one dO out, the three lse in and out: 5 activation
passes) in the shipped build only; every committed run's build, the what-if `gate_mix_unfolded`
and the GPU suite's core (modelcheck) keep the suite's path (three g * dO copies: 8 passes);
`measured_code_only` the fold (the 2026-11-26c H100 gate probe measured it). Pure arithmetic."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite import modelcheck

m = modelcheck.load_model()


def _gate_bwd(T: int, s, **flags):
    (k,) = [k for k in m.ours(T, s, **flags) if k.name == "gate_mix_bwd"]
    return k


def test_the_folded_gate_mix_backward_ships_and_every_measured_build_keeps_the_copies() -> None:
    from nsa.attention.triton import gated

    assert gated.FOLD_GATE is True
    for sname, s in m.SHAPES.items():
        T = 8192
        act = s.B * T * s.H * s.D * 2
        gates = 2 * s.B * T * s.H * 3 * 2
        lses = 2 * 3 * s.B * T * s.H * 4
        deltas = 3 * s.B * T * s.H * 4  # the branches' fp32 deltas (delta_folded, shipped)
        assert _gate_bwd(T, s).dram == 5 * act + gates + lses + deltas, sname
        assert _gate_bwd(T, s, delta_folded=False).dram == 5 * act + gates + lses, sname
        # (the runs before 2026-11-27: that H100's speed core ran the fold, its records say so, nsa_core)
        before = [b for r, b in m.RUN_BUILDS.items() if not r.startswith("2026-11-27")]
        for build in (*before, m.WHAT_IF["gate_mix_unfolded"]):
            assert _gate_bwd(T, s, **build).dram == 8 * act + gates, build
        # the 2026-11-26c H100 gate probe measured the fold: measured_code_only keeps it
        assert _gate_bwd(T, s, **m.WHAT_IF["measured_code_only"]).dram == _gate_bwd(T, s).dram
        assert _gate_bwd(T, s, before_ce226a4=True).dram == 8 * act + gates
        # H100, the paper shape at 8k: ~0.41 ms of the layer's ~13.2 become ~0.26
        if sname == "paper":
            h100 = m.GPUS["H100"]
            old = _gate_bwd(T, s, gate_folded=False).time(h100) * 1e3
            new = _gate_bwd(T, s).time(h100) * 1e3
            assert 0.38 < old < 0.44 and new < 0.7 * old, (old, new)


def test_the_what_if_rows_price_the_unfolded_path_above_the_shipped_one() -> None:
    rows = {(r["what_if"], r["gpu"], r["shape"], r["T"]): r["fwd_bwd"] for r in m.what_if_rows([8192])}
    pred = {(r["gpu"], r["shape"], r["T"]): r["fwd_bwd"] for r in m.prediction_rows([8192])}
    for (gpu, shape, T), ratio in pred.items():
        assert rows[("gate_mix_unfolded", gpu, shape, T)] > ratio, (gpu, shape)
