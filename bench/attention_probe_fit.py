"""Reads the cost model's launch-setting prices from a bench/kernel_probe.py run (bench/attention_fit.py
`--probe` prints them): the selection's warps factors (SEL_WARPS), the launch-setting factors
(CONFIG_FACTOR) and, for the selected op under the key-major switches (`fwd_keys` / `bwd_keys`), the
model's times beside the probe's and the keys kernels' efficiencies (KEYS_COST) that reproduce them.

Owns the probe side of the fit: each function solves the model's price that makes its time (or its
variant / base ratio) the probe's, restores the stored prices, and returns what it found; storing
a price is a commit. It needs no GPU; it asserts nothing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_model

m = load_model(Path(__file__).resolve().with_name("attention_model.py"))


def warps_factors(path: str) -> dict[int, dict]:
    """The selection kernel's time at each warp count over its time at 4 warps, per probed shape and
    their geometric mean (bench/kernel_probe.py's jsonl: `select` variants). The probe's default is
    its base build's (RUN_BUILDS by file name; the after-run probe's: 4 warps, the final one's: 2,
    whose ratios are taken to 4 warps by SEL_WARPS[2])."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    build = m.RUN_BUILDS.get(Path(path).name, {})
    sel = [r for r in rows if r.get("variant", {}).get("kernel") == "select"]
    base = {(r["shape"], r["T"]): r["ms"] for r in sel if set(r["variant"]) == {"kernel"}}
    out: dict[int, dict] = {}
    for r in sel:
        if set(r["variant"]) == {"kernel", "warps_sel"} and (r["shape"], r["T"]) in base:
            s = m.SHAPES[r["shape"]]
            w0 = (
                build.get("warps_sel")
                or m.shipped_launch(s, 90, build.get("before_ce226a4", False))["warps_sel"]
            )
            ratios = out.setdefault(r["variant"]["warps_sel"], {"ratios": {}})["ratios"]
            ratios[f"{r['shape']} T{r['T']}"] = round(
                r["ms"] / base[(r["shape"], r["T"])] * m.SEL_WARPS[w0], 3
            )
    for f in out.values():
        vals = list(f["ratios"].values())
        f["mean"] = round(math.prod(vals) ** (1 / len(vals)), 3)
    return out


# Probe variants that price a launch-setting tag (CONFIG_FACTOR): (probe, variant key, value, the
# tag, the probe's time it is read from, the model kernels that time covers). In this order: the
# dQ's token-tile factor is read from fwd+bwd with the forward's just found.
_SEL_FWD = ("sel_forced_fwd", "sel_fwd")
_SEL_ALL = (*_SEL_FWD, "sel_forced_dq", "sel_bwd_dq", "sel_reverse_index", "sel_bwd_dkdv", "sel_bwd_reduce")
PROBE_TAGS: list[tuple] = [
    ("cmp_fwd", "BTF", 2, "cmp_sel@bt2", "ms", ("cmp_select",)),
    ("cmp_bwd", "warps_dkv", 4, "cmp_dkv@w4", "ms", ("cmp_bwd_dq", "cmp_bwd_dkv")),
    ("selected", "TP", "x4", "tok_fwd@tp4", "fwd_ms", _SEL_FWD),
    ("selected", "TP", "x4", "tok_dq@tp4", "fwd_bwd_ms", _SEL_ALL),
    ("selected", "warps_tok", 2, "tok_fwd@w2", "fwd_ms", _SEL_FWD),
]


def _variant_flags(key: str, value, s: m.Shape) -> dict:
    if key == "BTF":
        return {"bt_sel": value}
    if key == "warps_dkv":
        return {"warps_cmp_dkv": value}
    if key == "TP":
        return {"tp": m._tokens_per_tile(s.G) * int(str(value).lstrip("x"))}
    return {key: value}


def _tags(kernels: list[m.Kernel]) -> set[str]:
    out = set()
    for k in kernels:
        base, _, tags = m.kind_parts(k.kind)
        out |= {f"{base}@{t}" for t in tags}
    return out


def config_factors(path: str, gpu_name: str = "H200") -> dict[str, dict]:
    """Each PROBE_TAGS factor from a bench/kernel_probe.py jsonl: per probed point where the code ships
    the setting, the factor f with which the model's time of the probed kernels at the variant over
    its time at the probe's base build (RUN_BUILDS by file name) is the measured ratio (bisection);
    their geometric mean. The model's structural change (programs, steps) stays in the model."""
    gpu = m.GPUS[gpu_name]
    build = m.RUN_BUILDS.get(Path(path).name, {})
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    saved = dict(m.CONFIG_FACTOR)
    out: dict[str, dict] = {}
    try:
        for probe, key, value, tag, field, names in PROBE_TAGS:
            ratios = {}
            for r in rows:
                v = r.get("variant", {})
                if r.get("probe") != probe or v.get(key) != value:
                    continue
                rest = {k: x for k, x in v.items() if k != key}
                base = next((b for b in rows if b.get("probe") == probe and b.get("variant") == rest
                             and (b["shape"], b["T"], b["B"]) == (r["shape"], r["T"], r["B"])), None)  # fmt: skip
                s0 = m.SHAPES[r["shape"]]
                s = m.Shape(s0.name, r["B"], s0.H, s0.Hkv, s0.D)
                flags = {**build, **_variant_flags(key, value, s)}
                var_ks = [k for k in m.ours(r["T"], s, cc=gpu.cc, **flags) if k.name in names]
                # ce226a4's rules (4x tiles at G 5-8, the selected branch query-major)
                x4 = {f: (v(s) if callable(v) else v) for f, v in m.WHAT_IF["token_tiles_x4"].items()}
                x4.update(select_v0=True, before_2930e5c=True)  # the selection kernel ce226a4 had
                if (
                    base is None
                    or tag not in _tags(var_ks)
                    or tag not in _tags(m.ours(r["T"], s, cc=gpu.cc, **x4))
                ):
                    continue  # no base row, or a setting ce226a4 did not ship at this shape
                t0 = sum(k.time(gpu) for k in m.ours(r["T"], s, cc=gpu.cc, **build) if k.name in names)
                want = r[field] / base[field]
                lo, hi = 0.01, 10.0
                for _ in range(60):
                    m.CONFIG_FACTOR[tag] = mid = math.sqrt(lo * hi)
                    lo, hi = (mid, hi) if sum(k.time(gpu) for k in var_ks) / t0 < want else (lo, mid)
                ratios[f"{r['shape']} T{r['T']}"] = round(math.sqrt(lo * hi), 3)
            if ratios:
                mean = math.prod(ratios.values()) ** (1 / len(ratios))
                out[tag] = {"factors": ratios, "mean": round(mean, 3)}
                m.CONFIG_FACTOR[tag] = mean  # the next tags' solves see it
    finally:
        m.CONFIG_FACTOR.clear()
        m.CONFIG_FACTOR.update(saved)
    return out


