"""Is a training step bound by the host issuing it? Its CPU issue time against its GPU time, on one GPU.

Owns the probe of issue 20's hypothesis (bench/RESULTS.md "Host cost of the NSA layer"): the
compiled M7C NSA step took 96-172 ms on the H100 of 2026-11-26c where dense took 40-44 ms and NSA's
attention core should add ~13 ms; bench/host_cost.py measured (on CPU, launches no-op) a few ms of
Python per NSA layer forward+backward. This times full optimizer steps built as bench/train.py's
`one` builds them (the config's `Transformer`, `parallelize` with its compile, bf16 autocast,
fused AdamW, gradient clipping; random tokens) and reports per step:

- issue_ms: wall time until the step's Python returns, no sync (the host issuing the work);
- gpu_ms: CUDA events recorded before and after the step's work on the current stream (the GPU's
  span of the step, idle gaps included); wall_ms: until a synchronize after it;
- from torch.profiler over `--profile-steps` steps: the GPU's kernel time a step (busy_ms, the sum
  of every CUDA kernel's time) and its share of gpu_ms, kernel launches a step and the 15 largest
  kernels by time (top_kernels);
- sync_debug: the synchronizing CUDA calls of one step under torch.cuda.set_sync_debug_mode("warn")
  (0 expected: the `--syncs` check below found none on CPU).

Host-bound reads as issue_ms ~ gpu_ms ~ wall_ms with busy_ms well below gpu_ms (the GPU waits on
the launches); GPU-bound as issue_ms << wall_ms and busy_ms ~ gpu_ms. One JSON row; never asserts.

    python bench/step_host.py --config configs/m7c_125m.yaml                      # NSA, compiled (GPU)
    python bench/step_host.py --config configs/m7c_125m.yaml --set model.attention=dense
    .venv/bin/python bench/step_host.py --dry-run     # no GPU: configs/tiny.yaml on CPU, eager
    .venv/bin/python bench/step_host.py --syncs --config configs/tiny.yaml   # no GPU: sync sites

`--syncs` needs no GPU: it runs the real trainer (nsa-train's `main`) on the meta device standing in
for the GPU, with the NSA triton ops bound there as on CUDA (their fake kernels run), under
nsa.train.hostsync.HostSyncs, for `--steps` and 2 x `--steps` optimizer steps each logging once at
its end; the difference is what the extra ordinary steps synced (0 expected). Eager and fp32 (dynamo
does not trace under a dispatch mode, autocast has no meta kernels); the fused AdamW's device check
is told meta is fine (its meta kernel exists). Prints one JSON row with every site.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]


def build(config: str, sets: list[str]):
    """(step, sync, dev, row): one optimizer step as bench/train.py's `one` runs it (its `setup`), a
    device sync, the device, and the row's description of the run."""
    import torch

    from nsa.attention.gpusuite.modelcheck import load_by_path

    cfg, _, dev, bf16, step, sync = load_by_path("bench_train", _REPO / "bench" / "train.py").setup(
        config, sets
    )
    t = cfg.train
    row = {
        "bench": "train/step_host",
        "config": config,
        "sets": sets,
        "attention": cfg.model.attention,
        "backend": getattr(getattr(cfg.model, "nsa", None), "backend", None),
        "compile": cfg.parallel.compile,
        "compile_mode": cfg.parallel.compile_mode,
        # what the blocks got on this device (compile_mode auto resolved; one process: world 1)
        "compile_mode_resolved": cfg.parallel.resolved_compile_mode(dev.type, 1)
        if cfg.parallel.compile
        else "off",
        "seq_len": t.seq_len,
        "batch": t.batch_size,
        "dtype": "bf16" if bf16 else "fp32",
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    return step, sync, dev, row


def _alloc_counts(dev) -> dict:
    import torch

    if dev.type != "cuda":
        return {}
    st = torch.cuda.memory_stats(dev)
    keys = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")
    return {k: int(st.get(k, 0)) for k in keys}


def _ms(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 2), "min": round(min(xs), 2), "max": round(max(xs), 2)}


