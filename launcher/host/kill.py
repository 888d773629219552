"""`kill`: stop every process of a run (TERM, grace, KILL), end its tmux sessions, verify none is left.

Owns the kill's guarantees: processes started meanwhile are caught (the set is re-read every poll),
nothing of the run survives, and no process of it holds GPU memory; it records `killed.json` only
when it stopped something of a run that had not ended. The reply says what it found and did.
"""

from __future__ import annotations

import time
from typing import Any

from launcher.host import gpu, procs, tmux
from nsa.runfiles import RunDir, atomic_write_json


def cmd_kill(req: dict[str, Any]) -> dict[str, Any]:
    """TERM the run's processes (and groups), grace, KILL; end the tmux sessions; verify none left."""
    run, rd = req["run"], RunDir(req["run_dir"])
    node = int(req.get("node", 0))
    pane_pid = tmux.train_pane_pid(req, run, node)
    tag = str(rd.root)

    def now_pids() -> set[int]:
        return procs.run_pids(tag, pane_pid)

    before = sorted(now_pids())
    already_done = rd.exit_code() is not None or rd.killed_file.exists()
    # Read before the kill: the wrapper now outlives the trainer's save and records its exit code.
    was_running = rd.exit_code() is None
    if before and rd.root.exists() and was_running:  # before any signal: no restart of a stopping run
        atomic_write_json(rd.stop_requested_file, {"time": time.time(), "by": "nsa-launch"})
    # The trainer checkpoints at the next step boundary on SIGTERM; the grace must cover that.
    remaining = procs.term_then_kill(now_pids, float(req.get("grace_s", 10.0)), spare=procs.is_wrapper)
    tmux.end_sessions(req, tmux.session_name(run, node))
    remaining |= now_pids()
    on_gpu = gpu.gpu_pids()
    gpu_left = sorted(p for p in (on_gpu or {}) if p in set(before) | remaining)
    killed = not remaining and not gpu_left
    if before and rd.root.exists() and was_running:
        atomic_write_json(
            rd.killed_file, {"time": time.time(), "by": "nsa-launch", "pids": before, "verified": killed}
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
    return {
        "ok": True,
        "killed": killed,
        "remaining_pids": sorted(remaining),
        "gpu_pids": gpu_left,
        "stopped_pids": before,
        "message": msg,
    }
