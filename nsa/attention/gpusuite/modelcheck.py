"""The cost model's predictions beside the GPU suite's speed measurements (issue 20, item 5).

Owns `compare(rec, gpu_name, geometry)`: for one record of the speed section (NSA's attention core
and SDPA flash at one shape and T, with the per-kernel profiler table), the times
bench/attention_model.py predicts for the same shape on the same GPU, per kernel family and in
total, with measured / predicted and the families off by more than 30 %. The model lives in
bench/, outside the installed package, so it is loaded from the repository by path (`load_model`,
its one loader: the bench scripts and the tests call it too); a GPU the model has no datasheet for
is reported as such, never guessed. Pure arithmetic on the
record: the same code runs in CI on recorded numbers. The model's Hopper prices of our kernels are
fitted on the committed GPU runs (H100: bench/gpu/2026-11-26-h100-speed.json; the kernels rewritten
since on the H200 run bench/gpu/2026-11-26-h200-speed-after.json, the selected reduction on
bench/gpu/2026-11-26-h200-speed-final.json, the key-major selected kernels and the int32 selection on
bench/gpu/2026-11-26b-h200-speed-keys.json), the launch settings changed after them by factors from
probes and proxies, and those the H100 run bench/gpu/2026-11-26c-h100-speed.json measured first by
its fit (every comparison of the committed runs within 30 % or ABS_FLOOR_MS, but the window dQ at the
paper shape, 64k, of 2026-11-26b's final H200 run, 1.305x), so a later run compares against that fit;
bench/attention_fit.py re-fits them from a new suite.json.
A record is compared with the kernels the code ships (the model's defaults) unless `build` names
other ones (the model's RUN_BUILDS: what each committed run measured), on the path the record's core
ran (`nsa_core`: the gate fold's node or the branches one by one; `core_flags`). FlashAttention-2
here is PyTorch SDPA's flash backend, as the suite measures it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

MODEL_PATH = Path(__file__).resolve().parents[3] / "bench" / "attention_model.py"
MODEL_NAME = "attention_model"  # its name in sys.modules: bench/attention.py imports it so
TOLERANCE = 0.30  # the issue's: a family off by more than this corrects the model (and says why)
# ...unless measured and predicted differ by less than this (ms): the one-program `_sel_fwd_segs`
# took 6 us (M7C) / 10 us (paper) on the 2026-11-26c H100 run against 4 us modelled (a launch), and the
# profiler rows are rounded to 1 us; a few microseconds of a 10-160 ms core are no price to correct.
ABS_FLOOR_MS = 0.01

# Model kernel -> the profiler name prefix of the kernel(s) it stands for, in the suite's attention
# core (compressed + selection, selected, window, gate mix: no RoPE, no compression MLP). Since
# 45bc233 the compressed forward is two kernels, the attention _cmp_fwd and the selection
# _cmp_select; the model's cmp_fwd_topn is the selection inside the fused _cmp_fwd before it (the
# first H100 run); cmp_bwd_dkv includes the partial sum _cmp_bwd_dkv_sum.
FAMILIES = {
    "cmp_fwd": "_cmp_fwd", "cmp_fwd_topn": "_cmp_fwd", "cmp_select": "_cmp_select",
    "cmp_bwd_dq": "_cmp_bwd_dq", "cmp_bwd_dkv": "_cmp_bwd_dkv",
    "sel_fwd": "_sel_fwd", "sel_bwd_dq": "_sel_bwd_dq", "sel_bwd_dkdv": "_sel_bwd_dkdv",
    "sel_bwd_reduce": "_sel_bwd_reduce", "sel_forced_fwd": "_sel_forced_fwd", "sel_forced_dq": "_sel_forced_dq",
    "win_fwd": "_window_fwd", "win_bwd_dq": "_window_bwd_dq", "win_bwd_dkdv": "_window_bwd_dkdv",
    "gate_mix_fwd": "_gate_mix_fwd", "gate_mix_bwd": "_gate_mix_bwd",
    # the key-major selected path (G <= 8: selected.py's fwd_keys / bwd_keys): selected_keys.py's
    # index kernels, forward and merge, selected_keys_bwd.py's delta, fused dK/dV + dQ partials, and
    # dQ merge
    "sel_fwd_index": "_sel_fwd_index", "sel_fwd_segs": "_sel_fwd_segs",
    "sel_fwd_keys": "_sel_fwd_keys", "sel_fwd_merge": "_sel_fwd_merge", "sel_bwd_delta": "_sel_bwd_delta",
    "sel_bwd_keys": "_sel_bwd_keys", "sel_bwd_dq_merge": "_sel_bwd_dq_merge",
    # with fwd_forced_merge the merge's place: one kernel, the model's dense pass and its partial reads
    "sel_fwd_forced_merge": "_sel_fwd_forced_merge", "sel_fwd_forced_merge_reads": "_sel_fwd_forced_merge",
}  # fmt: skip
# The same on the gate fold's path (gated.gated_branches, which the speed core takes as training does
# since the suite's branch of 2026-11-26: gpu.py `_nsa_core`): the model's gate_mix_bwd under
# gate_folded is the fold kernel, fused.py `_gate_fold_bwd` (dy once as dO, dg, the three lse' and,
# with delta_folded, the three deltas); every other kernel keeps its name (the branch backwards handed
# delta are the same jit functions, HAVE_DELTA a constexpr; the key-major delta kernel is not launched,
# and the model drops sel_bwd_delta likewise).
FOLDED_FAMILIES = {**FAMILIES, "gate_mix_bwd": "_gate_fold_bwd"}
# The profiler prefixes of either path (a record's rows are summed by the longest match among them).
PREFIXES = sorted(set(FAMILIES.values()) | set(FOLDED_FAMILIES.values()))
# In the core but not one triton family: the selected branch's reverse index (torch.sort & co.; the
# key-major forward's sort and searchsorted too) and autograd's sum of q's gradient from the three
# branches (two elementwise adds: the core's q is a leaf, `compare` prices it so for every build; on
# either path: the fold's node hands q its three gradients too, 2 aten adds counted on CPU).
OTHER_IN_CORE = ("sel_reverse_index", "sel_fwd_reverse_index", "q_grad_sum")
# The speed core's paths (gpu.py `core_path`, a record's `nsa_core`) as the model's flags: the gates
# folded into the branch backwards' lse or the gate mix's three g * dO copies; the branches' deltas
# written by the fold kernel or formed by each backward from its O.
CORE_PATHS = {
    "branches one by one": {"gate_folded": False, "delta_folded": False},
    "gated_branches": {"gate_folded": True, "delta_folded": False},
    "gated_branches, fold_delta": {"gate_folded": True, "delta_folded": True},
}
# A record without `nsa_core` (every committed run up to 2026-11-26c: the field came after) timed
# the branches one by one, unless its run's build says otherwise.
CORE_BEFORE_THE_FIELD = "branches one by one"


def load_by_path(name: str, path: Path):
    """The Python file `path` as the module `name`, loaded once per process (a second call returns
    the module in sys.modules). By path, never by putting bench/ on sys.path: bench/launcher.py and
    bench/data.py would shadow the project's packages in the importing process. The module is in
    sys.modules while its body runs (dataclasses look it up there); a failed load leaves none."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]  # no half-loaded module for the next caller
        raise
    return mod


