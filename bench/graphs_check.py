"""CUDA graphs with gradient accumulation: the same short training twice, `default` against `reduce-overhead`.

Owns the GPU check of `parallel.compile_mode: reduce-overhead` with `train.grad_accum > 1` (issue 20,
docs/training.md "Compile, checkpointing, memory"): the trainer owns the .grad buffers under CUDA
graphs (nsa/train/parallelize.py `own_grads`) so that accumulating micro-batches adds into them
instead of keeping a graph-pool tensor the next replay overwrites (pytorch/pytorch#169545). This runs
the real trainer (`python -m nsa.train`, one subprocess per mode, each its own compile and graph pool)
on the same config, seed and data (the bundled `sample` corpus: no network), logging every step, and
prints one JSON line as each run ends, then one per step with both modes' loss and grad norm, their
relative differences and each mode's step ms, then one summary line. Exit 0 when every step agrees within the tolerances, 1
when a run fails or a step differs, 2 on bad arguments or a config that does not load.

Why these tolerances: both modes run the same inductor and triton kernels (reduce-overhead only
replays them from CUDA graphs), so step 1's loss (before any update) and grad norm differ only by
the backward kernels' atomic-add order (bf16 autocast, fp32 accumulation): far below 1 %. The bug
this guards against leaves in .grad a replayed buffer that each micro-batch overwrites (1-2 x the last
micro-batch's gradient instead of the sum of 4, or the error "accessing tensor output of CUDAGraphs that
has been overwritten"): step 1's grad norm moves by more than 1 % unless the 4 micro-batches' gradients
are nearly parallel, and the loss of the following steps moves with it. `--control` runs the second
mode a third time with the trainer's own buffers switched off (as before the fix): under CUDA graphs
it must differ or fail, else the check could not see the bug and exits 1.

    # the lead's device call (H100; torch 2.11 image, pydantic from .whl/ as scripts/gpu-session.sh
    # installs it; carry .whl; ~60-90 s estimated, --control adds one warm run):
    python3 -c "import pydantic, yaml" 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
        --no-compile --no-cache-dir --target /tmp/site .whl/*.whl; \
        PYTHONPATH=.:/tmp/site PYTHONUNBUFFERED=1 python3 bench/graphs_check.py --timeout 150
    # no GPU: the comparison machinery on CPU (reduce-overhead is refused there, exit 2)
    .venv/bin/python bench/graphs_check.py --config configs/tiny.yaml --modes default,default \
        --steps 3 --grad-accum 2 --batch-size 2 --seq-len 64 --set model.nsa.backend=eager --skip 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
MODES = ("default", "reduce-overhead", "auto")


def fixed_sets(args: argparse.Namespace, mode: str) -> list[str]:
    """The overrides both runs share (short, offline, every step logged, nothing else), then the mode."""
    return [
        *args.sets,
        "data.source=sample",
        f"train.steps={args.steps}",
        f"train.grad_accum={args.grad_accum}",
        f"train.batch_size={args.batch_size}",
        f"train.seq_len={args.seq_len}",
        "train.global_batch=null",
        "train.warmup_steps=0",
        "train.log_every=1",
        "train.eval_every=0",
        "train.save_every=0",
        "train.save_final=false",
        "telemetry.tensorboard=false",
        f"telemetry.nsa_stats_every={args.steps + 1}",  # no stats side pass: not what is compared
        "eval.long_context_every=0",
        f"parallel.compile_mode={mode}",
    ]


def check_args(args: argparse.Namespace) -> tuple[list[str], str | None]:
    """(modes, problem): a problem is a one-line message with the fix (exit 2)."""
    modes = [m.strip() for m in args.modes.split(",")]
    if len(modes) != 2 or any(m not in MODES for m in modes):
        return (
            modes,
            f"--modes {args.modes!r}: give two of {', '.join(MODES)}. Fix: e.g. --modes default,reduce-overhead",
        )
    if args.steps < args.skip + 1:
        return (
            modes,
            f"--steps {args.steps}: the timed steps come after --skip {args.skip}. Fix: --steps >= {args.skip + 1}",
        )
    for name in ("grad_accum", "batch_size", "seq_len"):
        if getattr(args, name) < 1:
            return modes, f"--{name.replace('_', '-')} {getattr(args, name)}: too small. Fix: give 1 or more"
    for name in ("loss_rtol", "gnorm_rtol"):
        v = getattr(args, name)
        if not 0 < v < 1:
            return (
                modes,
                f"--{name.replace('_', '-')} {v}: not a relative tolerance. Fix: give one in (0, 1), e.g. 0.01",
            )
    if args.skip < 0 or args.timeout <= 0:
        return (
            modes,
            f"--skip {args.skip} / --timeout {args.timeout}: out of range. Fix: --skip >= 0 and --timeout > 0",
        )
    try:  # the config with each mode's overrides must load, as nsa-train would load it (one rank)
        from nsa import malloc
        from nsa.train.cli import cudagraphs_problem
        from nsa.train.config import ConfigError, load_config

        for mode in modes:
            cfg = load_config(args.config, fixed_sets(args, mode), world_size=1)
            if cfg.train.device == "cuda" and not malloc.gpu_present():
                return modes, (
                    f"{args.config}: train.device is 'cuda' but this host has no NVIDIA GPU. Fix: run on a GPU "
                    "host, or --set train.device=cpu with --modes default,default (CUDA graphs need a GPU)"
                )
            problem = cudagraphs_problem(mode, cfg.train.device, malloc.gpu_present(), args.config)
            if problem:
                return modes, problem
    except ConfigError as e:
        return modes, str(e)
    return modes, None


# --control: the trainer with its own .grad buffers switched off, as before this fix. Under CUDA
# graphs it must differ from `default` (or fail): that shows the check can see the bug it guards against.
CONTROL = """import sys
from nsa.train import trainer
trainer.own_grads = lambda params: None  # .grad left to AccumulateGrad: pytorch/pytorch#169545
from nsa.train.cli import main
sys.exit(main(sys.argv[1:]))
"""


def train(args: argparse.Namespace, mode: str, run_dir: Path, control: bool = False) -> dict:
    """One run of the trainer; its per-step metrics (loss, grad norm, step ms) or its failure."""
    head = ["-c", CONTROL] if control else ["-m", "nsa.train"]
    cmd = [sys.executable, *head, "--config", args.config, "--run-dir", str(run_dir)]
    for s in fixed_sets(args, mode):
        cmd += ["--set", s]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
    }
    t0 = time.perf_counter()
    rc, err = run_trainer(cmd, env, args.timeout)
    wall = round(time.perf_counter() - t0, 1)
    metrics = run_dir / "metrics.jsonl"
    steps = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.exists() else []
    res = {"mode": mode, "control": control, "rc": rc, "wall_s": wall, "steps": steps}
    if rc != 0:
        res["stderr_tail"] = err[-1500:]
    return res


def run_trainer(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int | str, str]:
    """(return code or "timeout", stderr) of one trainer process (the tests run it in-process instead)."""
    try:
        out = subprocess.run(cmd, cwd=_REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return "timeout", (e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr) or ""
    return out.returncode, out.stderr


def announce(run: dict) -> dict:
    """One line as soon as a run ends: what a call cut short by its time limit still shows."""
    first = run["steps"][0] if run["steps"] else {}
    print(json.dumps({
        "bench": "train/graphs_check_run", "mode": run["mode"], "control": run["control"],
        "rc": run["rc"], "wall_s": run["wall_s"], "steps_logged": len(run["steps"]),
        "step1_loss": first.get("loss"), "step1_grad_norm": first.get("grad_norm"),
    }), flush=True)  # fmt: skip
    return run


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def compare(a: dict, b: dict, loss_rtol: float, gnorm_rtol: float, skip: int) -> tuple[list[dict], dict]:
    """Per-step rows and the summary of two runs' metrics; summary["ok"] is the verdict."""
    ma, mb = a["mode"], b["mode"]
    if ma == mb:
        ma, mb = f"{ma}#1", f"{mb}#2"
    by_a = {r["step"]: r for r in a["steps"]}
    by_b = {r["step"]: r for r in b["steps"]}
    rows, bad = [], []
    for step in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(step), by_b.get(step)
        if ra is None or rb is None:
            bad.append(step)
            rows.append({"bench": "train/graphs_check", "step": step, "missing_in": ma if ra is None else mb})
            continue
        dl, dg = rel(ra["loss"], rb["loss"]), rel(ra["grad_norm"], rb["grad_norm"])
        ok = dl <= loss_rtol and dg <= gnorm_rtol  # NaN compares False: a non-finite step fails
        if not ok:
            bad.append(step)
        rows.append({
            "bench": "train/graphs_check", "step": step, "ok": ok,
            "loss": {ma: ra["loss"], mb: rb["loss"]}, "loss_rel_diff": round(dl, 7),
            "grad_norm": {ma: ra["grad_norm"], mb: rb["grad_norm"]}, "grad_norm_rel_diff": round(dg, 7),
            "step_ms": {ma: round(ra["step_time"] * 1e3, 2), mb: round(rb["step_time"] * 1e3, 2)},
        })  # fmt: skip

    def timed(run: dict) -> float | None:
        ms = [r["step_time"] * 1e3 for r in run["steps"] if r["step"] > skip]
        return round(statistics.median(ms), 2) if ms else None

    ta, tb = timed(a), timed(b)
    runs_ok = a["rc"] == 0 and b["rc"] == 0
    summary = {
        "bench": "train/graphs_check_summary",
        "ok": runs_ok and not bad and bool(rows),
        "modes": [ma, mb],
        "rc": {ma: a["rc"], mb: b["rc"]},
        "steps_compared": len(rows),
        "steps_differing": bad,
        "loss_rtol": loss_rtol,
        "gnorm_rtol": gnorm_rtol,
        "max_loss_rel_diff": max((r.get("loss_rel_diff", 0.0) for r in rows), default=None),
        "max_grad_norm_rel_diff": max((r.get("grad_norm_rel_diff", 0.0) for r in rows), default=None),
        f"step_ms_median_after_{skip}": {ma: ta, mb: tb},
        "speedup": round(ta / tb, 3) if ta and tb else None,
        "wall_s": {ma: a["wall_s"], mb: b["wall_s"]},
        "max_allocated_gb": {
            ma: max((r.get("memory/max_allocated_gb", 0.0) for r in a["steps"]), default=None),
            mb: max((r.get("memory/max_allocated_gb", 0.0) for r in b["steps"]), default=None),
        },
    }
    for run, name in ((a, ma), (b, mb)):
        if "stderr_tail" in run:
            summary[f"stderr_tail_{name}"] = run["stderr_tail"]
    return rows, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(_REPO / "configs" / "m7c_125m.yaml"))
    ap.add_argument("--set", action="append", default=[], dest="sets", help="config override key=value")
    ap.add_argument("--modes", default="default,reduce-overhead", help="the two compile modes compared")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per run")
    ap.add_argument("--grad-accum", type=int, default=4, help="micro-batches per optimizer step")
    ap.add_argument("--batch-size", type=int, default=4, help="sequences per micro-batch")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument(
        "--skip", type=int, default=2, help="first steps left out of the step ms (compile, recording)"
    )
    ap.add_argument("--loss-rtol", type=float, default=0.01, help="relative loss difference allowed per step")
    ap.add_argument(
        "--gnorm-rtol", type=float, default=0.01, help="relative grad-norm difference allowed per step"
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument(
        "--control",
        action="store_true",
        help="a third run: the second mode without the trainer's own .grad buffers, which must differ or fail",
    )
    ap.add_argument("--run-dir", default=None, help="keep the two runs' dirs here (default: a temporary dir)")
    args = ap.parse_args(argv)
    modes, problem = check_args(args)
    if problem:
        print(f"graphs_check: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.run_dir or tmp)
        runs = [announce(train(args, mode, root / f"{i}-{mode}")) for i, mode in enumerate(modes)]
        control = (
            announce(train(args, modes[1], root / f"2-{modes[1]}-control", control=True))
            if args.control
            else None
        )
    rows, summary = compare(runs[0], runs[1], args.loss_rtol, args.gnorm_rtol, args.skip)
    if control is not None:
        c_rows, c_sum = compare(runs[0], control, args.loss_rtol, args.gnorm_rtol, args.skip)
        detected = control["rc"] != 0 or bool(c_sum["steps_differing"])
        summary["control"] = {
            "what": f"{modes[1]} without the trainer's own .grad buffers: must differ from {modes[0]} or fail",
            "rc": control["rc"], "steps_differing": c_sum["steps_differing"], "detected": detected,
            "max_grad_norm_rel_diff": c_sum["max_grad_norm_rel_diff"],
            "grad_norm_step1": [r.get("grad_norm") for r in c_rows[:1]],
            "stderr_tail": control.get("stderr_tail", "")[-600:],
        }  # fmt: skip
        summary["ok"] = summary["ok"] and detected
    summary.update(config=args.config, sets=args.sets, grad_accum=args.grad_accum, batch_size=args.batch_size,
                   seq_len=args.seq_len, steps=args.steps)  # fmt: skip
    for row in rows:
        print(json.dumps(row), flush=True)
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
