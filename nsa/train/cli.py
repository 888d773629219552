"""`nsa-train`: the trainer's command line. Validates everything, then hands over to the loop.

Owns argument parsing, the CONFIG-environment consistency check, config loading with `--set`
overrides and the run-dir sanity checks, all BEFORE torch is imported or a process group joined:
bad input exits 2 with one clear paragraph and nothing started. It must not hold training logic.

    nsa-train --config configs/tiny.yaml --run-dir runs/tiny [--set train.steps=20 ...] [--resume]
    nsa-train --flops --config configs/m7c_125m.yaml [--set train.seq_len=8192]
    python -m nsa.train --config configs/tiny.yaml --run-dir runs/tiny
    torchrun --nproc_per_node 2 -m nsa.train --config configs/tiny.yaml --run-dir runs/tiny2
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from nsa.runfiles import EXIT_BAD_INPUT, EXIT_SIGTERM, RunDir
from nsa.train.config import ConfigError, TrainConfig, load_config
from nsa.versions import release


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nsa-train",
        description="Train a Llama-style model with Native Sparse Attention (alone or under torchrun).",
    )
    p.add_argument("--config", required=True, help="Training config YAML, e.g. configs/tiny.yaml.")
    p.add_argument(
        "--run-dir", help="Run directory (created if missing; required to train); see docs/run-dir.md."
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="Override one config value (repeatable), validated like the file, e.g. --set train.steps=20.",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="Continue from the run dir's newest intact checkpoint (manifest verified; see docs/run-dir.md).",
    )
    p.add_argument(
        "--check", action="store_true", help="Validate and print the resolved config, then exit (no torch)."
    )
    p.add_argument(
        "--flops",
        action="store_true",
        help="Print the FLOP account as JSON (params, flops_per_token, attention_flops_per_token, "
        "keys_per_query averaged over train.seq_len), then exit. MFU in metrics.jsonl uses it.",
    )
    return p


# How long a rank other than 0 waits before printing its bad-input message (see `fail`).
FAIL_GRACE_S = 2.0


def fail(message: str) -> int:
    """Print the bad-input message once per run, yet never lose it; return exit code 2.

    Every rank validates the same input. Rank 0 prints at once. Any other rank waits FAIL_GRACE_S
    first: when rank 0 failed the same way, torchrun has stopped this rank by then, so the log holds
    one copy. When rank 0 was slower, or the error is this rank's own (another node's run dir), the
    message still reaches the log, tagged with the rank. Printing on rank 0 only lost it whenever
    rank 1 exited first and torchrun SIGTERMed rank 0 before it printed.
    """
    rank = os.environ.get("RANK", "0")
    if rank == "0":
        print(f"nsa-train: {message}", file=sys.stderr, flush=True)
    else:
        time.sleep(FAIL_GRACE_S)
        print(f"nsa-train (rank {rank}): {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT


def check_config_env(config_arg: str) -> str | None:
    """The CONFIG environment variable may agree with --config, never silently override it."""
    env = os.environ.get("CONFIG")
    if not env:
        return None
    if Path(env).resolve() == Path(config_arg).resolve():
        return None
    return (
        f"environment variable CONFIG={env!r} disagrees with --config {config_arg!r}: the config comes "
        "from --config only. Fix: unset CONFIG (or make it name the same file)."
    )


def check_log_level(text: str | None) -> str | None:
    """NSA_LOG_LEVEL must be one of its choices: an unknown value used to hide the step lines."""
    from nsa.envvars import NSA_ENV

    choices = NSA_ENV["NSA_LOG_LEVEL"].choices
    if text is None or text in choices:
        return None
    return f"NSA_LOG_LEVEL={text!r} is not one of {', '.join(choices)}. Fix: use one of them, or unset it."


# What libgomp accepts: a positive count, or a comma-separated list of them (nested levels).
_OMP_THREADS = re.compile(r"\s*[1-9][0-9]{0,5}(\s*,\s*[1-9][0-9]{0,5})*\s*")


def check_omp_threads(text: str | None) -> str | None:
    """OMP_NUM_THREADS (README, docs/env.md) must be a thread count: libgomp printed one line for
    `abc` or `0` and the run went on with torch's default of one thread per core, unnoticed."""
    if not text or _OMP_THREADS.fullmatch(text):  # unset or empty: torch's default
        return None
    return (
        f"OMP_NUM_THREADS={text[:200]!r} is not a positive number of threads (libgomp would ignore it and "
        "torch use one thread per core). Fix: set e.g. OMP_NUM_THREADS=4, or unset it."
    )


