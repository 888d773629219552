"""The cost model's A100 prices (bench/attention_cost/prices.py, sass80.py): the selection and the
key-major backward from their own sm_80 SASS (bench/a100_proxy_sass.json, recorded by
bench/a100_proxy.py), the other key-major kernels' Hopper fit carried over per SM cycle x their SASS
ratio, everything else at the published efficiencies; the what-if that keeps the pricing before.
CPU only, no compile: the SASS counts are the committed record's."""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace

import pytest

from nsa.attention.gpusuite.modelcheck import load_model
from nsa.attention.triton import compressed as cmp
from nsa.attention.triton import selected as sel
from tests.fixtures.bench import load_bench

m = load_model()
sass80 = sys.modules["attention_cost.sass80"]
prices = sys.modules["attention_cost.prices"]
A100 = m.GPUS["A100"]
PUBLISHED = replace(A100, sass=False)
# the keys backward's launch settings its sm_80 record is keyed by (sass80.keys_key)
KEYS_SETTING = ("BR_keys", "warps_keys", "stages_kv", "pdq_bits", "keys_div32", "keys_dq_mma", "keys_rowlim")


def _kernels(T: int, shape: str, gpu=A100) -> dict:
    return {k.name: k for k in m.ours_on(T, m.SHAPES[shape], gpu)}


def _scaled(rec: dict, factor: float) -> dict:
    """The record with every recorded SASS count of the proxied kernels x factor."""
    out = copy.deepcopy(rec)
    for table in ("select", "keys_bwd"):
        for entry in out[table].values():
            p = entry["paths"]
            # (step_ops / always_ops / branch_ops: the SASS by opcode class, breakdowns the prices do not read)
            parts = [p[k] for k in p if k not in ("branches", "loops") and not k.endswith("_ops")]
            if "loops" in p:  # select_split's entries: the code outside the loops, each loop's paths
                parts += [
                    p["loops"]["once"],
                    *(x for lp in p["loops"]["loops"] for x in (lp["always"], *lp["branches"])),
                ]
            for part in [*parts, *p.get("branches", [])]:
                for c in ("insns", "lds_sts"):
                    part[c] *= factor
    return out


def test_the_proxied_kernels_follow_their_sm80_sass(monkeypatch) -> None:
    """Twice the SASS a program and a step: twice the A100 time of the selection and the keys
    backward (the proxy binds, not a floor), and nothing else moves; Hopper does not look at it."""
    before = {s: _kernels(32768, s) for s in ("m7c", "paper")}
    h100 = {k.name: k.time(m.GPUS["H100"]) for k in m.ours_on(32768, m.SHAPES["m7c"], m.GPUS["H100"])}
    doubled = _scaled(m.a100_record(), 2.0)
    monkeypatch.setattr(prices, "a100_record", lambda: doubled)
    monkeypatch.setattr(sass80, "a100_record", lambda: doubled)
    for s, ks in before.items():
        after = _kernels(32768, s)
        for name, k in ks.items():
            want = (
                2.0
                if (s, name) in {("m7c", "cmp_select"), ("m7c", "sel_bwd_keys"), ("paper", "cmp_select")}
                else 1.0
            )
            launches = m.LAUNCH_S * k.launches
            got = (
                (after[name].time(A100) - launches) / (k.time(A100) - launches)
                if k.time(A100) > launches
                else 1.0
            )
            assert got == pytest.approx(want, rel=1e-6), (s, name)
    for k in m.ours_on(32768, m.SHAPES["m7c"], m.GPUS["H100"]):
        assert k.time(m.GPUS["H100"]) == h100[k.name]


def test_a_launch_setting_without_a_record_is_priced_as_published(monkeypatch) -> None:
    """No sm_80 SASS of the launch (e.g. another `_config`): the kind's published pricing, not zero."""
    empty = {**m.a100_record(), "select": {}, "keys_bwd": {}}
    monkeypatch.setattr(prices, "a100_record", lambda: empty)
    monkeypatch.setattr(sass80, "a100_record", lambda: empty)
    ks = _kernels(32768, "m7c")
    for name in ("cmp_select", "sel_bwd_keys"):
        assert "warp_insns" not in ks[name].work
        assert ks[name].time(A100) == ks[name].time(PUBLISHED) > 0


