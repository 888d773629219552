"""The cost model's launch settings of the shipped build are the kernels' own: bench/attention_cost/
counts.py `shipped_launch` and `_sel_tiles` call compressed.py's and selected.py's `_config` and
window.py's `_configs` for the priced GPU's arch, so a change of a `_config` reaches the model by itself, while the past builds the
model prices (RUN_BUILDS, what-if rows) keep their historical settings (pure arithmetic: the
kernels' modules are imported, nothing is launched)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite.modelcheck import load_model
from nsa.attention.triton import compressed, selected, window

m = load_model()
MODEL_T = [8192, 16384, 32768, 65536]  # bench/attention.py --model's lengths


def _cmp(key: str):
    return lambda cfg: cfg["compressed"][key]


def _sel(key: str):
    return lambda cfg: cfg["selected"][key]


def _win(kernel: str, key: str):
    return lambda cfg: cfg["window"][kernel][key]


# the model's launch setting -> where the kernels keep it (in their `_config`s, as _kernel_configs has them)
FROM_CONFIG = {
    "warps_sel": _cmp("warps_sel"),
    "bt_sel": _cmp("bt_sel"),
    "halves_sel": _cmp("halves_sel"),
    "maxnreg_sel": _cmp("maxnreg_sel"),
    "select_cut": _cmp("select_cut"),
    "select_shm": _cmp("select_shm"),
    "select_split": _cmp("select_split"),
    "select_pair": _cmp("select_pair"),
    "select_insert": _cmp("select_insert"),
    "select_tma": _cmp("select_tma"),
    "warps_cmp_dkv": _cmp("warps_dkv"),
    "tp": _sel("TP"),
    "warps_tok": _sel("warps_tok"),
    "tok_pipe": _sel("tok_pipe"),
    "fwd_keys": _sel("fwd_keys"),
    "bwd_keys": _sel("bwd_keys"),
    "br_fwd_keys": _sel("BR_f"),
    "br_bwd_keys": _sel("BR_keys"),
    "tm_merge": _sel("TM"),
    "bm_merge": _sel("BM_merge"),
    "pdq_bits": _sel("pdq_bits"),
    "warps_keys": _sel("warps_keys"),
    "stages_kv": _sel("stages_kv"),
    "keys_div32": _sel("keys_div32"),
    "keys_dq_mma": _sel("keys_dq_mma"),
    "keys_rowlim": _sel("keys_rowlim"),
    "merge_tiles": _sel("merge_tiles"),
    "fwd_forced_merge": _sel("fwd_forced_merge"),
    "seg_target": _sel("seg_target"),
    "br_dkdv": _sel("BR"),
    "bm_forced": _sel("BM"),
    "bn_sel": _sel("BN"),
    "bm_cmp_fwd": _cmp("bm_fwd"),
    "bn_cmp_fwd": _cmp("bn_fwd"),
    "rows_cmp_dq": lambda cfg: cfg["compressed"]["BT"] * cfg["compressed"]["GP"],  # its grid's rows a tile
    "stages_cmp_dq": _cmp("stages_dq"),
    "bn_cmp_dkv": _cmp("bn_dkv"),
    "split_cmp_dkv": _cmp("split_dkv"),
    "bm_win_fwd": _win("fwd", "BLOCK_M"),
    "bm_win_dq": _win("dq", "BLOCK_M"),
    "bn_win_dkdv": _win("dkdv", "BLOCK_N"),
    "bm_win_dkdv": _win("dkdv", "BLOCK_M"),
    "warps_win_dkdv": _win("dkdv", "num_warps"),
}


def _kernel_configs(s, cc: int) -> dict[str, dict]:
    """The settings as the kernels pick them on an sm_`cc` GPU (64 keys a step: selected.py's
    `_launch_config` outside the interpreter; window.py's GPU tiles). Written out here, not taken
    from counts.py `kernel_configs`: the test's own reading of the calls (argument order included)."""
    return {
        "compressed": compressed._config(s.G, s.D, s.n, s.bl, s.d, s.lp, cc),
        "selected": selected._config(s.G, s.D, s.lp, key_tile=64, arch=cc),
        "window": window._configs(s.D, cc),
    }


def _assert_follows(launch: dict, s, cc: int) -> None:
    cfg = _kernel_configs(s, cc)
    # A new setting is read from a `_config` too. index_once (the shipped build's backward reuses the
    # forward's reverse index) is the build's, not a kernel's: `ours` adds it to shipped_launch's, and
    # cc (the arch the launch is counted for: sm_80's SASS prices the A100's, attention_cost/sass80.py);
    # delta_folded too (the gate fold's deltas, gated.FOLD_DELTA: the autograd node's, not a kernel's).
    assert set(launch) - {"index_once", "cc", "delta_folded"} == {*FROM_CONFIG, "select_v0"}
    assert launch.get("index_once", True) is True, (s, cc)
    assert launch.get("delta_folded", True) is True, (s, cc)
    for ours, theirs in FROM_CONFIG.items():
        assert launch[ours] == theirs(cfg), (s, cc, ours)
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
    """Mutating the `_config`s (the selection at 8 warps and 1 token a tile, the compressed dK/dV at
    8 warps, the selected forward query-major, the fused backward at 32 rows a step, the window's dQ
    tile halved) changes the shipped build's settings and the kernels priced; the runs' builds keep
    theirs."""
    s, h100 = m.SHAPES["m7c"], m.GPUS["H100"]
    past = {
        flag: m.shipped_launch(s, 90, *flags)
        for flag, flags in (("ce226a4", (True,)), ("2930e5c", (False, True)))
    }
    before = {k.name: k.kind for k in m.ours_on(8192, s, h100)}
    assert (
        before["cmp_select"] == "cmp_sel32@w1@bt2@h2@cut@shm@split@tma"
        and before["cmp_bwd_dkv"] == "cmp_dkv@64@w4@bn64"
    )
    assert (
        before["sel_fwd_keys"] == "sel_keys_fwd@64@free" and before["sel_bwd_keys"] == "sel_keys_bwd@64@div32"
    )
    programs = {k.name: k.programs for k in m.ours_on(8192, s, h100)}
    cmp_config, sel_config, win_configs = compressed._config, selected._config, window._configs

    def cmp_changed(*a, **kw):
        changed = {"warps_sel": 8, "bt_sel": 1, "halves_sel": 0, "warps_dkv": 8, "select_cut": 0}
        return {**cmp_config(*a, **kw), **changed}

    def sel_changed(*a, **kw):
        return {**sel_config(*a, **kw), "fwd_keys": False, "BR_keys": 32}

    def win_changed(*a, **kw):
        c = win_configs(*a, **kw)
        return {**c, "dq": {**c["dq"], "BLOCK_M": c["dq"]["BLOCK_M"] // 2}}

    monkeypatch.setattr(compressed, "_config", cmp_changed)
    monkeypatch.setattr(selected, "_config", sel_changed)
    monkeypatch.setattr(window, "_configs", win_changed)
    launch = m.shipped_launch(s, 90)
    assert (launch["warps_sel"], launch["bt_sel"], launch["halves_sel"]) == (8, 1, 0)
    assert (launch["warps_cmp_dkv"], launch["fwd_keys"], launch["br_bwd_keys"]) == (8, False, 32)
    after = {k.name: k.kind for k in m.ours_on(8192, s, h100)}
    assert after["cmp_select"] == "cmp_sel32@w8@bt1" and after["cmp_bwd_dkv"] == "cmp_dkv@64@bn64"
    assert "sel_fwd_keys" not in after and after["sel_fwd"] == "tok_fwd"  # the query-major forward
    assert after["sel_bwd_keys"] == "sel_keys_bwd@64@br32@div32"
    moved = {k.name: k.programs for k in m.ours_on(8192, s, h100)}
    assert moved["win_bwd_dq"] == 2 * programs["win_bwd_dq"] and moved["win_fwd"] == programs["win_fwd"]
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


def test_the_backward_grids_are_the_kernels_grids_where_the_mirror_had_slipped() -> None:
    """compressed.py launches dQ over ceil(T*G / (BT*GP)) tiles and window.py dQ over ceil(T*G /
    BLOCK_M): at G 1 (head_dim 64) BT*GP is 32 rows, and window.py's dQ tile is 64 rows past head_dim
    64; the model counted 128 rows in both until it read the `_config`s (the paper shape's window dQ:
    half the programs it launches)."""
    T = 8192
    for s, cc in ((m.Shape("g1", 1, 2, 2, 64), 80), (m.SHAPES["paper"], 90)):
        cfg = _kernel_configs(s, cc)
        grids = {
            "cmp_bwd_dq": -(-T * s.G // (cfg["compressed"]["BT"] * cfg["compressed"]["GP"])),
            "win_bwd_dq": -(-T * s.G // cfg["window"]["dq"]["BLOCK_M"]),
            "win_fwd": -(-T * s.G // cfg["window"]["fwd"]["BLOCK_M"]),
            "win_bwd_dkdv": -(-T // cfg["window"]["dkdv"]["BLOCK_N"]),
        }
        ks = {k.name: k for k in m.ours(T, s, cc=cc)}
        for name, grid in grids.items():
            assert ks[name].programs == s.B * s.Hkv * grid, (s.name, name)
    # sm_90's window dQ runs 128 rows past head_dim 64 since wintiles (bench/flash_proxy.py); the runs' 64
    assert cfg["window"]["dq"]["BLOCK_M"] == 128 and m.shipped_launch(s, 90, True)["bm_win_dq"] == 64
    assert window._configs(s.D, 80)["dq"]["BLOCK_M"] == 64 and m.shipped_launch(s, 80)["bm_win_dq"] == 64
