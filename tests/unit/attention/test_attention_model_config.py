"""The cost model's launch settings of the shipped build are the kernels' own: bench/attention_cost/
counts.py `shipped_launch` and `_sel_tiles` call compressed.py's and selected.py's `_config` for the
priced GPU's arch, so a change of a `_config` reaches the model by itself, while the past builds the
model prices (RUN_BUILDS, what-if rows) keep their historical settings (pure arithmetic: the
kernels' modules are imported, nothing is launched)."""

from __future__ import annotations

import sys

import pytest

from nsa.attention.gpusuite.modelcheck import load_model
from nsa.attention.triton import compressed, selected

m = load_model()
MODEL_T = [8192, 16384, 32768, 65536]  # bench/attention.py --model's lengths

# the model's launch setting -> (kernel module, its `_config` key)
FROM_CONFIG = {
    "warps_sel": ("compressed", "warps_sel"),
    "bt_sel": ("compressed", "bt_sel"),
    "halves_sel": ("compressed", "halves_sel"),
    "warps_cmp_dkv": ("compressed", "warps_dkv"),
    "tp": ("selected", "TP"),
    "warps_tok": ("selected", "warps_tok"),
    "fwd_keys": ("selected", "fwd_keys"),
    "bwd_keys": ("selected", "bwd_keys"),
    "br_fwd_keys": ("selected", "BR_f"),
    "br_bwd_keys": ("selected", "BR_keys"),
    "tm_merge": ("selected", "TM"),
    "bm_merge": ("selected", "BM_merge"),
}


def _kernel_configs(s, cc: int) -> dict[str, dict]:
    """The settings as the kernels pick them on an sm_`cc` GPU (64 keys a step: selected.py's
    `_launch_config` outside the interpreter)."""
    return {
        "compressed": compressed._config(s.G, s.D, s.n, s.bl, s.d, s.lp, cc),
        "selected": selected._config(s.G, s.D, s.lp, key_tile=64, arch=cc),
    }


def _assert_follows(launch: dict, s, cc: int) -> None:
    cfg = _kernel_configs(s, cc)
    for ours, (module, key) in FROM_CONFIG.items():
        assert launch[ours] == cfg[module][key], (s, cc, ours)
    assert launch["select_v0"] is bool(cfg["compressed"]["select_v0"]) is False, (s, cc)
    tiles = m._sel_tiles(s, cc)
    assert tiles == {k: cfg["compressed"][k] for k in ("GPF", "BTF", "RP", "BJ")}, (s, cc)


def test_every_priced_gpu_shape_and_length_runs_at_the_kernels_config(monkeypatch) -> None:
    """Every (gpu, shape, T) the predictions price: the launch settings `ours` takes are the
    `_config`s' for that GPU's arch (sm_80: A100, sm_90: H100/H200); likewise for shapes no row
    prices (G 1, 2, 8, 16 at head_dim 64, G 2 at 96)."""
    seen: list[tuple] = []
    kernels = sys.modules["attention_cost.kernels"]
    real = kernels.shipped_launch

    def spy(s, cc, *past):
        launch = real(s, cc, *past)
        seen.append((s, cc, past, launch))
        return launch

    monkeypatch.setattr(kernels, "shipped_launch", spy)
    rows = m.prediction_rows(MODEL_T)
    assert len(rows) == len(seen) == 3 * 2 * len(MODEL_T)
    assert {(s.name, cc) for s, cc, _, _ in seen} == {
        (sname, m.GPUS[g].cc) for g in m.PREDICTED_GPUS for sname in m.SHAPES
    }
    assert {m.GPUS[g].cc for g in m.PREDICTED_GPUS} == {80, 90}
    for s, cc, past, launch in seen:
        assert not any(past)  # the shipped build
        _assert_follows(launch, s, cc)
    extra = [m.Shape(f"g{G}d{D}", 1, 2 * G, 2, D) for G, D in ((1, 64), (2, 64), (8, 64), (16, 64), (2, 96))]
    for s in extra:
        for cc in (80, 90):
            _assert_follows(m.shipped_launch(s, cc), s, cc)