def test_every_what_if_finds_its_sm80_keys_backward_in_the_record(monkeypatch) -> None:
    """A what-if whose keys-backward setting the A100 record lacks would silently fall back to the
    published pricing (the test above), so its A100 row would compare two pricings, not two builds
    (pdq_bits 16 shipping left `measured_code_only` so until its setting was recorded); and none
    prices a setting that spills: a switch sm_80's 64 rows need, flipped (`keys_dq_mma_off`,
    `keys_div32_off`, `keys_rowlim_off`, ...), is priced at the 32 rows the launcher runs then
    (selected_keys_bwd.keys_rows)."""
    cost = sys.modules["attention_cost.selected"]
    asked = []
    work = cost.keys_bwd_work
    monkeypatch.setattr(cost, "keys_bwd_work", lambda T, s, st: asked.append(st) or work(T, s, st))
    rec = m.a100_record()["keys_bwd"]
    for name, flags in m.WHAT_IF.items():
        for sname in ("m7c", "paper"):
            s = m.SHAPES[sname]
            fl = {f: (v(s) if callable(v) else v) for f, v in flags.items()}
            asked.clear()
            k = {k.name: k for k in m.ours_on(8192, s, A100, **fl)}.get("sel_bwd_keys")
            assert k is None or "warp_insns" in k.work, (name, sname)
            for st in asked:
                assert rec[sass80.keys_key(s.G, s.D, st)]["spill"] == 0, (name, sname, st)
    cvt = {k.name: k.kind for k in m.ours_on(8192, m.SHAPES["m7c"], A100, keys_dq_mma=False)}
    assert cvt["sel_bwd_keys"] == "sel_keys_bwd@64@br32"


def test_the_what_if_keeps_the_published_pricing() -> None:
    """`a100_published_eff`: A100 priced as before (every kind of ours at its generic kind's published
    efficiency) for the shipped kernels; at the selection's sm_80 settings before 2026-11-26 (4 warps,
    merged at once, no cap), fp32 dQ partials and the index's T/4 segments that is today's 2.66 / 0.78 / 0.54 at
    M7C (2.43 / 0.79 / 0.55 before bench/attention_cost/balance.py scheduled the keys kernels' programs:
    B = 1 at 8k has a few long ones); 1.45 / 0.47 / 0.31 at the paper shape (unchanged). The predictions take the SASS prices. (The pinned figures keep sm_80's keys
    backward at the 32 rows without the per-row key limit it ran before: `keys_rowlim` False, and the
    key-major merges' loops: `merge_tiles` False, and the masked keys walk with its separate merge:
    `fwd_forced_merge` False.)"""
    Ts = [8192, 32768, 65536]
    rows = {
        (r["shape"], r["T"]): r["fwd_bwd"] for r in m.what_if_rows(Ts) if r["what_if"] == "a100_published_eff"
    }
    before = {"warps_sel": 4, "halves_sel": 0, "maxnreg_sel": 0, "pdq_bits": 32, "keys_rowlim": False,
              "merge_tiles": False, "seg_target": 0, "fwd_forced_merge": False}  # fmt: skip
    # autograd's q gradient sum and the gate mix's three g * dO copies, as then (the pinned figures)
    unfused = {"q_grad_fused": False, "gate_folded": False}
    for (shape, T), ratio in rows.items():
        s = m.SHAPES[shape]
        fa = m.total(m.flash2(T, s), PUBLISHED)
        assert m.total(m.ours_on(T, s, PUBLISHED), PUBLISHED) / fa == pytest.approx(ratio, abs=5e-4)
        then_flags = {**unfused, **(before if shape == "m7c" else {})}
        then = round(m.total(m.ours_on(T, s, PUBLISHED, **then_flags), PUBLISHED) / fa, 3)
        assert then == {
            ("m7c", 8192): 2.662, ("m7c", 32768): 0.783, ("m7c", 65536): 0.541,
            ("paper", 8192): 1.45, ("paper", 32768): 0.473, ("paper", 65536): 0.305,
        }[(shape, T)]  # fmt: skip
    pred = {(r["shape"], r["T"]): r["fwd_bwd"] for r in m.prediction_rows(Ts) if r["gpu"] == "A100"}
    assert all(pred[p] < rows[p] for p in rows)


