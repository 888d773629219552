"""bench/attention_fit.py: the Hopper prices of bench/attention_model.py are what the fit of the
committed GPU runs gives (H100: the first run; H200: the kernels rewritten since), the H100 prices of
the kernels that did not change agree with the H200 run's fit, one family re-fits alone, and the
selection's warps factors are the probe's (pure arithmetic, no tensor work)."""

from __future__ import annotations

import copy
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from tests.fixtures.bench import load_bench

_BENCH = Path(__file__).resolve().parents[3] / "bench"
FIRST_RUN = _BENCH / "gpu" / "2026-11-26-h100-speed.json"
H200_RUN = _BENCH / "gpu" / "2026-11-26-h200-speed-after.json"
H200_PROBE = _BENCH / "gpu" / "2026-11-26-h200-probe-after.jsonl"
FINAL_PROBE = _BENCH / "gpu" / "2026-11-26-h200-probe-final.jsonl"
C_RUN = _BENCH / "gpu" / "2026-11-26c-h100-speed.json"


fit = load_bench("attention_fit")
m = fit.m


@pytest.fixture(scope="module")
def recs() -> list[dict]:
    return fit.records([str(FIRST_RUN)])


@pytest.fixture(scope="module")
def h200() -> list[dict]:
    return fit.records([str(H200_RUN)])


@pytest.fixture(scope="module")
def h200_fit(h200) -> dict[str, dict]:
    return fit.fit(h200, "H200")


def test_the_stored_h100_prices_are_the_fit_of_the_first_run(recs) -> None:
    # the kernels it measured: the fused forward, dK/dV at 8 warps, the launch settings before ce226a4
    assert recs[0]["build"] == {
        "split_cmp_fwd": False,
        "warps_dkdv": 8,
        "before_ce226a4": True,
        "pdq_bits": 32,
    }
    fitted = fit.fit(recs)
    assert set(fitted) == set(m.H100_COST) | set(m.H200_FINAL_COST)  # the reduce: priced on the final run
    tables = (m.H100_COST, m.H200_COST, m.H200_FINAL_COST, m.KEYS_COST, m.H100C_COST)
    assert set().union(*tables) == set(fit.FIT_TERMS)
    assert not set(m.H100_COST) & set(m.H200_COST) and not set(m.H200_FINAL_COST) & set(m.H100_COST)
    for kind, terms in fitted.items():
        if kind in m.H200_FINAL_COST:
            continue
        assert set(terms) == set(m.H100_COST[kind]), kind
        for term, value in terms.items():
            assert m.H100_COST[kind][term] == pytest.approx(value, rel=0.02), (kind, term)


def test_the_measured_configurations_are_the_fit_of_the_2026_11_26c_run() -> None:
    """H100C_COST: the launch settings the H100 run of 2026-11-26c measured first are priced by its
    fit (within 2 %), with the run's build (RUN_BUILDS: the suite core's unfolded gates); each one the
    kind of a kernel the run modelled, fitted on its own family only."""
    recs = fit.records([str(C_RUN)])
    core = {"q_grad_fused": False, "gate_folded": False, "delta_folded": False}
    # and the probes' verdicts flipped after it, at the values it ran ("flips"), and the index's segments
    # shipped since (seg_target: T/4 alone then, the same S at that run's B*T = 64k shapes; select_insert)
    flipped = {"select_one_warp": False, "cmp_dq_stages2": False, "dkdv_rows128": False, "seg_target": 0}
    flipped["select_insert"] = 0
    # (and select_shm at the paper's shape, flipped on after the 2026-11-27 run: given here, it is kept;
    # select_tma at M7C and select_split at the paper's shape, flipped on after that run's second call)
    flipped |= {"select_tma": 0, "paper_split": False}
    # (and the key-major forward's merging forced pass, shipped after main at 8898d3c)
    flipped["fwd_forced_merge"] = False
    assert recs[0]["build"] == {**core, **flipped, "paper_shm": False, "select_shm": 1, "merge_tiles": True}
    fams = ["_cmp_select", "_cmp_bwd_dq", "_cmp_bwd_dkv", "_sel_fwd", "_sel_bwd_dq", "_sel_fwd_merge"]
    fams += ["_window_bwd_dq", "_window_bwd_dkdv", "_sel_bwd_keys"]
    got = fit.fit(recs, "H100", families=fams)
    for cfg, terms in m.H100C_COST.items():
        assert set(got[cfg]) == set(fit.FIT_TERMS[cfg]), cfg
        for term, value in got[cfg].items():
            assert terms[term] == pytest.approx(value, rel=0.02), (cfg, term)
    assert set(m.H100C_COST) <= set(got)


