"""`tensorboard`: start (or reuse) TensorBoard on the host's 127.0.0.1 for a run, reply with its port.

Owns choosing the port (the first free one from the request's start, again on the next when another
server took it first), proving the listener is ours (procs.listens_on, not just "something answers")
and `tensorboard.json` in the run dir, which lets the next call reuse a live server. TensorBoard runs
in the run's tmux session (window `tb`) through tmux.py, with an explicit environment (the allowlist
and the run's tag; no secret). It must not stop the run.

A request with `live_only` (a tunnel reopening after the run's TensorBoard stopped) starts nothing
for a run being killed or killed: a kill stops TensorBoard first and the run seconds later, and a
reopen in between would start a TensorBoard the kill no longer sees, which then outlived the run
and held its tunnel open for good. The check is made before the start and again once it serves.
"""

from __future__ import annotations

import os
import shlex
import socket
import time
from pathlib import Path
from typing import Any

from launcher.core.ports import free_port
from launcher.host import procs, tmux
from launcher.host.logtail import log_tail
from nsa.runfiles import RunDir, atomic_write_json, read_json

TB_STATE = "tensorboard.json"
TB_LOG = "tensorboard.log"
TB_VIEW = ".tensorboard"  # the --logdir: one link named after the run, to tb/
TB_PORT_TRIES = 3  # TensorBoard starts again on the next free port if another took its port first


def cmd_tensorboard(req: dict[str, Any]) -> dict[str, Any]:
    """Start (or reuse) TensorBoard on 127.0.0.1 for the run, in a tmux window; reply with its port."""
    rd = RunDir(req["run_dir"])
    live_only = bool(req.get("live_only"))
    if live_only and (stopped := _stopped(rd)):
        return stopped
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
        port = free_port(start)
        pid = _tensorboard_window(req, rd, port, log)
        while time.monotonic() < deadline:
            # Ours must be the one listening: a TensorBoard started at the same moment (a tunnel to
            # another run) may have taken the port first, and ours then fails to bind and exits.
            if _serves(pid, port):
                if live_only and (stopped := _stopped(rd)):  # the kill began while it started
                    _stop_tree(pid)
                    return stopped
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
        str(_named_view(rd, req["run"])),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--reload_interval",
        "5",
    ]
    # A clean environment (tmux.clean_command): the allowlist and the run's tag, never the agent's
    # environment, which on a local run is the user's shell with its secrets.
    cmd = f"exec {shlex.join(argv)} >{shlex.quote(str(log))} 2>&1"
    name = tmux.session_name(req["run"], int(req.get("node", 0)))
    return tmux.open_tb_window(req, name, cmd, {procs.TAG: str(rd.root)})


def _stopped(rd: RunDir) -> dict[str, Any] | None:
    """The refusal of a `live_only` start when the run is being killed or was killed; None else."""
    if not (rd.stop_requested_file.exists() or rd.killed_file.exists()):
        return None
    return {
        "ok": False,
        "stopped": True,
        "error": f"run in {rd.root} is being stopped or was killed: its TensorBoard is not started again",
        "fix": "`nsa-launch restart` the run first",
    }


def _stop_tree(pid: int) -> None:
    procs.term_then_kill(lambda: {p for p in {pid} | procs.descendants(pid) if procs.alive(p)}, 5.0)


def _named_view(rd: RunDir, run: str) -> Path:
    """A directory holding one link, <run> -> the run's tb/, for TensorBoard's --logdir: runs are
    named by their path below the logdir, so tb/ itself would show as run "." (and --logdir_spec
    as "<run>/.")."""
    view = rd.root / TB_VIEW
    view.mkdir(exist_ok=True)
    link = view / run
    if not (link.is_symlink() and os.readlink(link) == str(rd.tb_dir)):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(rd.tb_dir, target_is_directory=True)
    return view


def _serves(pid: int, port: int) -> bool:
    ours = procs.listens_on(pid, port)
    return ours if ours is not None else _listening(port)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0