def test_a100_rows_say_how_each_kernel_is_priced() -> None:
    rows = {(r["shape"], r["a100_price"]): r for r in m.a100_rows([32768])}
    by = {k: r["priced_by"] for k, r in rows.items()}
    assert by[("m7c", "cmp_select")] == by[("m7c", "sel_bwd_keys")] == by[("paper", "cmp_select")] == "sass"
    assert by[("m7c", "sel_fwd_keys")] == by[("paper", "sel_bwd_dkdv")] == "carry"
    assert by[("m7c", "win_bwd_dkdv")] == by[("paper", "sel_bwd_dq")] == "published"
    for (shape, name), r in rows.items():
        k = _kernels(32768, shape)[name]
        assert r["ms"] == round(k.time(A100) * 1e3, 4)
        assert r["published_ms"] == round(k.time(PUBLISHED) * 1e3, 4)
        if r["priced_by"] == "sass":  # the tensor cores at the datasheet peak: a floor, and the range's top
            assert r["tensor_ms"] <= r["ms"] <= r["sass_plus_tensor_ms"]
        if r["priced_by"] == "published":
            assert r["ms"] == r["published_ms"]
    # A carried-over kind: its Hopper efficiency per SM cycle over the sm_80 / sm_90 SASS ratio.
    hop = m.GPUS["H100"]
    per_cycle = (hop.peak / (hop.sms * hop.clock)) / (A100.peak / (A100.sms * A100.clock))
    want = m.KEYS_COST["sel_keys_fwd"]["eff"] * per_cycle / m.carry_ratio("sel_keys_fwd@64")
    assert m.kind_cost("sel_keys_fwd@64", A100)["eff"] == pytest.approx(want)
    assert m.kind_cost("sel_keys_fwd@64", PUBLISHED)["eff"] == m.EFF["ampere"]["gather_bwd"]
    # The shipped mask-free walk (fwd_forced_merge) by its own step's ratio, not the masked walk's
    free = m.KEYS_COST["sel_keys_fwd"]["eff"] * per_cycle / m.carry_ratio("sel_keys_fwd@64@free")
    assert m.kind_cost("sel_keys_fwd@64@free", A100)["eff"] == pytest.approx(free)
    assert m.carry_ratio("sel_keys_fwd@64@free") != pytest.approx(m.carry_ratio("sel_keys_fwd@64"), rel=1e-3)


def test_the_record_holds_what_sm80_ships_and_the_proxies_constants() -> None:
    """bench/a100_proxy_sass.json has the sm_80 SASS of the settings the kernels' `_config`s ship on
    sm_80 (a `_config` change needs `bench/a100_proxy.py --recount`), compiled by triton 3.6 (the GPU
    images'), unspilled; its keys-backward constants are bench/keys_proxy.py's fit of its H200 points."""
    rec = m.a100_record()
    assert rec["triton"].startswith("3.6")
    for shape in ("m7c", "paper"):
        s = m.SHAPES[shape]
        c = cmp._config(s.G, s.D, s.n, s.bl, s.d, s.lp, 80)
        switches = (cmp._split_of(c), c["select_shm"] if c["select_cut"] else 0)
        key = sass80.select_key(
            s.G, s.D, c["bt_sel"], c["warps_sel"], c["halves_sel"], c["maxnreg_sel"], *switches
        )
        assert key.endswith("/split/shm") == (shape == "m7c")  # sm_80 ships the pair at M7C (a100shm)
        entry = rec["select"][key]
        assert entry["spill"] == 0
        assert sass80.select_work(8192, s, m.shipped_launch(s, 80)) is not None
    sc = sel._config(6, 64, 64, arch=80)
    st = {k: sc[k] for k in KEYS_SETTING}
    assert rec["keys_bwd"][sass80.keys_key(6, 64, st)]["spill"] == 0
    kp = load_bench("keys_proxy")
    rows = kp.rows_of("bwd", kp.measured_points("bwd"), json.loads(kp.SASS_FILE.read_text()))
    fit = kp.fit(rows, kp.FORMS["issue+smem"])
    assert rec["fit"]["keys_bwd"] == pytest.approx(fit, rel=1e-3)
    assert set(rec["fit"]["select"]) == {"insn", "smem", "lat"}


