"""The host agent: runs ON the host, owns the run's tmux session, its processes and its status.

    cd <workdir> && PYTHONPATH=<workdir> <python> -m launcher.agent {start|status|kill|logs|tensorboard|free_port}

Reads one JSON request on stdin, prints one JSON reply on stdout (`logs` prints log lines instead).
It is the only code that touches tmux (libtmux session `nsa-<run>`, window `train`) and host
processes. It derives a run's state from the run-dir files (nsa/runfiles.py) plus the tmux session.
Standard library + libtmux + nsa.runfiles only: the host may have nothing else, and the launcher's
side never imports this module's dependencies. Nothing here reads arguments from the command line
beyond the subcommand, so no value ever passes through a shell unquoted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from launcher import procs
from launcher.logtail import error_lines, follow_log, log_tail
from launcher.ports import first_free_port
from nsa.runfiles import RunDir, atomic_write_json, atomic_write_text, read_json, tail_jsonl

WRAPPER = "launch.sh"
SECRETS = ".launch.secrets"
TB_STATE = "tensorboard.json"
TB_LOG = "tensorboard.log"
TB_PORT_TRIES = 3  # TensorBoard starts again on the next free port if another took its port first


def session_name(run: str, node: int = 0) -> str:
    """`nsa-<run>` (what users attach to); on node i > 0 `nsa-<run>-node<i>`, so that two nodes sharing
    one tmux server (two workdirs on one machine, as in the tests) cannot collide."""
    return f"nsa-{run}" if not node else f"nsa-{run}-node{int(node)}"


def _server(req: dict[str, Any]) -> Any:
    import libtmux

    sock = req.get("tmux_socket")
    if sock and "/" in sock:
        return libtmux.Server(socket_path=sock)
    return libtmux.Server(socket_name=sock) if sock else libtmux.Server()


def _session(server: Any, name: str) -> Any | None:
    try:
        if not server.has_session(name):
            return None
        return server.sessions.get(session_name=name, default=None)
    except Exception:  # no server running yet: libtmux raises on an absent socket
        return None


def _tmux_argv(req: dict[str, Any]) -> list[str]:
    sock = req.get("tmux_socket")
    if not sock:
        return ["tmux"]
    return ["tmux", "-S", sock] if "/" in sock else ["tmux", "-L", sock]


def _train_pane_pid(req: dict[str, Any], run: str, node: int = 0) -> int | None:
    """PID of the live `train` pane of the run's session, or None. One tmux exec and no libtmux import:
    status runs every second or two from the dashboard, so its cost matters."""
    fmt = "#{window_name}\t#{pane_pid}\t#{pane_dead}"
    try:
        out = subprocess.run(
            [*_tmux_argv(req), "list-panes", "-s", "-t", "=" + session_name(run, node), "-F", fmt],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] == "train" and parts[2] != "1" and parts[1].isdigit():
            return int(parts[1])
    return None


def wrapper_script(req: dict[str, Any]) -> str:
    """The bash wrapper tmux runs: exports, torchrun tee'd with pipefail, the true exit code."""
    q = shlex.quote
    rd = req["run_dir"]
    log, code = f"{rd}/train.log", f"{rd}/exit_code"
    lines = [
        "#!/usr/bin/env bash",
        f"# Written by nsa-launch for run {req['run']!r}; tmux runs it as `bash {WRAPPER} [--resume]`.",
        "set -o pipefail",
        f"cd -- {q(req['workdir'])} || exit 97",
    ]
    env = dict(req.get("env", {}))
    env.update(
        {"PYTHONUNBUFFERED": "1", "NSA_RUN_ID": req["run"], procs.TAG: rd, "PYTHONPATH": req["workdir"]}
    )
    lines += [f"export {k}={q(v)}" for k, v in sorted(env.items())]
    lines += [
        f"if [ -f {q(rd + '/' + SECRETS)} ]; then . {q(rd + '/' + SECRETS)}; rm -f -- {q(rd + '/' + SECRETS)}; fi",
        f'printf \'%s\\n\' "[nsa-launch] $(date -u +%Y-%m-%dT%H:%M:%SZ) start: "{q(shlex.join(req["argv"]))}" $*"'
        f" >> {q(log)}",
        f'{shlex.join(req["argv"])} "$@" 2>&1 | tee -a -- {q(log)}',
        "ec=${PIPESTATUS[0]}",
        f"printf '%s\\n' \"$ec\" > {q(code + '.tmp')} && mv -f -- {q(code + '.tmp')} {q(code)}",
        f"printf '%s\\n' \"[nsa-launch] torchrun exited with $ec\" >> {q(log)}",
        'exit "$ec"',
        "",
    ]
    return "\n".join(lines)


