"""A run's state on the host, derived from its run dir plus its tmux pane: `status` and `wait_started`.

Owns the state rules (docs/ARCHITECTURE.md "Run states": starting, restarting, running, stalled,
finished, failed, killed, lost), the error a failed or stalled run reports (failed: `runfiles.failure_cause`,
disk full or torchrun's first failing rank; stalled: the trainer's own event; a stopped (T state)
rank by name and pid; killed: a final save that failed, with the steps it lost),
elapsed time and the ETA. It only reads: it must not write the run dir or signal processes.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from launcher.host import gpu, procs, restarts, tmux
from launcher.host.logtail import error_lines, log_tail
from nsa.runfiles import RunDir, failure_cause, iter_jsonl, read_json, tail_jsonl

WAITING = ("starting", "restarting")  # no heartbeat of the current start yet


def run_status(req: dict[str, Any], now: float) -> dict[str, Any]:
    rd = RunDir(req["run_dir"])
    run = req["run"]
    manifest = read_json(rd.manifest) or {}
    pane_pid = tmux.train_pane_pid(req, run, int(req.get("node", 0)))
    pids = sorted(procs.run_pids(str(rd.root), pane_pid)) if rd.root.exists() else []
    hbs = rd.heartbeats()
    recs = tail_jsonl(rd.metrics, 65536)
    # Eval records share metrics.jsonl; the train record is the last one carrying `loss`.
    metrics = next((r for r in reversed(recs) if "loss" in r), {})
    val = next((r for r in reversed(recs) if "loss/val" in r), {})
    exit_code = rd.exit_code()
    # An empty `killed` (written on a full disk, launcher/host/kill.py) still means killed.
    killed = (read_json(rd.killed_file) or {}) if rd.killed_file.exists() else None
    events = tail_jsonl(rd.events, 16384)
    stall_s = float(manifest.get("stall_seconds") or 300)
    restarted = manifest.get("restarts") or []  # `nsa-launch restart` times (launcher/host/start.py)
    restarted_at = float(restarted[-1].get("time") or 0) if restarted else None
    error = None
    if not rd.root.exists():
        state, error = "lost", f"run dir {rd.root} does not exist on this host"
    elif killed is not None:
        state = "killed"
        final = killed.get("final_save") or {}
        if final.get("ok") is False:
            error = final.get("line") or f"final save failed: {final.get('cause')}"
    elif exit_code is not None:
        state = "finished" if exit_code == 0 else "failed"
    elif pane_pid is None and not pids:
        state = "failed"
        error = failure_cause(rd, None) or (
            "the run's tmux session ended without writing exit_code (the wrapper was killed) and no rank "
            "said why; see train.log"
        )
    elif restarted_at is not None and all(hb.time < restarted_at for hb in hbs.values()):
        state = "restarting"  # the heartbeats are the previous start's: not running again yet
    elif not hbs:
        state = "starting"
    elif max(now - hb.time for hb in hbs.values()) > stall_s and all(
        hb.phase != "done" for hb in hbs.values()
    ):
        state = "stalled"
    else:
        state = "running"
    if error is None and state == "failed":
        # Every failed state carries one line: disk full, the first failing rank (code or signal), ...
        error = failure_cause(rd, exit_code)
    if error is None and state in ("failed", "stalled"):
        # The trainer's own account (an `error` or `stalled` event) says more than an exit code.
        ev = next((e for e in reversed(events) if e.get("kind") in ("error", "stalled")), None)
        if ev is not None:
            d = ev.get("detail") or {}
            what = ": ".join(str(d[k]) for k in ("error", "message") if d.get(k)) or json.dumps(
                d, sort_keys=True
            )
            error = f"{ev['kind']} at step {ev.get('step')}: {what}"
    if state not in ("killed", "finished", "lost"):
        # A stopped rank (SIGSTOP, Ctrl-Z, a debugger) is not dead: name it, whatever else is said.
        held = _stopped_ranks(hbs, pids)
        if held:
            state = "stalled" if state == "running" else state
            error = (
                "; ".join(f"rank {r} (pid {p}) is stopped (T state)" for r, p in held)
                + f": `kill -CONT {' '.join(str(p) for _, p in held)}` on the host resumes it; "
                "nsa-launch kill continues it and stops the run"
            )
    step = max([hb.step for hb in hbs.values()] + [int(metrics.get("step", 0) or 0)] or [0])
    total = manifest.get("total_steps")
    started = manifest.get("started_at")
    ended = rd.exit_code_file.stat().st_mtime if exit_code is not None else (killed or {}).get("time")
    elapsed = ((ended or now) - started) if started else None
    eta = _eta(events, hbs, step, total) if state in ("running", "stalled") else None
    return {
        "run": run,
        "host": manifest.get("host") or socket.gethostname(),
        "profile": manifest.get("profile"),
        "state": state,
        "step": step,
        "total_steps": total,
        "loss": metrics.get("loss"),
        "val_loss": val.get("loss/val"),
        "tokens_per_s": metrics.get("tokens_per_s"),
        "eta_s": eta,
        "elapsed_s": elapsed,
        "heartbeat_age_s": {str(r): round(now - hb.time, 3) for r, hb in sorted(hbs.items())},
        "phases": {str(r): hb.phase for r, hb in sorted(hbs.items())},
        "gpus": [],
        "exit_code": exit_code,
        "pids": pids,
        "events": events[-5:],
        **({"events_since": _events_since(rd, float(req["events_since"]))} if "events_since" in req else {}),
        "restarts": restarts.summary(rd, manifest.get("max_restarts")),
        "time": now,
        "error": error,
        "run_dir": str(rd.root),
    }


# What `restart` needs to say where a run resumed: read from the whole file, since a training run
# writes many events after its boot (the last five never held it).
RESUME_KINDS = ("boot", "resumed", "checkpoint_fallback", "error", "restart", "restarts_stopped")


def _events_since(rd: RunDir, since: float) -> list[dict[str, Any]]:
    return [
        e
        for e in iter_jsonl(rd.events)
        if e.get("kind") in RESUME_KINDS and float(e.get("time") or 0) >= since
    ][:50]


def _stopped_ranks(hbs: dict[int, Any], pids: list[int]) -> list[tuple[int, int]]:
    """(rank, pid) of each rank whose process is in T state; any other stopped process of the run as
    rank -1 would be noise (the wrapper's shell under job control), so only heartbeat pids count."""
    mine = set(pids)
    return sorted((r, hb.pid) for r, hb in hbs.items() if hb.pid in mine and procs.stopped([hb.pid]))


def _eta(events: list[dict[str, Any]], hbs: dict[int, Any], step: int, total: Any) -> float | None:
    first = next((e for e in events if e.get("kind") == "first_step"), None)
    if not total or not first or not hbs:
        return None
    s0, t0 = int(first.get("step") or 0), float(first["time"])
    t1 = max(hb.time for hb in hbs.values())
    if step <= s0 or t1 <= t0:
        return None
    return round((int(total) - step) * (t1 - t0) / (step - s0), 1)


def cmd_status(req: dict[str, Any]) -> dict[str, Any]:
    now = time.time()
    gpus = gpu.gpus()
    runs = []
    for r in req.get("runs", []):
        st = run_status({**r, "tmux_socket": req.get("tmux_socket")}, now)
        st["gpus"] = gpus
        runs.append(st)
    return {"ok": True, "host": socket.gethostname(), "time": now, "gpus": gpus, "runs": runs}


def cmd_wait_started(req: dict[str, Any]) -> dict[str, Any]:
    """Poll until the first heartbeat, the run's end, or the timeout; reply with status and log tail."""
    deadline = time.monotonic() + float(req.get("timeout_s", 600))
    while True:
        st = run_status(req, time.time())
        if st["state"] not in WAITING or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    lines = log_tail(RunDir(req["run_dir"]).train_log, 300)
    st["log_tail"] = lines[-int(req.get("tail", 20)) :]
    st["error_lines"] = error_lines(lines)
    return {"ok": True, "status": st, "timed_out": st["state"] in WAITING}
