"""Fits the cost model's prices of our kernel kinds (bench/attention_model.py, H100_COST, H200_COST,
H200_FINAL_COST, KEYS_COST and H100C_COST, the latter per launch configuration: a kind's tags a run
measured first, FIT_TERMS names them) to a GPU suite's speed records, reads its launch-setting factors
(CONFIG_FACTOR) from a kernel probe, and checks the model against them.

Owns the re-fit of issue 20, item 5: for each kernel family the suite profiles (modelcheck.FAMILIES),
the model's kernels of that family at each record's shape and T give the counts a price applies to
(issued MMA FLOPs, programs, loop steps, token-steps, gathered bytes: Kernel.work); a non-negative
least-squares fit in relative error gives each kind the few terms FIT_TERMS names (1 / efficiency,
SM cycles per count; a term of a kind's price that FIT_TERMS does not name stays as stored and its
time is taken off the measured one first: the key-major kernels' partials' DRAM time). SDPA flash (the baseline) is fitted the same way from its forward and
forward+backward times. A committed run is modelled with the kernels it measured (the model's
RUN_BUILDS, by file name); any other file with the kernels the code ships. The selection kernel's
cycles are fitted as its 4-warp price (each record's counts scaled by SEL_WARPS of its warps), and
any kind with launch-setting tags likewise at its untagged price (scaled by CONFIG_FACTOR);
`--probe` (bench/attention_probe_fit.py) prints the warps factors and the launch-setting factors
(`config_factors`: per probed point, the factor that makes the model's variant / base ratio the
measured one) from a bench/kernel_probe.py run, and for its selected rows under the key-major
switches (`fwd_keys`, `bwd_keys`) the model's times beside the probe's and the keys kernels'
efficiencies that reproduce them (`keys_effs`). It needs no GPU; it asserts nothing.

Prints JSON lines: one "fit" row per kind (the terms, as the COST tables hold them: `eff` and
cycles), then one "check" row per (record, family) with the measured time and the time the model
as it stands predicts; with --probe, one "warps_factor" row per warp count, one "config_factor"
row per launch-setting tag the probe prices, one "probe_check" row per selected probe row under the
key-major switches and one "keys_eff" row per key-major kernel kind.

  .venv/bin/python bench/attention_fit.py bench/gpu/2026-11-26-h100-speed.json
  .venv/bin/python bench/attention_fit.py bench/gpu/2026-11-26-h200-speed-after.json \
      --probe bench/gpu/2026-11-26-h200-probe-after.jsonl
  .venv/bin/python bench/attention_fit.py bench/gpu/2026-11-26-h200-speed-final.json \
      --probe bench/gpu/2026-11-26-h200-probe-final.jsonl   # the launch settings of ce226a4
  .venv/bin/python bench/attention_fit.py bench/gpu/2026-11-26c-h100-speed.json   # H100C_COST
  .venv/bin/python bench/attention_fit.py NEW-suite.json --families _cmp_select   # one family only
  .venv/bin/python bench/attention_fit.py NEW-suite.json --probe NEW-probe.jsonl  # fwd_keys / bwd_keys

After a kernel is rewritten, mirror its new structure in the model (`ours`, its work counts), run
the suite, run this on the new suite.json, and copy the "fit" rows of its kinds into the COST table
of that run's GPU (docs/attention.md "Time budget").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_model

m = load_model(Path(__file__).resolve().with_name("attention_model.py"))


def _probe_module():
    """bench/attention_probe_fit.py (the probe's prices), loaded by path like the model."""
    if "attention_probe_fit" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "attention_probe_fit", Path(__file__).resolve().with_name("attention_probe_fit.py")
        )
        sys.modules["attention_probe_fit"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["attention_probe_fit"])
    return sys.modules["attention_probe_fit"]


_probe = _probe_module()
# the probe's side, re-exported: `attention_fit.X` stays the one interface of the scripts and tests
PROBE_TAGS, _SEL_FWD, _SEL_ALL = _probe.PROBE_TAGS, _probe._SEL_FWD, _probe._SEL_ALL
warps_factors, config_factors = _probe.warps_factors, _probe.config_factors
selected_probe_rows, keys_effs = _probe.selected_probe_rows, _probe.keys_effs