def test_a_measured_configuration_takes_its_own_price_and_leaves_the_other_tags_to_their_factors() -> None:
    """config_price: the M7C selection's kind (2 warps, 2 tokens, halves, cut + shm + split) takes the
    H100C price of the measured loop, times the warps, tokens and halves factors only; a kind with none
    of a key's tags (the runs before the cut) keeps its old price; one with some (the measured loop with
    select_split or select_shm off, the what-ifs) takes the measured price over the missing tags' factors."""
    kind = "cmp_sel32@w2@bt2@h2@cut@shm@split"
    assert m.measured_config(kind) == "cmp_sel32@cut@shm@split"
    price, f = m.config_price(kind)
    assert price == m.H100C_COST["cmp_sel32@cut@shm@split"]
    assert f == pytest.approx(m.config_factor("cmp_sel32@w2@bt2@h2"))
    for old in ("cmp_sel32@w2@bt2", "cmp_sel32@w2@bt2@h2"):
        assert m.measured_config(old) is None and m.nearby_config(old) is None
        assert m.config_price(old) == (m.KEYS_COST["cmp_sel32"], m.config_factor(old))
    for off, missing in (("split", "cmp_sel32@split"), ("shm", "cmp_sel32@shm")):
        near = "cmp_sel32@w2@bt2@h2@cut@" + ("shm" if off == "split" else "split")
        assert m.measured_config(near) is None
        assert m.nearby_config(near) == ("cmp_sel32@cut@shm@split", [off])
        price, f = m.config_price(near)
        assert price == m.H100C_COST["cmp_sel32@cut@shm@split"]
        assert f == pytest.approx(m.config_factor("cmp_sel32@w2@bt2@h2") / m.CONFIG_FACTOR[missing])
    # head_dim-specific keys match their head_dim only; a later tag on top is priced by its factor
    assert m.measured_config("win_dq@128@wg_d128") == "win_dq@128@wg_d128"
    assert m.measured_config("win_dq@64") is None and m.measured_config("cmp_dq@64") is None
    assert m.measured_config("cmp_dkv@128@w4@bn64_d128") == "cmp_dkv@bn64_d128"
    assert m.config_price("cmp_dkv@128@w4@bn64_d128")[1] == pytest.approx(m.CONFIG_FACTOR["cmp_dkv@w4"])
    h100 = m.GPUS["H100"]
    assert m.kind_cost("cmp_dkv@128@w4@bn64_d128", h100)["eff"] == pytest.approx(
        m.H100C_COST["cmp_dkv@bn64_d128"]["eff"] / m.CONFIG_FACTOR["cmp_dkv@w4"]
    )


def test_the_stored_h200_prices_are_the_fit_of_the_split_forward_run(h200_fit) -> None:
    """The kernels rewritten after the first run (the attention and the selection of the split
    compressed forward, the 4-warp key-major dK/dV) are priced from the H200 run (warps_sel 4)."""
    for kind, terms in m.H200_COST.items():
        assert set(h200_fit[kind]) == set(terms), kind
        for term, value in terms.items():
            assert value == pytest.approx(h200_fit[kind][term], rel=0.02), (kind, term)


def test_the_h100_prices_of_unchanged_kernels_agree_with_the_h200_fit(h200_fit) -> None:
    """Same SMs and clocks: the kinds the H200 run did not change fit to the H100's efficiencies
    within 10 % (the forced kernels' fp32 state moves through the faster HBM: +7 / +10 %) and to its
    per-program cycles within 30 % (dQ's prologue: -24 %)."""
    shared = set(h200_fit) & set(m.H100_COST)
    assert shared == set(m.H100_COST) - {"cmp_fused", "cmp_topn", "sel_dkdv_w8"}
    for kind in shared:
        for term, value in m.H100_COST[kind].items():
            tol = 0.10 if term == "eff" else 0.30
            assert h200_fit[kind][term] == pytest.approx(value, rel=tol), (kind, term)


def test_the_selection_refits_alone(h200) -> None:
    """A _cmp_select twice as fast: re-fitting its family halves its cycle terms and fits nothing else."""
    faster = copy.deepcopy(h200)
    for r in faster:
        for row in r["nsa_kernels"]:
            if row["kernel"] == "_cmp_select":
                row["ms"] /= 2
    before = fit.fit(h200, "H200", families=["_cmp_select"])
    after = fit.fit(faster, "H200", families=["_cmp_select"])
    assert set(after) == {"cmp_sel"}
    for term, value in after["cmp_sel"].items():
        assert value == pytest.approx(before["cmp_sel"][term] / 2, rel=0.01)