def test_merge_rates_interpolate_in_log_t_and_hold_beyond() -> None:
    s = m.SHAPES["m7c"]
    table = m.a100_record()["merge_rate"]["G6xD64/bt4/h0"]
    r8, r16 = table["8192"][0], table["16384"][0]
    mid = sass80.merge_rates(6, 64, 4, 0, int(8192 * 2**0.5))[0]
    assert mid == pytest.approx((r8 + r16) / 2)
    assert sass80.merge_rates(6, 64, 4, 0, 1 << 20) == table["65536"]
    assert sass80.merge_rates(6, 64, 4, 0, 1024) == table["2048"]
    assert sass80.merge_rates(6, 64, 3, 0, 8192) is None  # no record: the kind is priced as published
    assert s.G == 6


def test_the_shipped_sm80_selection_is_the_candidate_priced_15_percent_faster_unspilled() -> None:
    """bench/a100_proxy.py's candidates from the committed record (no compile): the setting
    compressed.py ships on sm_80 at M7C (4 tokens in halves, 2 warps, capped at 168 registers) is
    unspilled, as many warps an SM as the 4-warp one before it, and priced >= 15 % faster at 8k, 32k
    and 64k; the keys backward's shipped 64 rows (with keys_rowlim) unspilled, and nothing unspilled
    >= 15 % faster."""
    ap = load_bench("a100_proxy")
    rows = ap.candidate_rows(m.a100_record())
    picks = {
        (r["bt_sel"], r["warps_sel"], r["halves_sel"], r["maxnreg_sel"], r["T"]): r
        for r in rows
        if r["a100_candidate"] == "cmp_select"
        and r["shape"] == "m7c"
        and not r["select_split"]
        and not r["select_shm"]
    }
    c = cmp._config(6, 64, 16, 32, 16, 64, 80)
    shipped = (c["bt_sel"], c["warps_sel"], c["halves_sel"], c["maxnreg_sel"])
    assert shipped == (4, 2, 1, 168)
    for T in ap.POINTS:
        new, old = picks[(*shipped, T)], picks[(4, 4, 0, 0, T)]
        assert new["spill"] == 0 and new["resident_warps"] == old["resident_warps"] == 12
        assert new["proxy_ms"] <= 0.85 * old["proxy_ms"], T
    keys = [r for r in rows if r["a100_candidate"] == "sel_bwd_keys"]
    sc = sel._config(6, 64, 64, arch=80)
    st = {k: sc[k] for k in KEYS_SETTING}
    base = {r["T"]: r["proxy_ms"] for r in keys if all(r[k] == v for k, v in st.items())}
    assert (st["BR_keys"], st["keys_rowlim"]) == (64, True) and len(base) == len(ap.POINTS)
    for r in keys:
        if r["spill"] == 0:
            assert r["proxy_ms"] > 0.85 * base[r["T"]], r


def test_sm80_ships_the_shm_split_pair_at_m7c_priced_8_percent_faster_unspilled() -> None:
    """bench/a100_proxy.py's candidates from the committed record (triton 3.6, no compile): at sm_80's
    M7C setting (4 tokens in halves, 2 warps, 168 registers) select_split + select_shm is unspilled,
    holds the 12 warps an SM of the CUT loop without them and is priced >= 8 % faster at 8k (the gate,
    bench/RESULTS.md "a100shm": 0.855 there, 0.807 at 64k) and at every point, faster than either
    alone; compressed.py ships it on sm_80 at M7C and the model's A100 selection reads that entry."""
    ap = load_bench("a100_proxy")
    rows = ap.candidate_rows(m.a100_record())
    at = {
        (r["select_split"], r["select_shm"], r["T"]): r
        for r in rows
        if r["a100_candidate"] == "cmp_select" and r["shape"] == "m7c"
        and (r["bt_sel"], r["warps_sel"], r["halves_sel"], r["maxnreg_sel"]) == (4, 2, 1, 168)
    }  # fmt: skip
    for T in ap.POINTS:
        pair, neither = at[(1, 1, T)], at[(0, 0, T)]
        assert pair["spill"] == 0 and pair["resident_warps"] == neither["resident_warps"] == 12
        assert pair["proxy_ms"] <= 0.92 * neither["proxy_ms"], T
        assert pair["proxy_ms"] < min(at[(1, 0, T)]["proxy_ms"], at[(0, 1, T)]["proxy_ms"]), T
        assert max(at[(1, 0, T)]["proxy_ms"], at[(0, 1, T)]["proxy_ms"]) < neither["proxy_ms"], T
    s = m.SHAPES["m7c"]
    launch = m.shipped_launch(s, 80)
    assert (launch["select_split"], launch["select_shm"], launch["bt_sel"]) == (1, 1, 4)
    want = sass80.select_work(8192, s, {"bt_sel": 4, "warps_sel": 2, "halves_sel": 1, "maxnreg_sel": 168,
                                        "select_split": 1, "select_shm": 1})  # fmt: skip
    assert _kernels(8192, "m7c")["cmp_select"].work["warp_insns"] == want["warp_insns"]
    assert m.shipped_launch(m.SHAPES["paper"], 80)["select_shm"] == 0  # unpriced there on sm_80


