"""bench/tiles_d128.py (head_dim-128 tile candidates, no GPU) and the probe variants it chose
(bench/kernel_probe.py): the variants apply at the paper shape and nowhere else, the probe's dry run
refuses a variant that names a key the config lacks, the candidates' overrides are the tiles they
say, the what-if rows label their assumptions beside the model's own prediction, and the selected
candidate runs to eager's gradients under the interpreter. No compile here (gpucheck's tests compile;
the script's tables are in bench/RESULTS.md).

Run: .venv/bin/pytest tests/unit/attention/test_tiles_d128.py
"""

from __future__ import annotations

import json

import torch

from nsa.attention.triton import compressed as cmp
from nsa.attention.triton import selected as sel
from tests.fixtures.bench import load_bench

PAPER_SHAPES = ["paper:8192:2", "paper:32768:1"]  # the next GPU session's points


def _dry(probe, capsys, probes, shapes) -> tuple[int, list[dict]]:
    rc = probe.dry_run(probes, {p: shapes for p in probes})
    return rc, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_head_dim_128_variants_apply_at_the_paper_shape_only(capsys):
    probe = load_bench("kernel_probe")
    rc, rows = _dry(probe, capsys, ["cmp_fwd", "cmp_bwd", "selected"], PAPER_SHAPES)
    assert rc == 0
    paper = [r for r in rows if r["variant"].get("shape") == "paper"]
    assert {r["probe"] for r in paper} == {"cmp_fwd", "cmp_bwd", "selected"}
    assert {r["T"] for r in paper} == {8192, 32768}
    for r in paper:  # each changes the shipped config, as the tiles it names
        assert r["changes"], r
        for k, v in r["variant"].items():
            if isinstance(v, str) and v.startswith("rows:"):  # BT tokens of 16 heads (or shipped so)
                shipped = cmp._config(16, 128, 16, 32, 16, 64, 90)[k]
                assert r["changes"].get(k, shipped) * 16 == int(v[5:])
            elif k not in probe.META:
                assert r["changes"].get(k, v) == v
    rc, rows = _dry(probe, capsys, ["cmp_fwd", "cmp_bwd", "selected"], ["m7c:8192:8"])
    assert rc == 0 and rows and not [r for r in rows if r["variant"].get("shape") == "paper"]


def test_the_dry_run_refuses_a_key_the_config_lacks(capsys, monkeypatch):
    """`_apply` skips a key the config lacks, so a misspelt variant would time the shipped setting
    under its own name: the dry run says so and exits 2."""
    probe = load_bench("kernel_probe")
    monkeypatch.setattr(
        probe, "CMP_BWD_VARIANTS", [*probe.CMP_BWD_VARIANTS, {"shape": "paper", "bn_dqq": 64}]
    )
    rc, rows = _dry(probe, capsys, ["cmp_bwd"], PAPER_SHAPES[:1])
    assert rc == 2
    assert [r["variant"] for r in rows if "error" in r] == [{"shape": "paper", "bn_dqq": 64}]
    assert "bn_dqq" in rows[-1]["error"]


def test_candidate_overrides_are_the_tiles_they_name():
    tiles = load_bench("tiles_d128")
    # compressed dQ / dK/dV count rows as BT tokens of GP heads: 64 rows at G 16 are 4 tokens
    assert tiles.overrides("cmp_dq", 16, 128, 90, 64, 64, 4, 2) == {
        "BT": 4,
        "bn_bwd": 64,
        "warps": 4,
        "stages_dq": 2,
    }
    assert tiles.overrides("cmp_dkv", 5, 128, 90, 64, 32, 4, 2)["bt_dkv"] == 8  # G 5: 8 padded heads
    assert tiles.overrides("cmp_dq", 16, 128, 90, 8, 32, 4, 2) is None  # fewer rows than one token's heads
    assert tiles.overrides("sel_dkdv", 16, 128, 90, 64, 64, 8, 1) == {
        "BR": 64,
        "BN": 64,
        "warps_kv": 8,
        "stages_kv": 1,
    }
    # the measured head_dim-128 tiles, as the issue states them (sm_80 keeps them; sm_90 ships
    # bench/flash_proxy.py's since flashproxy)
    assert tiles.shipped("cmp_dq", 16, 128, 80) == {"rows": 32, "keys": 32, "warps": 4, "stages": 2}
    assert tiles.shipped("cmp_dkv", 16, 128, 80) == {"rows": 32, "keys": 32, "warps": 4, "stages": 2}
    assert tiles.shipped("cmp_dq", 16, 128, 90) == {"rows": 128, "keys": 32, "warps": 8, "stages": 2}
    assert tiles.shipped("cmp_dkv", 16, 128, 90) == {"rows": 32, "keys": 64, "warps": 4, "stages": 2}
    assert tiles.shipped("sel_dkdv", 16, 128, 90) == {"rows": 128, "keys": 64, "warps": 8, "stages": 1}
    assert tiles.shipped("sel_dkdv", 16, 128, 80) == {"rows": 32, "keys": 64, "warps": 4, "stages": 1}
    assert tiles.shipped("cmp_fwd", 16, 128, 90) == {"rows": 64, "keys": 32, "warps": 4, "stages": 2}


