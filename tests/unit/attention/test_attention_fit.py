"""bench/attention_fit.py: the H100 prices of bench/attention_model.py are what the fit of the committed
first GPU run gives, and one term (the compressed forward) re-fits alone (pure arithmetic, no torch)."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[3] / "bench"
FIRST_RUN = _BENCH / "gpu" / "2026-11-26-h100-speed.json"


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


fit = _load("attention_fit")
m = fit.m


@pytest.fixture(scope="module")
def recs() -> list[dict]:
    return fit.records([str(FIRST_RUN)])


def test_the_stored_h100_prices_are_the_fit_of_the_first_run(recs) -> None:
    fitted = fit.fit(recs)
    assert set(fitted) == set(m.H100_COST) == set(fit.FIT_TERMS)
    for kind, terms in fitted.items():
        assert set(terms) == set(m.H100_COST[kind]), kind
        for term, value in terms.items():
            assert m.H100_COST[kind][term] == pytest.approx(value, rel=0.02), (kind, term)


def test_the_compressed_forward_refits_alone(recs) -> None:
    """A rewritten _cmp_fwd twice as fast: re-fitting its family halves its cycle terms and fits nothing else."""
    faster = copy.deepcopy(recs)
    for r in faster:
        for row in r["nsa_kernels"]:
            if row["kernel"] == "_cmp_fwd":
                row["ms"] /= 2
    before, after = fit.fit(recs, families=["_cmp_fwd"]), fit.fit(faster, families=["_cmp_fwd"])
    assert set(after) == {"cmp_fwd", "cmp_topn"}
    for kind in after:
        for term, value in after[kind].items():
            assert value == pytest.approx(before[kind][term] / 2, rel=0.01)


def test_a100_keeps_the_published_efficiencies_and_takes_the_cycles_per_sm_cycle() -> None:
    a100, h100 = m.GPUS["A100"], m.GPUS["H100"]
    for kind in ("win_fwd@64", "cmp_dq@128", "sel_dkdv@64"):
        base = kind.split("@")[0]
        cost = m.kind_cost(kind, a100)
        assert cost["eff"] == m.EFF["ampere"][m.A100_KIND[base]]
        assert {k: v for k, v in cost.items() if k != "eff"} == {
            k: v for k, v in m.kind_cost(kind, h100).items() if k != "eff"
        }
    assert m.kind_cost("cmp_fwd@64", a100) == m.H100_COST["cmp_fwd"]  # cycles include its MMAs
    assert m.kind_cost("sdpa_bwd", a100) == {"eff": m.EFF["ampere"]["fa2_bwd"]}  # FA2 as published
    assert m.kind_cost("dense_fwd", a100) is None  # the published kernels' kinds: priced by EFF


def test_a_file_without_speed_records_is_refused_with_exit_2(tmp_path, capsys, monkeypatch) -> None:
    bad = tmp_path / "suite.json"
    bad.write_text('{"sections": {"env": {}}}')
    monkeypatch.setattr(sys, "argv", ["attention_fit.py", str(bad)])
    with pytest.raises(SystemExit) as e:
        fit.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "sections.speed.records" in err
