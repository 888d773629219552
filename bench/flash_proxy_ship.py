"""Candidates of the flash-style tiles priced by bench/flash_proxy.py, and the evidence to ship them.

Owns the pricing behind compressed.py `_config`'s sm_90 tiles (issue 20, task flashproxy): each
`CANDIDATES` setting of the compressed attention, dQ or dK/dV (bench/tiles_d128.py's spill-free
head_dim-128 ones, at head_dim 64 the compressed dK/dV over rows x keys x warps x stages, and the
window's kernels) compiled as the proxy's settings are (bench/flash_proxy_sass.json, or compiled),
priced against the measured setting at the suite's points (`PRICE_AT`) with its registers, spills
and whether its trip lies in the calibrated range (`domain`); `SHIPPED`'s settings as the cost
model's CONFIG_FACTOR tags (`config_factors`); `spill_grid`, the shipped dQ / dK/dV over gpucheck's
grid and G 5 / 8 (recorded). Prints one JSON object per line; asserts nothing.

  .venv/bin/python bench/flash_proxy_ship.py --candidates     # price CANDIDATES (3.6 records)
  .venv/bin/python bench/flash_proxy_ship.py --candidates --triton 3.9.0   # their triton 3.9 SASS
  .venv/bin/python bench/flash_proxy_ship.py --factors        # SHIPPED's CONFIG_FACTOR values
  PYTHONPATH=/tmp/forced-leg36 .venv/bin/python bench/flash_proxy_ship.py --spill-grid   # and without
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path, load_model

fp = load_by_path("flash_proxy", Path(__file__).resolve().with_name("flash_proxy.py"))
CONFIGS, _key, _model_kernels, proxy_ms = fp.CONFIGS, fp._key, fp._model_kernels, fp.proxy_ms

# Launch settings to price against the shipped one (`_config` overrides of the CONFIGS entry, at its
# own shape): bench/tiles_d128.py's spill-free head_dim-128 candidates (bench/RESULTS.md "d128") and
# beside them 64 rows x 32 keys (the probe's `bt_dkv` x2 at 8 warps, measured faster) at 4 warps; at
# head_dim 64 the compressed dK/dV (M7C's largest compressed kernel) over rows x keys x warps x stages.
CANDIDATES: list[tuple[str, dict]] = [
    ("cmp_fwd@128", {"bm_fwd": 128, "bn_fwd": 64, "warps_fwd": 8}),
    ("cmp_fwd@128", {"bm_fwd": 128, "bn_fwd": 64, "warps_fwd": 8, "stages_fwd": 3}),
    ("cmp_dq@128", {"BT": 4, "bn_bwd": 64}),
    ("cmp_dq@128", {"BT": 8, "warps": 8}),
    ("cmp_dq@128", {"BT": 8, "warps": 8, "stages_dq": 1}),
    ("cmp_dkv@128", {"bn_dkv": 64, "stages_dkv": 1}),
    ("cmp_dkv@128", {"bn_dkv": 64}),
    ("cmp_dkv@128", {"bt_dkv": 4}),
    ("cmp_dkv@128", {"bt_dkv": 4, "stages_dkv": 1}),
    *[
        ("cmp_dkv@64", {k: v for k, v in (("bt_dkv", bt), ("bn_dkv", bn), ("warps_dkv", w), ("stages_dkv", st))
                        if v != {"bt_dkv": 8, "bn_dkv": 32, "warps_dkv": 4, "stages_dkv": 2}[k]})
        for bt in (4, 8, 16) for bn in (32, 64) for w in (4, 8) for st in (1, 2)
        if (bt, bn, w, st) != (8, 32, 4, 2)
    ],
    # the shipped M7C tile at 16 query parts a key tile (B 1 at 8k: bench/RESULTS.md "split16")
    ("cmp_dkv@64", {"bt_dkv": 4, "bn_dkv": 64, "stages_dkv": 1, "split_dkv": 16}),
    # the window's (window.py `_configs` keys over the measured tiles, flash_sass.RUN_OVER; three ship
    # on sm_90: SHIPPED, bench/RESULTS.md "wintiles")
    ("win_fwd@128", {"BLOCK_N": 64}),
    ("win_dq@128", {"BLOCK_M": 128}),
    ("win_dq@128", {"BLOCK_M": 128, "BLOCK_N": 32}),
    ("win_dkdv@128", {"BLOCK_N": 64}),
    ("win_dkdv@128", {"BLOCK_M": 128}),
    ("win_dkdv@64", {"BLOCK_M": 64}),
    ("win_dkdv@64", {"BLOCK_M": 64, "BLOCK_N": 32}),
    ("win_dkdv@64", {"num_warps": 4}),
]  # fmt: skip
# Where each is priced: the suite's points (B * T = 64k), the paper's shape for head_dim 128, M7C's
# for 64.
PRICE_AT = {128: [("paper_G16_D128", 8192, 8), ("paper_G16_D128", 65536, 1)],
            64: [("m7c", 8192, 8), ("m7c", 65536, 1)]}  # fmt: skip
SHAPE_HEADS = {"paper_G16_D128": (64, 4, 128), "m7c": (12, 2, 64)}  # H, Hkv, D


def domain(sass: dict) -> dict[str, tuple[float, float]]:
    """The calibrated range of each trip ratio (per instruction: shared-memory accesses, wgmma FLOPs,
    wgmma waits) and of the programs an SM holds, over the measured, unspilled settings."""
    keys = {p["key"] for p in fp.with_keys(fp.measured_points())}
    recs = [sass[k] for k in keys if sass[k]["spill"] == 0]
    out = {}
    for name, fn in _RATIOS.items():
        vals = [fn(r) for r in recs]
        out[name] = (min(vals), max(vals))
    return out


_RATIOS = {
    "smem_per_insn": lambda r: r["trip"]["smem"] / r["trip"]["insns"],
    "wgmma_flops_per_insn": lambda r: r["trip"]["hgmma_flops"] / r["warps"] / r["trip"]["insns"],
    "waits_per_insn": lambda r: r["trip"]["wgwait"] / r["trip"]["insns"],
    "resident": lambda r: r["resident"],
}


def price(config: str, over: dict, sass: dict, f: dict, dom: dict, triton: str = "3.6.0") -> list[dict]:
    """The candidate (config + over) against the measured setting (config) at PRICE_AT's points, both
    from `triton`'s recorded SASS (the constants are the 3.6 fit's)."""
    am = load_model()
    c0 = CONFIGS[config]
    new = sass[_key(config, over, c0[4], c0[5], 90, triton)]
    old = sass[_key(config, {}, c0[4], c0[5], 90, triton)]
    out_of = [k for k, fn in _RATIOS.items() if not dom[k][0] <= fn(new) <= dom[k][1]]
    rows = []
    for shape, T, B in PRICE_AT[c0[5]]:
        H, Hkv, D = SHAPE_HEADS[shape]
        rec = {"shape": shape, "T": T, "B": B, "H": H, "Hkv": Hkv, "D": D}
        k = _model_kernels(am, rec, {})[c0[1]]
        p = {"T": T, "BH": B * Hkv, "dram": k.dram, "gpu": "H200"}
        ms_new, parts = proxy_ms(p, new, f)
        ms_old, _ = proxy_ms(p, old, f)
        rows.append({"candidate": config, "set": over, "triton": triton, "shape": shape, "T": T, "B": B,
                     "registers": new["registers"], "spill": new["spill"], "resident": new["resident"],
                     "rows": new["rows"], "keys": new["keys"], "warps": new["warps"], "stages": new["stages"],
                     "wgmma": new["trip"]["hgmma"] > 0, "proxy_ms": round(ms_new, 4), "shipped_ms": round(ms_old, 4),
                     "ratio": round(ms_new / ms_old, 3), "bound": max(parts, key=parts.get),
                     "in_domain": not out_of and new["spill"] == 0, "outside": out_of})  # fmt: skip
    return rows


# The settings shipped on sm_90 on this proxy's word (compressed.py `_config`), as the CONFIG_FACTOR
# tags the cost model prices them by (bench/attention_cost/kernels.py `flash_tiles`).
SHIPPED: dict[str, tuple[str, dict]] = {
    "cmp_dkv@bn64": ("cmp_dkv@64", {"bt_dkv": 4, "bn_dkv": 64, "stages_dkv": 1, "split_dkv": 16}),
    "cmp_dkv@bn64_d128": ("cmp_dkv@128", {"bn_dkv": 64}),
    "cmp_dq@wg_d128": ("cmp_dq@128", {"BT": 8, "warps": 8, "stages_dq": 1}),
    # the window's (window.py `_configs` on sm_90 since wintiles)
    "win_dq@wg_d128": ("win_dq@128", {"BLOCK_M": 128, "BLOCK_N": 32}),
    "win_dkdv@bm128_d128": ("win_dkdv@128", {"BLOCK_M": 128}),
    "win_dkdv@w4": ("win_dkdv@64", {"num_warps": 4}),
}


def config_factors(sass: dict, f: dict) -> dict[str, float]:
    """Each SHIPPED tag's CONFIG_FACTOR: the proxy's time of the shipped setting over the measured
    one's, divided by the cost model's own ratio for the new tile (its programs, waves and longest
    program, the tag priced at 1), geometric mean over PRICE_AT's points, on the H200."""
    import math

    am = load_model()
    prices = sys.modules["attention_cost.prices"]
    out = {}
    for tag, (config, over) in SHIPPED.items():
        c0 = CONFIGS[config]
        logs = []
        for shape, T, B in PRICE_AT[c0[5]]:
            H, Hkv, D = SHAPE_HEADS[shape]
            rec = {"shape": shape, "T": T, "B": B, "H": H, "Hkv": Hkv, "D": D}
            p = {"T": T, "BH": B * Hkv, "dram": _model_kernels(am, rec, {})[c0[1]].dram, "gpu": "H200"}
            proxy = (
                proxy_ms(p, sass[_key(config, over, c0[4], c0[5])], f)[0]
                / proxy_ms(p, sass[_key(config, {}, c0[4], c0[5])], f)[0]
            )
            saved = prices.CONFIG_FACTOR.get(tag)
            prices.CONFIG_FACTOR[tag] = 1.0
            # the tiles' prices before any run measured them (H100C_COST prices them since 2026-11-26c)
            measured = dict(prices.H100C_COST)
            prices.H100C_COST.clear()
            try:
                gpu = am.GPUS["H200"]
                # the tile SHIPPED names (the dQ at the 1 stage the proxy priced; the 2 stages shipped
                # since the H100 of 2026-11-26c are its measured tag @s2_d128 on top)
                new = _model_kernels(am, rec, {"cmp_dq_stages2": False})[c0[1]].time(gpu)
                old = _model_kernels(am, rec, {"flash_tiles": False})[c0[1]].time(gpu)
            finally:
                prices.H100C_COST.update(measured)
                if saved is None:
                    del prices.CONFIG_FACTOR[tag]
                else:
                    prices.CONFIG_FACTOR[tag] = saved
            logs.append(math.log(proxy / (new / old)))
        out[tag] = math.exp(sum(logs) / len(logs))
    return out


