"""The calibration: the model given the published kernels' structure reproduces published NSA and
FlashAttention-2 figures at their shapes (issue 20, item 1: within +-30 % per point).

Owns `published_nsa` (the structure the NSA paper and Scalable-Flash-NSA describe), the published
figures and the calibration rows. Used for nothing else: our kernels are priced from GPU runs.
"""

from __future__ import annotations

import math

from .counts import Shape, _sel_keys
from .kernels import flash2
from .prices import GPUS, Kernel, total


def published_nsa(T: int, s: Shape, score_pass: bool) -> list[Kernel]:
    """The structure the NSA paper and Scalable-Flash-NSA describe, at G >= 16 (full tiles): compressed
    attention plus a score pass and a top-n kernel, group-centric query-major selected attention, a
    flash-style window; backward = 2.5x each forward's GEMMs. Used only for calibration."""
    B, G, D, BH = s.B, s.G, s.D, s.B * s.Hkv
    nc = max(0, (T - s.bl) // s.d + 1)
    ns = -(-T // s.lp)
    act = B * T * s.H * D * 2
    kvb = BH * T * D * 2
    cunit = 2 * BH * T * G * (nc / 2) * D
    sunit = 2 * BH * T * G * _sel_keys(T, s) * D
    wunit = 2 * BH * T * G * min(T, s.w) * D
    score = 4 * BH * T * ns
    rows = BH * math.ceil(T * G / 128)
    return [
        Kernel("cmp_fwd", "compressed", "fwd", "dense_fwd", (2 + score_pass) * cunit, 2 * cunit, 2 * act, programs=rows),
        Kernel("topn", "selection", "fwd", "scalar", dram=2 * score, alu=BH * T * ns * 16 * 4, programs=rows),
        Kernel("sel_fwd", "selected", "fwd", "gather_fwd", 2 * sunit, 2 * sunit, 2 * act + 2 * kvb,
               l2=BH * T * _sel_keys(T, s) * D * 4, programs=BH * T, per_sm=4),
        Kernel("win_fwd", "window", "fwd", "dense_fwd", 2 * wunit, 2 * wunit, 2 * act + 2 * kvb, programs=rows),
        Kernel("cmp_bwd", "compressed", "bwd", "dense_bwd", 5 * cunit, 5 * cunit, 4 * act, programs=rows, launches=2),
        Kernel("sel_bwd", "selected", "bwd", "gather_bwd", 5 * sunit, 5 * sunit, 4 * act + 4 * kvb,
               l2=2 * BH * T * _sel_keys(T, s) * D * 4, programs=BH * T, per_sm=4, launches=2),
        Kernel("win_bwd", "window", "bwd", "dense_bwd", 5 * wunit, 5 * wunit, 4 * act + 4 * kvb, programs=rows, launches=2),
    ]  # fmt: skip


# NSA paper (Yuan et al. 2025, arXiv 2502.11089, Sec. 5.1, Fig. 6): Triton NSA kernel vs Triton
# FlashAttention-2 on A100, GQA group 16 (64 heads, 4 KV heads; head_dim taken as 128), speedups.
NSA_PAPER = {
    "gpu": "A100",
    "shape": Shape("nsa_paper_a100", 1, 64, 4, 128),
    "fwd": {8192: 2.1, 16384: 3.8, 32768: 6.3, 65536: 9.0},
    "bwd": {8192: 1.1, 16384: 2.0, 32768: 3.4, 65536: 6.0},
}
# Scalable-Flash-NSA README (github.com/mdy666/Scalable-Flash-Native-Sparse-Attention, benchmark
# tables): H800, 64 heads, 4 KV heads, head_dim 128, l=32, d=16, l'=64, n=16; milliseconds.
SCALABLE = {
    "gpu": "H800",
    "shape": Shape("scalable_h800", 1, 64, 4, 128),
    "nsa_fwd": {4096: 1.370, 8192: 2.630, 16384: 5.660, 32768: 13.237, 65536: 34.162, 131072: 101.123},
    "nsa_bwd": {4096: 2.772, 8192: 5.571, 16384: 12.322, 32768: 28.960, 65536: 73.689, 131072: 213.904},
    "fa2_fwd": {4096: 0.826, 8192: 3.055, 16384: 11.677, 32768: 46.912, 65536: 182.879, 131072: 774.342},
    "fa2_bwd": {4096: 2.503, 8192: 9.009, 16384: 33.972, 32768: 131.634, 65536: 523.686, 131072: 2068.492},
}


def calibration_rows() -> list[dict]:
    rows = []

    def add(source: str, gpu: str, shape: Shape, T: int, what: str, published: float, predicted: float):
        rows.append({
            "calibration": f"{source}/{what}", "gpu": gpu, "shape": f"H{shape.H}/Hkv{shape.Hkv}/D{shape.D}",
            "T": T, "published": published, "predicted": round(predicted, 3),
            "error": round(predicted / published - 1, 3),
        })  # fmt: skip

    p = NSA_PAPER
    gpu, shape = GPUS[p["gpu"]], p["shape"]
    for T in p["fwd"]:
        fa, ns = flash2(T, shape, "dense"), published_nsa(T, shape, score_pass=False)
        for d in ("fwd", "bwd"):
            add(
                "nsa_paper_fig6",
                p["gpu"],
                shape,
                T,
                f"speedup_{d}",
                p[d][T],
                total(fa, gpu, d) / total(ns, gpu, d),
            )
    c = SCALABLE
    gpu, shape = GPUS[c["gpu"]], c["shape"]
    for T in c["nsa_fwd"]:
        fa, ns = flash2(T, shape, "fa2"), published_nsa(T, shape, score_pass=True)
        for d in ("fwd", "bwd"):
            add(
                "scalable_flash_nsa",
                c["gpu"],
                shape,
                T,
                f"nsa_ms_{d}",
                c[f"nsa_{d}"][T],
                total(ns, gpu, d) * 1e3,
            )
            add(
                "scalable_flash_nsa",
                c["gpu"],
                shape,
                T,
                f"fa2_ms_{d}",
                c[f"fa2_{d}"][T],
                total(fa, gpu, d) * 1e3,
            )
    return rows