def resume_problem(rd: RunDir, arg: str) -> str | None:
    """--resume names a run dir: one that exists and holds a run's files. A mistyped path used to start
    a new run from step 0 there, said by one line after the boot banner."""
    if not rd.root.is_dir():
        return (
            f"--resume: --run-dir {arg!r} does not exist, so there is nothing to resume. Fix: pass the run "
            "dir of the run to continue, or drop --resume to start a new run there."
        )
    marks = (rd.manifest, rd.config, rd.events, rd.checkpoints_dir)
    if not any(p.exists() for p in marks):
        return (
            f"--resume: --run-dir {arg!r} is not a run dir (it has none of manifest.json, config.yaml, "
            "events.jsonl, checkpoints/). Fix: pass the run dir of the run to continue, or drop --resume "
            "and use a new --run-dir."
        )
    return None


MIN_FREE_MB = 4.0


def check_disk(rd: RunDir) -> str | None:
    """Room for the run's files and one more checkpoint (the size of the newest one), else the cause.

    A run started on a full disk died in its first heartbeat write with a traceback; a restart on a
    disk that is still full must say so instead.
    """
    from nsa.runfiles import disk_free, disk_need_mb

    df = disk_free(rd.root)
    if df is None:
        return None
    where, free, _total = df
    # The same need as the trainer's check before each save (nsa.train.ckpt): a start that passed here
    # with less would fail at its first save.
    need = max(MIN_FREE_MB, disk_need_mb(rd))
    if free >= need:
        return None
    return (
        f"disk full: {rd.root} ({where} has {free:.1f} MB free; this run needs about {need:.1f} MB: "
        "one checkpoint plus logs; No space left on device). Fix: free space there (old runs, "
        "fewer checkpoints: train.keep_last), then start again."
    )


TERM_SAVE_DEFAULT_S = 120.0


def term_save_seconds(text: str | None) -> tuple[float, str | None]:
    """NSA_TERM_SAVE_S: (seconds, None), or (default, one-paragraph problem) for a bad value."""
    if not text:
        return TERM_SAVE_DEFAULT_S, None
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= 86400):
        return TERM_SAVE_DEFAULT_S, (
            f"NSA_TERM_SAVE_S={text!r} is not a number of seconds in (0, 86400]. Fix: set e.g. "
            f"NSA_TERM_SAVE_S=120, or unset it (default {TERM_SAVE_DEFAULT_S:.0f})."
        )
    return v, None


def _on_cpu(device: str, gpu: bool) -> bool:
    """train.device resolves to the CPU: 'cpu', or 'auto' on a host without an NVIDIA GPU."""
    return device == "cpu" or (device == "auto" and not gpu)


def backend_problem(attention: str, backend: str, device: str, gpu: bool) -> str | None:
    """model.nsa.backend=triton where it cannot run (no triton; CPU without the interpreter; a triton
    older than the kernels support, also for auto on a GPU), torch-free."""
    if attention == "nsa" and (backend == "triton" or (backend == "auto" and gpu and device != "cpu")):
        from nsa.attention.triton import unsupported_reason

        reason = unsupported_reason()
        if reason:
            return f"config model.nsa.backend = '{backend}': {reason}"
    if attention != "nsa" or backend != "triton":
        return None
    if importlib.util.find_spec("triton") is None:
        return (
            "config model.nsa.backend = 'triton' but the triton package is not installed. Fix: install a "
            "CUDA build of torch (it brings triton), or set model.nsa.backend=auto."
        )
    if _on_cpu(device, gpu) and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return (
            "config model.nsa.backend = 'triton' but this run is on the CPU, where the triton kernels run "
            "only in triton's slow interpreter (TRITON_INTERPRET=1). Fix: set model.nsa.backend=auto "
            "(eager on CPU, triton on CUDA), run on a GPU, or export TRITON_INTERPRET=1."
        )
    return None