# --- commands -----------------------------------------------------------------------------------
def cmd_start(req: dict[str, Any]) -> dict[str, Any]:
    """Create the run dir (or reuse it with resume), write manifest + wrapper, start tmux."""
    run, rd = req["run"], RunDir(req["run_dir"])
    sname = session_name(run, int(req.get("node", 0)))
    server = _server(req)
    if _session(server, sname) is not None:
        return {
            "ok": False,
            "error": f"tmux session {sname} already exists on this host",
            "fix": "pick another --name, or `nsa-launch kill --run " + run + "` first",
        }
    resume = bool(req.get("resume"))
    if not resume and rd.root.exists() and any(rd.root.iterdir()):
        return {
            "ok": False,
            "error": f"run dir {rd.root} already exists on this host",
            "fix": "pick another --name, or use `nsa-launch restart --run " + run + "`",
        }
    if resume and not rd.manifest.exists():
        return {
            "ok": False,
            "error": f"run dir {rd.root} has no manifest.json: nothing to resume",
            "fix": "start a new run with `nsa-launch up`",
        }
    rd.root.mkdir(parents=True, exist_ok=True)
    for name, text in (req.get("files") or {}).items():
        atomic_write_text(rd.root / name, text)
    if resume:
        manifest = read_json(rd.manifest) or {}
        manifest.setdefault("restarts", []).append({"time": time.time()})
        for p in (rd.exit_code_file, rd.killed_file):
            p.unlink(missing_ok=True)
    else:
        manifest = dict(req.get("manifest") or {})
        atomic_write_text(rd.root / WRAPPER, wrapper_script(req))
    manifest["started_at"] = time.time()
    atomic_write_json(rd.manifest, manifest)
    secrets = req.get("secrets") or {}
    if secrets:
        sp = rd.root / SECRETS
        fd = os.open(sp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(f"export {k}={shlex.quote(v)}\n" for k, v in secrets.items())
    argv = ["bash", str(rd.root / WRAPPER)] + (["--resume"] if resume else [])
    sess = server.new_session(
        session_name=sname,
        window_name="train",
        window_command="exec " + shlex.join(argv),
        start_directory=req["workdir"],
        attach=False,
    )
    pane = sess.windows[0].active_pane
    return {"ok": True, "session": sname, "pane_pid": int(pane.pane_pid), "time": time.time()}


def run_status(req: dict[str, Any], now: float) -> dict[str, Any]:
    rd = RunDir(req["run_dir"])
    run = req["run"]
    manifest = read_json(rd.manifest) or {}
    pane_pid = _train_pane_pid(req, run, int(req.get("node", 0)))
    pids = sorted(procs.run_pids(str(rd.root), pane_pid)) if rd.root.exists() else []
    hbs = rd.heartbeats()
    recs = tail_jsonl(rd.metrics, 65536)
    # Eval records share metrics.jsonl; the train record is the last one carrying `loss`.
    metrics = next((r for r in reversed(recs) if "loss" in r), {})
    val = next((r for r in reversed(recs) if "loss/val" in r), {})
    exit_code = rd.exit_code()
    killed = read_json(rd.killed_file) if rd.killed_file.exists() else None
    events = tail_jsonl(rd.events, 16384)
    stall_s = float(manifest.get("stall_seconds") or 300)
    error = None
    if not rd.root.exists():
        state, error = "lost", f"run dir {rd.root} does not exist on this host"
    elif killed is not None:
        state = "killed"
    elif exit_code is not None:
        state = "finished" if exit_code == 0 else "failed"
    elif pane_pid is None and not pids:
        state, error = "failed", "the run's tmux session ended without writing exit_code (wrapper killed?)"
    elif not hbs:
        state = "starting"
    elif max(now - hb.time for hb in hbs.values()) > stall_s and all(
        hb.phase != "done" for hb in hbs.values()
    ):
        state = "stalled"
    else:
        state = "running"
    if error is None and state in ("failed", "stalled"):
        # The trainer's own account (an `error` or `stalled` event) says more than an exit code.
        ev = next((e for e in reversed(events) if e.get("kind") in ("error", "stalled")), None)
        if ev is not None:
            d = ev.get("detail") or {}
            what = ": ".join(str(d[k]) for k in ("error", "message") if d.get(k)) or json.dumps(
                d, sort_keys=True
            )
            error = f"{ev['kind']} at step {ev.get('step')}: {what}"
    step = max([hb.step for hb in hbs.values()] + [int(metrics.get("step", 0) or 0)] or [0])
    total = manifest.get("total_steps")
    started = manifest.get("started_at")
    ended = rd.exit_code_file.stat().st_mtime if exit_code is not None else (killed or {}).get("time")
    elapsed = ((ended or now) - started) if started else None
    eta = _eta(events, hbs, step, total, now) if state in ("running", "stalled") else None
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
        "time": now,
        "error": error,
        "run_dir": str(rd.root),
    }


