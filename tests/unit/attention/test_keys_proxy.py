"""bench/keys_proxy.py, the key-major selected kernels' GPU-free time proxy: the loop path a step
issues (division fast paths in, their slow-path calls out), the modelled reverse index against the
kernels' own bounds and against a table built by the selection, the measured points read from the
committed GPU runs, and the non-negative fit (CPU, no compile)."""

from __future__ import annotations

import json

import pytest
import torch

from nsa.attention.triton.selected_keys import _seg_pairs, index_bounds
from tests.fixtures.bench import load_bench

kp = load_bench("keys_proxy")

# nvdisasm's form: a prologue (2), a row loop with an MMA holding one int64-division-like branch (a
# 3-instruction fast path that falls through, then a jump over a 2-instruction slow-path call), the
# epilogue to EXIT (1), a trap loop after EXIT.
_LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/              @!P0 BRA `(.L_x_9) ;
.L_x_1:
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ ;
        /*0030*/               @P5 BRA `(.L_x_11) ;
        /*0040*/                   MUFU.RCP R153, R153 ;
        /*0050*/                   IMAD.HI.U32 R155, R155, R152, RZ ;
        /*0060*/                   BRA `(.L_x_12) ;
.L_x_11:
        /*0070*/                   MOV R202, 0x3cd0 ;
        /*0080*/                   CALL.REL.NOINC `($__internal_0_$__cuda_sm20_div_s64) ;
.L_x_12:
        /*0090*/                   STS [R2], R5 ;
        /*00a0*/                   ISETP.GE.AND P4, PT, R0, R3, PT ;
        /*00b0*/               @P4 BRA `(.L_x_1) ;
.L_x_9:
        /*00c0*/                   EXIT ;
.L_x_4:
        /*00d0*/                   BRA `(.L_x_4);