def test_every_what_if_finds_its_sm80_selection_in_the_record() -> None:
    """A what-if whose selection setting the A100 record lacks would fall back to the published pricing
    (two pricings, not two builds): each one's `_cmp_select` is priced from its sm_80 SASS
    (select_split_off: select_shm alone; select_shm_off: select_split alone; select_cut_off: neither,
    as the kernel runs them), but for the kernel before it (select_v0, never recorded)."""
    for name, flags in m.WHAT_IF.items():
        for sname in ("m7c", "paper"):
            s = m.SHAPES[sname]
            fl = {f: (v(s) if callable(v) else v) for f, v in flags.items()}
            k = {k.name: k for k in m.ours_on(8192, s, A100, **fl)}.get("cmp_select")
            assert k is None or "warp_insns" in k.work or k.kind.startswith("cmp_sel@"), (name, sname)
    s = m.SHAPES["m7c"]
    shipped = _kernels(8192, "m7c")["cmp_select"].work["warp_insns"]
    alone = {
        f: next(k for k in m.ours_on(8192, s, A100, **{f: 0}) if k.name == "cmp_select").work["warp_insns"]
        for f in ("select_split", "select_shm", "select_cut")
    }
    assert all(v > shipped for v in alone.values())
    launch = {"bt_sel": 4, "warps_sel": 2, "halves_sel": 1, "maxnreg_sel": 168}
    assert alone["select_cut"] == sass80.select_work(8192, s, launch)["warp_insns"]


def test_sm80_ships_64_keys_rows_with_the_limit_unspilled_and_priced_below_its_32_rows_before() -> None:
    """sm_80's shipped keys backward at head_dim 64: 64 rows a step with the per-row key limit
    (recorded by bench/a100_proxy.py on triton 3.6), unspilled at 2 programs an SM (64 rows without
    the limit spilled: not launched, not recorded), priced >= 8 % faster than its 32 rows before
    (selected_keys_bwd.KEYS_BR32_SM80) at 8k, 32k and 64k. Shipped on the lead's call outside the keys proxy's calibrated
    range (instructions a scheduler 13-20 % below it, shared accesses and warps inside): the 32 rows
    before lay outside it too (shared accesses up to 3 % above), so no sm_80 setting is inside
    (bench/RESULTS.md "a100ship"). The record's key names the limit only with the 32-bit rows it needs."""
    from nsa.attention.triton.selected_keys_bwd import KEYS_BR32_SM80

    ap = load_bench("a100_proxy")
    rec = m.a100_record()
    shipped, before = ap.keys_setting(6, 64, {}), ap.keys_setting(6, 64, KEYS_BR32_SM80)
    assert (shipped["BR_keys"], shipped["keys_rowlim"]) == (64, True)
    assert (before["BR_keys"], before["keys_rowlim"]) == (32, False)
    key = sass80.keys_key(6, 64, shipped)
    assert key.endswith("/BR64/w4/s1/pdq16/div1/dq1/rl1")
    assert sass80.keys_key(6, 64, {**shipped, "keys_div32": False}).endswith("/div0/dq1")
    assert rec["keys_bwd"][key]["spill"] == 0
    # 64 rows without the limit spilled (88-96 B): the launcher runs 32 rows for them, the record and
    # bench/a100_proxy.py's KEYS hold only settings that launch as given, all unspilled
    with pytest.raises(ValueError, match="keys_rows"):
        ap.keys_setting(6, 64, {"keys_rowlim": False})
    assert {sass80.keys_key(6, 64, ap.keys_setting(6, 64, o)) for o in ap.KEYS} == set(rec["keys_bwd"])
    assert all(e["spill"] == 0 for e in rec["keys_bwd"].values())
    ms = {
        (r["BR_keys"], r["keys_rowlim"], r["T"]): r
        for r in ap.candidate_rows(rec)
        if r["a100_candidate"] == "sel_bwd_keys" and r["pdq_bits"] == 16 and r["keys_dq_mma"] and r["keys_div32"]
        and r["warps_keys"] == 4 and r["stages_kv"] == 1
    }  # fmt: skip
    for T in ap.POINTS:
        new, old = ms[(64, True, T)], ms[(32, False, T)]
        assert new["resident_programs"] == old["resident_programs"] == 2
        assert new["proxy_ms"] <= 0.92 * old["proxy_ms"], T
    cal = ap.calibrated_range()
    rows = ap.range_rows(rec, cal)
    ours = [r for r in rows if r["a100_keys_range"] == key]
    assert len(ours) == len(ap.RANGE_POINTS)
    for r in ours:
        assert 0.8 <= r["insn_vs_range"] <= 0.87 and r["smem_vs_range"] == 1 and not r["inside"], r
        assert r["warps_per_scheduler"] in cal["warps_per_scheduler"]
    was = [r for r in rows if r["a100_keys_range"] == sass80.keys_key(6, 64, before)]
    assert len(was) == len(ap.RANGE_POINTS) and not all(r["inside"] for r in was)
    assert max(r["smem_vs_range"] for r in was) <= 1.04


