"""bench/flash_proxy.py, the flash-style tiles' GPU-free time proxy: the trips its grid model walks
against the kernels' own loop bounds, its fit and held-out errors from the recorded SASS counts (no
compile), the factors the cost model prices the proxy-shipped tiles by, and the model's tags."""

from __future__ import annotations

import math
import sys

import pytest

from nsa.attention.triton import compressed as cmp
from tests.fixtures.bench import load_bench

fp = load_bench("flash_proxy")
ship = load_bench("flash_proxy_ship")


@pytest.fixture(scope="module")
def fitted():
    rec = fp.load_record()
    points = fp.with_keys(fp.measured_points())
    return rec, points, fp.fit(points, rec["sass"])


def test_the_fit_reproduces_its_recorded_constants_and_calibrates(fitted) -> None:
    """From the recorded SASS counts and the committed runs: FIT's constants, every measured point
    within 30 %, and each setting held out of the fit within 35 % (the rule to ship on it)."""
    rec, points, f = fitted
    assert set(f) == set(fp.FIT)
    for k, v in fp.FIT.items():
        assert f[k] == pytest.approx(v, rel=1e-4), k
    assert len(points) >= 360 and len({p["key"] for p in points}) >= 30
    errs = [abs(r["error"]) for r in fp.predict(points, rec["sass"], f)]
    assert max(errs) <= 0.30
    held = fp.held_out(points, rec["sass"])
    assert max(abs(e) for es in held.values() for e in es) <= 0.35


def test_a_measured_setting_counts_as_the_build_that_ran_it() -> None:
    """The measured settings compile as their runs' builds, not today's sm_90 tiles: dK/dV at 8 warps
    before ce226a4 and at 32 keys a tile, dQ past head_dim 64 at 32 x 32 (RUN_OVER)."""
    assert fp.run_configs({"before_ce226a4": True, "split_cmp_fwd": False}) == [
        c
        for c in fp.CONFIGS
        if not c.startswith("cmp_fwd") and (not c.startswith("cmp_dkv") or c.endswith("@w8"))
    ]
    spec = fp.build_spec("cmp_dkv@64", {})
    assert (spec.constexprs["BN"], spec.constexprs["BT"] * spec.constexprs["GP"], spec.num_stages) == (
        32,
        64,
        2,
    )
    spec = fp.build_spec("cmp_dq@128", {})
    assert (spec.constexprs["BT"] * spec.constexprs["GP"], spec.num_warps) == (32, 4)
    shipped = cmp._config(16, 128, 16, 32, 16, 64, 90)
    assert (shipped["BT"] * shipped["GP"], shipped["bn_dkv"]) == (128, 64)


