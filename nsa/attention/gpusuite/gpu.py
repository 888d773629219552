"""Sections d-e of the GPU suite: compute-sanitizer and speed against SDPA (CUDA only).

Owns the sections that need a real GPU, but training (`training.py`). Each takes (plan, suite), runs
its items (a tool, a shape) while their estimate (`budget`) fits in `suite.left()`, times each, and
returns a JSON-able dict with `ok` (None with `skipped` when it could not run) and `summary`.
- sanitizer: memcheck and racecheck over `smoke.py` (one small shape per kernel), when the tool exists;
- speed: NSA's attention core (triton branches + gate mix) against F.scaled_dot_product_attention
  (flash, and cuDNN where torch offers it), forward and forward+backward, bf16, B*T = 64k tokens,
  with a per-kernel breakdown from torch.profiler and model FLOPs/bytes per kernel (docs/gpu-suite.md),
  and the cost model's predicted times beside the measured ones (`modelcheck`);
- train: lives in `training.py` (re-exported here: the section table finds every section in `gpu`).
It must not change kernel configs or install anything; logs go under the suite's OUT_DIR.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from nsa.attention.gpusuite import modelcheck
from nsa.attention.gpusuite.budget import SANITIZER_TOOL_S, Item, Items, speed_estimate
from nsa.attention.gpusuite.checks import Plan
from nsa.attention.gpusuite.training import TRAIN_CONFIG, read_train_metrics, train, train_runs  # noqa: F401 (section f)

REPO = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------------ d) sanitizer
def _sanitizer_tool() -> str | None:
    found = shutil.which("compute-sanitizer")
    for cand in (found, "/usr/local/cuda/bin/compute-sanitizer",
                 "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):  # fmt: skip
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def sanitizer(plan: Plan, suite) -> dict:
    tool = _sanitizer_tool()
    if tool is None:
        return {"ok": None, "skipped": "not installed (no compute-sanitizer on PATH or in /usr/local/cuda)"}
    rows, ok = {}, True
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    items = Items(suite, [Item(name, SANITIZER_TOOL_S, name) for name in ("memcheck", "racecheck")])
    for item in items:
        name, left = item.spec, suite.left()
        log = suite.out_dir / f"sanitizer-{name}.log"
        cmd = [
            tool,
            "--tool",
            name,
            "--error-exitcode",
            "3",
            sys.executable,
            "-m",
            "nsa.attention.gpusuite.smoke",
        ]
        t = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(240, left), env=env)
            text = p.stdout + p.stderr
            rc = p.returncode
        except subprocess.TimeoutExpired as e:
            text, rc = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {e.timeout:.0f} s", None
        log.write_text(text if isinstance(text, str) else text.decode(errors="replace"))
        summary = re.findall(
            r"(ERROR SUMMARY: .*|RACECHECK SUMMARY: .*)", text if isinstance(text, str) else ""
        )
        smoke_ok = "SMOKE OK" in (text if isinstance(text, str) else "")
        clean = rc == 0 and smoke_ok
        rows[name] = {"ok": clean, "exit_code": rc, "summary": summary[-1:] or ["(no summary line)"],
                      "log": str(log), "seconds": round(time.monotonic() - t, 1)}  # fmt: skip
        ok &= clean
    text = "; ".join(f"{n}: {'clean' if r['ok'] else 'ERRORS'} {r['summary'][0]}" for n, r in rows.items())
    if items.skipped:
        text += ("; " if text else "") + f"skipped for time: {', '.join(items.skipped)}"
    return {"ok": ok and bool(rows), "tool": tool, "summary": text, "tools": rows, **items.fields()}


# ---------------------------------------------------------------------------------------- e) speed
def _time_cuda(fn, iters: int, warmup: int = 2) -> float:
    """Median milliseconds of fn() over `iters` runs (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def _nsa_core_inputs(B, T, Hkv, G, D, geo, dev, dtype):
    g = torch.Generator(device="cpu").manual_seed(0)
    nc = (T - geo["block_len"]) // geo["block_stride"] + 1

    def mk(*s):
        return torch.randn(*s, generator=g).to(dev, dtype).requires_grad_()

    return {
        "q": mk(B, Hkv, T, G, D), "kc": mk(B, Hkv, nc, D), "vc": mk(B, Hkv, nc, D),
        "ks": mk(B, Hkv, T, D), "vs": mk(B, Hkv, T, D), "kw": mk(B, Hkv, T, D), "vw": mk(B, Hkv, T, D),
        "g": torch.rand(B, T, Hkv, G, 3, generator=g).to(dev, dtype).requires_grad_(),
    }  # fmt: skip


def _nsa_core(inp, geo, scale):
    """The attention part of an NSA layer on the triton backend, as NSAAttention.forward runs it in
    training: the gate fold's one node (gated.gated_branches: compressed + selection, selected,
    window and the gate mix forward; the gates folded into the branch backwards' lse) where it
    applies, else the branches and the gate mix one by one (gated.FOLD_GATE off: the path every GPU
    run up to 2026-11-26c timed here). q is one leaf for the three branches, so autograd sums its
    three gradients (in a layer RoPE's backward does; modelcheck prices that `q_grad_sum`). The
    projections and the compression MLP are ordinary GEMMs, as for dense."""
    from nsa.attention.triton import compressed, fused, gated, selected, window

    branch = {"q_sel": inp["q"], "q_win": inp["q"], **{k: v for k, v in inp.items() if k != "g"}}
    geo_args = [geo[k] for k in ("block_len", "block_stride", "sel_block", "n_sel", "window")]
    mixed = gated.gated_branches(branch, inp["g"], *geo_args, scale=scale)
    if mixed is not None:
        return mixed[0]
    o_cmp, idx, valid = compressed.compressed_attention_and_selection(
        inp["q"], inp["kc"], inp["vc"], block_len=geo["block_len"], block_stride=geo["block_stride"],
        sel_block=geo["sel_block"], n_sel=geo["n_sel"], scale=scale,
    )  # fmt: skip
    o_sel = selected.selected_attention(inp["q"], inp["ks"], inp["vs"], idx, valid, sel_block=geo["sel_block"],
                                        scale=scale, forced_blocks=True)  # fmt: skip
    o_win = window.window_attention(inp["q"], inp["kw"], inp["vw"], window=geo["window"], scale=scale)
    return fused.gate_mix(inp["g"], o_cmp, o_sel, o_win)


def _flops_model(B, T, Hkv, G, D, geo) -> dict[str, float]:
    """Useful FLOPs per kernel family (matmul FLOPs over the visible (query, key) pairs, causal)."""
    H = Hkv * G
    w, bl, d, lp, n = (geo[k] for k in ("window", "block_len", "block_stride", "sel_block", "n_sel"))
    win_pairs = T * w - w * (w - 1) / 2 if w <= T else T * (T + 1) / 2
    cmp_pairs = sum(max(0, (t - bl) // d + 1) for t in range(0, T, 16)) * 16
    # Selected: the forced blocks (block 0, own up to t, previous) run in _sel_forced_*, the other
    # entries (whole blocks) in the query-major _sel_fwd / _sel_bwd_dq; dK/dV takes every pair.
    forced_pairs = sum(t % lp + 1 + lp * (min(3, t // lp + 1) - 1) for t in range(0, T, 16)) * 16
    other_pairs = sum((min(n, t // lp + 1) - min(3, t // lp + 1)) * lp for t in range(0, T, 16)) * 16
    sel_pairs = forced_pairs + other_pairs
    per = B * H * D
    # The key-major path (G <= 8, selected.py's fwd_keys / bwd_keys): the fused backward takes every
    # pair (dK/dV's four products + dQ's); the forward's keys walk the non-forced pairs (QK + PV) and
    # the merging forced pass the forced ones (fwd_forced_merge, shipped 2026-11-27; every earlier run's
    # `_sel_fwd_keys` took every pair: 4 * per * sel_pairs).
    return {
        "_window_fwd": 4 * per * win_pairs, "_window_bwd_dq": 6 * per * win_pairs,
        "_window_bwd_dkdv": 8 * per * win_pairs,
        # Since 45bc233 two kernels: _cmp_fwd the attention in one flash pass (QK + PV), _cmp_select
        # the selection from its row statistics (QK only: p, Eq. 9 scores and the top-n, no V).
        "_cmp_fwd": 4 * per * cmp_pairs, "_cmp_select": 2 * per * cmp_pairs,
        "_cmp_bwd_dq": 6 * per * cmp_pairs, "_cmp_bwd_dkv": 8 * per * cmp_pairs,
        "_sel_fwd": 4 * per * other_pairs, "_sel_bwd_dq": 6 * per * other_pairs,
        "_sel_forced_fwd": 4 * per * forced_pairs, "_sel_forced_dq": 6 * per * forced_pairs,
        "_sel_bwd_dkdv": 8 * per * sel_pairs,
        "_sel_fwd_keys": 4 * per * other_pairs, "_sel_fwd_forced_merge": 4 * per * forced_pairs,
        "_sel_bwd_keys": 10 * per * sel_pairs,
    }  # fmt: skip


def _bytes_model(B, T, Hkv, G, D, geo) -> dict[str, float]:
    """Minimal bytes each kernel must move (its inputs read once, outputs written once; bf16 values,
    float32 statistics): a lower bound of its traffic, so GB/s from it is a lower bound too."""
    Q = B * T * Hkv * G * D * 2
    K = B * T * Hkv * D * 2
    Kc = K / geo["block_stride"]
    table = B * Hkv * T * geo["n_sel"] * 9
    lse = B * T * Hkv * G * 4
    state = 2 * Q  # fp32 rows of head_dim: twice the bf16 queries
    # Key-major partials: one row per kept table entry (min(n, t // l' + 1) a token) and head: PO
    # (q's dtype) + PL (fp32 lse) in the forward, PDQ (q's 16-bit dtype at pdq_bits 16, the least; fp32
    # at 32) in the backward; written once, read once by the merges (the forward merge's tiles read PL
    # once: merge_tiles; its measured loop read it twice).
    lp, n = geo["sel_block"], geo["n_sel"]
    kept = sum(min(n, t // lp + 1) for t in range(0, T, 16)) * 16 / T
    # the non-forced ones (fwd_forced_merge: the keys forward's and the merging pass's partials)
    other = kept - sum(min(3, t // lp + 1) for t in range(0, T, 16)) * 16 / T
    return {
        "_window_fwd": 2 * Q + 2 * K + lse, "_window_bwd_dq": 4 * Q + 2 * K + 2 * lse,
        "_window_bwd_dkdv": 2 * Q + 4 * K + 2 * lse,
        "_cmp_fwd": 2 * Q + 2 * Kc + lse,  # q, compressed K and V in; output and lse out
        "_cmp_select": Q + Kc + lse + table,  # q, compressed K and the lse in; the table out
        "_cmp_bwd_dq": 4 * Q + 2 * Kc + 2 * lse, "_cmp_bwd_dkv": 2 * Q + 2 * Kc + 2 * lse + 32 * Kc,
        "_cmp_bwd_dkv_sum": 32 * Kc + 2 * Kc,  # 8 fp32 partials of dK and dV per key in, dK/dV out
        # The forced kernels write an fp32 [T, G, D] state (+ lse / delta) that the query-major ones read.
        "_sel_fwd": 2 * Q + 2 * K + table + lse + state + lse, "_sel_bwd_dq": 4 * Q + 2 * K + table + 2 * lse + state,
        "_sel_forced_fwd": Q + 2 * K + table + state + lse, "_sel_forced_dq": 3 * Q + 2 * K + table + state + 2 * lse,
        "_sel_bwd_dkdv": 2 * Q + 4 * K + table + 2 * lse,
        "_sel_fwd_keys": other * Q + 2 * K + other * (Q + lse), "_sel_fwd_merge": kept * (Q + lse) + table + Q + lse,
        "_sel_fwd_forced_merge": Q + 2 * K + table + other * (Q + lse) + Q + lse,
        "_sel_bwd_delta": 2 * Q + lse, "_sel_bwd_keys": 2 * Q + 4 * K + 2 * lse + kept * Q,
        "_sel_bwd_dq_merge": kept * Q + table + Q,
        "_sel_fwd_index": table * 17 / 9,  # idx + valid in, each entry's int64 sort key out
        "_gate_mix_fwd": 4 * Q, "_gate_mix_bwd": 8 * Q, "_rope_kernel": 2 * Q,
        # the gate fold's backward: dy and the three outputs in, dO out; each branch's lse in, lse -
        # log2 g and (FOLD_DELTA, shipped) its fp32 delta out
        "_gate_fold_bwd": 5 * Q + 9 * lse,
    }  # fmt: skip


def _kernel_table(fn, flops: dict[str, float], nbytes: dict[str, float]) -> list[dict]:
    """Per-kernel device time of one call of fn (torch.profiler), with achieved TFLOP/s (model FLOPs,
    `_flops_model`) and GB/s (minimal bytes, `_bytes_model`) where the kernel is one of ours."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        # Older torch (2.11 on the first GPU run) warns "Profiler clears events at the end of each
        # cycle ... set acc_events=True" on every profile, cycles or not (fixed by pytorch#180387):
        # one profile of one call has no cycles to keep, so the warning says nothing here.
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    families = sorted(set(flops) | set(nbytes), key=len, reverse=True)
    rows = []
    for ev in prof.key_averages():
        t_us = getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0)
        if t_us <= 0:
            continue
        fam = next((k for k in families if ev.key.startswith(k)), None)
        row = {"kernel": ev.key[:80], "calls": ev.count, "ms": round(t_us / 1000, 3)}
        if fam in flops:
            row["tflops"] = round(flops[fam] / (t_us * 1e-6) / 1e12, 1)
        if fam in nbytes:
            row["gbps_min"] = round(nbytes[fam] / (t_us * 1e-6) / 1e9, 0)
        rows.append(row)
    rows.sort(key=lambda r: -r["ms"])
    total = sum(r["ms"] for r in rows)
    for r in rows:
        r["share"] = round(r["ms"] / total, 3) if total else 0.0
    return rows[:24]


def core_path() -> str:
    """Which path `_nsa_core` times on bf16 inputs: the gate fold's node, or the branches one by one."""
    from nsa.attention.triton import gated

    if not gated.FOLD_GATE:
        return "branches one by one"
    return "gated_branches, fold_delta" if gated.FOLD_DELTA else "gated_branches"


def _measure_nsa(rec: dict, B, T, Hkv, G, D, geo, iters: int) -> None:
    inp = _nsa_core_inputs(B, T, Hkv, G, D, geo, "cuda", torch.bfloat16)
    dout = torch.randn(B, T, Hkv * G * D, device="cuda", dtype=torch.bfloat16)
    scale = D**-0.5

    def fwd():
        with torch.no_grad():
            _nsa_core(inp, geo, scale)

    leaves = list(inp.values())

    def fwd_bwd():  # autograd.grad: no .grad accumulation kernels in the timing
        torch.autograd.grad(_nsa_core(inp, geo, scale), leaves, dout)

    rec["nsa_core"] = core_path()
    rec["nsa_fwd_ms"] = round(_time_cuda(fwd, iters), 3)
    rec["nsa_fwd_bwd_ms"] = round(_time_cuda(fwd_bwd, iters), 3)
    geo_args = (B, T, Hkv, G, D, geo)
    rec["nsa_kernels"] = _kernel_table(fwd_bwd, _flops_model(*geo_args), _bytes_model(*geo_args))


def _measure_sdpa(rec: dict, B, T, H, Hkv, D, iters: int) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append(("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION))
    q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
    dense_flops = 4 * B * H * D * T * (T + 1) / 2  # causal QK^T and PV
    rec["dense_fwd_model_tflop"] = round(dense_flops / 1e12, 3)

    gqa = {"enable_gqa": True}

    def attend():
        if gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        rep = H // Hkv  # a torch without enable_gqa for this backend: K/V expanded to every head
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              is_causal=True)  # fmt: skip

    def fwd():
        with torch.no_grad():
            attend()

    def fwd_bwd():
        torch.autograd.grad(attend(), (q, k, v), do)

    for name, backend in backends:
        try:
            with sdpa_kernel([backend]):
                gqa["enable_gqa"] = True
                try:
                    fwd()
                except (RuntimeError, TypeError):
                    gqa.clear()
                f_ms, fb_ms = _time_cuda(fwd, iters), _time_cuda(fwd_bwd, iters)
            rec[f"{name}_gqa"] = "enable_gqa" if gqa else "kv expanded"
            rec[f"{name}_fwd_ms"], rec[f"{name}_fwd_bwd_ms"] = round(f_ms, 3), round(fb_ms, 3)
            rec[f"{name}_fwd_tflops"] = round(dense_flops / (f_ms * 1e-3) / 1e12, 1)
        except Exception as e:  # a backend torch cannot run for this shape: say so, go on
            rec[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:200]}"


def _speed_iters(plan: Plan) -> int:
    return 3 if plan.mode == "quick" else 5


def speed_items(plan: Plan) -> list[Item]:
    """One item per (shape, T) of the plan, with its estimated seconds."""
    iters = _speed_iters(plan)
    cases = plan.speed_cases
    first = [all(c[0] != name for c in cases[:i]) for i, (name, *_) in enumerate(cases)]  # compiles
    return [Item(f"{name} T{T}", speed_estimate(name, T, iters, first[i]), (name, H, Hkv, D, T))
            for i, (name, H, Hkv, D, T) in enumerate(cases)]  # fmt: skip


def speed(plan: Plan, suite) -> dict:
    iters = _speed_iters(plan)
    records = []
    items = Items(suite, speed_items(plan))
    for item in items:
        name, H, Hkv, D, T = item.spec
        B = max(1, 65536 // T)
        rec = {"shape": name, "H": H, "Hkv": Hkv, "D": D, "T": T, "B": B}
        try:
            _measure_nsa(rec, B, T, Hkv, H // Hkv, D, plan.geometry, iters)
            torch.cuda.empty_cache()
            _measure_sdpa(rec, B, T, H, Hkv, D, iters)
        except torch.cuda.OutOfMemoryError as e:
            rec["error"] = f"OOM: {str(e)[:200]}"
        torch.cuda.empty_cache()
        if "sdpa_flash_fwd_ms" in rec and "nsa_fwd_ms" in rec:
            rec["speedup_fwd_vs_flash"] = round(rec["sdpa_flash_fwd_ms"] / rec["nsa_fwd_ms"], 2)
            rec["speedup_fwd_bwd_vs_flash"] = round(rec["sdpa_flash_fwd_bwd_ms"] / rec["nsa_fwd_bwd_ms"], 2)
        rec.update(nsa_over_sdpa(rec))
        try:  # the model's prediction beside the measurement; never fails the section
            rec["model"] = modelcheck.compare(rec, torch.cuda.get_device_name(0), plan.geometry)
        except Exception as e:
            rec["model"] = {"skipped": f"{type(e).__name__}: {str(e)[:200]}"}
        records.append(rec)
    ok = bool(records) and all("error" not in r and "nsa_fwd_ms" in r for r in records)
    return {"ok": ok, "summary": speed_summary(records, items.skipped), "records": records, **items.fields()}


def nsa_over_sdpa(rec: dict) -> dict[str, float]:
    """NSA's time over SDPA's, the issue's measure (below 1.0: NSA is faster), for each backend and
    pass the record has (the first GPU run's tables computed these by hand from the milliseconds)."""
    out = {}
    for backend in ("flash", "cudnn"):
        for part in ("fwd", "fwd_bwd"):
            nsa, sdpa = rec.get(f"nsa_{part}_ms"), rec.get(f"sdpa_{backend}_{part}_ms")
            if nsa and sdpa:
                out[f"nsa_over_{backend}_{part}"] = round(nsa / sdpa, 2)
    return out


def speed_summary(records: list[dict], skipped: list[str]) -> str:
    """NSA/FA2 per record (the first four; below 1: NSA faster), the model comparison, what was skipped."""
    parts = [
        f"{r['shape']} T{r['T']}: NSA/FA2 fwd {r.get('nsa_over_flash_fwd', '?')} "
        f"fwd+bwd {r.get('nsa_over_flash_fwd_bwd', '?')}" + (f" ({r['error'][:60]})" if "error" in r else "")
        for r in records
    ]
    text = "; ".join(parts[:4]) + (f" (+{len(parts) - 4} more)" if len(parts) > 4 else "")
    phrases = [text] if text else []
    if records:
        phrases.append(modelcheck.summary(records))
    if skipped:
        phrases.append(f"skipped for time: {', '.join(skipped)}")
    return "; ".join(phrases)