def _selected_probe(path: str) -> tuple[dict, list[dict]]:
    """The probe's base build (RUN_BUILDS by file name; none: what the code ships) and its rows of the
    selected op under the key-major switches and the dQ partials' width alone (bench/kernel_probe.py
    SEL_VARIANTS: {}, fwd_keys, bwd_keys, pdq_bits), each with the model's flags for it."""
    build = m.RUN_BUILDS.get(Path(path).name, {})
    out = []
    for line in Path(path).read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        v = r.get("variant", {})
        if r.get("probe") == "selected" and "fwd_ms" in r and set(v) <= {"fwd_keys", "bwd_keys", "pdq_bits"}:
            s0 = m.SHAPES[r["shape"]]
            out.append({**r, "flags": {**build, **v}, "s": m.Shape(s0.name, r["B"], s0.H, s0.Hkv, s0.D)})
    return build, out


def _sel_ms(r: dict, gpu: m.Gpu, direction: str | None = None) -> float:
    ks = m.ours(r["T"], r["s"], cc=gpu.cc, **r["flags"])
    return sum(k.time(gpu) for k in ks if k.branch == "selected" and direction in (None, k.direction)) * 1e3


def selected_probe_rows(path: str, gpu_name: str = "H200") -> list[dict]:
    """The model's selected-branch time beside a probe's (forward, forward+backward) for its rows under
    the key-major switches: the query-major and key-major paths as the model prices them."""
    gpu = m.GPUS[gpu_name]
    rows = []
    for r in _selected_probe(path)[1]:
        fwd, both = _sel_ms(r, gpu, "fwd"), _sel_ms(r, gpu)
        rows.append({
            "probe_check": "selected", "shape": r["shape"], "T": r["T"], "B": r["B"], "variant": r["variant"],
            "fwd_ms": r["fwd_ms"], "model_fwd_ms": round(fwd, 3),
            "fwd_bwd_ms": r["fwd_bwd_ms"], "model_fwd_bwd_ms": round(both, 3),
        })  # fmt: skip
    return rows


def keys_effs(path: str, gpu_name: str = "H200") -> dict[str, dict]:
    """The key-major kernels' efficiencies (the "eff" of the price each kernel takes: KEYS_COST, or
    H100C_COST's where a measured launch configuration covers its kind) that make the model's selected
    forward, then forward+backward, the probe's, per probed point where the model runs that kernel
    (bisection, the partials' DRAM term kept); their geometric mean. A first price from a probe alone;
    a suite run (per-kernel times) re-fits them with `fit`."""
    gpu = m.GPUS[gpu_name]
    rows = _selected_probe(path)[1]
    tables = (m.KEYS_COST, m.H100C_COST)
    saved = [{k: dict(v) for k, v in t.items()} for t in tables]
    out: dict[str, dict] = {}
    try:
        for kind, field, direction in (
            ("sel_keys_fwd", "fwd_ms", "fwd"),
            ("sel_keys_bwd", "fwd_bwd_ms", None),
        ):
            effs, priced = {}, []
            for r in rows:
                ks = [
                    k for k in m.ours(r["T"], r["s"], cc=gpu.cc, **r["flags"]) if k.kind.split("@")[0] == kind
                ]
                if not ks:
                    continue
                cfg = m.measured_config(ks[0].kind)
                price = m.H100C_COST[cfg] if cfg else m.KEYS_COST[kind]
                priced.append(price)
                lo, hi = 0.005, 5.0
                for _ in range(60):
                    price["eff"] = mid = math.sqrt(lo * hi)
                    lo, hi = (lo, mid) if _sel_ms(r, gpu, direction) < r[field] else (mid, hi)
                key = f"{r['shape']} T{r['T']} B{r['B']} {json.dumps(r['variant'], sort_keys=True)}"
                effs[key] = round(math.sqrt(lo * hi), 4)
            if effs:
                mean = math.prod(effs.values()) ** (1 / len(effs))
                out[kind] = {"effs": effs, "mean": round(mean, 4)}
                for price in priced:  # the backward's solve sees the forward's price
                    price["eff"] = mean
    finally:
        for t, s in zip(tables, saved):
            for k, v in s.items():
                t[k].clear()
                t[k].update(v)
    return out
