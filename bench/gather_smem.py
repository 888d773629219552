"""Where the query-major gather loops' shared-memory traffic goes, and what the calibrated gather proxy
says of the changes that would cut it (issue 20, tokshm; no GPU).

Owns the breakdown behind bench/RESULTS.md "tokshm": for the token tiles (`_sel_fwd_tok_kernel` /
`_sel_bwd_dq_tok_kernel`) and the forced tiles (`_sel_forced_fwd_kernel` / `_sel_forced_dq_kernel`)
as selected._config ships them on sm_90 at the paper shape (G 16, D 128), the shared-memory bytes
one warp moves in a key step by role (bench/gather_sass.py `smem_roles`: the K/V stage's writes, K / V
read as MMA operands, the loop-invariant Q / dO read again every step, P / dS layout conversions, the
row statistics), and each kernel's proxy price (bench/gather_proxy.py, its fitted constants) with the
part its shared-memory term takes. Then CANDIDATES, the settings that change those bytes with the
kernels' code unchanged (so bitwise the same outputs under the interpreter), each compiled and priced
against the shipped build at 8k and 64k: its registers, spill, programs an SM, bytes a program-step,
whether the proxy's measured configurations span it (`domain`) and whether it passes the bar
(SHIP_GAIN faster at both T, no spill, in the domain).

  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/gather_smem.py [--record]  # the GPU runs' triton

Compiles 4 + len(CANDIDATES) kernels (a few seconds each). Prints one JSON object per line (`--record`
also writes them to bench/gather_smem.json, which tests/unit/attention/test_gather_proxy.py holds
selected._config to); asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
gp = load_by_path("gather_proxy", HERE / "gather_proxy.py")
gs = gp.gather_sass

RECORD = HERE / "gather_smem.json"  # the last --record run's rows (triton 3.6, sm_90): what the tests read
# The bar a change must pass to ship (issue 20, tokshm): >= 8 % faster for the kernel at 8k and 64k.
SHIP_GAIN = 0.08
# Settings the proxy's measured points span, per kernel (bench/RESULTS.md "tokgather"'s table): the
# token tiles at 2-8 warps, 1-8 tokens; the forced tiles only as shipped (64 rows, 4 warps).
MEASURED = {
    "tok_fwd": {"warps_tok": (2, 4, 8), "TP": (1, 2, 4, 8)},
    "tok_dq": {"warps_q": (2, 4, 8), "TP": (1, 2, 4, 8)},
    "forced_fwd": {"warps_f": (4,), "BM": (64,), "stages_f": (2,)},
    "forced_dq": {"warps_f": (4,), "BM": (64,), "stages_fdq": (1,)},
}
# Over the shipped build: fewer warps a token tile (each warp then reads the whole K/V and Q, but no
# P / dS conversion and no cross-warp row statistics), two tokens a tile (32 rows: the warps split the
# rows, not the keys), the forced tiles at 2 / 8 warps, 128 rows a program (the K/V stage written
# once for twice the rows) and the forced dQ's copies asynchronous.
CANDIDATES = [
    ("tok_fwd", {"warps_tok": 1}),
    ("tok_dq", {"warps_q": 1}),
    ("tok_fwd", {"TP": 2}),
    ("tok_dq", {"TP": 2}),
    ("forced_fwd", {"warps_f": 2}),
    ("forced_fwd", {"warps_f": 8}),
    ("forced_fwd", {"BM": 128}),
    ("forced_fwd", {"BM": 128, "warps_f": 8}),
    ("forced_dq", {"warps_f": 8}),
    ("forced_dq", {"BM": 128}),
    ("forced_dq", {"BM": 128, "warps_f": 8}),
    ("forced_dq", {"stages_fdq": 2}),
]


def shipped(kernel: str, shape: str = "paper", arch: int = 90) -> dict:
    """The shipped build's settings of `kernel` over the measured loop's (gather_sass.run_base)."""
    G, D = gs.SHAPES[shape]
    return {k: v for k, v in gp.shipped_settings(G, D, arch).items() if k in gp.TOK_KEYS.get(kernel, ())}


def _setting(kernel: str, over: dict) -> dict:
    from nsa.attention.triton import selected as sel

    cfg = {**sel._config(16, 128, 64, arch=90), **over}
    keys = ("TP", gs.KERNELS[kernel][2], gs.KERNELS[kernel][3]) + (
        ("BM",) if kernel.startswith("forced") else ()
    )
    return {k: cfg[k] for k in keys}


def priced(kernel: str, over: dict, shape: str = "paper", arch: int = 90) -> dict:
    """`kernel` compiled under `over` (over the measured loop's settings): its counts, its shared bytes
    a key step by role and its proxy price at gp.PRICE_T (the fitted constants)."""
    c = gp.compile_counts(kernel, shape, over, arch)
    D = gs.SHAPES[shape][1]
    roles = gs.smem_roles(gs.compiled_listing(kernel, shape, over, arch), 2 * 64 * D * 2)
    sass = {gp.key(kernel, shape, over, arch): c}
    pts = [{"kernel": kernel, "shape": shape, "T": T, "B": 1, "over": over} for T in gp.PRICE_T]
    rows = gp.predict(gp.rows_of(pts, sass, arch), gp.FITTED, arch)
    return {"counts": c, "roles": roles, "rows": {r["T"]: r for r in rows}}


def role_row(kernel: str, p: dict) -> dict:
    c, roles, rows = p["counts"], p["roles"], p["rows"]
    total = sum(roles.values())
    return {"smem_roles": kernel, "shape": "paper", "arch": "sm90", "triton": c["triton"],
            "warps": c["warps"], "registers": c["registers"], "bytes_per_warp_step": roles,
            "total_per_warp_step": total, "total_per_program_step": total * c["warps"],
            "share": {k: round(v / total, 3) for k, v in roles.items()},
            "proxy_ms": {T: r["proxy_ms"] for T, r in rows.items()},
            "smem_share_of_price": {T: round(r["parts_ms"]["smem_bytes"] / r["proxy_ms"], 3)
                                    for T, r in rows.items()}}  # fmt: skip


def candidate_row(kernel: str, change: dict, p: dict, base: dict) -> dict:
    c, rows = p["counts"], p["rows"]
    ratio = {T: round(r["proxy_ms"] / base["rows"][T]["proxy_ms"], 3) for T, r in rows.items()}
    setting = _setting(kernel, {**shipped(kernel), **change})
    spanned = all(setting[k] in ok for k, ok in MEASURED[kernel].items() if k in setting)
    domain = (
        "calibrated"
        if spanned and all(r["domain"] == "calibrated" for r in rows.values())
        else "extrapolated"
    )
    per_rows = (
        sum(p["roles"].values()) * c["warps"] / (setting["BM"] if "BM" in setting else 16 * setting["TP"])
    )
    base_rows = sum(base["roles"].values()) * base["counts"]["warps"] / (64 if "BM" in setting else 16)
    return {"candidate": kernel, "change": change, "setting": setting, "registers": c["registers"],
            "spill": c["spill"], "resident": rows[gp.PRICE_T[0]]["resident"],
            "bytes_per_row_step_over_shipped": round(per_rows / base_rows, 3),
            "proxy_ms": {T: r["proxy_ms"] for T, r in rows.items()},
            "parts_ms": {T: r["parts_ms"] for T, r in rows.items()}, "ratio": ratio, "domain": domain,
            "passes": domain == "calibrated" and not c["spill"]
            and all(x <= 1 - SHIP_GAIN for x in ratio.values())}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help=f"also write the rows to {RECORD.name}")
    args = ap.parse_args(argv)
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-gather-smem-"))
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    base = {k: priced(k, shipped(k)) for k in gs.KERNELS}
    out = [role_row(k, p) for k, p in base.items()]
    for kernel, change in CANDIDATES:
        p = priced(kernel, {**shipped(kernel), **change})
        out.append(candidate_row(kernel, change, p, base[kernel]))
    for r in out:
        print(json.dumps(r), flush=True)
    if args.record:
        RECORD.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