@pytest.mark.parametrize("config", ["cmp_fwd@64", "cmp_dq@128", "cmp_dkv@128", "win_fwd@64", "win_dkdv@128"])
def test_grid_trips_walk_the_kernels_loops(config) -> None:
    """The trips and programs of `grid_trips` equal a plain walk of each program's loop bounds as the
    kernels write them (compressed.py's n_vis / first tile, window.py's _key_phases / dK/dV tiles)."""
    c = {"config": config, "G": fp.CONFIGS[config][4], "rows": 64, "keys": 32, "split": 8}
    T, G, BM, BN, L, S, W = 3000, c["G"], 64, 32, 32, 16, 512
    nc = (T - L) // S + 1
    trips = masked = programs = 0
    kernel = fp.CONFIGS[config][3]
    if kernel in ("compressed_fwd", "compressed_bwd_dq"):
        for pid in range(-(-T * G // BM)):
            t_last = min((pid * BM + BM - 1) // G, T - 1)
            n_vis = min(nc, (t_last - L + 1) // S + 1) if t_last >= L - 1 else 0
            trips, programs = trips + -(-n_vis // BN), programs + 1
    elif kernel == "compressed_bwd_dkv":
        for pid_n in range(-(-nc // BN)):
            first = (pid_n * BN * S + L - 1) * G // BM
            trips, programs = trips + max(-(-T * G // BM) - first, 0), programs + 8
    elif kernel == "window_fwd":
        for r0 in range(0, T * G, BM):
            t_lo, t_hi = r0 // G, min((r0 + BM - 1) // G, T - 1)
            for n0 in range((max(t_lo - W + 1, 0) // BN) * BN, t_hi + 1, BN):
                full = n0 + BN - 1 <= t_lo and n0 >= t_hi - W + 1  # every row sees every key: unmasked
                trips, masked = trips + full, masked + (not full)
            programs += 1
    else:
        for n0 in range(0, T, BN):
            for r0 in range(n0 * G, min(T, n0 + BN - 1 + W) * G, BM):
                # every row of the tile sees every key: past the tile's last key, before its window ends
                full = r0 // G >= n0 + BN - 1 and r0 + BM <= min(T, n0 + W) * G
                trips, masked = trips + full, masked + (not full)
            programs += 1
    assert fp.grid_trips(c, T) == {"programs": programs, "unmasked": trips, "masked": masked}


def test_the_shipped_tiles_config_factors_are_the_proxys(fitted) -> None:
    """CONFIG_FACTOR's proxy-shipped tags are the proxy's ratios (flash_proxy_ship.py --factors) from the recorded
    counts; each prices the shipped tile >= 10 % faster than the measured one, in the proxy's domain."""
    rec, _, f = fitted
    prices = sys.modules["attention_cost.prices"]
    factors = ship.config_factors(rec["sass"], f)
    assert set(factors) == set(ship.SHIPPED)
    for tag, v in factors.items():
        assert prices.CONFIG_FACTOR[tag] == pytest.approx(v, abs=0.002), tag
    dom = ship.domain(rec["sass"])
    for config, over in ship.SHIPPED.values():
        for row in ship.price(config, over, rec["sass"], f, dom):
            assert row["in_domain"] and row["spill"] == 0 and row["ratio"] <= 0.9, row


def test_the_model_follows_the_shipped_tiles_tags() -> None:
    """On Hopper the model tags the compressed backward's kinds by the shipped tiles and prices them by
    the factor; flash_tiles False (the what-if `flash_tiles_off`, the last committed run's build) and
    A100 (sm_80 keeps the measured tiles) carry no tag."""
    from nsa.attention.gpusuite.modelcheck import load_model

    am = load_model()
    prices = sys.modules["attention_cost.prices"]
    h100, a100 = am.GPUS["H100"], am.GPUS["A100"]
    kinds = {(s, k.name): k.kind for s in ("m7c", "paper") for k in am.ours_on(65536, am.SHAPES[s], h100)}
    assert kinds[("m7c", "cmp_bwd_dkv")] == "cmp_dkv@64@w4@bn64"
    assert kinds[("paper", "cmp_bwd_dkv")] == "cmp_dkv@128@w4@bn64_d128"
    # (at 2 stages since the H100 of 2026-11-26c: its measured tag on top of the proxy's)
    assert kinds[("paper", "cmp_bwd_dq")] == "cmp_dq@128@wg_d128@s2_d128"
    assert kinds[("m7c", "cmp_bwd_dq")] == "cmp_dq@64"
    for flags, gpu in (({"flash_tiles": False}, h100), ({}, a100)):
        ks = am.ours_on(65536, am.SHAPES["paper"], gpu, **flags)
        assert {k.kind for k in ks if k.name.startswith("cmp_bwd")} == {"cmp_dq@128", "cmp_dkv@128@w4"}
    assert "flash_tiles" in am.RUN_BUILDS["2026-11-26b-h200-speed-final.json"]
    # the tag scales the kind's time by its factor (the model's own count of the tile unchanged), where
    # no run measured it; since the 2026-11-26c H100 run the tile takes its measured price (H100C_COST)
    k = next(k for k in am.ours_on(65536, am.SHAPES["paper"], h100) if k.name == "cmp_bwd_dkv")
    assert am.measured_config(k.kind) == "cmp_dkv@bn64_d128"
    measured_price = k.time(h100)
    saved, measured = prices.CONFIG_FACTOR["cmp_dkv@bn64_d128"], dict(prices.H100C_COST)
    prices.H100C_COST.clear()
    try:
        with_tag = k.time(h100)
        prices.CONFIG_FACTOR["cmp_dkv@bn64_d128"] = 1.0
        without = k.time(h100)
    finally:
        prices.CONFIG_FACTOR["cmp_dkv@bn64_d128"] = saved
        prices.H100C_COST.update(measured)
    assert with_tag / without == pytest.approx(saved, rel=0.02)
    assert math.isfinite(with_tag) and measured_price > 1.2 * with_tag  # the proxy overclaimed


def test_the_recorded_spill_grid_is_the_shipped_tiles_without_a_spill() -> None:
    """The record's spill grid (flash_proxy_ship.py --spill-grid, triton 3.6 and 3.9, sm_90) holds the shipped dQ and
    dK/dV tiles of today's `_config` at every GRID point, none spilled."""
    rows = fp.load_record()["spill_grid"]
    assert {r["triton"][:3] for r in rows} == {"3.6", "3.9"}
    for r in rows:
        assert r["spill"] == 0, r
        c = cmp._config(r["G"], r["D"], 16, 32, 16, 64, r["arch"])
        if r["spill_grid"] == "compressed_bwd_dq":
            assert (r["rows"], r["keys"], r["warps"], r["stages"]) == (
                c["BT"] * c["GP"],
                c["bn_bwd"],
                c["warps"],
                c["stages_dq"],
            )
        else:
            assert (r["rows"], r["keys"], r["warps"], r["stages"]) == (
                c["bt_dkv"] * c["GP"],
                c["bn_dkv"],
                c["warps_dkv"],
                c["stages_dkv"],
            )
    assert len({(r["G"], r["D"], r["arch"], r["triton"][:3]) for r in rows}) == 2 * len(ship.GRID)
