"""The run's tmux sessions on the host: the only code of the project that talks to tmux.

Owns the session names (`nsa-<run>`, window `train`; `-node<i>` on node i > 0), finding the live
`train` pane, creating the run's session and TensorBoard window, and ending sessions, all through the
plain `tmux` binary. Every tmux client runs with a built environment (`client_env`: the allowlist
below, never the agent's own environment, which holds the user's shell and its secrets), so a tmux
server this code starts has nothing else in its global environment, and every command a pane runs is
`exec env -i ALLOWLIST... command`, so a pane inherits nothing from a server someone else started.
The run's own env and its secrets are added by the wrapper (wrapper.py), by name. The server is the
user's default one unless the request names a socket (`tmux_socket`: a name, or a path when it
contains '/'). It must not decide run states or signal processes (state.py, kill.py do).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
from typing import Any

# What a pane (and the tmux client) gets from the agent's environment. LD_LIBRARY_PATH: GPU images
# put the driver's libraries (libcuda) there; TMPDIR / TMUX_TMPDIR: where tmux keeps its socket.
ALLOWLIST = ("PATH", "HOME", "LANG", "TERM", "USER", "LD_LIBRARY_PATH", "TMPDIR", "TMUX_TMPDIR")


class TmuxError(RuntimeError):
    """A tmux command failed: the command and what tmux said."""


def session_name(run: str, node: int = 0) -> str:
    """`nsa-<run>` (what users attach to); on node i > 0 `nsa-<run>-node<i>`, so that two nodes sharing
    one tmux server (two workdirs on one machine, as in the tests) cannot collide."""
    return f"nsa-{run}" if not node else f"nsa-{run}-node{int(node)}"


def client_env() -> dict[str, str]:
    """The allowlisted part of this process's environment: all a tmux client or pane is given."""
    return {k: os.environ[k] for k in ALLOWLIST if k in os.environ}


def clean_command(command: str, extra: dict[str, str] | None = None) -> str:
    """`exec env -i ALLOWLIST... [extra...] sh -c COMMAND`: the pane starts from nothing inherited."""
    env = {**client_env(), **(extra or {})}
    assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items()))
    return f"exec /usr/bin/env -i {assigns} /bin/sh -c {shlex.quote(command)}"


def _argv(req: dict[str, Any]) -> list[str]:
    sock = req.get("tmux_socket")
    if not sock:
        return ["tmux"]
    return ["tmux", "-S", sock] if "/" in sock else ["tmux", "-L", sock]


def _tmux(req: dict[str, Any], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        res = subprocess.run(
            [*_argv(req), *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=client_env(),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TmuxError(f"tmux {args[0]}: {e}") from None
    if check and res.returncode != 0:
        raise TmuxError(f"tmux {args[0]} exited {res.returncode}: {res.stderr.strip()[:300]}")
    return res


def has_session(req: dict[str, Any], name: str) -> bool:
    """Whether session `name` exists (exactly that name: `=` stops tmux's prefix matching)."""
    try:
        return _tmux(req, "has-session", "-t", "=" + name, check=False).returncode == 0
    except TmuxError:
        return False


def train_pane_pid(req: dict[str, Any], run: str, node: int = 0) -> int | None:
    """PID of the live `train` pane of the run's session, or None. One tmux exec: status runs every
    second or two from the dashboard, so its cost matters."""
    # Space-separated, the window name last: a tmux client without a UTF-8 locale (an SSH session
    # that sets no LANG, as on the tests' fake pods) prints a tab in -F output as "_", and a
    # tab-split then found no pane at all. state.py then saw only the tagged processes, not the
    # wrapper, and called a run "failed" in the moment between torchrun's exit and the wrapper
    # writing exit_code.
    fmt = "#{pane_pid} #{pane_dead} #{window_name}"
    # `=NAME:`, not `=NAME`: list-panes -s reads its target as a window, and tmux 3.3a resolved a bare
    # `=nsa-reuse` to the session `nsa-reuse2` when no `nsa-reuse` existed, so `kill --run reuse` after
    # reuse had finished stopped the live run reuse2 (found by tests/e2e/test_host_env.py, 2026-11-27).
    try:
        out = _tmux(
            req, "list-panes", "-s", "-t", f"={session_name(run, node)}:", "-F", fmt, check=False
        ).stdout
    except TmuxError:
        return None
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[2] == "train" and parts[1] != "1" and parts[0].isdigit():
            return int(parts[0])
    return None


def _pid(res: subprocess.CompletedProcess[str]) -> int:
    return int(res.stdout.strip().splitlines()[-1])


def start_session(req: dict[str, Any], name: str, command: str, start_directory: str) -> int:
    """A detached session `name` whose `train` window runs `command` in a clean environment; the
    pane's pid. TmuxError when tmux refuses (e.g. the session exists)."""
    res = _tmux(
        req, "new-session", "-d", "-s", name, "-n", "train", "-c", start_directory,
        "-P", "-F", "#{pane_pid}", clean_command(command),
    )  # fmt: skip
    return _pid(res)


def open_tb_window(req: dict[str, Any], name: str, command: str, extra: dict[str, str] | None = None) -> int:
    """(Re)open the `tb` window running `command` (clean environment plus `extra`) in session `name`,
    or in a session `name`-tb when the run's session has ended (a finished run's TensorBoard); the
    pane's pid."""
    cmd = clean_command(command, extra)
    if has_session(req, name):
        _tmux(req, "kill-window", "-t", f"={name}:tb", check=False)
        res = _tmux(req, "new-window", "-d", "-t", f"={name}:", "-n", "tb", "-P", "-F", "#{pane_pid}", cmd)
    else:
        _tmux(req, "kill-session", "-t", f"={name}-tb", check=False)
        res = _tmux(req, "new-session", "-d", "-s", name + "-tb", "-n", "tb", "-P", "-F", "#{pane_pid}", cmd)
    return _pid(res)


def end_sessions(req: dict[str, Any], name: str) -> None:
    """End the run's session and its TensorBoard session, if they exist."""
    for n in (name, name + "-tb"):
        with contextlib.suppress(TmuxError):
            _tmux(req, "kill-session", "-t", "=" + n, check=False)