def _eta(
    events: list[dict[str, Any]], hbs: dict[int, Any], step: int, total: Any, now: float
) -> float | None:
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
    gpus = procs.gpus()
    runs = []
    for r in req.get("runs", []):
        st = run_status({**r, "tmux_socket": req.get("tmux_socket")}, now)
        st["gpus"] = gpus
        runs.append(st)
    return {"ok": True, "host": socket.gethostname(), "time": now, "gpus": gpus, "runs": runs}


def cmd_kill(req: dict[str, Any]) -> dict[str, Any]:
    """TERM the run's processes (and groups), grace, KILL; end the tmux sessions; verify none left."""
    run, rd = req["run"], RunDir(req["run_dir"])
    server = _server(req)
    pane_pid = _train_pane_pid(req, run, int(req.get("node", 0)))
    tag = str(rd.root)

    def now_pids() -> set[int]:
        return procs.run_pids(tag, pane_pid)

    before = sorted(now_pids())
    already_done = rd.exit_code() is not None or rd.killed_file.exists()
    remaining = procs.term_then_kill(now_pids, float(req.get("grace_s", 10.0)))
    sname = session_name(run, int(req.get("node", 0)))
    for name in (sname, sname + "-tb"):
        sess = _session(server, name)
        if sess is not None:
            with contextlib.suppress(Exception):
                sess.kill()
    remaining |= now_pids()
    on_gpu = procs.gpu_pids()
    gpu_left = sorted(p for p in (on_gpu or {}) if p in set(before) | remaining)
    killed = not remaining and not gpu_left
    if before and rd.root.exists() and rd.exit_code() is None:
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


