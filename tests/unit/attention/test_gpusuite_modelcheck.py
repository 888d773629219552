"""nsa/attention/gpusuite/modelcheck.py: the cost model's predictions beside the GPU suite's speed
records (pure arithmetic on a record; the records here are built from the model's own kernel
times, then perturbed, so each comparison has a known answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite import modelcheck

GEO = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}


def _record(T: int = 8192, scale: dict[str, float] | None = None) -> dict:
    """A speed record whose per-kernel times are the model's own H100 predictions (x scale[family]),
    named as the profiler names the triton kernels; _cmp_bwd_dkv's time split with its sum kernel."""
    m = modelcheck.load_model()
    shape = m.Shape("m7c", 65536 // T, 12, 2, 64, bl=32, d=16, lp=64, n=16, w=512)
    gpu = m.GPUS["H100"]
    fam_ms: dict[str, float] = {}
    core = 0.0
    # the suite's core takes q as a leaf: autograd sums its three gradients in every build; and it
    # runs the gate mix's own backward (three g * dO copies), not the gates folded into the lse
    for k in m.ours(T, shape, q_grad_fused=False, gate_folded=False):
        if k.name in modelcheck.FAMILIES:
            fam = modelcheck.FAMILIES[k.name]
            fam_ms[fam] = fam_ms.get(fam, 0.0) + k.time(gpu) * 1e3
            core += k.time(gpu) * 1e3
        elif k.name in modelcheck.OTHER_IN_CORE:
            core += k.time(gpu) * 1e3
    rows = []
    for fam, ms in fam_ms.items():
        ms *= (scale or {}).get(fam, 1.0)
        if fam == "_cmp_bwd_dkv":
            rows += [
                {"kernel": "_cmp_bwd_dkv", "ms": ms * 0.75},
                {"kernel": "_cmp_bwd_dkv_sum", "ms": ms * 0.25},
            ]
        else:
            rows.append({"kernel": f"{fam}_kernel" if fam.startswith("_sel") else fam, "ms": ms})
    rows.append({"kernel": "void at::native::radix_sort_kernel", "ms": 0.05})  # not a family of ours
    fa = m.flash2(T, shape)
    return {
        "shape": "m7c", "H": 12, "Hkv": 2, "D": 64, "T": T, "B": 65536 // T, "nsa_kernels": rows,
        "nsa_fwd_bwd_ms": core, "sdpa_flash_fwd_ms": m.total(fa, gpu, "fwd") * 1e3,
        "sdpa_flash_fwd_bwd_ms": m.total(fa, gpu) * 1e3,
    }  # fmt: skip


def test_a_record_equal_to_the_model_is_within_tolerance_everywhere() -> None:
    out = modelcheck.compare(_record(), "NVIDIA H100 80GB HBM3", GEO)
    assert out["gpu_model"] == "H100"
    fams = {f["family"]: f["measured_over_predicted"] for f in out["families"]}
    m = modelcheck.load_model()
    # the core runs the branches one by one: no gate fold, so each backward forms its own delta
    core = m.ours(8192, m.SHAPES["m7c"], gate_folded=False)
    shipped = {modelcheck.FAMILIES[k.name] for k in core if k.name in modelcheck.FAMILIES}
    assert set(fams) == shipped  # _cmp_bwd_dkv_sum folded into its family
    assert {"_sel_fwd_keys", "_sel_bwd_keys", "_sel_bwd_dq_merge"} <= shipped  # key-major at G 6
    assert all(r == pytest.approx(1.0, abs=1e-3) for r in fams.values())
    assert out["off_by_more_than_30pct"] == [] and out["compared"] == len(fams) + 3
    assert out["nsa_over_flash"]["measured"] == pytest.approx(out["nsa_over_flash"]["predicted"], abs=1e-3)


def test_a_family_slower_than_predicted_is_flagged_and_counted() -> None:
    rec = _record(scale={"_sel_bwd_keys": 1.5, "_window_fwd": 1.25})
    out = modelcheck.compare(rec, "NVIDIA H100 80GB HBM3", GEO)
    fams = {f["family"]: f["measured_over_predicted"] for f in out["families"]}
    assert fams["_sel_bwd_keys"] == pytest.approx(1.5, abs=1e-3)
    assert "_sel_bwd_keys" in out["off_by_more_than_30pct"]
    assert "_window_fwd" not in out["off_by_more_than_30pct"]  # 25 %: within the 30 %
    rec["model"] = out
    assert (
        modelcheck.summary([rec])
        == f"model: {out['compared'] - 1} of {out['compared']} comparisons within 30 %"
    )


def test_a_tiny_family_off_by_less_than_the_absolute_floor_is_not_flagged() -> None:
    """A 6 us kernel at 1.5x its 4 us price (`_sel_fwd_segs` on the H100) is within ABS_FLOOR_MS;
    the same ratio on a kernel of a millisecond is flagged."""
    m = modelcheck.load_model()
    s = m.SHAPES["m7c"]
    core = m.ours(8192, s, gate_folded=False)
    ms = {k.name: k.time(m.GPUS["H100"]) * 1e3 for k in core}
    assert ms["sel_fwd_segs"] * 0.5 < modelcheck.ABS_FLOOR_MS < ms["sel_bwd_keys"] * 0.5
    out = modelcheck.compare(_record(scale={"_sel_fwd_segs": 1.5, "_sel_bwd_keys": 1.5}), "NVIDIA H100", GEO)
    fams = {f["family"]: f["measured_over_predicted"] for f in out["families"]}
    assert fams["_sel_fwd_segs"] == pytest.approx(1.5, abs=2e-3)
    assert out["off_by_more_than_30pct"] == ["_sel_bwd_keys"]


def test_gpus_without_figures_are_reported_not_guessed() -> None:
    for name in ("NVIDIA H100 PCIe", "NVIDIA L40S", "NVIDIA H100 NVL"):
        out = modelcheck.compare(_record(), name, GEO)
        assert "no figures" in out["skipped"] and name in out["skipped"]
    assert modelcheck.compare(_record(), "NVIDIA H200", GEO)["gpu_model"] == "H200"
    assert modelcheck.compare(_record(), "NVIDIA A100-SXM4-80GB", GEO)["gpu_model"] == "A100"


FIRST_RUN = Path(__file__).resolve().parents[3] / "bench" / "gpu" / "2026-11-26-h100-speed.json"
H200_RUN = FIRST_RUN.with_name("2026-11-26-h200-speed-after.json")
BUILDS = modelcheck.load_model().RUN_BUILDS  # the kernels each committed run measured
FINAL_RUN = FIRST_RUN.with_name("2026-11-26-h200-speed-final.json")
C_RUN = FIRST_RUN.with_name("2026-11-26c-h100-speed.json")


def test_the_corrected_model_reproduces_the_first_h100_run_within_30_percent() -> None:
    """Issue 20, item 5: the model as modelcheck uses it (the suite's comparison) against the committed
    measurement: every kernel family of every record within 30 %, and the whole NSA
    core and SDPA flash (fwd, fwd+bwd) within 30 % everywhere. The model before this fit: 62 of 170;
    168 until `_sel_bwd_reduce`'s serial tail was priced (block 0's program sums its partials alone)."""
    doc = json.loads(FIRST_RUN.read_text())
    gpu = doc["sections"]["env"]["gpu"]
    recs = doc["sections"]["speed"]["records"]
    assert len(recs) == 10 and {r["shape"] for r in recs} == {"m7c", "paper_G16_D128"}
    off: dict[str, list] = {}
    compared = 0
    for rec in recs:
        out = modelcheck.compare(rec, gpu, GEO, build=BUILDS[FIRST_RUN.name])
        assert out["gpu_model"] == "H100"
        assert len(out["families"]) == 14  # every triton family of the core (the fused _cmp_fwd)
        compared += out["compared"]
        for name in out["off_by_more_than_30pct"]:
            off.setdefault(name, []).append(rec["T"])
        for key in ("nsa_fwd_bwd_ms", "flash_fwd_ms", "flash_fwd_bwd_ms"):
            assert abs(out[key]["measured_over_predicted"] - 1) <= modelcheck.TOLERANCE, (key, rec["T"])
        ratio = out["nsa_over_flash"]
        assert ratio["predicted"] == pytest.approx(ratio["measured"], rel=0.1)
    assert compared == 170 and not off, off


def test_the_model_reproduces_the_h200_run_of_the_split_forward_within_30_percent() -> None:
    """The split compressed forward (_cmp_fwd attention + _cmp_select at 4 warps, the H200 run):
    every family of every record within 30 % (177 of 180 until the reduce's tail), the NSA core and SDPA flash
    within 30 % everywhere and NSA/FA2 within 10 %. The prices: the H100's for the kernels that did
    not change, the H200 fit for the three that did. Before this model: 143 of 170 (the fused
    forward's prices on the new kernels)."""
    doc = json.loads(H200_RUN.read_text())
    gpu = doc["sections"]["env"]["gpu"]
    recs = doc["sections"]["speed"]["records"]
    assert len(recs) == 10 and gpu == "NVIDIA H200"
    off: dict[str, list] = {}
    compared = 0
    for rec in recs:
        out = modelcheck.compare(rec, gpu, GEO, build=BUILDS[H200_RUN.name])
        assert out["gpu_model"] == "H200"
        fams = {f["family"] for f in out["families"]}
        assert len(fams) == 15 and {"_cmp_fwd", "_cmp_select"} <= fams  # the two forward kernels apart
        compared += out["compared"]
        for name in out["off_by_more_than_30pct"]:
            off.setdefault(name, []).append((rec["shape"], rec["T"]))
        for key in ("nsa_fwd_bwd_ms", "flash_fwd_ms", "flash_fwd_bwd_ms"):
            assert abs(out[key]["measured_over_predicted"] - 1) <= modelcheck.TOLERANCE, (key, rec["T"])
        ratio = out["nsa_over_flash"]
        assert ratio["predicted"] == pytest.approx(ratio["measured"], rel=0.1)
    assert compared == 180 and not off, off


def test_the_model_reproduces_the_final_h200_run_within_30_percent() -> None:
    """The final H200 run (76bdb6b's kernels: RUN_BUILDS, before ce226a4's launch settings), as the
    suite compares it: all 15 families of all 10 records, the NSA core and SDPA flash within 30 %,
    NSA/FA2 within 10 % (the suite's own comparison at run time, with the model before: 143 of 170)."""
    doc = json.loads(FINAL_RUN.read_text())
    gpu = doc["sections"]["env"]["gpu"]
    recs = doc["sections"]["speed"]["records"]
    assert len(recs) == 10 and gpu == "NVIDIA H200"
    assert BUILDS[FINAL_RUN.name] == {"before_ce226a4": True, "pdq_bits": 32}
    worst: dict[str, float] = {}
    compared = 0
    for rec in recs:
        out = modelcheck.compare(rec, gpu, GEO, build=BUILDS[FINAL_RUN.name])
        assert len(out["families"]) == 15
        compared += out["compared"]
        assert not out["off_by_more_than_30pct"], (rec["shape"], rec["T"], out["off_by_more_than_30pct"])
        for f in out["families"]:
            err = abs(f["measured_over_predicted"] - 1)
            worst[f["family"]] = max(worst.get(f["family"], 0.0), err)
        ratio = out["nsa_over_flash"]
        assert ratio["predicted"] == pytest.approx(ratio["measured"], rel=0.1), (rec["shape"], rec["T"])
    assert compared == 180 and max(worst.values()) <= modelcheck.TOLERANCE, worst


def test_the_refitted_model_reproduces_the_2026_11_26c_h100_run_within_30_percent() -> None:
    """The H100 run of main at f72f66b (RUN_BUILDS: the suite core's unfolded gates and deltas): all
    199 comparisons within 30 % (173 before H100C_COST and the absolute floor: the M7C selection, the
    compressed backward's proxy tiles, the paper's token dQ, the forward merge, the window dQ past
    head_dim 64, the 6-10 us `_sel_fwd_segs`), NSA/FA2 within 10 % at every record."""
    doc = json.loads(C_RUN.read_text())
    gpu = doc["sections"]["env"]["gpu"]
    recs = doc["sections"]["speed"]["records"]
    assert len(recs) == 10 and gpu == "NVIDIA H100 80GB HBM3"
    worst: dict[str, float] = {}
    compared = 0
    for rec in recs:
        out = modelcheck.compare(rec, gpu, GEO, build=BUILDS[C_RUN.name])
        compared += out["compared"]
        assert not out["off_by_more_than_30pct"], (rec["shape"], rec["T"], out["off_by_more_than_30pct"])
        for f in out["families"]:
            if abs(f["measured_ms"] - f["predicted_ms"]) > modelcheck.ABS_FLOOR_MS:
                worst[f["family"]] = max(worst.get(f["family"], 0.0), abs(f["measured_over_predicted"] - 1))
        ratio = out["nsa_over_flash"]
        assert ratio["predicted"] == pytest.approx(ratio["measured"], rel=0.1), (rec["shape"], rec["T"])
    assert compared == 199 and max(worst.values()) <= modelcheck.TOLERANCE, worst


def test_the_shipped_build_is_compared_unless_a_run_names_its_own() -> None:
    """Without `build`, compare() models the kernels the code ships: at sm_90 the selection at 2
    warps and 2 tokens a tile (M7C), so the H200 run's 4-warp, 4-token selection reads as slower than
    predicted by more than 1 / SEL_WARPS[2]; with the run's build, the model of that build."""
    m = modelcheck.load_model()
    rec = json.loads(H200_RUN.read_text())["sections"]["speed"]["records"][4]  # M7C 64k
    ships = {f["family"]: f for f in modelcheck.compare(rec, "NVIDIA H200", GEO)["families"]}
    ran = {
        f["family"]: f for f in modelcheck.compare(rec, "NVIDIA H200", GEO, BUILDS[H200_RUN.name])["families"]
    }
    ratio = ran["_cmp_select"]["predicted_ms"] / ships["_cmp_select"]["predicted_ms"]
    shape = m.Shape("m7c", rec["B"], 12, 2, 64)

    def select_ms(build: dict) -> float:
        return (
            next(k for k in m.ours(rec["T"], shape, **build) if k.name == "cmp_select").time(m.GPUS["H200"])
            * 1e3
        )

    assert ships["_cmp_select"]["predicted_ms"] == pytest.approx(select_ms({}), abs=1e-4)
    assert ran["_cmp_select"]["predicted_ms"] == pytest.approx(select_ms(BUILDS[H200_RUN.name]), abs=1e-4)
    assert ratio > 1 / m.SEL_WARPS[2]
    assert ran["_window_fwd"] == ships["_window_fwd"]
