"""Section f of the GPU suite: training runs of `python -m nsa.train` on one GPU (CUDA only).

Owns the list of runs (`train_runs`: configs/m7c_125m.yaml, dense and NSA x activation checkpointing
{none, full} x {eager, compiled}, synthetic data; and the 64k-token NSA run of configs/m7c_64k.yaml
with every block recomputed, its peak memory beside bench/memory.py's prediction for the same
step), running them in subprocesses within `suite.left()`, and reading the trainer's metrics.jsonl
(tokens/s after warm-up, peak allocated / reserved GiB, last loss). It must not change a config's
model or install anything; run dirs and logs go under the suite's OUT_DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nsa.attention.gpusuite.budget import Item, Items, train_estimate
from nsa.attention.gpusuite.checks import Plan

REPO = Path(__file__).resolve().parents[3]

# ---------------------------------------------------------------------------------------- f) train
TRAIN_CONFIG = REPO / "configs" / "m7c_125m.yaml"
TRAIN_TOKENS_PER_STEP = 16384
# (activation checkpointing, compiled) in the order they run, most telling first (time may cut the
# tail): what the configs ship (none, compiled), what they shipped before issue 23 (full, eager),
# then the other two. --quick keeps the first, at seq 2048 only.
TRAIN_SETTINGS = (("none", True), ("full", False), ("none", False), ("full", True))
# Issue 20, item 4: the 125M NSA model at 64k tokens per sequence with every block recomputed
# (configs/m7c_64k.yaml), one sequence per step. Eager, as bench/memory.py counts it (a compiled
# block keeps fewer temporaries, so eager is the upper end), and one micro-batch per step (the
# config's 8 accumulated ones take 8x the time for the same peak, less one gradient's fp32 size).
LONG_CONFIG = REPO / "configs" / "m7c_64k.yaml"
LONG_SEQ = 65536
MEMORY_SCRIPT = REPO / "bench" / "memory.py"


def _run(config: Path, attention: str, seq: int, bs: int, steps: int, ac: str, compiled: bool) -> dict:
    sets = {
        "model.attention": attention, "data.source": "synthetic", "train.seq_len": seq,
        "train.batch_size": bs, "train.grad_accum": 1, "train.global_batch": bs,
        "train.steps": steps, "train.warmup_steps": 0, "train.log_every": 1,
        "train.eval_every": 0, "train.save_every": 0, "train.save_final": "false",
        "train.device": "cuda", "telemetry.tensorboard": "false",
        "parallel.activation_checkpointing": ac, "parallel.compile": str(compiled).lower(),
    }  # fmt: skip
    return {
        "name": f"{attention}-{seq}-ac_{ac}-{'compiled' if compiled else 'eager'}",
        "config": str(config.relative_to(REPO)), "attention": attention, "seq_len": seq, "batch_size": bs,
        "activation_checkpointing": ac, "compile": compiled, "steps": steps,
        "estimate_s": train_estimate(compiled, seq * bs, steps),
        "sets": [f"{k}={v}" for k, v in sets.items()],
    }  # fmt: skip


def train_runs(plan: Plan) -> list[dict]:
    """Every training run of the section, in order, each with its config and --set list: dense and
    NSA x checkpointing {none, full} x {eager, compiled} at each of `plan.train_seqs` (--quick: the
    shipped setting only), and after the first pair the 64k NSA run with its memory prediction."""
    settings = TRAIN_SETTINGS[:1] if plan.mode == "quick" else TRAIN_SETTINGS
    runs = []
    for seq in plan.train_seqs:
        bs = max(1, TRAIN_TOKENS_PER_STEP // seq)
        for ac, compiled in settings:
            for attention in ("dense", "nsa"):
                runs.append(_run(TRAIN_CONFIG, attention, seq, bs, plan.train_steps, ac, compiled))
    if plan.long_train_steps:
        long = _run(LONG_CONFIG, "nsa", LONG_SEQ, 1, plan.long_train_steps, "full", False)
        long["predict_memory"] = True
        runs.insert(min(2, len(runs)), long)
    return runs


def memory_prediction_command(run: dict) -> list[str]:
    """bench/memory.py for the run's model, sequence, batch and checkpointing (on the meta device:
    CPU only, seconds; run beside the GPU run)."""
    cmd = [sys.executable, str(MEMORY_SCRIPT), "--config", str(REPO / run["config"]), "--top", "0",
           "--checkpointing", run["activation_checkpointing"]]  # fmt: skip
    for x in run["sets"]:
        if not x.startswith("parallel."):  # memory.py sets checkpointing from --checkpointing, compile off
            cmd += ["--set", x]
    return cmd


def _prediction(proc: subprocess.Popen | None, timeout: float) -> dict:
    """bench/memory.py's JSON row for the run, or why there is none; never fails the run."""
    if proc is None:
        return {"skipped": f"no {MEMORY_SCRIPT.relative_to(REPO)} in this checkout"}
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"skipped": f"bench/memory.py did not finish in {timeout:.0f} s"}
    rows = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not rows:
        return {"skipped": f"bench/memory.py exit {proc.returncode}: {err.strip()[-300:]}"}
    return rows[-1]


