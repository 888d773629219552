"""`kill`: stop every process of a run (CONT, TERM, grace, KILL), end its tmux sessions, verify none is
left, and say whether the trainer's final save kept every step.

Owns the kill's guarantees: processes started meanwhile are caught (the set is re-read every poll),
stopped ranks are continued first (a stopped rank holds its SIGTERM until the grace runs out),
nothing of the run survives, and no process of it holds GPU memory; it records `killed.json` only
when it stopped something of a run that had not ended, with the final save's outcome. The reply
says what it found and did, and, when steps were lost, the newest saved step N, the last trained
step M and why the save failed (`final_save_failed`): the CLI exits non-zero on it.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Any

from launcher.host import gpu, procs, tmux
from nsa.runfiles import (
    RunDir,
    atomic_write_json,
    checkpoint_step,
    disk_full_cause,
    iter_jsonl,
    read_json,
    read_tail,
)


def cmd_kill(req: dict[str, Any]) -> dict[str, Any]:
    """CONT stopped ranks, TERM the run's processes (and groups), grace, KILL; end the tmux sessions;
    verify none left; judge the final save."""
    run, rd = req["run"], RunDir(req["run_dir"])
    node = int(req.get("node", 0))
    pane_pid = tmux.train_pane_pid(req, run, node)
    tag = str(rd.root)
    grace = float(req.get("grace_s", 10.0))

    def now_pids() -> set[int]:
        return procs.run_pids(tag, pane_pid)

    before = sorted(now_pids())
    already_done = rd.exit_code() is not None or rd.killed_file.exists()
    # Read before the kill: the wrapper now outlives the trainer's save and records its exit code.
    was_running = rd.exit_code() is None
    t_stop = time.time()
    log_at = rd.train_log.stat().st_size if rd.train_log.exists() else 0
    if before and rd.root.exists() and was_running:  # before any signal: no restart of a stopping run
        _record(rd.stop_requested_file, {"time": t_stop, "by": "nsa-launch"})
    # The trainer checkpoints at the next step boundary on SIGTERM; the grace must cover that.
    report: dict[str, Any] = {}
    remaining = procs.term_then_kill(now_pids, grace, spare=procs.is_wrapper, report=report)
    tmux.end_sessions(req, tmux.session_name(run, node))
    remaining |= now_pids()
    on_gpu = gpu.gpu_pids()
    gpu_left = sorted(p for p in (on_gpu or {}) if p in set(before) | remaining)
    killed = not remaining and not gpu_left
    final = (
        final_save(rd, t_stop, log_at, report, grace)
        if before and rd.root.exists() and was_running
        else {"ok": True}
    )
    if before and rd.root.exists() and was_running:
        _record(
            rd.killed_file,
            {
                "time": time.time(),
                "by": "nsa-launch",
                "pids": before,
                "verified": killed,
                "final_save": final,
            },
        )
    if not before:
        msg = (
            "no process of the run was running"
            + (" (it had already ended)" if already_done else "")
            + "; nothing left"
        )
    elif killed:
        msg = f"stopped {len(before)} processes; verified none is left" + (
            " and none holds GPU memory" if on_gpu is not None else " (no nvidia-smi here: no GPU check)"
        )
    else:
        parts = [f"{len(remaining)} processes survive SIGKILL: {sorted(remaining)}"] if remaining else []
        parts += [f"GPU memory held by {gpu_left} (nvidia-smi --query-compute-apps)"] if gpu_left else []
        msg = "; ".join(parts)
    if report.get("continued"):
        msg += f"; {len(report['continued'])} stopped (T state) processes were continued first"
    if final.get("note"):
        msg += f"; {final['note']}"
    return {
        "ok": True,
        "killed": killed,
        "remaining_pids": sorted(remaining),
        "gpu_pids": gpu_left,
        "stopped_pids": before,
        "continued_pids": report.get("continued", []),
        "message": msg,
        "final_save_failed": not final["ok"],
        "saved_step": final.get("saved_step"),
        "last_step": final.get("last_step"),
        "final_save_cause": final.get("cause"),
    }


def _record(path: Path, obj: dict[str, Any]) -> None:
    """Write a marker file even on a full disk, where the kill matters most: the JSON when it fits,
    else the file empty (an inode, no data block: its existence is what the wrapper and status read).
    A kill must never stop before its signals because a marker could not be written."""
    try:
        atomic_write_json(path, obj)
    except OSError:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def _last_step(rd: RunDir) -> int:
    """The last step a rank of the current start recorded (heartbeats older than the start are the
    previous one's: a kill before the new trainer beats must not count them)."""
    started = float((read_json(rd.manifest) or {}).get("started_at") or 0)
    return max((hb.step for hb in rd.heartbeats().values() if hb.time >= started - 1), default=0)


def final_save(
    rd: RunDir, t_stop: float, log_at: int, report: dict[str, Any], grace: float
) -> dict[str, Any]:
    """Did the trainer's save on SIGTERM keep every step it trained? {"ok", "saved_step" N,
    "last_step" M, "cause", "line"}: not ok when M > N, with the first cause found: the trainer's
    own `error` event after the stop (disk full named as such), its "exiting without a checkpoint"
    line, the SIGKILL after the grace, else a plain "no checkpoint was written"."""
    last = _last_step(rd)
    ck = rd.newest_intact_checkpoint()
    saved = None
    if ck is not None:
        meta = read_json(ck / "meta.json") or {}
        saved = int(meta.get("step", checkpoint_step(ck.name) or 0))
    out: dict[str, Any] = {"ok": True, "saved_step": saved, "last_step": last}
    if last <= (saved or 0):
        return out
    events = [e for e in iter_jsonl(rd.events) if float(e.get("time") or 0) >= t_stop - 1.0]
    terms = [e for e in events if e.get("kind") == "sigterm"]
    if terms and not any((e.get("detail") or {}).get("save") for e in terms):
        # Nothing was armed to save (train.save_every 0 and save_final false): no save failed.
        out["note"] = f"the run saves no checkpoints: steps {(saved or 0) + 1}..{last} were not saved"
        return out
    size = rd.train_log.stat().st_size if rd.train_log.exists() else 0
    log = read_tail(rd.train_log, min(65536, max(0, size - log_at))) if size > log_at else ""
    errors = [e for e in events if e.get("kind") == "error"]
    texts = [str((e.get("detail") or {}).get("message") or "") for e in errors]
    cause = disk_full_cause(rd, "\n".join([*texts, log]))
    if cause is None and texts:
        err = errors[0].get("detail") or {}
        cause = f"{err.get('error', 'error')}: {' '.join(texts[0].split())}"
    if cause is None:
        line = next((ln for ln in reversed(log.splitlines()) if "exiting without a checkpoint" in ln), None)
        # "[rank1]:[nsa] rank 1: no step boundary within 10s ...; exiting without a checkpoint"
        cause = re.sub(r"^(\[[^\]]*\]:?\s*)+", "", line).strip() if line else None
    if cause is None and report.get("sigkilled"):
        cause = f"the save did not finish within the kill grace of {grace:.0f} s (SIGKILL)"
    if cause is None:
        cause = "no checkpoint was written after SIGTERM (see train.log)"
    cause = cause if len(cause) <= 400 else cause[:397] + "..."
    first = (saved or 0) + 1
    out.update(ok=False, cause=cause)
    out["line"] = (
        f"final save failed: {cause}; newest saved step {saved}, steps {first}..{last} are lost"
        if saved is not None
        else f"final save failed: {cause}; no checkpoint was saved, steps 1..{last} are lost"
    )
    return out