def fsdp_cpu_problem(strategy: str, device: str, gpu: bool, torch_version: str | None = None) -> str | None:
    """FSDP2 on the CPU (gloo) needs a newer torch than FSDP2 on CUDA: torch 2.6 fails inside
    fully_shard's unshard ("'Stream' object has no attribute 'record_event'", bench/RESULTS.md),
    torch 2.13 works (CI). Torch-free: the version comes from the distribution's metadata."""
    if strategy != "fsdp" or not _on_cpu(device, gpu):
        return None
    if torch_version is None:
        try:
            torch_version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return None
    if release(torch_version)[:2] < (2, 7):
        return (
            f"config parallel.strategy = 'fsdp' on the CPU needs torch >= 2.7 (found {torch_version}, whose "
            "FSDP2 fails on CPU tensors: 'Stream' object has no attribute 'record_event'). Fix: "
            "--set parallel.strategy=ddp, upgrade torch, or run on a GPU."
        )
    return None


def cudagraphs_problem(compile_mode: str, device: str, gpu: bool, source: str = "the config") -> str | None:
    """parallel.compile_mode=reduce-overhead on the CPU: train.device=cpu is refused at load, and
    'auto' on a host without an NVIDIA GPU here (inductor would skip the graphs with a warning and
    train as `default`), torch-free. compile_mode=auto is never refused: it resolves to default there."""
    if compile_mode != "reduce-overhead" or not _on_cpu(device, gpu):
        return None
    return (
        f"config error in {source}: parallel.compile_mode = 'reduce-overhead': records CUDA graphs, but "
        f"train.device={device} runs on the CPU here (no NVIDIA GPU). Fix: set parallel.compile_mode=default "
        "(or auto: CUDA graphs where there is a GPU), or run on a GPU host."
    )


def data_problem(cfg: TrainConfig, config: str, run_dir: str | None = None) -> str | None:
    """Local data named in the config that is not there on this host (data.paths of `files`: missing,
    a glob matching nothing, an unsupported extension, every file empty; data.hf_path written as a
    local directory that does not exist): found here in milliseconds, torch-free, instead of by the
    loader after torch and the process group had started (nsa.data.sources.preflight)."""
    from nsa.data import DataError
    from nsa.data.config import gpt2_files
    from nsa.data.sources import preflight

    try:
        gpt2_files(cfg.data)  # data.tokenizer_path: the loader found it only after torch had started
    except DataError as e:
        return f"data error in {config}: {e}"
    try:
        preflight(cfg.data)
    except DataError as e:
        key = "data.hf_path" if cfg.data.source == "fineweb_edu" else "data.paths"
        paths = [cfg.data.hf_path] if key == "data.hf_path" else cfg.data.paths
        relative = any(not Path(p).expanduser().is_absolute() for p in paths)
        where = f" (relative paths are read from the working directory, {os.getcwd()})" if relative else ""
        shown = repr(cfg.data.hf_path if key == "data.hf_path" else paths)
        shown = shown if len(shown) <= 200 else f"{shown[:200]}... ({len(paths)} paths)"
        return f"data error in {config}: {key} = {shown}: {str(e).removeprefix(key + ': ')}{where}"
    return run_dir_in_data(cfg, config, run_dir)