def load_model(path: Path = MODEL_PATH):
    """bench/attention_model.py as the module `attention_model`, loaded by path once per process; None
    where `path` is missing (the suite run outside a repository checkout).

    The one loader of the model: the GPU suite, the bench scripts (attention_fit.py,
    attention_probe_fit.py, selected_keys_bwd.py, memory.py: each passes its sibling file) and the
    tests all call it, so they share one module, the one bench/attention.py imports by that name
    from beside it."""
    if MODEL_NAME not in sys.modules and not path.is_file():
        return None
    return load_by_path(MODEL_NAME, path)


def gpu_key(name: str, model) -> str | None:
    """The model's GPU entry for a device name ('NVIDIA H100 80GB HBM3' -> 'H100'); None for a GPU
    the model has no figures for (PCIe and NVL parts have other clocks and bandwidths)."""
    if any(part in name for part in ("PCIe", "NVL")):
        return None
    return next((k for k in model.GPUS if k in name), None)


def _prefix_match(kernel: str, prefix: str, prefixes: list[str]) -> bool:
    # the longest matching prefix wins (_cmp_bwd_dkv_sum belongs to _cmp_bwd_dkv, not to a shorter one)
    best = max((p for p in prefixes if kernel.startswith(p)), key=len, default=None)
    return best == prefix


def core_flags(rec: dict[str, Any], build: dict[str, Any] | None = None) -> dict[str, Any]:
    """The flags of the model's `ours` for the kernels a speed record's core ran: `build` (its run's,
    RUN_BUILDS; None: the shipped kernels) with the core's own path. q is a leaf whatever the path:
    autograd sums its three gradients (in a layer RoPE's backward does since q_grad_fused). The gates
    and deltas: the record's `nsa_core` when it has one, else the build's flags where it names them,
    else the branches one by one. ValueError for an `nsa_core` this module does not know."""
    path = rec.get("nsa_core")
    if path is not None and path not in CORE_PATHS:
        raise ValueError(
            f"nsa_core {path!r} is not a path the model prices (it knows {', '.join(CORE_PATHS)})"
        )
    flags = {**(build or {}), "q_grad_fused": False}
    if path is not None:
        return {**flags, **CORE_PATHS[path]}
    gate = flags.get("gate_folded", CORE_PATHS[CORE_BEFORE_THE_FIELD]["gate_folded"])
    delta = gate and flags.get("delta_folded", CORE_PATHS[CORE_BEFORE_THE_FIELD]["delta_folded"])
    return {**flags, "gate_folded": gate, "delta_folded": delta}  # no delta fold without the gates' (`ours`)


def families_of(flags: dict[str, Any]) -> dict[str, str]:
    """Model kernel -> profiler prefix for a core with these flags (`core_flags`)."""
    return FOLDED_FAMILIES if flags.get("gate_folded") else FAMILIES