# What each kind's price is made of (the physical reason is in docs/attention.md, "Time budget"):
# "eff" a fraction of the tensor-core peak; the others SM cycles per count of Kernel.work.
FIT_TERMS: dict[str, tuple[str, ...]] = {
    "cmp_fused": ("programs", "steps"),  # before 45bc233: per tile; per key step of either pass
    "cmp_topn": ("token_steps",),  # its rank merge, per token per pass-2 step
    "cmp_attn@64": ("eff", "programs"),  # the flash attention _cmp_fwd since 45bc233
    "cmp_attn@128": ("eff", "programs"),
    "cmp_sel": ("programs", "token_steps"),  # _cmp_select: per program; per token per key tile
    "cmp_dq@64": ("eff", "programs"),
    "cmp_dq@128": ("eff", "programs"),
    "cmp_dkv": ("eff",),
    "forced_fwd": ("eff",),
    "forced_dq": ("eff",),
    "tok_fwd": ("gather_bytes",),
    "tok_dq": ("gather_bytes",),
    "sel_dkdv": ("eff",),  # 4 warps (since 4e22175)
    "sel_dkdv_w8": ("eff",),  # 8 warps (the first H100 run)
    "win_fwd@64": ("eff",),
    "win_fwd@128": ("eff",),
    "win_dq": ("eff",),
    "win_dkdv": ("eff",),
    "sdpa_fwd": ("eff", "programs"),
    "sdpa_bwd": ("eff", "programs"),
    "sel_reduce": ("dram", "serial_bytes"),  # DRAM time x; the longest program's bytes (its tail)
    # The key-major forward and fused backward: their MMAs' efficiency. Their partials' DRAM time
    # (KEYS_COST "dram") stays fixed: it grows with the same (pair, head) rows as the MMAs, so a fit
    # of both terms could not tell them apart; a term a kind's price has but FIT_TERMS does not name
    # is subtracted from the measured time before the fit.
    "sel_keys_fwd": ("eff",),
    "sel_keys_bwd": ("eff",),
    "cmp_sel32": ("programs", "token_steps"),  # the int32 selection merge (since 2026-11-26b)
    "sel_fwd_merge": ("dram",),  # the key-major path's merges: DRAM time x
    "sel_dq_merge": ("dram",),
    "sel_index": ("dram",),  # the key-major forward's sort-key kernel
    # the launch configurations the 2026-11-26c H100 run measured first (H100C_COST)
    "cmp_sel32@cut@shm@split": ("programs", "token_steps"),
    "cmp_dq@128@wg_d128": ("eff", "programs"),
    "cmp_dkv@bn64": ("eff", "programs"),  # with a program's cost: the 16 query parts' prologues
    "cmp_dkv@bn64_d128": ("eff", "programs"),
    "tok_fwd@pipe": ("gather_bytes",),
    "tok_dq@pipe": ("gather_bytes",),
    "sel_fwd_merge@tiles": ("dram",),
    "win_dq@128@wg_d128": ("eff",),
    "win_dkdv@64@w4": ("eff",),
    "sel_keys_bwd@div32": ("eff",),  # its partials' DRAM time kept, as sel_keys_bwd's
}


def fit_key(kind: str) -> str:
    """The FIT_TERMS entry a kernel kind is priced by (a measured launch configuration's, H100C_COST;
    else a head_dim-specific one, else the shared one; the other launch-setting tags dropped: a
    record's counts are scaled by their factor instead)."""
    cfg = m.measured_config(kind)
    if cfg is not None:
        return cfg
    base, key, _ = m.kind_parts(kind)
    return key if key in FIT_TERMS else base


def family_of(kernel_name: str, flags: dict | None = None) -> str | None:
    """The profiler family of a model kernel in a core with these flags (modelcheck.core_flags: on
    the gate fold's path gate_mix_bwd is `_gate_fold_bwd`)."""
    from nsa.attention.gpusuite import modelcheck

    return modelcheck.families_of(flags or {}).get(kernel_name)


class BadInput(ValueError):
    """A suite.json this script cannot use (the message names the file, the key and the fix)."""


def records(paths: list[str]) -> list[dict]:
    """The speed records with a kernel profile of every file (scripts/gpu-suite.sh's suite.json),
    each with `build`: the model's flags for the kernels that file measured (RUN_BUILDS)."""
    from nsa.attention.gpusuite import modelcheck

    out = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
        except (OSError, ValueError) as e:
            raise BadInput(
                f"{p}: not a readable JSON file ({e}); pass a suite.json (bench/gpu/*.json)"
            ) from e
        speed = (doc.get("sections") or {}).get("speed") if isinstance(doc, dict) else None
        if not isinstance(speed, dict) or not isinstance(speed.get("records"), list):
            raise BadInput(
                f"{p}: no sections.speed.records; pass the suite.json of a run with the speed section"
            )
        build = m.RUN_BUILDS.get(Path(p).name, {})
        recs = [
            {**r, "build": build} for r in speed["records"] if "nsa_kernels" in r and "sdpa_flash_fwd_ms" in r
        ]
        for r in recs:  # the core's path (`nsa_core`) must be one the model prices
            try:
                modelcheck.core_flags(r, build)
            except ValueError as e:
                raise BadInput(f"{p}: {r['shape']} T{r['T']}: {e}") from e
        out += recs
    if not out:
        raise BadInput(f"{', '.join(paths)}: no speed record with nsa_kernels and sdpa_flash_fwd_ms to fit")
    return out


