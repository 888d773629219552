"""The GPU suite's speed records and summary, on the first H100 run's own records
(bench/gpu/2026-11-26-h100-speed.json): NSA/FA2 is in each record (the issue's measure; the first
run's tables in bench/RESULTS.md computed it by hand), and the summary says it, not the inverse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa.attention.gpusuite.gpu import nsa_over_sdpa, speed_summary

REPO = Path(__file__).resolve().parents[3]
FIRST_RUN = REPO / "bench" / "gpu" / "2026-11-26-h100-speed.json"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return json.loads(FIRST_RUN.read_text())["sections"]["speed"]["records"]


def test_nsa_over_sdpa_gives_the_ratios_bench_results_tabulates(records) -> None:
    # bench/RESULTS.md, "The first GPU run": NSA/FA2 fwd, fwd+bwd and NSA/cuDNN fwd+bwd.
    want = {("m7c", 8192): (5.15, 2.70, 4.40), ("m7c", 65536): (2.71, 1.02, 1.53),
            ("paper_G16_D128", 32768): (1.14, 0.71, 1.19)}  # fmt: skip
    for r in records:
        if (r["shape"], r["T"]) in want:
            got = nsa_over_sdpa(r)
            assert (
                got["nsa_over_flash_fwd"],
                got["nsa_over_flash_fwd_bwd"],
                got["nsa_over_cudnn_fwd_bwd"],
            ) == (pytest.approx(want[r["shape"], r["T"]], abs=0.006))
    assert nsa_over_sdpa({"nsa_fwd_ms": 1.0}) == {}  # no SDPA figure (a backend that failed): no ratio


def test_speed_summary_says_nsa_over_fa2_and_what_was_skipped(records) -> None:
    recs = [{**r, **nsa_over_sdpa(r)} for r in records]
    text = speed_summary(recs, ["paper_G16_D128 T131072"])
    assert text.startswith(
        "m7c T2048: NSA/FA2 fwd 8.95 fwd+bwd 5.21; m7c T8192: NSA/FA2 fwd 5.15 fwd+bwd 2.7;"
    )
    assert "(+6 more)" in text and "comparisons within 30 %" in text
    assert text.endswith("; skipped for time: paper_G16_D128 T131072")
    assert speed_summary([], ["m7c T8192"]) == "skipped for time: m7c T8192"  # not "; model: ..."


def test_the_split_compressed_forward_is_counted_as_two_kernels() -> None:
    """Since 45bc233 _cmp_fwd is the attention alone (QK + PV per visible pair) and _cmp_select the
    selection (QK only, no V): the per-kernel TFLOP/s and GB/s columns count each kernel's own work
    (the fused kernel's 3 products per pair put 390 TFLOP/s on the H200's 1.59 ms attention at M7C
    64k; it did 260), and the FLOPs agree with the cost model's useful FLOPs of the same kernels."""
    from nsa.attention.gpusuite import modelcheck
    from nsa.attention.gpusuite.gpu import _bytes_model, _flops_model

    geo = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
    args = (1, 65536, 2, 6, 64, geo)
    flops, nbytes = _flops_model(*args), _bytes_model(*args)
    assert flops["_cmp_fwd"] == 2 * flops["_cmp_select"]
    assert flops["_cmp_fwd"] / 1.585e-3 / 1e12 == pytest.approx(260, abs=3)  # the H200 run's 1.585 ms
    Q, Kc = 65536 * 12 * 64 * 2, 65536 * 2 * 64 * 2 / 16
    assert nbytes["_cmp_fwd"] == pytest.approx(2 * Q + 2 * Kc, rel=0.03)  # no table: _cmp_select writes it
    assert nbytes["_cmp_select"] > Q + Kc
    m = modelcheck.load_model()
    useful = {k.name: k.useful for k in m.ours(65536, m.SHAPES["m7c"])}
    assert flops["_cmp_fwd"] == pytest.approx(useful["cmp_fwd"], rel=0.02)
    assert flops["_cmp_select"] == pytest.approx(useful["cmp_select"], rel=0.02)
