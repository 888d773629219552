"""The dashboard in a real terminal for the e2e tests: a tmux session on the test's private server.

Starts `nsa-launch dashboard` as a real process in a tmux pane of the given size, types keys with
`send-keys` and reads the screen with `capture-pane`, exactly what a person at a terminal sees.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


class DashboardTerminal:
    def __init__(self, socket_name: str, session: str = "dashboard"):
        self.socket_name = socket_name
        self.session = session

    def _tmux(self, *args: str) -> str:
        res = subprocess.run(
            ["tmux", "-L", self.socket_name, *args], capture_output=True, text=True, timeout=10, check=False
        )
        return res.stdout

    def start(self, args: list[str], env: dict[str, str], size: tuple[int, int] = (160, 48)) -> None:
        cmd = " ".join(
            shlex.quote(a)
            for a in [sys.executable, "-c", "from launcher.cli import main; main()", "dashboard", *args]
        )
        env_args = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
        # The leading sleep lets the resize below land before the app reads its terminal size; the
        # trailing one keeps the pane (and its last screen) after the app exits, for the exit assertion.
        subprocess.run(
            ["tmux", "-L", self.socket_name, "new-session", "-d", "-s", self.session, "-x", str(size[0]),
             "-y", str(size[1]), *env_args, f"sleep 0.5; {cmd}; echo DASHBOARD-EXITED $?; sleep 600"],
            check=True,
            timeout=10,
        )  # fmt: skip
        # A detached session may keep the server's default size; make it the size asked for.
        self._tmux("resize-window", "-t", self.session, "-x", str(size[0]), "-y", str(size[1]))

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", f"{self.session}:0.0")

    def keys(self, *keys: str) -> None:
        for k in keys:
            self._tmux("send-keys", "-t", f"{self.session}:0.0", k)
            time.sleep(0.15)

    def wait(self, cond: Callable[[str], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            got = cond(screen)
            if got:
                return got
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; screen:\n{screen}")

    def close(self) -> None:
        self._tmux("kill-session", "-t", self.session)


def row(screen: str, run: str) -> str | None:
    """The runs-table line of `run` on the captured screen."""
    pat = re.compile(rf"^│ \S+\s+{re.escape(run)}\s")  # host column, then the run column
    for line in screen.splitlines():
        if pat.match(line):
            return line
    return None


def row_step(screen: str, run: str) -> int | None:
    line = row(screen, run)
    m = re.search(r" (\d+)/(\d+) ", line or "")
    return int(m.group(1)) if m else None