def measured_families(rec: dict) -> dict[str, float]:
    """Measured ms per family (profiler rows summed by the longest matching prefix, as modelcheck)."""
    from nsa.attention.gpusuite import modelcheck

    out = modelcheck.measured_families(rec)
    out["sdpa_fwd"] = rec["sdpa_flash_fwd_ms"]
    out["sdpa_bwd"] = rec["sdpa_flash_fwd_bwd_ms"] - rec["sdpa_flash_fwd_ms"]
    return out


def gpu_of(path: str) -> str:
    """The model's GPU entry for the GPU a suite.json ran on (its env section)."""
    from nsa.attention.gpusuite import modelcheck

    name = ((json.loads(Path(path).read_text()).get("sections") or {}).get("env") or {}).get("gpu", "")
    key = modelcheck.gpu_key(name, m)
    if key is None:
        raise BadInput(f"{path}: sections.env.gpu {name!r} is not a GPU the model knows; pass --gpu")
    return key


def shape_of(rec: dict, geometry: dict | None = None) -> m.Shape:
    g = geometry or {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
    return m.Shape(rec["shape"], rec["B"], rec["H"], rec["Hkv"], rec["D"], g["block_len"],
                   g["block_stride"], g["sel_block"], g["n_sel"], g["window"])  # fmt: skip


def model_families(rec: dict, gpu: m.Gpu) -> dict[str, list[m.Kernel]]:
    """The model's kernels of each measured family for one record (SDPA as two pseudo-families), of
    the path its core ran (modelcheck.core_flags: its `nsa_core`, else its build's, as the suite's
    check prices it; q's gradient summed by autograd, a kernel of no family)."""
    from nsa.attention.gpusuite import modelcheck

    s = shape_of(rec)
    flags = modelcheck.core_flags(rec, rec.get("build"))
    out: dict[str, list[m.Kernel]] = {}
    for k in m.ours(rec["T"], s, cc=gpu.cc, **flags):
        fam = family_of(k.name, flags)
        if fam:
            out.setdefault(fam, []).append(k)
    fa = m.flash2(rec["T"], s)
    out["sdpa_fwd"], out["sdpa_bwd"] = [fa[0]], [fa[1]]
    return out


def _feature(k: m.Kernel, term: str, gpu: m.Gpu) -> float:
    f = m.config_price(k.kind)[1]  # the tags its price leaves to CONFIG_FACTOR
    if term == "eff":
        return f * k.flops / gpu.peak
    if term == "dram":  # kind_cost scales a fitted DRAM factor by the tags too
        return f * k.dram / gpu.dram
    if term.startswith("serial_"):
        return k.work.get(term, 0.0) / gpu.clock
    return k.work.get(term, 0.0) * f / (gpu.sms * gpu.clock)


def _fixed_time(k: m.Kernel, gpu: m.Gpu) -> float:
    """The time of the terms of k's price that FIT_TERMS does not fit (0 for most kinds)."""
    cost = m.config_price(k.kind)[0]  # the price before its tags: _feature applies their factor
    fitted = FIT_TERMS.get(fit_key(k.kind), ())
    return sum(_feature(k, t, gpu) * (1 / c if t == "eff" else c) for t, c in cost.items() if t not in fitted)


def _nnls(rows: list[list[float]], y: list[float]) -> list[float]:
    """min sum (A x - y)^2, x >= 0, for a handful of columns: normal equations on the active set."""
    n = len(rows[0])
    active = list(range(n))
    while True:
        x = [0.0] * n
        if active:
            a = [[sum(r[i] * r[j] for r in rows) for j in active] for i in active]
            b = [sum(r[i] * yy for r, yy in zip(rows, y)) for i in active]
            sol = _solve(a, b)
            for i, v in zip(active, sol):
                x[i] = v
        neg = [i for i in active if x[i] < 0]
        if not neg:
            return x
        active.remove(min(neg, key=lambda i: x[i]))


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    n = len(b)
    M = [[*row, bb] for row, bb in zip(a, b)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(M[r][c]))
        M[c], M[p] = M[p], M[c]
        if M[c][c] == 0:
            continue
        for r in range(n):
            if r != c:
                f = M[r][c] / M[c][c]
                M[r] = [x - f * y for x, y in zip(M[r], M[c])]
    return [M[i][n] / M[i][i] if M[i][i] else 0.0 for i in range(n)]


def fit(recs: list[dict], gpu_name: str = "H100", families: list[str] | None = None) -> dict[str, dict]:
    """{kind: {"eff": ..., cycles terms ...}} fitted per family on `recs` (relative least squares)."""
    gpu = m.GPUS[gpu_name]
    meas = [measured_families(r) for r in recs]
    mods = [model_families(r, gpu) for r in recs]
    fams = families or sorted({f for mm in mods for f in mm})
    out: dict[str, dict] = {}
    for fam in fams:
        cols: list[tuple[str, str]] = []
        for mm in mods:
            for k in mm.get(fam, []):
                key = fit_key(k.kind)
                cols += [(key, t) for t in FIT_TERMS.get(key, ()) if (key, t) not in cols]
        if not cols:
            continue
        A, y = [], []
        for ms, mm in zip(meas, mods):
            if fam not in ms or fam not in mm:
                continue
            row = [0.0] * len(cols)
            for k in mm[fam]:
                key = fit_key(k.kind)
                for i, (ck, t) in enumerate(cols):
                    if ck == key:
                        row[i] += _feature(k, t, gpu)
            target = ms[fam] * 1e-3 - sum(k.launches * m.LAUNCH_S + _fixed_time(k, gpu) for k in mm[fam])
            A.append([v / (ms[fam] * 1e-3) for v in row])  # relative error: each row scaled by 1/measured
            y.append(target / (ms[fam] * 1e-3))
        if not A:  # modelled but not in any run's kernel table (its launch did not happen there)
            continue
        x = _nnls(A, y)
        for (key, t), v in zip(cols, x):
            out.setdefault(key, {})[t] = (1 / v if v else None) if t == "eff" else v
    return out


def check_rows(recs: list[dict], gpu_name: str = "H100") -> list[dict]:
    """Measured vs the model as it stands (the COST tables), per record and family."""
    gpu = m.GPUS[gpu_name]
    rows = []
    for r in recs:
        meas, mods = measured_families(r), model_families(r, gpu)
        for fam in sorted(meas):
            if fam not in mods:
                continue
            pred = sum(k.time(gpu) for k in mods[fam]) * 1e3
            rows.append({
                "check": fam, "shape": r["shape"], "T": r["T"], "measured_ms": round(meas[fam], 3),
                "model_ms": round(pred, 3), "measured_over_model": round(meas[fam] / pred, 3),
            })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite_json", nargs="+", help="suite.json files with a speed section (bench/gpu/)")
    ap.add_argument("--families", nargs="+", help="fit only these families (e.g. _cmp_fwd)")
    ap.add_argument("--gpu", choices=sorted(m.GPUS), help="the model's GPU (default: the first file's env)")
    ap.add_argument(
        "--probe",
        help="a bench/kernel_probe.py jsonl: print the selection's warps factors, the launch-setting factors "
        "and the key-major kernels' prices from it",
    )
    args = ap.parse_args()
    try:
        recs = records(args.suite_json)
        args.gpu = args.gpu or gpu_of(args.suite_json[0])
    except BadInput as e:
        print(f"bench/attention_fit.py: {e}", file=sys.stderr)
        sys.exit(2)
    if args.probe:
        for warps, f in sorted(warps_factors(args.probe).items()):
            print(json.dumps({"warps_factor": warps, **f, "stored": m.SEL_WARPS.get(warps)}))
        for tag, f in config_factors(args.probe, args.gpu).items():
            print(json.dumps({"config_factor": tag, **f, "stored": m.CONFIG_FACTOR.get(tag)}))
        for row in selected_probe_rows(args.probe, args.gpu):
            print(json.dumps(row))
        for kind, f in keys_effs(args.probe, args.gpu).items():
            print(json.dumps({"keys_eff": kind, **f, "stored": m.KEYS_COST[kind]["eff"]}))
    for kind, terms in sorted(fit(recs, args.gpu, args.families).items()):
        print(json.dumps({"fit": kind, **{t: (round(v, 4) if v else v) for t, v in terms.items()}}))
    for row in check_rows(recs, args.gpu):
        if not args.families or row["check"] in args.families:
            print(json.dumps(row))


if __name__ == "__main__":
    main()