def _text(x: bytes | str | None) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else x or ""


def train(plan: Plan, suite) -> dict:
    records = []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("TRITON_INTERPRET", None)
    runs = train_runs(plan)
    items = Items(suite, [Item(r["name"], r["estimate_s"], r) for r in runs])
    for item in items:
        run = item.spec
        run_dir = suite.out_dir / "train" / run["name"]
        if run_dir.exists():
            shutil.rmtree(run_dir)
        cmd = [
            sys.executable,
            "-m",
            "nsa.train",
            "--config",
            str(REPO / run["config"]),
            "--run-dir",
            str(run_dir),
        ]
        for x in run["sets"]:
            cmd += ["--set", x]
        predictor = None
        if run.get("predict_memory") and MEMORY_SCRIPT.is_file():  # CPU work, beside the GPU run
            predictor = subprocess.Popen(memory_prediction_command(run), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env={**env, "CUDA_VISIBLE_DEVICES": ""},
                                         cwd=REPO)  # fmt: skip
        t = time.monotonic()
        rec = {k: v for k, v in run.items() if k not in ("sets", "predict_memory")}
        log = suite.out_dir / f"train-{run['name']}.log"
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10.0, min(300.0, suite.left())),
                               env=env, cwd=REPO)  # fmt: skip
            rec["exit_code"], text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rec["exit_code"], rec["error"] = None, f"timed out after {e.timeout:.0f} s"
            text = "".join(_text(x) for x in (e.stdout, e.stderr))
        except BaseException:  # the suite itself broke (not the run): leave no process behind
            if predictor is not None:
                predictor.kill()
            raise
        log.write_text(text)
        rec["seconds"] = round(time.monotonic() - t, 1)
        rec.update(read_train_metrics(run_dir / "metrics.jsonl"))
        if rec["exit_code"] != 0:  # why, without opening the log (an OOM at 64k, a refused config)
            rec["log_tail"] = [x[:300] for x in text.strip().splitlines()[-6:]]
        if run.get("predict_memory"):
            pred = _prediction(predictor, timeout=min(120.0, max(10.0, suite.left())))
            rec["memory_predicted"] = pred
            if "total_gib" in pred and "peak_allocated_gib" in rec:
                rec["predicted_gib"] = pred["total_gib"]
                rec["measured_over_predicted"] = round(rec["peak_allocated_gib"] / pred["total_gib"], 3)
        rec["ok"] = rec.get("exit_code") == 0 and "tokens_per_s_median" in rec
        records.append(rec)
    ok = bool(records) and all(r["ok"] for r in records)
    return {"ok": ok, "summary": train_summary(records, items.skipped), "records": records, **items.fields()}


def train_summary(records: list[dict], skipped: list[str]) -> str:
    """Each run's tokens/s and peak GiB (and the 64k run's prediction), then what was skipped."""
    phrases = []
    for r in records:
        tps, peak = r.get("tokens_per_s_median"), r.get("peak_allocated_gib")
        text = f"{r['name']}: " + (f"{tps:,} tok/s, " if tps is not None else "? tok/s, ")
        text += f"{peak:.2f} GiB" if peak is not None else "? GiB"
        if "predicted_gib" in r:
            text += f" (bench/memory.py predicts {r['predicted_gib']:.2f})"
        if not r["ok"]:
            text += f" FAILED ({r.get('error') or 'exit code ' + str(r.get('exit_code'))})"
        phrases.append(text)
    if skipped:
        phrases.append(f"skipped for time: {', '.join(skipped)}")
    return "; ".join(phrases)


def read_train_metrics(metrics: Path) -> dict:
    """Median tokens/s (and MFU) after warm-up, peak allocated and reserved GiB, the first and last
    loss, from the trainer's metrics.jsonl (the keys nsa.train.trainer writes on each log step)."""
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
    rows = [r for r in rows if "tokens_per_s" in r]
    warm = rows[2:] or rows[-1:]  # the first steps compile kernels and warm the allocator
    if not warm:
        return {}
    tps = sorted(r["tokens_per_s"] for r in warm)
    out = {
        "tokens_per_s_median": round(tps[len(tps) // 2]),
        "steps_measured": len(warm),
        "peak_allocated_gib": round(max(r.get("memory/max_allocated_gb", 0) for r in rows), 3),
        "first_loss": rows[0].get("loss"),
        "final_loss": rows[-1].get("loss"),
    }
    mfu = sorted(r["throughput/mfu"] for r in warm if "throughput/mfu" in r)
    if mfu:  # a GPU the trainer knows the peak of
        out["mfu_median"] = round(mfu[len(mfu) // 2], 4)
    if any("memory/max_reserved_gb" in r for r in rows):
        out["peak_reserved_gib"] = round(max(r.get("memory/max_reserved_gb", 0) for r in rows), 3)
    return out