def run_dir_in_data(cfg: TrainConfig, config: str, run_dir: str | None) -> str | None:
    """data.paths that would also read the files the run writes (events.jsonl, metrics.jsonl,
    stacks/*.txt): `data.paths: [data]` with `--run-dir data/run1`, or `**/*.jsonl` from a checkout
    holding runs/. The loader resolves the paths after the run dir is written, and a 2-rank run
    trained on its own logs (`5 file(s)` for a corpus of 2). Checked by pattern, before anything exists."""
    if cfg.data.source != "files" or not run_dir:
        return None
    from nsa.data.sources import covers
    from nsa.runfiles import EVENTS, METRICS, STACKS_DIR, sigusr1_name

    for own in (
        Path(run_dir) / EVENTS,
        Path(run_dir) / METRICS,
        Path(run_dir) / STACKS_DIR / sigusr1_name(0),
    ):
        pat = covers(cfg.data.paths, str(own))
        if pat is not None:
            return (
                f"data error in {config}: data.paths = {cfg.data.paths!r}: {pat!r} also reads the files of "
                f"--run-dir {run_dir} (e.g. {own}): the run would train on its own files. Fix: narrow "
                "data.paths to the corpus (e.g. 'data/*.jsonl'), or put the run dir outside it"
            )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = check_config_env(args.config)
    if problem:
        return fail(problem)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        cfg = load_config(args.config, args.overrides, world_size=world)
    except ConfigError as e:
        return fail(str(e))
    if args.check:
        print(f"# config {args.config} hash {cfg.config_hash()} world_size {world}")
        print(cfg.to_yaml(), end="")
        return 0
    if args.flops:
        import json

        from nsa.train.flops import flops_account

        print(json.dumps(flops_account(cfg), indent=1))
        return 0
    if not args.run_dir:
        return fail("--run-dir is required to train. Fix: pass --run-dir runs/NAME (or --check / --flops).")
    try:
        from nsa.train.faults import fault_from_env

        fault_from_env()
    except ValueError as e:
        return fail(f"{e}. Fix: unset NSA_FAULT (it is for tests only).")
    term_save_s, problem = term_save_seconds(os.environ.get("NSA_TERM_SAVE_S"))
    if problem:
        return fail(problem)
    problem = check_log_level(os.environ.get("NSA_LOG_LEVEL")) or check_omp_threads(
        os.environ.get("OMP_NUM_THREADS")
    )
    if problem:
        return fail(problem)
    from nsa.telemetry.wandb_sink import problem as wandb_problem

    problem = wandb_problem()
    if problem:
        return fail(problem)
    from nsa import malloc

    if cfg.train.device == "cuda" and not malloc.gpu_present():
        return fail(
            "train.device is 'cuda' but this host has no NVIDIA GPU (no /dev/nvidiactl). "
            "Fix: --set train.device=auto (or cpu), or run on a GPU host."
        )

    try:
        alloc = malloc.plan(
            os.environ.get(malloc.VAR),
            cfg.train.device,
            gpu_present=malloc.gpu_present(),
            lib=malloc.find_tcmalloc(),
        )
    except ValueError as e:
        return fail(str(e))
    problem = (
        backend_problem(cfg.model.attention, cfg.model.nsa.backend, cfg.train.device, malloc.gpu_present())
        or fsdp_cpu_problem(cfg.parallel.strategy, cfg.train.device, malloc.gpu_present())
        or cudagraphs_problem(cfg.parallel.compile_mode, cfg.train.device, malloc.gpu_present(), args.config)
    )
    if problem:
        return fail(problem)
    problem = data_problem(cfg, args.config, args.run_dir)
    if problem:
        return fail(problem)
    rd = RunDir(args.run_dir)
    if rd.root.exists() and not rd.root.is_dir():
        return fail(f"--run-dir {args.run_dir!r} exists and is not a directory. Fix: pass a directory path.")
    problem = resume_problem(rd, args.run_dir) if args.resume else None
    if problem:
        return fail(problem)
    if not args.resume and rd.checkpoints():
        return fail(
            f"--run-dir {args.run_dir!r} already holds checkpoints ({rd.checkpoints()[0]}); starting over "
            "would interleave two runs. Fix: pass --resume to continue it, or use a new --run-dir."
        )
    problem = check_disk(rd)
    if problem:
        return fail(problem)
    created = not rd.root.exists()
    try:
        rd.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return fail(f"cannot create --run-dir {args.run_dir!r}: {e.strerror}. Fix: choose a writable path.")

    if alloc.lib and argv is None:  # as a program only: never exec a caller that passed argv (tests)
        malloc.reexec_with(alloc.lib)  # same PID, LD_PRELOAD set; returns if already preloaded

    try:
        from nsa.train.trainer import Run  # imports torch: only after the input is known to be good
    except KeyboardInterrupt:
        # Ctrl-C while torch loads (~3 s; the trainer's own SIGINT handling starts with the run): as
        # SIGTERM before the loop, exit 143 at once, with one line instead of torch's import traceback,
        # and the run dir this call made removed while still empty.
        if created:
            with contextlib.suppress(OSError):
                rd.root.rmdir()
        print("nsa-train: interrupted (Ctrl-C) while loading torch; the run had not started", file=sys.stderr)
        return EXIT_SIGTERM

    run = Run(cfg, rd.root, args.config, args.resume, malloc_note=alloc.note, term_save_s=term_save_s)
    code = run.execute()
    if argv is None and world > 1:  # as a program only: a caller that passed argv gets the code
        from nsa.train.dist import exit_process

        exit_process(code)  # never returns: no interpreter teardown beside gloo's threads
    return code


if __name__ == "__main__":
    sys.exit(main())
