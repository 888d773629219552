"""The run's tmux sessions on the host: the only code of the project that talks to tmux.

Owns the session names (`nsa-<run>`, window `train`; `-node<i>` on node i > 0), finding the live
`train` pane, creating the run's session and TensorBoard window, and ending sessions. libtmux for
changes; the plain `tmux` binary for the hot read (`train_pane_pid`, every status poll). The server
is the user's default one unless the request names a socket (`tmux_socket`: a name, or a path when
it contains '/'). It must not decide run states or signal processes (state.py, kill.py do).
"""

from __future__ import annotations

import contextlib
import subprocess
from typing import Any


def session_name(run: str, node: int = 0) -> str:
    """`nsa-<run>` (what users attach to); on node i > 0 `nsa-<run>-node<i>`, so that two nodes sharing
    one tmux server (two workdirs on one machine, as in the tests) cannot collide."""
    return f"nsa-{run}" if not node else f"nsa-{run}-node{int(node)}"


def server(req: dict[str, Any]) -> Any:
    import libtmux

    sock = req.get("tmux_socket")
    if sock and "/" in sock:
        return libtmux.Server(socket_path=sock)
    return libtmux.Server(socket_name=sock) if sock else libtmux.Server()


def session(srv: Any, name: str) -> Any | None:
    try:
        if not srv.has_session(name):
            return None
        return srv.sessions.get(session_name=name, default=None)
    except Exception:  # no server running yet: libtmux raises on an absent socket
        return None


def _argv(req: dict[str, Any]) -> list[str]:
    sock = req.get("tmux_socket")
    if not sock:
        return ["tmux"]
    return ["tmux", "-S", sock] if "/" in sock else ["tmux", "-L", sock]


def train_pane_pid(req: dict[str, Any], run: str, node: int = 0) -> int | None:
    """PID of the live `train` pane of the run's session, or None. One tmux exec and no libtmux import:
    status runs every second or two from the dashboard, so its cost matters."""
    fmt = "#{window_name}\t#{pane_pid}\t#{pane_dead}"
    try:
        out = subprocess.run(
            [*_argv(req), "list-panes", "-s", "-t", "=" + session_name(run, node), "-F", fmt],
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


def start_session(req: dict[str, Any], name: str, command: str, start_directory: str) -> int:
    """A detached session `name` whose `train` window runs `command`; the pane's pid."""
    sess = server(req).new_session(
        session_name=name,
        window_name="train",
        window_command=command,
        start_directory=start_directory,
        attach=False,
    )
    return int(sess.windows[0].active_pane.pane_pid)


def open_tb_window(req: dict[str, Any], name: str, command: str) -> int:
    """(Re)open the `tb` window running `command` in session `name`, or in a session `name`-tb when
    the run's session has ended (a finished run's TensorBoard); the pane's pid."""
    srv = server(req)
    sess = session(srv, name)
    if sess is not None:
        with contextlib.suppress(Exception):
            for w in sess.windows:
                if w.window_name == "tb":
                    w.kill()
        win = sess.new_window(window_name="tb", window_shell=command, attach=False)
    else:
        tb = session(srv, name + "-tb")
        if tb is not None:
            tb.kill()
        win = srv.new_session(
            session_name=name + "-tb", window_name="tb", window_command=command, attach=False
        ).windows[0]
    return int(win.active_pane.pane_pid)


def end_sessions(req: dict[str, Any], name: str) -> None:
    """End the run's session and its TensorBoard session, if they exist."""
    srv = server(req)
    for n in (name, name + "-tb"):
        sess = session(srv, n)
        if sess is not None:
            with contextlib.suppress(Exception):
                sess.kill()