"""


def test_step_path_takes_the_fast_path_and_jumps_over_the_slow_call():
    p = kp.paths(_LISTING.splitlines())
    assert p["prologue"]["insns"] == 2
    assert p["epilogue"]["insns"] == 1
    # HGMMA, the branch, MUFU, IMAD, the jump, STS, ISETP, the backedge: not the MOV and CALL.
    assert p["step"]["insns"] == 8
    assert (p["step"]["mma"], p["step"]["lds_sts"], p["step"]["mufu"]) == (1, 1, 1)
    assert p["loop_static"]["insns"] == 10
    want = {"mma": 1, "float": 1, "int": 1, "smem": 1, "predicate": 1, "branch": 3}
    assert p["step_ops"] == {**dict.fromkeys([*kp.OPCLASSES, "int"], 0), **want}


@pytest.mark.parametrize("T", [2048, 8192, 65536])
def test_modelled_table_lists_every_entry_and_the_forced_blocks(T):
    cnt = kp.pairs_per_block(T)
    ns = T // 64
    # Every query lists min(n, its blocks) entries.
    assert abs(sum(cnt) - sum(64 * min(16, m + 1) for m in range(ns))) <= ns
    assert cnt[0] == T  # block 0: forced for every query
    assert cnt[-1] == 64  # the last block: its own queries only
    assert kp.segments(T, 1, 1, 6, 64)["S"] == _seg_pairs(T)  # the kernels' segment length


def test_segments_use_the_kernels_static_grid_and_cover_every_row():
    T, B, Hkv, G, BR = 8192, 8, 2, 6, 64
    sg = kp.segments(T, B, Hkv, G, BR)
    assert sg["programs"] == index_bounds(B * Hkv, T, 16, 64)[1]
    assert sg["used"] <= sg["programs"]
    # Full S-pair segments take S*G/BR steps; the tails round up: between rows/BR and that + used.
    rows = sg["pairs"] * G
    assert rows / BR <= sg["steps"] <= rows / BR + sg["used"]


def test_modelled_counts_match_a_random_table_built_as_top_blocks_builds_it():
    """The model (the n - 3 free entries spread evenly over a query's earlier blocks) against the
    counts of a table whose free entries are random distinct blocks, as random scores pick them."""
    T, n, lp = 4096, 16, 64
    g = torch.Generator().manual_seed(0)
    ns = T // lp
    cnt = torch.zeros(ns)
    for m in range(ns):
        if m < n:
            cnt[: m + 1] += lp
            continue
        cnt[[0, m - 1, m]] += lp
        for _ in range(lp):
            cnt[1 + torch.randperm(m - 2, generator=g)[: n - 3]] += 1
    model = kp.pairs_per_block(T)
    for BR in (16, 64):
        a = kp.segments(T, 1, 1, 6, BR, cnt=model)
        b = kp.segments(T, 1, 1, 6, BR, cnt=[int(c) for c in cnt])
        assert abs(a["steps"] / b["steps"] - 1) < 0.01 and a["used"] == b["used"]
    assert (torch.tensor(model) - cnt).abs().max() / cnt[1:].mean() < 0.2


def test_measured_points_anchor_the_probe_on_the_speed_runs():
    pts = kp.measured_points("bwd")
    speed = [p for p in pts if p["source"].startswith("speed")]
    # The runs measured the int64 token division (keys_div32 False, no longer the default) and the dQ
    # tile converted before its store (keys_dq_mma False, the default on sm_90 only).
    measured = {"keys_div32": False, "keys_dq_mma": False}
    assert len(speed) == 10 and all(p["setting"] == {"BR_keys": 64, **measured} for p in speed)
    tune = [p for p in pts if p["source"] == "probe-tune" and p["T"] == 8192]
    br32 = next(p for p in tune if p["setting"] == {"BR_keys": 32, **measured})
    # (13.6852 - 4.0521) - (10.204 - 4.1288) over the speed runs' mean at 8k (4.528, 4.577).
    assert br32["ms"] == pytest.approx((4.528 + 4.577) / 2 + 9.6331 - 6.0752, abs=1e-3)
    # Variants of other kernels' keys (BR_f, warps_m) are not points of this one.
    assert all(set(p["setting"]) <= set(kp.OWN_KEYS["bwd"]) for p in pts)
    fwd = kp.measured_points("fwd")
    want = [
        {"BR_f": 128},
        {"BR_f": 64},
        {"BR_f": 32},
        {"BR_f": 64, "warps_fk": 8},
        {"BR_f": 64, "stages_fk": 2},
    ]
    assert {json_key(p["setting"]) for p in fwd} == {json_key({**w, "keys_div32": False}) for w in want}


def json_key(setting: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(setting.items()))


def test_nnls_recovers_constants_and_never_goes_negative():
    xs = [[1.0, 2.0], [2.0, 1.0], [3.0, 5.0], [1.0, 4.0]]
    ys = [3 * a + 0.5 * b for a, b in xs]
    c = kp.nnls_rel(xs, ys)
    assert c == pytest.approx([3.0, 0.5], rel=1e-6)
    # y falls as the second column grows: the unconstrained fit would give it a negative constant.
    c = kp.nnls_rel([[1.0, 1.0], [1.0, 3.0], [1.0, 5.0]], [3.0, 2.0, 1.0])
    assert min(c) >= 0.0 and c[1] == 0.0


def test_fit_and_predict_price_a_launch_by_its_terms():
    counts = {"registers": 128, "smem": 0,
              "paths": {part: {"insns": 100, "lds_sts": 10, "mma": 4, "mufu": 0, "bar": 0, "shfl": 0,
                               "isetp_ex": 0, "ldl_stl": 0} for part in ("prologue", "epilogue", "step")}}  # fmt: skip
    st = {"BR": 64, "warps": 4, "stages": 1, "pdq_bits": 32, "BN": 64}
    ln = kp.launch("bwd", 8192, 8, st, counts)
    assert ln["resident"] == 4  # 128 registers x 4 warps: 4 programs an SM
    f = {"insn": 2.0, "smem": 10.0}
    ms = kp.parts_ms(ln, f)
    x = kp.features(ln)
    assert ms["insn"] == pytest.approx(2.0 * x["insn"] / 1.98e6)
    rows = [{**ln, "ms": sum(ms.values()) * s} for s in (1.0, 1.0)]
    assert kp.fit(rows, ("insn", "smem"))["insn"] >= 0
    total, bound = kp.proxy_ms(ln, f)
    assert total == pytest.approx(sum(ms.values())) and bound in f


def test_the_committed_calibration_and_a_bad_key(capsys):
    """The script on the committed runs and SASS counts: the backward's default form within 22.3 %
    of its 21 points (bench/RESULTS.md), every calibration row priced; a --set key that is not one of
    selected._config's: exit 2 naming it, before any compile."""
    assert kp.main(["--kernel", "bwd"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    fit = next(r for r in rows if r.get("fit") == "_sel_bwd_keys_kernel" and r["form"] == "issue+smem")
    assert (fit["points"], fit["within_20pct"], fit["max_abs_error"]) == (21, 19, 0.223)
    cal = [r for r in rows if "calibration" in r]
    assert len(cal) == 21 and all(r["bound"] in ("insn", "smem") and r["spill"] == 0 for r in cal)
    with pytest.raises(SystemExit) as e:
        kp.main(["--predict", "m7c:8192:8", "--set", "BR_key=32"])
    assert e.value.code == 2 and "BR_key" in capsys.readouterr().err


def test_set_parses_booleans_and_keys_div32_false_prices_the_measured_build(capsys):
    """--set keys_div32=False is the boolean (the string "False" would compile as a true constexpr):
    the measured build's setting, priced from its recorded SASS counts (no compile), as measured."""
    measured = ["--set", "keys_div32=False", "--set", "keys_dq_mma=False"]
    argv = ["--kernel", "bwd", "--predict", "m7c:8192:8", *measured]
    assert kp.main(argv) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    (pred,) = [r for r in rows if "prediction" in r]
    assert pred["setting"] == {"BR_keys": 64, "keys_div32": False, "keys_dq_mma": False}
    assert (pred["step_insns"], pred["registers"], pred["proxy_ms"]) == (1406, 252, 4.285)