GRID = [(G, D) for G in (1, 2, 5, 6, 8, 16) for D in (64, 96, 128)]  # gpucheck's grid, G 5 and 8 too


def spill_grid(arch: int = 90) -> list[dict]:
    """The compressed dQ and dK/dV as compressed.py's `_config` ships them (no override) at every
    GRID point on sm_`arch`, bf16: registers, spilled bytes, shared memory, the tile (the installed
    triton: run it with PYTHONPATH=<triton 3.6> and without)."""
    import triton

    from nsa.attention import gpucheck
    from nsa.attention.triton import compressed as cmp
    from nsa.attention.triton.spec import GpuShape

    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-flash-proxy-"))
    rows = []
    for G, D in GRID:
        shape = GpuShape("grid", head_dim=D, group=G, block_len=32, block_stride=16, sel_block=64, n_sel=16,
                         window=512, dtype="bf16")  # fmt: skip
        for spec in cmp.gpucheck_specs(shape, arch):
            if spec.name not in ("compressed_bwd_dq", "compressed_bwd_dkv"):
                continue
            k, rep = gpucheck.compile_spec(spec, arch)
            c = spec.constexprs
            rows.append({"spill_grid": spec.name, "G": G, "D": D, "arch": arch, "triton": triton.__version__,
                         "rows": c["BT"] * c["GP"], "keys": c["BN"], "warps": spec.num_warps,
                         "stages": spec.num_stages, "registers": rep["registers"],
                         "spill": rep["spill_stores"] + rep["spill_loads"],
                         "smem": int(k.metadata.shared) + rep["static_smem"]})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", action="store_true", help="price CANDIDATES (compiles the unrecorded)")
    ap.add_argument("--triton", default="3.6.0", help="whose recorded SASS --candidates prices (3.6.0)")
    ap.add_argument("--factors", action="store_true", help="SHIPPED's CONFIG_FACTOR values")
    ap.add_argument(
        "--spill-grid", action="store_true", help="compile the shipped dQ / dK/dV over GRID, record"
    )
    ap.add_argument("--arch", type=int, default=90, choices=(80, 90))
    args = ap.parse_args(argv)
    if not (args.candidates or args.factors or args.spill_grid):
        ap.error("one of --candidates, --factors, --spill-grid")
    record = fp.load_record()
    sass = record["sass"]
    if args.spill_grid:
        rows = spill_grid(args.arch)
        for r in rows:
            print(json.dumps(r), flush=True)
        done = {(r["triton"], r["arch"]) for r in rows}
        record["spill_grid"] = [
            r for r in record["spill_grid"] if (r["triton"], r["arch"]) not in done
        ] + rows
        fp.save_record(record)
        return 0
    points = fp.with_keys(fp.measured_points())
    f = fp.fit(points, sass)
    if args.factors:
        factors = config_factors(sass, f)
        print(json.dumps({"config_factor": {k: round(v, 3) for k, v in factors.items()}}), flush=True)
        return 0
    import triton

    want = [*CANDIDATES, *((c, {}) for c, _ in CANDIDATES)]
    missing = [
        (c, o) for c, o in want if _key(c, o, CONFIGS[c][4], CONFIGS[c][5], 90, args.triton) not in sass
    ]
    if missing and triton.__version__ != args.triton:
        ap.error(
            f"--triton {args.triton}: {len(missing)} settings unrecorded; run with that triton installed"
        )
    for c, o in dict.fromkeys((c, json.dumps(o, sort_keys=True)) for c, o in missing):
        rec = fp.compile_config(c, json.loads(o))
        sass[_key(c, json.loads(o), rec["G"], rec["D"], 90, rec["triton"])] = rec
    if missing:
        fp.save_record(record)
    dom = domain(sass)
    for config, over in CANDIDATES:
        for r in price(config, over, sass, f, dom, args.triton):
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