def test_a_changed_config_changes_the_model_but_not_the_past_builds(monkeypatch) -> None:
    """Mutating `_config` (the selection at 8 warps and 1 token a tile, the compressed dK/dV at 8
    warps, the selected forward query-major, the fused backward at 32 rows a step) changes the
    shipped build's settings and the kernels priced; the runs' builds keep theirs."""
    s, h100 = m.SHAPES["m7c"], m.GPUS["H100"]
    past = {
        flag: m.shipped_launch(s, 90, *flags)
        for flag, flags in (("ce226a4", (True,)), ("2930e5c", (False, True)))
    }
    before = {k.name: k.kind for k in m.ours_on(8192, s, h100)}
    assert before["cmp_select"] == "cmp_sel32@w2@bt2@h2" and before["cmp_bwd_dkv"] == "cmp_dkv@64@w4"
    assert before["sel_fwd_keys"] == "sel_keys_fwd@64" and before["sel_bwd_keys"] == "sel_keys_bwd@64"
    cmp_config, sel_config = compressed._config, selected._config

    def cmp_changed(*a, **kw):
        return {**cmp_config(*a, **kw), "warps_sel": 8, "bt_sel": 1, "halves_sel": 0, "warps_dkv": 8}

    def sel_changed(*a, **kw):
        return {**sel_config(*a, **kw), "fwd_keys": False, "BR_keys": 32}

    monkeypatch.setattr(compressed, "_config", cmp_changed)
    monkeypatch.setattr(selected, "_config", sel_changed)
    launch = m.shipped_launch(s, 90)
    assert (launch["warps_sel"], launch["bt_sel"], launch["halves_sel"]) == (8, 1, 0)
    assert (launch["warps_cmp_dkv"], launch["fwd_keys"], launch["br_bwd_keys"]) == (8, False, 32)
    after = {k.name: k.kind for k in m.ours_on(8192, s, h100)}
    assert after["cmp_select"] == "cmp_sel32@w8@bt1" and after["cmp_bwd_dkv"] == "cmp_dkv@64"
    assert "sel_fwd_keys" not in after and after["sel_fwd"] == "tok_fwd"  # the query-major forward
    assert after["sel_bwd_keys"] == "sel_keys_bwd@64@br32"
    for flag, flags in (("ce226a4", (True,)), ("2930e5c", (False, True))):
        assert m.shipped_launch(s, 90, *flags) == past[flag], flag
    # the int64 merge kernel (`select_v0`, the probe's comparison) at its own settings
    monkeypatch.setattr(compressed, "_config", lambda *a, **kw: {**cmp_config(*a, **kw), "select_v0": 1})
    v0 = m.shipped_launch(s, 90)
    c = cmp_config(s.G, s.D, s.n, s.bl, s.d, s.lp, 90)
    assert (v0["select_v0"], v0["warps_sel"], v0["bt_sel"], v0["halves_sel"]) == (
        True,
        c["warps_sel_v0"],
        c["bt_sel_v0"],
        0,
    )
    assert {k.name: k.kind for k in m.ours_on(8192, s, h100)}["cmp_select"] == "cmp_sel@w2@bt2"


def test_the_past_builds_keep_their_settings() -> None:
    """The committed runs' builds as the calibration reproduces them (RUN_BUILDS): before ce226a4 the
    int64 selection at BTF tokens, 8-warp dK/dV, query-major selected; before 2930e5c the int32
    selection at v0's settings, never in halves, key-major at G <= 8."""
    s = m.SHAPES["m7c"]
    old = m.shipped_launch(s, 90, before_ce226a4=True)
    assert (old["select_v0"], old["bt_sel"], old["warps_cmp_dkv"], old["fwd_keys"]) == (True, 4, 8, False)
    keys = m.shipped_launch(s, 90, before_2930e5c=True)
    assert (keys["select_v0"], keys["bt_sel"], keys["halves_sel"], keys["fwd_keys"]) == (False, 2, 0, True)
    paper = m.SHAPES["paper"]
    assert m.shipped_launch(paper, 90, before_2930e5c=True)["bt_sel"] == 2  # BTF; 4 since 2930e5c
    assert m.shipped_launch(paper, 90)["bt_sel"] == 4


def test_without_the_kernel_modules_the_model_says_what_it_needs(monkeypatch) -> None:
    """Where the kernels' modules cannot be imported (no triton), the model names what it reads and
    the fix instead of a bare ImportError from deep inside."""
    import nsa.attention.triton as backend

    monkeypatch.delattr(backend, "compressed")
    monkeypatch.setitem(sys.modules, "nsa.attention.triton.compressed", None)
    with pytest.raises(ImportError, match=r"nsa/attention/triton/\*\.py's `_config`.*fix: run it with"):
        m.shipped_launch(m.SHAPES["m7c"], 90)
