"""The cost model's key-major selected path (bench/attention_cost/selected.py; the kernels of
nsa/attention/triton/selected_keys.py and selected_keys_bwd.py, switched on by selected.py's
`fwd_keys` / `bwd_keys` at G <= 8), the committed run of what main shipped before it, and the
model package's loading (pure arithmetic, no tensor work)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite import modelcheck
from tests.fixtures.bench import load_bench

_BENCH = Path(__file__).resolve().parents[3] / "bench"
SHIPPED_RUN = _BENCH / "gpu" / "2026-11-26b-h200-speed-shipped.json"
GEO = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
m = modelcheck.load_model()

QUERY_MAJOR = {"sel_forced_fwd", "sel_forced_dq", "sel_fwd", "sel_bwd_dq", "sel_bwd_dkdv"}
KEY_MAJOR = {"sel_fwd_index", "sel_fwd_reverse_index", "sel_fwd_segs", "sel_fwd_keys", "sel_fwd_merge",
             "sel_bwd_delta", "sel_bwd_keys", "sel_bwd_dq_merge"}  # fmt: skip
# the shipped layer hands the selected backward the gate fold's delta (delta_folded): no sel_bwd_delta;
# and its forward ends in the merging forced pass (fwd_forced_merge: one kernel, its dense pass and its
# partial reads in the model), not the separate merge
FORCED_MERGE = {"sel_fwd_forced_merge", "sel_fwd_forced_merge_reads"}
SHIPPED_KEY_MAJOR = KEY_MAJOR - {"sel_bwd_delta", "sel_fwd_merge"} | FORCED_MERGE


def _selected(T: int, shape, **flags) -> dict:
    return {k.name: k for k in m.ours(T, shape, **flags) if k.branch == "selected"}


def test_the_key_major_path_is_what_selected_config_ships_at_small_groups() -> None:
    """G <= 8 (FSA's range): every pair key-major in both directions, no forced-block kernel and no
    token tile; G 16 keeps the query-major path (its partials would be 16 x |q|). Each direction
    switches alone, and the what-if of the path before (main at 2b9778f) is the query-major one."""
    for G in (1, 2, 6, 8, 16):
        shape = m.Shape(f"g{G}", 1, 2 * G, 2, 64)
        launch = m.shipped_launch(shape, 90)
        assert launch["fwd_keys"] == launch["bwd_keys"] == (G <= 8)
        names = set(_selected(8192, shape))
        if G <= 8:
            assert names == SHIPPED_KEY_MAJOR | {"sel_reverse_index", "sel_bwd_reduce"}, G
            # each branch backward forming its own delta (the suite core; every committed run)
            # and the separate merge after the masked walk (fwd_forced_merge off: every committed run)
            unfolded = set(_selected(8192, shape, delta_folded=False, fwd_forced_merge=False))
            assert unfolded == KEY_MAJOR | {"sel_reverse_index", "sel_bwd_reduce"}, G
        else:  # the backward builds the index itself: the forward's two small kernels run there
            assert names == QUERY_MAJOR | {
                "sel_fwd_index",
                "sel_reverse_index",
                "sel_fwd_segs",
                "sel_bwd_reduce",
            }, G
    s = m.SHAPES["m7c"]
    fwd_only = set(_selected(8192, s, bwd_keys=False))
    assert {"sel_fwd_keys", "sel_bwd_dkdv", "sel_bwd_dq", "sel_forced_dq"} <= fwd_only
    assert not {"sel_fwd", "sel_forced_fwd", "sel_bwd_keys"} & fwd_only
    assert set(_selected(8192, s, before_ce226a4=True)) & KEY_MAJOR == set()  # the runs' builds
    assert {"fwd_keys": False, "bwd_keys": False}.items() <= m.RUN_BUILDS[SHIPPED_RUN.name].items()
    assert m.WHAT_IF["query_major_selected"] == {"fwd_keys": False, "bwd_keys": False}


def test_the_key_major_kernels_count_full_tiles_of_valid_pairs_and_their_partials() -> None:
    """Rows = (valid pair, head) in tiles of BR = 64 (32 at head_dim 128): no padded heads (the
    token tiles issue 16/6 of the useful FLOPs at G 6); 2 GEMMs a step forward, 5 in the fused
    backward (dK/dV's 4 + dQ's); the forward writes PO (bf16) + PL (fp32) per row and the merge reads
    PL and the table once and PO once with merge_tiles (a probe variant since the 2026-11-26c H100;
    the loop that ships: PL and the table twice); the backward writes PDQ (bf16 as shipped: pdq_bits 16) that the dQ merge reads. Rows a
    step as
    selected.py's `_config` has them: BR_f 128 (32 past head_dim 64), BR_keys 64 at head_dim 64 (on
    sm_80 with the per-row key limit, keys_rowlim) and 32 past it (registers)."""
    for sname, T in (("m7c", 8192), ("m7c", 65536), ("paper", 8192)):
        s0 = m.SHAPES[sname]
        s = m.Shape(s0.name, 1, s0.H, s0.Hkv, s0.D)
        ks = _selected(T, s, fwd_keys=True, bwd_keys=True, merge_tiles=True, fwd_forced_merge=False)
        BH, G, D = s.B * s.Hkv, s.G, s.D
        prow = BH * m._valid_pairs(T, s) * G
        launch = m.shipped_launch(s, 90)

        br_bwd = 64 if D <= 64 else 32  # sm_90 (launch's cc); on sm_80 too, with keys_rowlim
        assert launch["br_fwd_keys"] == (128 if D <= 64 else 32) and launch["br_bwd_keys"] == br_bwd
        a100 = m.shipped_launch(s, 80)
        assert (a100["br_bwd_keys"], a100["keys_rowlim"]) == (br_bwd, D <= 64)
        fwd_rows, bwd_rows = (math.ceil(prow / BR) * BR for BR in (launch["br_fwd_keys"], br_bwd))
        fk, bk = ks["sel_fwd_keys"], ks["sel_bwd_keys"]
        assert fk.flops == pytest.approx(2 * 2 * fwd_rows * s.lp * D)
        assert bk.flops == pytest.approx(5 * 2 * bwd_rows * s.lp * D)
        assert fk.flops / fk.useful == pytest.approx(bk.flops / bk.useful)
        assert fk.flops / fk.useful < 1.01  # full tiles
        po = prow * (D * 2 + 4)
        pdq = prow * D * 2
        act = s.B * T * s.H * D * 2
        assert fk.dram - po == pytest.approx(act + 2 * BH * T * D * 2 + BH * m._valid_pairs(T, s) * 8)
        table = BH * T * min(s.n, -(-T // s.lp)) * 9
        assert ks["sel_fwd_merge"].dram == pytest.approx(prow * (D * 2 + 4) + table + act + 4 * BH * T * G)
        loop = _selected(T, s, fwd_keys=True, bwd_keys=True, fwd_forced_merge=False)
        assert loop["sel_fwd_merge"].dram == pytest.approx(
            prow * (D * 2 + 8) + 2 * table + act + 4 * BH * T * G
        )
        assert loop["sel_bwd_dq_merge"].dram == ks["sel_bwd_dq_merge"].dram
        assert ks["sel_bwd_dq_merge"].dram == pytest.approx(pdq + table + act)
        assert bk.dram > pdq + 2 * act
        assert ks["sel_reverse_index"].dram == ks["sel_reverse_index"].launches == 0  # the forward's index
        assert ks["sel_fwd_index"].dram == table * 17 / 9  # idx + valid in, the int64 sort key out
    qm = _selected(8192, m.SHAPES["m7c"], fwd_keys=False, bwd_keys=False)["sel_fwd"]
    assert qm.flops / qm.useful > 2  # what the key-major forward removes at G 6


def test_the_reverse_index_is_built_once_a_layer_with_int32_keys() -> None:
    """selected_keys.reverse_index, the branch's only index: where the key-major forward builds it
    (G <= 8) the backward's `sel_reverse_index` costs nothing (0 launches, 0 bytes: the op hands the
    index over); where it does not (G 16, or fwd_keys off) the backward launches the same two kernels
    and 3 aten ops. The sort is of int32 keys (4 radix passes: 96 bytes an entry against the int64
    sort's 256); the committed runs' builds (before 2930e5c, and the final run by RUN_BUILDS) keep
    the backward's own int64 sort of 16 launches they measured."""
    T = 8192
    m7c, paper = m.SHAPES["m7c"], m.SHAPES["paper"]
    for s, fwd_keys in ((m7c, False), (paper, None)):
        ks = _selected(T, s, fwd_keys=fwd_keys)
        entries = s.B * s.Hkv * T * min(s.n, T // s.lp)
        bwd = {n: k for n, k in ks.items() if k.direction == "bwd"}
        assert {"sel_fwd_index", "sel_reverse_index", "sel_fwd_segs"} <= set(bwd), s.name
        assert bwd["sel_reverse_index"].launches == 3 and bwd["sel_reverse_index"].dram == entries * 96
        assert bwd["sel_fwd_index"].dram == entries * 17
    shared = _selected(T, m7c)
    assert shared["sel_fwd_reverse_index"].dram == shared["sel_fwd_index"].dram / 17 * 96
    assert shared["sel_reverse_index"].time(m.GPUS["H200"]) == 0
    for build in ({"before_2930e5c": True}, m.RUN_BUILDS["2026-11-26b-h200-speed-final.json"]):
        old = _selected(T, m7c, **build)
        assert old["sel_reverse_index"].launches == 16 and old["sel_reverse_index"].dram == (
            old["sel_fwd_reverse_index"].dram
        )
    # M7C 8k x 8 on the H200: the index's share of the modelled layer drops (the final run's build
    # predicted it twice: the int64 backward sort, the forward's at the same price)
    s8 = m.Shape("m7c", 8, m7c.H, m7c.Hkv, m7c.D)
    h200 = m.GPUS["H200"]
    now, before = (
        sum(k.time(h200) for k in m.ours(T, s8, cc=90, **b) if "reverse_index" in k.name)
        for b in ({}, {"index_once": False})
    )
    assert now < 0.25 * before


def test_the_key_major_kernels_are_priced_from_the_keys_run_plus_their_partials() -> None:
    """Fitted on the lead's H200 run of the integration build (KEYS_COST: the forward at 128 rows a
    step, the backward at 64): MMA efficiencies within 10 % of the key-major dK/dV's 0.142 that priced
    them before the run (A100: its published sparse backward efficiency, as for dK/dV), plus the
    partials' DRAM time at the datasheet bandwidth / 0.8 (added: stored inside a latency-bound loop);
    the backward at the 64 rows a step selected.py ships (sm_80 included); the merges and the
    index kernel at a fitted multiple of their DRAM time (their loops, shipped, at 1.70x / 1.32x;
    merge_tiles, a probe variant, at the forward merge's 1.74x the 2026-11-26c H100 run measured and
    the dQ merge's 1.32x), delta at the DRAM floor; the backward's 32-bit rows (keys_div32) on Hopper at
    that run's price (H100C_COST). (A100 as priced before its sm_80 SASS prices: Gpu.sass False,
    test_attention_model_a100.py has those.)"""
    s = m.SHAPES["m7c"]
    for gname in ("H100", "H200", "A100"):
        gpu = replace(m.GPUS[gname], sass=False)
        # sel_bwd_delta included; the masked walk and its separate merge (the runs' fwd_forced_merge off)
        ks = {k.name: k for k in m.ours_on(65536, s, gpu, delta_folded=False, fwd_forced_merge=False)}
        dkdv = {k.name: k for k in m.ours_on(65536, s, gpu, bwd_keys=False)}["sel_bwd_dkdv"]
        for name, kind in (("sel_fwd_keys", "sel_keys_fwd"), ("sel_bwd_keys", "sel_keys_bwd")):
            k = ks[name]
            eff = m.EFF["ampere"]["gather_bwd"] if gname == "A100" else m.KEYS_COST[kind]["eff"]
            assert eff == pytest.approx(m.kind_cost(dkdv.kind, gpu)["eff"], rel=0.1)
            # the backward at the runs' 64 rows a step (on sm_80 with keys_rowlim: no factor), its rows
            # in 32 bits (keys_div32) on Hopper
            f = m.config_factor(k.kind)
            bwd_f = 1.0 if gname == "A100" else m.CONFIG_FACTOR["sel_keys_bwd@div32"]
            assert f == (bwd_f if name == "sel_bwd_keys" else 1.0)
            assert k.programs / gpu.sms > 8  # no last-wave stretch at 64k
            dram = 1.25
            if name == "sel_bwd_keys" and gname != "A100":  # measured by the 2026-11-26c H100 run
                assert m.measured_config(k.kind) == "sel_keys_bwd@div32"
                eff, dram, f = *m.H100C_COST["sel_keys_bwd@div32"].values(), 1.0
            mma = k.flops / (gpu.peak * eff) * (f if gname != "A100" else 1.0)
            # the programs' lengths scheduled on 2 slots an SM (balance.py), relative to the fitted runs'
            assert k.per_sm == 2 and len(k.steps) == k.programs
            stretch = m.balance_factor(k.steps, gpu.sms * 2, name[4:7])
            assert 0.95 < stretch < 1.0  # 64k x 1: a schedule more even than the fitted runs' mean
            want = (mma + dram * f * k.dram / gpu.dram) * stretch + m.LAUNCH_S
            assert k.time(gpu) == pytest.approx(want, rel=1e-9), (gname, name)
        tiles = {k.name: k for k in m.ours_on(65536, s, gpu, delta_folded=False, merge_tiles=True,
                                              fwd_forced_merge=False)}  # fmt: skip
        for name, kind in (("sel_fwd_merge", "sel_fwd_merge"), ("sel_bwd_dq_merge", "sel_dq_merge")):
            k, loop = tiles[name], ks[name]
            assert (k.kind, loop.kind) == (f"{kind}@tiles", kind)
            price = m.H100C_COST["sel_fwd_merge@tiles"] if kind == "sel_fwd_merge" else m.KEYS_COST[kind]
            want = price["dram"] * k.dram / gpu.dram + m.LAUNCH_S
            assert k.time(gpu) == pytest.approx(want), (gname, name)
            want = m.KEYS_COST[kind]["dram"] * loop.dram / gpu.dram + m.LAUNCH_S
            assert loop.time(gpu) == pytest.approx(want), (gname, name)
        k = ks["sel_bwd_delta"]
        assert k.time(gpu) == pytest.approx(k.dram / (gpu.dram * m.DRAM_EFF) + m.LAUNCH_S)
    # At M7C the key-major forward is cheaper than the query-major one, 8k to 64k; so is the backward
    # at the 64 rows a step it takes on sm_90, while at 32 it is about the query-major backward (the
    # probe: selected fwd+bwd 12.68 ms with BR_keys 32 against 12.60 with the backward query-major).
    gpu = m.GPUS["H200"]

    def ms(T: int, d: str, **flags) -> float:
        return sum(k.time(gpu) for k in _selected(T, s, **flags).values() if k.direction == d)

    for T in (8192, 65536):
        qm = {d: ms(T, d, fwd_keys=False, bwd_keys=False) for d in ("fwd", "bwd")}
        assert ms(T, "fwd") < 0.8 * qm["fwd"], T
        assert ms(T, "bwd") < 0.8 * qm["bwd"], T
        # (the probe's build: the rows in int64, keys_div32 False, fp32 dQ partials)
        assert ms(T, "bwd", br_bwd_keys=32, keys_div32=False, pdq_bits=32) == pytest.approx(
            qm["bwd"], rel=0.15
        ), T


def _check_run(run) -> tuple[int, list]:
    """modelcheck over a run's speed records at its RUN_BUILDS build: NSA/FA2 within 10 % at each
    record; returns the number of family comparisons and those off by more than 30 %."""
    doc = json.loads(run.read_text())
    gpu = doc["sections"]["env"]["gpu"]
    compared, off = 0, []
    for rec in doc["sections"]["speed"]["records"]:
        out = modelcheck.compare(rec, gpu, GEO, build=m.RUN_BUILDS[run.name])
        compared += out["compared"]
        off += [(rec["shape"], rec["T"], f) for f in out["off_by_more_than_30pct"]]
        ratio = out["nsa_over_flash"]
        assert ratio["predicted"] == pytest.approx(ratio["measured"], rel=0.1), (rec["shape"], rec["T"])
    return compared, off


def test_the_keys_run_is_reproduced_and_its_fit_is_the_stored_prices() -> None:
    """bench/gpu/2026-11-26b-h200-speed-keys.json (the key-major kernels and the int32 selection,
    RUN_BUILDS' build): every comparison of modelcheck within 30 % (182 of 182), NSA/FA2 within 10 %,
    and bench/attention_fit.py's fit of it is KEYS_COST (within 2 %)."""
    run = SHIPPED_RUN.with_name("2026-11-26b-h200-speed-keys.json")
    compared, off = _check_run(run)
    assert compared == 182 and not off, off
    fit = load_bench("attention_fit")
    fams = [
        "_sel_fwd_keys",
        "_sel_bwd_keys",
        "_sel_fwd_merge",
        "_sel_bwd_dq_merge",
        "_sel_fwd_index",
        "_cmp_select",
    ]
    got = fit.fit(fit.records([str(run)]), "H200", families=fams)
    # The int32 selection is fitted on this run and the final build's together (its halves and 4-token
    # tiles came after this run: one price for both).
    final = run.with_name("2026-11-26b-h200-speed-final.json")
    got.update(fit.fit(fit.records([str(run), str(final)]), "H200", families=["_cmp_select"]))
    assert set(got) == set(m.KEYS_COST)
    for kind, terms in got.items():
        for term, value in terms.items():
            assert m.KEYS_COST[kind][term] == pytest.approx(value, rel=0.02), (kind, term)


def test_the_final_builds_run_is_reproduced_within_30_percent() -> None:
    """bench/gpu/2026-11-26b-h200-speed-final.json (what main ships since 050ce66): NSA/FA2 within
    10 % at every record, and every kernel family within 30 % but one: the paper shape's window dQ
    at 64k (8.56 ms measured, 1.305x the model; the kernel is unchanged since the runs where it was
    8.47-8.49 ms, 1.29x)."""
    run = SHIPPED_RUN.with_name("2026-11-26b-h200-speed-final.json")
    compared, off = _check_run(run)
    assert compared == 180 and off == [("paper_G16_D128", 65536, "_window_bwd_dq")], off


def test_the_suites_flops_of_the_key_major_kernels_agree_with_the_model() -> None:
    """gpu.py's per-kernel TFLOP/s counts the key-major kernels' useful work as the model does (the
    model counts the own block whole: within 5 %), and modelcheck knows their families."""
    from nsa.attention.gpusuite.gpu import _bytes_model, _flops_model

    flops = _flops_model(1, 65536, 2, 6, 64, GEO)
    nbytes = _bytes_model(1, 65536, 2, 6, 64, GEO)
    useful = {k.name: k.useful for k in m.ours(65536, m.SHAPES["m7c"])}
    assert flops["_sel_fwd_keys"] == pytest.approx(useful["sel_fwd_keys"], rel=0.05)
    assert flops["_sel_fwd_forced_merge"] == pytest.approx(useful["sel_fwd_forced_merge"], rel=0.05)
    assert flops["_sel_bwd_keys"] == pytest.approx(useful["sel_bwd_keys"], rel=0.05)
    # the backward takes every pair, the forward splits them between the keys walk and the forced pass
    assert flops["_sel_bwd_keys"] == 2.5 * (flops["_sel_fwd_keys"] + flops["_sel_fwd_forced_merge"])
    Q = 65536 * 12 * 64 * 2
    assert nbytes["_sel_bwd_dq_merge"] > 15 * Q  # ~16 partials a row read (16-bit at pdq_bits 16, the least)
    for name in KEY_MAJOR - {"sel_fwd_reverse_index"}:
        assert modelcheck.FAMILIES[name] == "_" + name
    assert {modelcheck.FAMILIES[name] for name in FORCED_MERGE} == {"_sel_fwd_forced_merge"}
    assert "sel_fwd_reverse_index" in modelcheck.OTHER_IN_CORE


def test_the_model_reproduces_the_run_of_what_main_shipped_within_30_percent() -> None:
    """bench/gpu/2026-11-26b-h200-speed-shipped.json (H200, main at 2b9778f: the selected branch
    query-major; RUN_BUILDS names that build): the suite's own count, 162 of 162 comparisons within
    30 %, holds for the model as it stands, and NSA/FA2 within 10 % at every record."""
    doc = json.loads(SHIPPED_RUN.read_text())
    gpu = doc["sections"]["env"]["gpu"]
    recs = doc["sections"]["speed"]["records"]
    assert gpu == "NVIDIA H200" and len(recs) == 9  # the paper shape at 64k skipped for time
    compared, off = 0, []
    for rec in recs:
        out = modelcheck.compare(rec, gpu, GEO, build=m.RUN_BUILDS[SHIPPED_RUN.name])
        assert len(out["families"]) == 15
        compared += out["compared"]
        off += [(rec["shape"], rec["T"], f) for f in out["off_by_more_than_30pct"]]
        ratio = out["nsa_over_flash"]
        assert ratio["predicted"] == pytest.approx(ratio["measured"], rel=0.1), (rec["shape"], rec["T"])
    assert compared == 162 and not off, off
    # without the build, the model of the key-major kernels has no _sel_fwd to compare with
    fams = {f["family"] for f in modelcheck.compare(recs[1], gpu, GEO)["families"]}
    assert "_sel_fwd" not in fams and "_sel_bwd_dkdv" not in fams


def test_loading_the_model_by_path_leaves_sys_path_alone() -> None:
    """modelcheck.load_model loads attention_model.py by path, once, and it loads its package
    (bench/attention_cost/) by path: bench/ on sys.path would let bench/launcher.py shadow the
    launcher package in the GPU suite's process. A bench script loaded after it shares the module."""
    code = (
        "import sys, importlib.util\n"
        "from nsa.attention.gpusuite.modelcheck import load_model\n"
        "mod = load_model()\n"
        f"spec = importlib.util.spec_from_file_location('fit', {str(_BENCH / 'attention_fit.py')!r})\n"
        "fit = importlib.util.module_from_spec(spec); spec.loader.exec_module(fit)\n"
        "assert fit.m is sys.modules['attention_probe_fit'].m is mod is sys.modules['attention_model']\n"
        f"assert not any(p.rstrip('/') == {str(_BENCH)!r} for p in sys.path), sys.path\n"
        "assert 'launcher' not in sys.modules and mod.ours is sys.modules['attention_cost.kernels'].ours\n"
        "print(len(mod.prediction_rows([8192])))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6"
    # 500 lines a module: structure belongs in modules; the fitted tables, one per GPU run, live in
    # fitted.py (the next run's table goes in a module of its own)
    for f in (_BENCH / "attention_cost").glob("*.py"):
        assert len(f.read_text().splitlines()) < 500, f


def test_a_probe_of_the_key_major_switches_prices_the_keys_kernels(tmp_path) -> None:
    """bench/attention_fit.py --probe on a kernel_probe run with the key-major switches (the lead's GPU
    call): the model's selected times beside the probe's, and the keys kernels' efficiencies solved
    from the forward, then forward+backward: here a probe made with 0.1 / 0.2 gives 0.1 / 0.2 back,
    and the stored prices are left as they were. (The backward's rows in 32 bits, keys_div32 as
    shipped, take the price the 2026-11-26c H100 run measured: H100C_COST's.)"""
    fit = load_bench("attention_fit")
    fm = fit.m
    gpu = fm.GPUS["H200"]
    s = fm.Shape("m7c", 8, 12, 2, 64)
    stored = {k: dict(v) for k, v in fm.KEYS_COST.items()}
    stored_c = dict(fm.H100C_COST["sel_keys_bwd@div32"])
    lines = []
    try:
        fm.KEYS_COST["sel_keys_fwd"]["eff"], fm.H100C_COST["sel_keys_bwd@div32"]["eff"] = 0.1, 0.2
        for variant in ({}, {"fwd_keys": False, "bwd_keys": False}, {"bwd_keys": False}, {"pdq_bits": 32}):
            ks = [k for k in fm.ours(8192, s, **variant) if k.branch == "selected"]
            fwd = sum(k.time(gpu) for k in ks if k.direction == "fwd") * 1e3
            both = sum(k.time(gpu) for k in ks) * 1e3
            row = {"probe": "selected", "shape": "m7c", "T": 8192, "B": 8, "variant": variant}
            lines.append(json.dumps({**row, "fwd_ms": fwd, "fwd_bwd_ms": both}))
    finally:
        for k, v in stored.items():
            fm.KEYS_COST[k].update(v)
        fm.H100C_COST["sel_keys_bwd@div32"].update(stored_c)
    lines.append(
        json.dumps({"probe": "selected", "shape": "m7c", "T": 8192, "B": 8, "variant": {"TP": "x2"}})
    )
    probe = tmp_path / "probe.jsonl"
    probe.write_text("\n".join(lines) + "\n")
    got = fit.keys_effs(str(probe))
    assert got["sel_keys_fwd"]["mean"] == pytest.approx(0.1, rel=1e-3)
    assert got["sel_keys_bwd"]["mean"] == pytest.approx(0.2, rel=1e-3)
    assert len(got["sel_keys_fwd"]["effs"]) == 3 and len(got["sel_keys_bwd"]["effs"]) == 2
    assert stored == fm.KEYS_COST and stored_c == fm.H100C_COST["sel_keys_bwd@div32"]
    rows = fit.selected_probe_rows(str(probe))
    assert [r["variant"] for r in rows] == [
        {}, {"fwd_keys": False, "bwd_keys": False}, {"bwd_keys": False}, {"pdq_bits": 32}
    ]  # fmt: skip
    qm = rows[1]  # the query-major path does not depend on the keys prices
    assert qm["model_fwd_bwd_ms"] == pytest.approx(qm["fwd_bwd_ms"], rel=1e-3)
    assert rows[0]["model_fwd_ms"] < rows[0]["fwd_ms"]  # the stored 0.142 against the probe's 0.1
    # fp32 dQ partials (the measured path): priced with twice PDQ's bytes, so its backward is longer
    assert rows[3]["model_fwd_ms"] == rows[0]["model_fwd_ms"]
    assert rows[3]["model_fwd_bwd_ms"] > rows[0]["model_fwd_bwd_ms"]


def test_a_suite_run_refits_the_keys_efficiency_with_the_partials_dram_time_kept() -> None:
    """fit() on speed records of the key-major kernels: the forward kernel 1.5x slower than priced
    gives an efficiency with which the model, its DRAM term unchanged, predicts the slower times."""
    fit = load_bench("attention_fit")
    fm = fit.m
    gpu = fm.GPUS["H200"]
    recs = []
    for T in (8192, 32768, 65536):
        s = fm.Shape("m7c", 65536 // T, 12, 2, 64)
        k = next(k for k in fm.ours(T, s) if k.name == "sel_fwd_keys")
        ms = k.time(gpu) * 1e3 * 1.5
        fa = fm.flash2(T, s)
        recs.append({
            "shape": "m7c", "T": T, "B": s.B, "H": 12, "Hkv": 2, "D": 64, "build": {},
            "nsa_kernels": [{"kernel": "_sel_fwd_keys_kernel", "ms": ms}],
            "sdpa_flash_fwd_ms": fa[0].time(gpu) * 1e3, "sdpa_flash_fwd_bwd_ms": fm.total(fa, gpu) * 1e3,
        })  # fmt: skip
    eff = fit.fit(recs, "H200", families=["_sel_fwd_keys"])["sel_keys_fwd"]["eff"]
    assert eff < fm.KEYS_COST["sel_keys_fwd"]["eff"] / 1.5  # the fixed DRAM part did not slow down
    saved = fm.KEYS_COST["sel_keys_fwd"]["eff"]
    try:
        fm.KEYS_COST["sel_keys_fwd"]["eff"] = eff
        for r in fit.check_rows(recs, "H200"):
            if r["check"] == "_sel_fwd_keys":
                assert r["measured_over_model"] == pytest.approx(1.0, abs=0.03), r
    finally:
        fm.KEYS_COST["sel_keys_fwd"]["eff"] = saved


def test_pdq_bits_halve_the_partials_bytes_of_the_keys_kernel_and_the_merge_only() -> None:
    """selected.py `_config` "pdq_bits" (shipped 16: q's bf16) reaches the model (shipped_launch); at
    16 PDQ's bytes are half fp32's in the keys kernel's write and the dQ merge's read, every other
    kernel unchanged; the what-if "pdq_fp32" is the path every GPU run before 2026-11-26c measured;
    every build before it the calibration and the run reproductions price pins fp32 partials, as the
    GPUs ran them; the 2026-11-26c H100 run measured the 16-bit ones (measured_code_only keeps them)."""
    from nsa.attention.triton import selected as tsel

    s = m.SHAPES["m7c"]
    for cc in (80, 90):
        assert m.shipped_launch(s, cc)["pdq_bits"] == tsel._config(6, 64, 64, arch=cc)["pdq_bits"] == 16
    assert m.WHAT_IF["pdq_fp32"] == {"pdq_bits": 32}
    assert "pdq_bits" not in m.WHAT_IF["measured_code_only"]
    c_run = "2026-11-26c-h100-speed.json"
    later = [r for r in m.RUN_BUILDS if r == c_run or r.startswith("2026-11-27")]  # the 16-bit ones
    assert all(build.get("pdq_bits") == 32 for run, build in m.RUN_BUILDS.items() if run not in later)
    assert all("pdq_bits" not in m.RUN_BUILDS[r] for r in later)
    for T in (8192, 65536):
        BH, G, D = s.B * s.Hkv, s.G, s.D
        pdq32 = BH * m._valid_pairs(T, s) * G * D * 4
        a, b = _selected(T, s, pdq_bits=32), _selected(T, s)
        assert a["sel_bwd_keys"].dram - b["sel_bwd_keys"].dram == pytest.approx(pdq32 / 2)
        assert a["sel_bwd_dq_merge"].dram - b["sel_bwd_dq_merge"].dram == pytest.approx(pdq32 / 2)
        same = set(a) - {"sel_bwd_keys", "sel_bwd_dq_merge"}
        assert all(a[n].dram == b[n].dram and a[n].flops == b[n].flops for n in same)
        assert a["sel_bwd_keys"].flops == b["sel_bwd_keys"].flops
    build = m.RUN_BUILDS["2026-11-26b-h200-speed-final.json"]
    assert (
        _selected(8192, s, **build)["sel_bwd_keys"].dram
        > _selected(8192, s, **{**build, "pdq_bits": 16})["sel_bwd_keys"].dram
    )
    # M7C 8k x 8 on the H200 (the measured shape): the model's saving of 16-bit partials, ~0.8 ms
    s8 = m.Shape("m7c", 8, s.H, s.Hkv, s.D)
    h200 = m.GPUS["H200"]
    saved = (
        m.total(m.ours_on(8192, s8, h200, pdq_bits=32), h200) - m.total(m.ours_on(8192, s8, h200), h200)
    ) * 1e3
    assert 0.6 < saved < 1.0, saved


def test_transient_bytes_follow_pdq_bits_and_count_no_order_the_forward_handed_over() -> None:
    """The key-major backward's scratch at M7C 64k: delta + the partial dK/dV + PDQ (bf16 as shipped:
    1.6 GB; fp32 at pdq_bits 32, twice that), without the reverse index's order, which the key-major forward's op returned
    and autograd saved (bench/memory.py's meta kernel allocates it: counted in its peak already);
    with the forward query-major the backward builds the index and holds order (8 bytes an entry)."""
    s = m.SHAPES["m7c"]
    T, P = 65536, 2 * 65536 * 16  # table entries
    rows, nseg = 2 * T * 6, 2 * 1024 + P // 2048
    part, pdq = 2 * nseg * 64 * 64 * 4, P * 6 * 64 * 4
    assert m.transient_bytes(T, s, pdq_bits=32) == 4 * rows + part + pdq
    assert m.transient_bytes(T, s) == m.transient_bytes(T, s, pdq_bits=16) == 4 * rows + part + pdq // 2
    assert m.transient_bytes(T, s, False, True, pdq_bits=32) == 4 * rows + 8 * P + part + pdq
    assert (
        m.transient_bytes(T, s, pdq_bits=32) - m.transient_bytes(T, s, pdq_bits=16) == 1610612736
    )  # 1.5 GiB


def test_q_grad_fused_replaces_autograds_sum_in_the_shipped_build_only() -> None:
    """fused.py `rope_q_fanout` (FUSE_Q_GRAD, shipped): q's three branch gradients and the RoPE
    tables in, dx out, one kernel (4 q-sized passes) instead of autograd's two adds (6 passes,
    `q_grad_sum`) and the inverse rotation (2); every committed run's build (RUN_BUILDS, the before_*
    flags: the suite core takes q as a leaf) keeps the two kernels, so the calibration and the run
    reproductions do not move; the what-if `q_grad_sum_unfused` prices that path; `measured_code_only`
    the fused one (the 2026-11-26c H100 rope probe measured it)."""
    from nsa.attention.triton import fused

    assert fused.FUSE_Q_GRAD is True
    for sname, s in m.SHAPES.items():
        T = 8192
        act, kvb = s.B * T * s.H * s.D * 2, s.B * s.Hkv * T * s.D * 2
        ships = {k.name: k for k in m.ours(T, s) if k.branch == "fused"}
        assert "q_grad_sum" not in ships and ships["rope_q_grad"].direction == "bwd"
        assert ships["rope_q_grad"].dram == 4 * act + 2 * T * s.D * 4, sname
        assert ships["rope_bwd"].dram == 2 * 3 * kvb
        measured = {k.name for k in m.ours(T, s, **m.WHAT_IF["measured_code_only"]) if k.branch == "fused"}
        assert "rope_q_grad" in measured and "q_grad_sum" not in measured
        for build in (*m.RUN_BUILDS.values(), m.WHAT_IF["q_grad_sum_unfused"]):
            ran = {k.name: k for k in m.ours(T, s, **build) if k.branch == "fused"}
            assert "rope_q_grad" not in ran, build
            assert ran["q_grad_sum"].dram == 6 * act and ran["rope_bwd"].dram == 2 * (act + 3 * kvb), build
        # H100, the paper shape at 8k: the two kernels' ~0.3 + ~0.15 ms become ~0.2 (4 passes of 8)
        h100 = m.GPUS["H100"]
        if sname == "paper":
            old = {k.name: k.time(h100) * 1e3 for k in m.ours_on(T, s, h100, q_grad_fused=False)}
            new = {k.name: k.time(h100) * 1e3 for k in m.ours_on(T, s, h100)}
            before = old["q_grad_sum"] + old["rope_bwd"]
            after = new["rope_q_grad"] + new["rope_bwd"]
            assert 0.4 < before < 0.5 and after < 0.6 * before, (before, after)


def test_the_keys_kernels_schedule_is_fitted_on_the_run_and_prices_the_short_grid() -> None:
    """bench/attention_cost/balance.py: its table model is bench/keys_proxy.py's, its ALPHA and REF are
    what bench/keys_balance.py fits on the 2026-11-26c H100 run, and at M7C 8k x 1 the T/4 segments'
    longest programs stretch the keys kernels (r > 2) where seg_target's (S 512) do not (r < 1.15);
    the shipped build (seg_target 512) prices the selected branch below the T/4 build at 8k and 16k
    and the same from 32k."""
    balance = vars(sys.modules[m.balance_factor.__module__])  # the module the model prices with
    kp, kb = load_bench("keys_proxy"), load_bench("keys_balance")
    # one table model (keys_proxy's is the model's module), loaded by path: bench/ never on sys.path,
    # where the worker's next `import launcher` would find bench/launcher.py
    assert kp.balance.pairs_per_block is balance["pairs_per_block"] is kb.balance.pairs_per_block
    assert str(Path(kb.__file__).parent) not in sys.path
    fit = kb.fit()
    assert next(r["alpha"] for r in fit if "alpha" in r) == pytest.approx(balance["ALPHA"], abs=0.005)
    for r in (r for r in fit if "ref" in r):
        assert r["value"] == pytest.approx(balance["REF"][r["ref"]], abs=0.001)
    b1 = {(r["T"], r["seg_target"]): r for r in kb.b1((0, 512))}
    assert b1[(8192, 0)]["S"] == 2048 and b1[(8192, 0)]["fwd_r"] > 2 and b1[(8192, 0)]["bwd_r"] > 2
    assert b1[(8192, 512)]["S"] == 512 and b1[(8192, 512)]["fwd_r"] < 1.15 and b1[(8192, 512)]["bwd_r"] < 1.15
    s, gpu = m.SHAPES["m7c"], m.GPUS["H100"]
    for T in (8192, 16384, 32768, 65536):
        on, off = (
            sum(k.time(gpu) for k in m.ours(T, s, seg_target=t) if k.branch == "selected") for t in (None, 0)
        )
        assert (
            on < 0.85 * off if T == 8192 else on < off if T == 16384 else on == pytest.approx(off, rel=1e-12)
        )