def test_the_what_if_labels_its_assumptions_beside_the_models_prediction():
    tiles = load_bench("tiles_d128")
    am = load_bench("attention_model")
    before = (cmp._config, sel._config)
    rows = tiles.what_if(Ts=(65536,), gpus=("H100",))
    assert (cmp._config, sel._config) == before  # restored
    by = {r["what_if"]: r for r in rows}
    pred = next(r for r in am.prediction_rows([65536]) if r["gpu"] == "H100" and r["shape"] == "paper")
    assert not by["shipped"]["assumption"] and by["shipped"]["fwd_bwd"] == pred["fwd_bwd"]
    assert by["dq_at_d64_eff"]["assumption"] and by["dkv_too_by_dq_ratio"]["assumption"]
    ship, dq = by["shipped"]["kernels_ms"], by["dq_at_d64_eff"]["kernels_ms"]
    # (the shipped dQ tile is priced by its measured factors since the 2026-11-26c H100: the assumed
    # efficiency moves it, in whichever direction)
    assert dq["cmp_bwd_dq"] != ship["cmp_bwd_dq"] and dq["sel_bwd_dkdv"] == ship["sel_bwd_dkdv"]
    assert by["dkv_too_by_dq_ratio"]["fwd_bwd"] < by["dq_at_d64_eff"]["fwd_bwd"]


def test_the_what_ifs_tiles_are_probe_variants():
    """The what-if prices the tiles the next GPU session measures: each of CANDIDATES is one of the
    probe's paper-shape variants (its config keys; the probe's own `_apply` patches both) or, since
    the H100 of 2026-11-26c measured them, what sm_90 ships (the probe's baseline: the compressed dQ
    tile at 2 stages, the selected dK/dV at 128 rows and 8 warps)."""
    tiles, probe = load_bench("tiles_d128"), load_bench("kernel_probe")
    variants = [{k: v for k, v in o.items() if k not in probe.META}
                for o in [*probe.CMP_VARIANTS, *probe.CMP_BWD_VARIANTS, *probe.SEL_VARIANTS]
                if o.get("shape") == "paper"]  # fmt: skip
    assert set(tiles.CANDIDATES) == set(tiles.KERNELS)
    shipped = {
        "compressed": cmp._config(16, 128, 16, 32, 16, 64, 90),
        "selected": sel._config(16, 128, 64, arch=90),
    }
    for kernel, over in tiles.CANDIDATES.items():
        base = shipped[tiles.KERNELS[kernel][0]]
        assert over in variants or probe._apply(base, over, 16) == base, kernel
    assert {k for k, o in tiles.CANDIDATES.items() if o not in variants} == {"cmp_dq", "sel_dkdv"}


def test_the_selected_candidate_matches_eager(monkeypatch):
    """bench/tiles_d128.py's selected dK/dV candidate (128 (pair, head) rows a step at 8 warps: sm_90's
    shipped setting past head_dim 64, applied as probe_sel patches `_launch_config`, since the
    interpreter takes sm_80's config) gives eager's gradients under the interpreter at G 16 x D 128,
    where the query-major path and its `_sel_bwd_dkdv_kernel` run (bwd_keys is G <= 8's), on a broken
    table (duplicates, future and invalid entries, a token without keys)."""
    from tests.unit.attention.triton.test_triton_selected_keys_bwd import (
        _assert_grads_match_eager,
        _inputs,
        _odd_table,
    )

    probe = load_bench("kernel_probe")
    over = load_bench("tiles_d128").CANDIDATES["sel_dkdv"]
    shipped = sel._launch_config
    seen = []

    def patched(G, D, LP, *a):
        c = probe._apply(shipped(G, D, LP, *a), over, G)
        seen.append((c["BR"], c["warps_kv"], c["bwd_keys"]))
        return c

    monkeypatch.setattr(sel, "_launch_config", patched)
    T, lp = 24, 8
    q, k, v, dout = _inputs(1, 1, T, 16, 128, torch.float32, seed=128)
    idx, valid = _odd_table(T, lp, 3, seed=128)
    _assert_grads_match_eager(q, k, v, dout, idx, valid, lp, torch.float32)
    assert (128, 8, False) in seen


def test_match_runs_the_variants_that_set_a_key_beside_the_baseline(capsys):
    """--match KEY keeps each probe's baseline (the shipped config, timed in the same run) and the
    variants that set KEY, at the shapes they run at; a key no variant sets exits 2 before any run."""
    probe = load_bench("kernel_probe")
    rc = probe.main(["--dry-run", "--only", "selected", "--shapes", "m7c:8192:8", "paper:8192:2",
                     "--match", "keys_div32", "--match", "tok_pipe"])  # fmt: skip
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0
    by_shape = {n: [r["variant"] for r in rows if r["shape"] == n] for n in ("m7c", "paper")}
    assert by_shape["m7c"][0] == {} and by_shape["paper"][0] == {}
    assert by_shape["m7c"][1:] and all("keys_div32" in v for v in by_shape["m7c"][1:])
    assert len(by_shape["paper"][1:]) == 5 and all("tok_pipe" in v for v in by_shape["paper"][1:])
    assert probe.main(["--dry-run", "--only", "selected", "--match", "keys_div33"]) == 2
    assert "keys_div33" in capsys.readouterr().err