def measured_families(rec: dict[str, Any]) -> dict[str, float]:
    """A record's profiler rows summed per family (the longest matching prefix of PREFIXES)."""
    measured: dict[str, float] = {}
    for row in rec.get("nsa_kernels", []):
        fam = next((p for p in PREFIXES if _prefix_match(row["kernel"], p, PREFIXES)), None)
        if fam is not None:
            measured[fam] = measured.get(fam, 0.0) + row["ms"]
    return measured


def compare(
    rec: dict[str, Any], gpu_name: str, geometry: dict[str, int], build: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Predicted vs measured for one speed record (keys of gpusuite.gpu.speed's records); `build`:
    flags of the model's `ours` for kernels other than the shipped ones (an older committed run); the
    core's path from the record (`core_flags`). `core`: the path priced; `not_priced`: families the
    profile has and the model of that path has not (a record whose kernels are not its path's)."""
    model = load_model()
    if model is None:
        return {"skipped": f"{MODEL_PATH} not found (run the suite from a repository checkout)"}
    key = gpu_key(gpu_name, model)
    if key is None:
        return {"skipped": f"the model has no figures for {gpu_name!r} (it knows {', '.join(model.GPUS)})"}
    gpu = model.GPUS[key]
    shape = model.Shape(
        rec["shape"], rec["B"], rec["H"], rec["Hkv"], rec["D"], geometry["block_len"],
        geometry["block_stride"], geometry["sel_block"], geometry["n_sel"], geometry["window"],
    )  # fmt: skip
    T = rec["T"]
    try:
        flags = core_flags(rec, build)
    except ValueError as e:
        return {"skipped": str(e)}
    fams = families_of(flags)
    kernels = model.ours(T, shape, cc=gpu.cc, **flags)
    predicted: dict[str, float] = {}
    core_ms = 0.0
    for k in kernels:
        if k.name in fams:
            fam = fams[k.name]
            predicted[fam] = predicted.get(fam, 0.0) + k.time(gpu) * 1e3
            core_ms += k.time(gpu) * 1e3
        elif k.name in OTHER_IN_CORE:
            core_ms += k.time(gpu) * 1e3
    measured = measured_families(rec)
    families = []
    for fam in PREFIXES:
        if fam in measured and predicted.get(fam):
            ratio = measured[fam] / predicted[fam]
            families.append({
                "family": fam, "measured_ms": round(measured[fam], 4), "predicted_ms": round(predicted[fam], 4),
                "measured_over_predicted": round(ratio, 3),
            })  # fmt: skip
    core = next(p for p, f in CORE_PATHS.items() if all(flags[k] == v for k, v in f.items()))
    out: dict[str, Any] = {"gpu_model": key, "core": core, "families": families}
    out["not_priced"] = sorted(f for f in measured if not predicted.get(f))
    off = [
        f["family"]
        for f in families
        if abs(f["measured_over_predicted"] - 1) > TOLERANCE
        and abs(f["measured_ms"] - f["predicted_ms"]) > ABS_FLOOR_MS
    ]
    compared = len(families)
    fa = model.flash2(T, shape, "sdpa")
    pairs = {
        "nsa_fwd_bwd_ms": (rec.get("nsa_fwd_bwd_ms"), core_ms),
        "flash_fwd_ms": (rec.get("sdpa_flash_fwd_ms"), model.total(fa, gpu, "fwd") * 1e3),
        "flash_fwd_bwd_ms": (rec.get("sdpa_flash_fwd_bwd_ms"), model.total(fa, gpu) * 1e3),
    }
    for name, (meas, pred) in pairs.items():
        out[name] = {"measured": meas, "predicted": round(pred, 4)}
        if meas:
            ratio = meas / pred
            out[name]["measured_over_predicted"] = round(ratio, 3)
            compared += 1
            if abs(ratio - 1) > TOLERANCE:
                off.append(name)
    m_nsa, m_fa = rec.get("nsa_fwd_bwd_ms"), rec.get("sdpa_flash_fwd_bwd_ms")
    out["nsa_over_flash"] = {
        "measured": round(m_nsa / m_fa, 3) if m_nsa and m_fa else None,
        "predicted": round(core_ms / (model.total(fa, gpu) * 1e3), 3),
    }
    out["compared"] = compared
    out["off_by_more_than_30pct"] = off
    return out


def summary(records: list[dict[str, Any]]) -> str:
    """One phrase for the speed section's summary: how many comparisons the model got within 30 %."""
    done = [r["model"] for r in records if "families" in r.get("model", {})]
    if not done:
        skipped = next((r["model"]["skipped"] for r in records if "skipped" in r.get("model", {})), None)
        return f"model: {skipped}" if skipped else "model: no record to compare"
    n_off = sum(len(m["off_by_more_than_30pct"]) for m in done)
    n_all = sum(m["compared"] for m in done)
    return f"model: {n_all - n_off} of {n_all} comparisons within 30 %"
