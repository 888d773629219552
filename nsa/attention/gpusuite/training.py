"""Section f of the GPU suite: training runs of `python -m nsa.train` on one GPU (CUDA only).

Owns the list of runs (`train_runs`: configs/m7c_125m.yaml, dense and NSA x activation checkpointing
{none, full} x {eager, compiled}, synthetic data; and the 64k-token NSA run of configs/m7c_64k.yaml
with every block recomputed, its peak memory beside bench/memory.py's prediction for the same
step), running them in subprocesses within `suite.left()`, judging one that does not finish from
its metrics.jsonl (cut for time while making steps, hung, crashed: `watch`), and reading the
trainer's metrics.jsonl (tokens/s after warm-up, peak allocated / reserved GiB, last loss). It must
not change a config's model or install anything; run dirs and logs go under the suite's OUT_DIR.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from nsa.attention.gpusuite.budget import Item, Items, train_estimate, train_start_s
from nsa.attention.gpusuite.checks import Plan

REPO = Path(__file__).resolve().parents[3]

# ---------------------------------------------------------------------------------------- f) train
TRAIN_CONFIG = REPO / "configs" / "m7c_125m.yaml"
TRAIN_TOKENS_PER_STEP = 16384
# (activation checkpointing, compiled) in the order they run, most telling first (time may cut the
# tail): what the configs ship (none, compiled), what they shipped before issue 23 (full, eager),
# then the other two. --quick keeps the first, at seq 2048 only. In each pair NSA runs before dense:
# NSA is what the section is for, dense its reference (measured three times at the shipped setting,
# 402k-470k tok/s: bench/gpu/), so a budget that fits one of the two keeps NSA's.
TRAIN_SETTINGS = (("none", True), ("full", False), ("none", False), ("full", True))
TRAIN_ATTENTIONS = ("nsa", "dense")
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
        "estimate_s": train_estimate(attention, seq, compiled, steps),
        "sets": [f"{k}={v}" for k, v in sets.items()],
    }  # fmt: skip


def train_runs(plan: Plan) -> list[dict]:
    """Every training run of the section, in order, each with its config and --set list: NSA and
    dense x checkpointing {none, full} x {eager, compiled} at each of `plan.train_seqs` (--quick: the
    shipped setting only). The 64k NSA run with its memory prediction comes second, after the first
    NSA run and before its dense reference: ~17 s (its estimate) for the one check of the memory at
    length, where the dense reference repeats what three runs measured."""
    settings = TRAIN_SETTINGS[:1] if plan.mode == "quick" else TRAIN_SETTINGS
    runs = []
    for seq in plan.train_seqs:
        bs = max(1, TRAIN_TOKENS_PER_STEP // seq)
        for ac, compiled in settings:
            for attention in TRAIN_ATTENTIONS:
                runs.append(_run(TRAIN_CONFIG, attention, seq, bs, plan.train_steps, ac, compiled))
    if plan.long_train_steps:
        long = _run(LONG_CONFIG, "nsa", LONG_SEQ, 1, plan.long_train_steps, "full", False)
        long["predict_memory"] = True
        runs.insert(min(1, len(runs)), long)
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


# How a run that has not exited is judged, from the rows of its metrics.jsonl (one per step: the runs
# log every step). No new row for longer than its allowance: hung (killed, FAILED, with its log
# tail). Before the first row the allowance is twice the run's start estimate (the first step
# compiles: 35.9 s of the 2026-11-26c H100 NSA run's ~53 s to its first row), at least 60 s (the
# eager runs' 9-14 s were measured after a compiled NSA run had filled Triton's cache; cold, NSA's
# ~17 kernels take ~12 s more: the numerics estimate). After the first row, 30 s: 18x the slowest
# step any run has logged (the 64k run's first, 1.65 s on the 2026-11-26b H200). Still making steps
# when the section's time ends: cut for time (killed, its partial figures kept, not a failure).
# Exited: finished (exit 0 with figures) or crashed (anything else, FAILED).
HANG_FIRST_FACTOR = 2.0
HANG_FIRST_MIN_S = 60.0
HANG_STEP_S = 30.0
POLL_S = 0.5


def train_command(run: dict, run_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "nsa.train", "--config", str(REPO / run["config"]), "--run-dir", str(run_dir)]  # fmt: skip
    for x in run["sets"]:
        cmd += ["--set", x]
    return cmd


def _rows(metrics: Path) -> int:
    try:
        return metrics.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _stop(proc: subprocess.Popen) -> None:
    """Kill the run and what it started (inductor's compile workers): its own process group."""
    with contextlib.suppress(ProcessLookupError):  # exited meanwhile, with everything it started
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def watch(proc: subprocess.Popen, metrics: Path, first_step_s: float, seconds: float) -> dict:
    """Wait for the run in `proc` (its own process group) for at most `seconds`, watching `metrics`
    grow. Returns how it stopped: {"stopped": "exited"}; {"stopped": "time", "steps_logged": n} (cut
    while making steps, or before its first while still within the first step's allowance);
    {"stopped": "hang", "steps_logged": n, "idle_s": s} (no new step within the allowance)."""
    t0 = time.monotonic()
    last, n = t0, 0
    while proc.poll() is None:
        now = time.monotonic()
        k = _rows(metrics)
        if k != n:
            n, last = k, now
        allowance = HANG_STEP_S if n else first_step_s
        if now - last > allowance:
            _stop(proc)
            return {"stopped": "hang", "steps_logged": n, "idle_s": round(now - last, 1)}
        if now - t0 >= seconds:
            _stop(proc)
            return {"stopped": "time", "steps_logged": n}
        time.sleep(min(POLL_S, max(0.01, seconds - (now - t0))))
    _stop(proc)  # what it left behind (a crash can leave inductor's compile workers)
    return {"stopped": "exited"}


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
        predictor = None
        if run.get("predict_memory") and MEMORY_SCRIPT.is_file():  # CPU work, beside the GPU run
            predictor = subprocess.Popen(memory_prediction_command(run), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env={**env, "CUDA_VISIBLE_DEVICES": ""},
                                         cwd=REPO)  # fmt: skip
        t = time.monotonic()
        rec = {k: v for k, v in run.items() if k not in ("sets", "predict_memory")}
        log = suite.out_dir / f"train-{run['name']}.log"
        start_s = train_start_s(run["attention"], run["seq_len"], run["compile"])
        first_step_s = max(HANG_FIRST_MIN_S, HANG_FIRST_FACTOR * start_s)
        with open(log, "w") as out:
            proc = subprocess.Popen(train_command(run, run_dir), stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=REPO, start_new_session=True)  # fmt: skip
            try:
                how = watch(proc, run_dir / "metrics.jsonl", first_step_s, max(1.0, suite.left()))
            except BaseException:  # the suite itself broke (not the run): leave no process behind
                _stop(proc)
                if predictor is not None:
                    predictor.kill()
                raise
        text = log.read_text(errors="replace")
        rec["seconds"] = round(time.monotonic() - t, 1)
        rec["exit_code"] = proc.returncode if how["stopped"] == "exited" else None
        rec.update(read_train_metrics(run_dir / "metrics.jsonl"))
        if how["stopped"] == "time":
            rec["cut_for_time"] = {"steps_logged": how["steps_logged"], "after_s": rec["seconds"]}
        elif how["stopped"] == "hang":
            rec["hung"] = {"steps_logged": how["steps_logged"], "idle_s": how["idle_s"]}
            step = f"after step {how['steps_logged']}" if how["steps_logged"] else "before its first step"
            rec["error"] = f"hung: no new step for {how['idle_s']:.0f} s {step} of {run['steps']}, killed"
        if how["stopped"] == "hang" or (how["stopped"] == "exited" and rec["exit_code"] != 0):
            rec["log_tail"] = [x[:300] for x in text.strip().splitlines()[-6:]]  # why, without the log
        if run.get("predict_memory"):
            pred = _prediction(predictor, timeout=min(120.0, max(10.0, suite.left())))
            rec["memory_predicted"] = pred
            if "total_gib" in pred and "peak_allocated_gib" in rec:
                rec["predicted_gib"] = pred["total_gib"]
                rec["measured_over_predicted"] = round(rec["peak_allocated_gib"] / pred["total_gib"], 3)
        if how["stopped"] == "time":  # not a fault: figures if it logged any, else nothing to judge
            rec["ok"] = True if "tokens_per_s_median" in rec else None
        else:
            rec["ok"] = how["stopped"] == "exited" and rec["exit_code"] == 0 and "tokens_per_s_median" in rec
        records.append(rec)
    res = {"ok": section_ok(records), "summary": train_summary(records, items.skipped), "records": records,
           **items.fields()}  # fmt: skip
    if records and res["ok"] is None:
        res["skipped"] = f"time budget: all {len(records)} run(s) cut for time before their first step"
    return res


def section_ok(records: list[dict]) -> bool | None:
    """False when a run failed (crashed, hung, no figures); None when no run has figures (every one
    cut for time before its first step); True otherwise: a run cut for time is not a failure."""
    if any(r["ok"] is False for r in records):
        return False
    return True if any(r["ok"] for r in records) or not records else None


def train_summary(records: list[dict], skipped: list[str]) -> str:
    """Each run's tokens/s and peak GiB (and the 64k run's prediction), how a run that did not
    finish stopped, then what was skipped."""
    phrases = []
    for r in records:
        tps, peak = r.get("tokens_per_s_median"), r.get("peak_allocated_gib")
        text = f"{r['name']}: " + (f"{tps:,} tok/s, " if tps is not None else "? tok/s, ")
        text += f"{peak:.2f} GiB" if peak is not None else "? GiB"
        if "predicted_gib" in r:
            text += f" (bench/memory.py predicts {r['predicted_gib']:.2f})"
        if "cut_for_time" in r:
            n, after = r["cut_for_time"]["steps_logged"], r["cut_for_time"]["after_s"]
            text += f" (cut for time after {after:.0f} s, {n} of {r['steps']} steps)"
        elif not r["ok"]:
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