def test_the_selection_warps_factors_are_the_probes_and_predict_its_times() -> None:
    """SEL_WARPS[2] is the probe's geometric mean, and the model's selection kernel at 2 and 4 warps
    predicts the probe's times of it alone (M7C 8k and 64k, paper 32k on the H200) within 30 %."""
    factors = fit.warps_factors(str(H200_PROBE))
    assert factors[2]["mean"] == pytest.approx(m.SEL_WARPS[2], abs=1e-3)
    assert 8 not in m.SEL_WARPS and factors[8]["mean"] > 1.4  # measured, not priced: nothing ships it
    with pytest.raises(ValueError, match="not priced"):
        m.warps_factor("cmp_sel@w8")
    gpu = m.GPUS["H200"]
    probe = [fit.json.loads(line) for line in H200_PROBE.read_text().splitlines()]
    checked = 0
    for r in probe:
        v = r["variant"]
        if v.get("kernel") != "select" or set(v) - {"kernel", "warps_sel"}:
            continue
        shape = m.SHAPES[r["shape"]]
        shape = m.Shape(shape.name, r["B"], shape.H, shape.Hkv, shape.D)
        if v.get("warps_sel", 4) not in m.SEL_WARPS:
            continue
        build = {**m.RUN_BUILDS[H200_PROBE.name], "warps_sel": v.get("warps_sel", 4)}  # BTF tokens a tile
        k = next(k for k in m.ours(r["T"], shape, **build) if k.name == "cmp_select")
        assert k.time(gpu) * 1e3 == pytest.approx(r["ms"], rel=0.30), r
        checked += 1
    assert checked == 6


def test_the_launch_factors_are_the_final_probes_and_the_shipped_configs_predict_it() -> None:
    """CONFIG_FACTOR (ce226a4's launch settings) is what config_factors reads from the final probe,
    the final probe's 4-warp selection agrees with SEL_WARPS from the earlier one, and the model at
    the shipped settings predicts the probe's times of them within 30 % (the selection at 2 tokens a
    tile, the compressed backward with dK/dV at 4 warps, the selected op at 8-token tiles and, at the
    paper shape, its forward at 2 warps)."""
    got = fit.config_factors(str(FINAL_PROBE))
    # 2026-11-26b's, the proxy-priced token tiles' branch-free loop (tokgather), the flash tiles
    # and window tiles bench/flash_proxy.py prices and the merges' tiles (mergeone: the lead's rule)
    # (no probe measured them), and the 2026-11-26c H100 probes' (RESULTS "flips": their own ratios)
    proxied = ("cmp_sel32@", "sel_keys_", "cmp_dkv@bn64", "cmp_dq@wg", "win_dq@wg", "win_dkdv@", "cmp_dq@s2",
               "sel_dkdv@br")  # fmt: skip
    later = {k for k in m.CONFIG_FACTOR if k.startswith(proxied) or k.endswith(("@pipe", "@tiles"))}
    assert set(got) == set(m.CONFIG_FACTOR) - {"cmp_sel@w2", "cmp_sel@w4"} - later
    for tag, f in got.items():
        assert m.CONFIG_FACTOR[tag] == pytest.approx(f["mean"], abs=1e-3), tag
    assert fit.warps_factors(str(FINAL_PROBE))[4]["mean"] == pytest.approx(1.0, abs=0.05)
    gpu = m.GPUS["H200"]
    probe = [fit.json.loads(line) for line in FINAL_PROBE.read_text().splitlines()]
    shipped = {  # (probe, shape, the variant that ships now): the probe's field -> the model's kernels
        ("cmp_fwd", "m7c", (("BTF", 2), ("kernel", "select"))): {"ms": ("cmp_select",)},
        ("cmp_bwd", "m7c", (("warps_dkv", 4),)): {"ms": ("cmp_bwd_dq", "cmp_bwd_dkv")},
        ("cmp_bwd", "paper", (("warps_dkv", 4),)): {"ms": ("cmp_bwd_dq", "cmp_bwd_dkv")},
        ("selected", "m7c", (("TP", "x4"),)): {"fwd_ms": fit._SEL_FWD, "fwd_bwd_ms": fit._SEL_ALL},
        ("selected", "paper", (("warps_tok", 2),)): {"fwd_ms": fit._SEL_FWD, "fwd_bwd_ms": fit._SEL_ALL},
    }
    checked = 0
    for r in probe:
        fields = shipped.get((r["probe"], r["shape"], tuple(sorted(r["variant"].items()))))
        for field, names in (fields or {}).items():
            s0 = m.SHAPES[r["shape"]]
            # what the code shipped after ce226a4: the selected branch query-major, the v0 selection
            then = {"fwd_keys": False, "bwd_keys": False, "select_v0": True, "before_2930e5c": True}
            ks = m.ours(r["T"], m.Shape(s0.name, r["B"], s0.H, s0.Hkv, s0.D), **then)
            model_ms = sum(k.time(gpu) for k in ks if k.name in names) * 1e3
            assert model_ms == pytest.approx(r[field], rel=0.30), (r, field, model_ms)
            checked += 1
    assert checked == 8