def test_the_keys_proxy_holds_on_the_h100_points_below_its_range_and_ldsm_is_no_cheaper() -> None:
    """bench/a100_gap.py (bench/RESULTS.md "a100gap"), from its committed record: (1) the keys proxy at
    the constants the A100 price uses (fitted on the 21 H200 points only) prices the H100 of
    2026-11-26c's five points of the shipped sm_90 keys backward within 15 %, at 0.40-0.50 of the H200
    points' lowest warp instructions a scheduler (sm_80's shipped setting sits at 0.82-0.87): below
    the old range the proxy still holds; (2) with LDSM fitted apart from the other shared accesses the
    Hopper points price sm_80's LDSM-heavy step within 10 % of the shipped constants: no evidence that
    sm_80's operand loads are cheaper than priced; (3) the A100's NSA/FA2 excess over the H100's (each
    kernel's A100 ms beyond its H100 ms x FlashAttention-2's ratio) is the keys backward's first at 8k
    and 32k, and it is 2.7x sm_90's priced step a warp, 72 % of it shared-memory accesses."""
    gap = load_bench("a100_gap")
    rec = json.loads(gap.SASS_FILE.read_text())
    rows = gap.check_rows(m, rec)
    chk = [r for r in rows if "h100c_check" in r]
    assert len(chk) == 5
    for r in chk:
        assert abs(r["error"]) <= 0.15 and r["x_insn_over_h200_lowest"] <= 0.55, r
    fits = [r for r in rows if "ldsm_fit" in r]
    assert len(fits) == 4
    for r in fits:
        assert 0.9 <= r["over_shipped_constants"] <= 1.1, r
        if "ldsm" in r["cycles"]:
            assert r["cycles"]["ldsm"] >= 0.9 * prices.a100_record()["fit"]["keys_bwd"]["smem"], r
    steps = {r["keys_step"]: r for r in gap.keys_step_rows(m, rec) if "keys_step" in r}
    assert steps["sm_80"]["ldsm"] > 4 * steps["sm_90"]["ldsm"]
    assert steps["sm_80"]["smem_share"] > 0.65
    assert 2.5 <= steps["sm_80"]["cycles_a_warp"] / steps["sm_90"]["cycles_a_warp"] <= 3.0
    for T in (8192, 32768):
        g = [r for r in gap.gap_rows(m, [T]) if "gap" in r]
        assert g[0]["gap"] == "sel_bwd_keys" and g[0]["excess_share"] > 0.5, g[0]
        assert abs(sum(r["excess_share"] for r in g) - 1) < 0.01