def cmd_tensorboard(req: dict[str, Any]) -> dict[str, Any]:
    """Start (or reuse) TensorBoard on 127.0.0.1 for the run, in a tmux window; reply with its port."""
    rd = RunDir(req["run_dir"])
    state = read_json(rd.root / TB_STATE)
    if state and procs.alive(int(state.get("pid", 0))) and _serves(int(state["pid"]), int(state["port"])):
        return {"ok": True, "port": int(state["port"]), "reused": True}
    if not rd.root.exists():
        return {"ok": False, "error": f"run dir {rd.root} does not exist", "fix": "check the run id"}
    rd.tb_dir.mkdir(exist_ok=True)
    log = rd.root / TB_LOG
    start = int(req.get("port", 6006))
    deadline = time.monotonic() + float(req.get("timeout_s", 90))
    for _ in range(TB_PORT_TRIES):
        port = _free_port(start)
        pid = _tensorboard_window(req, rd, port, log)
        while time.monotonic() < deadline:
            # Ours must be the one listening: a TensorBoard started at the same moment (a tunnel to
            # another run) may have taken the port first, and ours then fails to bind and exits.
            if _serves(pid, port):
                atomic_write_json(rd.root / TB_STATE, {"port": port, "pid": pid, "time": time.time()})
                return {"ok": True, "port": port, "reused": False}
            if not procs.alive(pid):
                break
            time.sleep(0.2)
        if procs.alive(pid) or not _listening(port):
            break  # out of time, or it died for another reason than a port taken under it
        start = port + 1
    tail = "\n".join(log_tail(log, 20))
    return {
        "ok": False,
        "error": f"TensorBoard did not listen on 127.0.0.1:{port}; its log ends:\n{tail}",
        "fix": "is tensorboard installed in the host's python (the `train` extra)?",
    }


def _tensorboard_window(req: dict[str, Any], rd: RunDir, port: int, log: Path) -> int:
    """(Re)start the run's `tb` tmux window running TensorBoard on 127.0.0.1:`port`; its pid."""
    argv = [
        req["python"],
        "-m",
        "tensorboard.main",
        "--logdir",
        str(rd.tb_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--reload_interval",
        "5",
    ]
    cmd = f"exec env {procs.TAG}={shlex.quote(str(rd.root))} {shlex.join(argv)} >{shlex.quote(str(log))} 2>&1"
    server = _server(req)
    sname = session_name(req["run"], int(req.get("node", 0)))
    sess = _session(server, sname)
    if sess is not None:
        with contextlib.suppress(Exception):
            for w in sess.windows:
                if w.window_name == "tb":
                    w.kill()
        win = sess.new_window(window_name="tb", window_shell=cmd, attach=False)
    else:
        tb = _session(server, sname + "-tb")
        if tb is not None:
            tb.kill()
        win = server.new_session(
            session_name=sname + "-tb", window_name="tb", window_command=cmd, attach=False
        ).windows[0]
    return int(win.active_pane.pane_pid)


def _serves(pid: int, port: int) -> bool:
    ours = procs.listens_on(pid, port)
    return ours if ours is not None else _listening(port)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port(start: int) -> int:
    port = first_free_port(start, 200)
    if port is not None:
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cmd_free_port(req: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "port": _free_port(int(req.get("start", 29400)))}


def cmd_wait_started(req: dict[str, Any]) -> dict[str, Any]:
    """Poll until the first heartbeat, the run's end, or the timeout; reply with status and log tail."""
    deadline = time.monotonic() + float(req.get("timeout_s", 600))
    while True:
        st = run_status(req, time.time())
        if st["state"] != "starting" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    lines = log_tail(RunDir(req["run_dir"]).train_log, 300)
    st["log_tail"] = lines[-int(req.get("tail", 20)) :]
    st["error_lines"] = error_lines(lines)
    return {"ok": True, "status": st, "timed_out": st["state"] == "starting"}


COMMANDS = {
    "start": cmd_start,
    "status": cmd_status,
    "kill": cmd_kill,
    "tensorboard": cmd_tensorboard,
    "free_port": cmd_free_port,
    "wait_started": cmd_wait_started,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in {*COMMANDS, "logs"}:
        print(
            json.dumps(
                {"ok": False, "error": f"usage: python -m launcher.agent {{{','.join(COMMANDS)},logs}}"}
            )
        )
        return 2
    req = json.loads(sys.stdin.read() or "{}")
    if argv[0] == "logs":
        with contextlib.suppress(BrokenPipeError):
            follow_log(req)
        return 0
    reply = COMMANDS[argv[0]](req)
    print(json.dumps(reply, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