def test_a100_keeps_the_published_efficiencies_and_takes_the_cycles_per_sm_cycle() -> None:
    # As priced before the sm_80 SASS prices (Gpu.sass False: the what-if a100_published_eff;
    # tests/unit/attention/test_attention_model_a100.py has those).
    a100, h100 = replace(m.GPUS["A100"], sass=False), m.GPUS["H100"]
    for kind in ("win_fwd@64", "cmp_dq@128", "sel_dkdv@64", "cmp_attn@64"):
        base = kind.split("@")[0]
        cost = m.kind_cost(kind, a100)
        assert cost["eff"] == m.EFF["ampere"][m.A100_KIND[base]]
        assert {k: v for k, v in cost.items() if k != "eff"} == {
            k: v for k, v in m.kind_cost(kind, h100).items() if k != "eff"
        }
    assert m.kind_cost("cmp_fused@64", a100) == m.H100_COST["cmp_fused"]  # cycles include its MMAs
    w2 = {t: c * m.SEL_WARPS[2] for t, c in m.H200_COST["cmp_sel"].items()}
    assert m.kind_cost("cmp_sel@w2", a100) == pytest.approx(w2) == m.kind_cost("cmp_sel@w2", h100)
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


def test_the_cli_takes_the_gpu_from_the_file_and_prints_the_warps_factors(capsys, monkeypatch) -> None:
    monkeypatch.setattr(
        sys,
        "argv",
        ["attention_fit.py", str(H200_RUN), "--probe", str(H200_PROBE), "--families", "_cmp_select"],
    )
    fit.main()
    rows = [fit.json.loads(line) for line in capsys.readouterr().out.splitlines()]
    warps = {r["warps_factor"]: r for r in rows if "warps_factor" in r}
    assert warps[2]["stored"] == m.SEL_WARPS[2] and warps[8]["stored"] is None
    assert [r["fit"] for r in rows if "fit" in r] == ["cmp_sel"]
    checks = [r for r in rows if "check" in r]
    assert len(checks) == 10 and all(abs(r["measured_over_model"] - 1) < 0.1 for r in checks)


def test_the_cli_prints_the_launch_factors_of_the_final_probe(capsys, monkeypatch) -> None:
    final = _BENCH / "gpu" / "2026-11-26-h200-speed-final.json"
    argv = ["attention_fit.py", str(final), "--probe", str(FINAL_PROBE), "--families", "_sel_bwd_reduce"]
    monkeypatch.setattr(sys, "argv", argv)
    fit.main()
    rows = [fit.json.loads(line) for line in capsys.readouterr().out.splitlines()]
    factors = {r["config_factor"]: r for r in rows if "config_factor" in r}
    assert set(factors) == {"cmp_sel@bt2", "cmp_dkv@w4", "tok_fwd@tp4", "tok_dq@tp4", "tok_fwd@w2"}
    assert all(r["stored"] == pytest.approx(r["mean"], abs=1e-3) for r in factors.values())
    assert [r["fit"] for r in rows if "fit" in r] == ["sel_reduce"]
    checks = [r for r in rows if "check" in r]
    assert len(checks) == 10 and all(abs(r["measured_over_model"] - 1) < 0.2 for r in checks)


def test_turning_a_measured_selection_setting_off_never_prices_faster_than_shipped() -> None:
    """The H100 measured select_shm + select_split 0.84-0.89x the loop without them; the what-ifs that
    turn one off must price above the shipped build (before `nearby_config` they took the H200-fitted
    old price, 1.32-1.40x short on the H100, and came out 1-4 % faster than what ships)."""
    Ts = [8192, 65536]
    pred = {(r["gpu"], r["shape"], r["T"]): r["fwd_bwd"] for r in m.prediction_rows(Ts)}
    for r in m.what_if_rows(Ts):
        if (
            r["what_if"] in ("select_split_off", "select_shm_off")
            and r["gpu"] != "A100"
            and r["shape"] == "m7c"
        ):
            assert r["fwd_bwd"] > pred[(r["gpu"], r["shape"], r["T"])], r
