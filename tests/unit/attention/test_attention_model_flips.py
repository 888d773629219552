"""The five settings the H100 of 2026-11-26c probed (bench/gpu/2026-11-26c-h100-probe-*.jsonl), as
`_config` ships them after it and as the cost model prices them: the M7C selection at 1 warp under a
register cap (`@w1`), select_shm off at the paper's shape, the compressed dQ past head_dim 64 at 2
stages (`@s2_d128`), the query-major selected dK/dV past head_dim 64 at 128 rows and 8 warps
(`@br128`), the key-major merges' loops (merge_tiles off). Each new tag's CONFIG_FACTOR is the ratio
the probe measured against the kind that run measured; RUN_BUILDS takes each flipped switch at
that run's value. Pure arithmetic on the recorded probe rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite import modelcheck
from nsa.attention.triton import compressed, selected

m = modelcheck.load_model()
GPU_DIR = Path(__file__).resolve().parents[3] / "bench" / "gpu"


def _rows(*names: str) -> list[dict]:
    rows = []
    for name in names or ("2026-11-26c-h100-probe-queue.jsonl", "2026-11-26c-h100-probe-since.jsonl"):
        rows += [json.loads(line) for line in (GPU_DIR / name).read_text().splitlines() if line.strip()]
    return rows


def _ms(probe: str, shape: str, T: int, variant: dict, field: str = "ms") -> list[float]:
    return [
        r[field]
        for r in _rows()
        if (r["probe"], r["shape"], r["T"], r["variant"]) == (probe, shape, T, variant)
    ]


def _kinds(T: int, sname: str, gpu: str = "H100", **flags) -> dict[str, str]:
    return {k.name: k.kind for k in m.ours_on(T, m.SHAPES[sname], m.GPUS[gpu], **flags)}


def test_the_configs_ship_the_flips_on_sm90_only_where_measured():
    m7c, m7c80 = (compressed._config(6, 64, 16, 32, 16, 64, a) for a in (90, 80))
    paper, paper80 = (compressed._config(16, 128, 16, 32, 16, 64, a) for a in (90, 80))
    assert (m7c["warps_sel"], m7c["maxnreg_sel"] > 0, m7c["select_shm"], m7c["select_split"]) == (
        1,
        True,
        1,
        1,
    )
    assert (m7c80["warps_sel"], m7c80["maxnreg_sel"]) == (2, 168)  # sm_80's own capped 2 warps
    assert compressed._config(6, 32, 16, 32, 16, 64, 90)["warps_sel"] == 2  # head_dim 32: not shm_split's
    assert (paper["warps_sel"], paper["maxnreg_sel"] in (0, 168), paper["select_shm"]) == (4, True, 1)
    # the second 2026-11-27 call's flips: the key tile as one bulk copy at M7C's 1 warp, the split loop at
    # the paper's shape (select_shm's scope there), on sm_90 only, on triton 3.6 and 3.9 alike
    assert (m7c["select_tma"], paper["select_split"], paper["select_tma"]) == (1, 1, 0)
    assert (m7c80["select_tma"], paper80["select_split"], paper80["select_shm"]) == (0, 0, 0)
    assert compressed._config(6, 32, 16, 32, 16, 64, 90)["select_tma"] == 0  # not one_warp's scope
    assert compressed._config(16, 64, 16, 32, 16, 64, 90)["select_split"] == 0  # head_dim 64 at G 16
    assert (paper["BT"] * paper["GP"], paper["warps"], paper["stages_dq"]) == (128, 8, 2)
    assert paper80["stages_dq"] == 2 and paper80["BT"] * paper80["GP"] == 32
    s90, s80 = (selected._config(16, 128, 64, arch=a) for a in (90, 80))
    assert (s90["BR"], s90["warps_kv"], s80["BR"], s80["warps_kv"]) == (128, 8, 32, 4)
    assert selected._config(6, 64, 64, arch=90)["BR"] == 64  # head_dim 64 unchanged
    assert not any(selected._config(G, 64, 64, arch=a)["merge_tiles"] for G in (1, 6, 16) for a in (80, 90))


def test_the_cap_follows_the_triton_the_registers_were_checked_on(monkeypatch):
    """168 on triton 3.6 (the GPU images', what the H100 measured), 224 from 3.7 (3.9 spilled at 168
    and at 216-220; none at 224)."""
    for version, cap in (("3.6.0", 168), ("3.6.1", 168), ("3.7.0", 224), ("3.9.0", 224)):
        monkeypatch.setattr(compressed.triton, "__version__", version)
        assert compressed._one_warp_cap() == cap, version
        assert compressed._config(6, 64, 16, 32, 16, 64, 90)["maxnreg_sel"] == cap, version


def test_the_new_tags_are_the_probes_ratios():
    f = m.CONFIG_FACTOR
    # the selection at 1 warp capped: 4.64 / 5.67 ms at M7C 64k, the same process, on @w2's factor
    shipped = _ms("cmp_fwd", "m7c", 65536, {"kernel": "select"})
    capped = _ms("cmp_fwd", "m7c", 65536, {"kernel": "select", "warps_sel": 1, "maxnreg_sel": 168})
    assert capped == [4.6404] and 5.665 in shipped
    assert f["cmp_sel32@w1"] / f["cmp_sel32@w2"] == pytest.approx(capped[0] / 5.665)
    # select_shm at the paper's shape: on / off in the same process (2026-11-26c, without the insertion)
    off = _ms("cmp_fwd", "paper", 32768, {"kernel": "select", "shape": "paper", "select_shm": 0})
    assert off == [4.5781] and 4.709 in _ms("cmp_fwd", "paper", 32768, {"kernel": "select"})
    # on since the 2026-11-27 H100's probe beside the insertion: its on / off ratio, 8k x 2 and 64k x 1
    ratios = []
    for T, B in ((8192, 2), (65536, 1)):
        rows = [r for r in _rows("2026-11-27-h100-probe-queue.jsonl") if r["step"] == "select_shm"]
        rows = [r for r in rows if (r["shape"], r["T"], r["B"]) == ("paper", T, B)]
        shipped = [r["ms"] for r in rows if r["variant"] == {"kernel": "select"}]
        on = [
            r["ms"] for r in rows if r["variant"] == {"kernel": "select", "shape": "paper", "select_shm": 1}
        ]
        assert len(shipped) == len(on) == 1 and on[0] < shipped[0]
        ratios.append(on[0] / shipped[0])
    assert f["cmp_sel32@shm_d128"] == pytest.approx(math.sqrt(ratios[0] * ratios[1]))
    assert 0.94 < f["cmp_sel32@shm_d128"] < 0.97
    # the second call's two probes (main at b94bec6, the same process): select_tma at M7C 64k x 1 and
    # select_split at the paper's 64k x 1, each its on / off ratio
    second = _rows("2026-11-27b-h100-probe-select.jsonl")
    for shape, key, tag in (
        ("m7c", "select_tma", "cmp_sel32@tma"),
        ("paper", "select_split", "cmp_sel32@split_d128"),
    ):
        rows = [r for r in second if (r["probe"], r["shape"], r["T"], r["B"]) == ("cmp_fwd", shape, 65536, 1)]
        shipped = [r["ms"] for r in rows if r["variant"] == {"kernel": "select"}]
        on = [r["ms"] for r in rows if r["variant"] == {"kernel": "select", "shape": shape, key: 1}]
        assert len(shipped) == len(on) == 1 and on[0] < shipped[0], shape
        assert f[tag] == pytest.approx(on[0] / shipped[0]), tag
    assert (round(f["cmp_sel32@tma"], 3), round(f["cmp_sel32@split_d128"], 3)) == (0.929, 0.908)
    # the compressed backward at 2 stages: 10.46 / 11.57 ms, all of it dQ's
    two = _ms("cmp_bwd", "paper", 32768, {"shape": "paper", "BT": "rows:128", "warps": 8, "stages_dq": 2})
    assert two == [10.4618] and 11.5659 in _ms("cmp_bwd", "paper", 32768, {})
    assert f["cmp_dq@s2_d128"] == pytest.approx(0.784, abs=0.001)
    # the selected dK/dV at 128 rows, 8 warps: fwd+bwd at paper 8k x 2 and 64k x 1
    for T, new, old in ((8192, 15.0949, 16.6562), (65536, 62.2955, 64.256)):
        over = {"shape": "paper", "BR": 128, "warps_kv": 8}
        assert _ms("selected", "paper", T, over, "fwd_bwd_ms") == [new]
        assert old in _ms("selected", "paper", T, {}, "fwd_bwd_ms")
    assert f["sel_dkdv@br128"] == pytest.approx(math.sqrt(0.7673 * 0.9294), abs=0.001)
    assert f["sel_fwd_merge@tiles"] > 1 and f["sel_dq_merge@tiles"] == 1.0


def test_the_model_tags_the_shipped_kinds_and_prices_them_by_the_factor():
    m7c, paper = _kinds(65536, "m7c"), _kinds(65536, "paper")
    assert m7c["cmp_select"] == "cmp_sel32@w1@bt2@h2@cut@shm@split@tma"  # select_tma on since 2026-11-27b
    # select_shm on since 2026-11-27, select_split since 2026-11-27b
    assert paper["cmp_select"] == "cmp_sel32@w4@bt4@cut_d128@shm_d128@split_d128"
    assert _kinds(65536, "paper", paper_split=False)["cmp_select"] == "cmp_sel32@w4@bt4@cut_d128@shm_d128"
    assert _kinds(65536, "m7c", select_tma=0)["cmp_select"] == "cmp_sel32@w1@bt2@h2@cut@shm@split"
    # as the 2026-11-27 run measured: neither flip, select_shm off at the paper's shape
    assert _kinds(65536, "paper", **m.SINCE_LAST_RUN)["cmp_select"] == "cmp_sel32@w4@bt4@cut_d128"
    assert _kinds(65536, "m7c", **m.SINCE_LAST_RUN)["cmp_select"] == "cmp_sel32@w1@bt2@h2@cut@shm@split"
    # the second call's base build (b94bec6): select_shm on at the paper's shape, neither flip
    b94 = m.RUN_BUILDS["2026-11-27b-h100-probe-select.jsonl"]
    assert _kinds(65536, "paper", **b94)["cmp_select"] == "cmp_sel32@w4@bt4@cut_d128@shm_d128"
    assert _kinds(65536, "m7c", **b94)["cmp_select"] == "cmp_sel32@w1@bt2@h2@cut@shm@split"
    assert paper["cmp_bwd_dq"] == "cmp_dq@128@wg_d128@s2_d128"
    assert paper["sel_bwd_dkdv"] == "sel_dkdv@128@br128"
    # the forward's merging forced pass (fwd_forced_merge: its dense pass at forced_fwd, its partial
    # reads at the merge's price) and the dQ merge's loop
    assert (m7c["sel_fwd_forced_merge"], m7c["sel_fwd_forced_merge_reads"]) == ("forced_fwd", "sel_fwd_merge")
    assert m7c["sel_bwd_dq_merge"] == "sel_dq_merge" and "sel_fwd_merge" not in m7c
    # sm_80 runs none of the sm_90 settings
    a100 = _kinds(65536, "paper", "A100")
    assert (a100["cmp_bwd_dq"], a100["sel_bwd_dkdv"]) == ("cmp_dq@128", "sel_dkdv@128")
    assert _kinds(65536, "m7c", "A100")["cmp_select"] == "cmp_sel32@w2@h2"
    # each switch at the 2026-11-26c run's value: the kind that run measured
    before = {**m.RUN_BUILDS["2026-11-26c-h100-speed.json"]}
    assert {k: before[k] for k in ("select_one_warp", "cmp_dq_stages2", "dkdv_rows128")} == dict.fromkeys(
        ("select_one_warp", "cmp_dq_stages2", "dkdv_rows128"), False
    )
    flags = {"select_one_warp": False, "cmp_dq_stages2": False, "dkdv_rows128": False, "select_shm": 1,
             "merge_tiles": True, "select_tma": 0, "paper_split": False, "fwd_forced_merge": False}  # fmt: skip
    run_m7c, run_paper = _kinds(65536, "m7c", **flags), _kinds(65536, "paper", **flags)
    assert run_m7c["cmp_select"] == "cmp_sel32@w2@bt2@h2@cut@shm@split"
    assert run_m7c["sel_fwd_merge"] == "sel_fwd_merge@tiles"
    assert run_paper["cmp_select"] == "cmp_sel32@w4@bt4@cut_d128@shm_d128"
    assert (run_paper["cmp_bwd_dq"], run_paper["sel_bwd_dkdv"]) == ("cmp_dq@128@wg_d128", "sel_dkdv@128")
    # a given warps_sel is kept (the probes' fits price it)
    assert _kinds(65536, "m7c", select_one_warp=False, warps_sel=4)["cmp_select"].startswith("cmp_sel32@w4")
    # the tag scales the kernel's time by its factor on Hopper, the counts unchanged
    h100 = m.GPUS["H100"]
    # (the M7C selection's one-key insertion, shipped at 1 warp since, off on both sides)
    for sname, name, flag, tag, base in (
        ("m7c", "cmp_select", {"select_one_warp": False}, None, {"select_insert": 0}),
        ("paper", "cmp_bwd_dq", {"cmp_dq_stages2": False}, "cmp_dq@s2_d128", {}),
        ("paper", "sel_bwd_dkdv", {"dkdv_rows128": False}, "sel_dkdv@br128", {}),
    ):
        new = next(k for k in m.ours_on(65536, m.SHAPES[sname], h100, **base) if k.name == name)
        old = next(k for k in m.ours_on(65536, m.SHAPES[sname], h100, **base, **flag) if k.name == name)
        want = (
            m.CONFIG_FACTOR["cmp_sel32@w1"] / m.CONFIG_FACTOR["cmp_sel32@w2"]
            if tag is None
            else m.CONFIG_FACTOR[tag]
        )
        assert new.flops == pytest.approx(old.flops, rel=0.01) and new.dram == old.dram
        assert (new.time(h100) - m.LAUNCH_S) / (old.time(h100) - m.LAUNCH_S) == pytest.approx(
            want, rel=0.02
        ), name