def profile_steps(step, sync, n: int) -> dict:
    """GPU kernel time and launches a step from torch.profiler (CUDA activity)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        sync()
    busy_us, kernels, launch_cpu_us = 0.0, 0, 0.0
    top = []
    for ev in prof.key_averages():
        dev_us = getattr(ev, "self_device_time_total", None)
        if dev_us is None:
            dev_us = getattr(ev, "self_cuda_time_total", 0.0)
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            busy_us += dev_us
            kernels += ev.count
            top.append((dev_us, ev.count, ev.key))
        if ev.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"):
            launch_cpu_us += ev.self_cpu_time_total
    return {
        "busy_ms_per_step": round(busy_us / 1e3 / n, 2),
        "kernels_per_step": round(kernels / n, 1),
        "launch_api_cpu_ms_per_step": round(launch_cpu_us / 1e3 / n, 2),
        # where the GPU time goes: NSA's step against dense's names the kernels (copies, the
        # attention's own) that fill the gap the attention benchmark does not see
        "top_kernels": [
            {"kernel": k[:100], "ms_per_step": round(us / 1e3 / n, 3), "calls_per_step": round(c / n, 1)}
            for us, c, k in sorted(top, reverse=True)[:15]
        ],
    }


def sync_check(step, sync) -> dict:
    """One step under torch.cuda's sync debug mode ("warn"): every synchronizing CUDA call it makes
    (a copy to the host, `.item()`, a blocking copy...) raises a warning; none expected
    (bench/RESULTS.md "Host syncs and host cost of the compiled training step", checked on CPU)."""
    import warnings

    import torch

    sync()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sync()
    msgs = [str(w.message).splitlines()[0][:200] for w in caught if "synchroniz" in str(w.message).lower()]
    return {"syncs": len(msgs), "first": msgs[:3]}


def run(config: str, sets: list[str], steps: int, warmup: int, prof_steps: int) -> dict:
    import torch

    step, sync, dev, row = build(config, sets)
    t0 = time.perf_counter()
    for _ in range(warmup):  # compiles (inductor, Triton) land here
        step()
    sync()
    row["warmup_s"] = round(time.perf_counter() - t0, 1)
    issue, wall, gpu = [], [], []
    mem0 = _alloc_counts(dev)
    for _ in range(steps):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        if dev.type == "cuda":
            end.record()
        sync()
        t2 = time.perf_counter()
        issue.append((t1 - t0) * 1e3)
        wall.append((t2 - t0) * 1e3)
        if dev.type == "cuda":
            gpu.append(start.elapsed_time(end))
    row.update(steps=steps, issue_ms=_ms(issue), wall_ms=_ms(wall), gpu_ms=_ms(gpu) if gpu else None)
    # the caching allocator's device mallocs / frees and retries during the timed steps: nonzero
    # means cudaMalloc / cudaFree (which synchronize) inside steps, another way to stall the GPU
    mem1 = _alloc_counts(dev)
    row["allocator_during_steps"] = {k: mem1[k] - mem0[k] for k in mem0} if mem0 else None
    if dev.type == "cuda":
        try:
            row["sync_debug"] = sync_check(step, sync)
        except Exception as e:  # the timings above stand without it
            row["sync_debug"] = f"{type(e).__name__}: {str(e)[:200]}"
    if dev.type == "cuda" and prof_steps:
        try:
            p = profile_steps(step, sync, prof_steps)
            p["busy_share_of_gpu_ms"] = round(p["busy_ms_per_step"] / statistics.median(gpu), 3)
            row["profiler"] = p
        except Exception as e:  # the timings above stand without it
            row["profiler"] = f"{type(e).__name__}: {str(e)[:200]}"
    return row


def trainer_syncs(config: str, sets: list[str], steps: int, run_dir: str) -> dict:
    """Sync sites (nsa.train.hostsync) of `steps` trainer steps on the meta device, logging once at the end."""
    from unittest import mock

    import torch
    import torch.optim.adam as adam

    import nsa.attention.nsa as nsa_attention
    from nsa.train import trainer
    from nsa.train.cli import main as train_main
    from nsa.train.dist import DistInfo
    from nsa.train.hostsync import HostSyncs

    real_resolve = nsa_attention.resolve_backend

    def resolve(backend: str, device) -> str:  # meta stands in for CUDA: what CUDA would run
        if torch.device(device).type == "meta" and backend in ("auto", "triton"):
            return "triton"
        return real_resolve(backend, device)

    meta = DistInfo(0, 0, 1, torch.device("meta"), None)
    fixed = ["train.device=cpu", "train.dtype=fp32", "train.warmup_steps=0", "parallel.compile=false",
             "parallel.compile_mode=default", "train.eval_every=0",
             "train.save_every=0", "train.save_final=false", "telemetry.tensorboard=false"]  # fmt: skip
    argv = ["--config", config, "--run-dir", run_dir]
    for s in [*sets, *fixed, f"train.steps={steps}", f"train.log_every={steps}"]:
        argv += ["--set", s]
    with (
        mock.patch.object(trainer, "init_distributed", lambda *a: meta),
        mock.patch.object(nsa_attention, "resolve_backend", resolve),
        mock.patch.object(adam, "_device_dtype_check_for_fused", lambda *a, **k: None),
        HostSyncs() as spy,
    ):
        rc = train_main(argv)
    return {"rc": rc, "sites": dict(spy.sites), "syncs": sum(spy.syncs().values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(_REPO / "configs" / "m7c_125m.yaml"))
    ap.add_argument("--set", action="append", default=[], dest="sets", help="config override key=value")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (the compiles)")
    ap.add_argument("--profile-steps", type=int, default=2, help="steps under torch.profiler (0: none)")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: checks --config with its --set loads (exit 2 if not), then steps configs/tiny.yaml on CPU, "
        "eager, 2 steps (checks the probe runs; no GPU fields)",
    )
    ap.add_argument(
        "--syncs",
        action="store_true",
        help="no GPU: host syncs of --steps and 2 x --steps trainer steps on the meta device, by call site",
    )
    args = ap.parse_args()
    from nsa.train.config import ConfigError, load_config

    # The config as given, with its --set, is checked first, also by --dry-run (which then steps
    # configs/tiny.yaml): a bad key or combination (compile_mode reduce-overhead with
    # compile_backend aot_eager...) exits 2 here, not with a traceback on a leased GPU.
    try:
        load_config(args.config, args.sets)
    except ConfigError as e:
        print(f"step_host: {e}", file=sys.stderr)
        sys.exit(2)
    if args.syncs:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            a, b = (
                trainer_syncs(args.config, args.sets, n, f"{d}/r{n}") for n in (args.steps, 2 * args.steps)
            )
        extra = {k: b["sites"].get(k, 0) - a["sites"].get(k, 0) for k in {*a["sites"], *b["sites"]}}
        row = {"bench": "train/step_syncs", "config": args.config, "sets": args.sets, "steps": args.steps,
               "rc": [a["rc"], b["rc"]], "syncs": [a["syncs"], b["syncs"]], "sites": b["sites"],
               "per_extra_step": {k: v / args.steps for k, v in sorted(extra.items()) if v}}  # fmt: skip
        print(json.dumps(row), flush=True)
        sys.exit(max(a["rc"], b["rc"]))  # a trainer that failed: its sites are not a step's
    if args.dry_run:
        sets = [*args.sets, "train.device=cpu", "parallel.compile=false", "parallel.compile_mode=default",
                "model.nsa.backend=eager"]  # fmt: skip
        row = run(str(_REPO / "configs" / "tiny.yaml"), sets, 2, 1, 0)
        row["dry_run"] = True
    else:
        row = run(args.config, args.sets, args.steps, args.warmup, args.profile_steps)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
