"""The dashboard application object and `make_app`, the one factory every entry point uses.

Owns app-wide settings (refresh period, backoff cap, clock, log capacity, where screenshots go) and
closing what the session opened (TensorBoard tunnels) on exit. The CLI builds it over `LauncherBackend`; tests and
bench/dashboard.py build it over `RecordedBackend` with a fixed clock. Holds no run state itself:
that lives in the main screen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from launcher.dashboard.backend import Backend
from launcher.dashboard.logbuffer import printable
from launcher.dashboard.screens.help import HelpScreen
from launcher.dashboard.screens.main import MainScreen
from launcher.dashboard.widgets.log_view import DEFAULT_CAPACITY

TUNNEL_CLOSE_WAIT_S = 3.0


class DashboardApp(App):
    CSS_PATH = "dashboard.tcss"
    TITLE = "nsa-launch dashboard"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(
        self,
        backend: Backend,
        *,
        refresh_s: float = 1.0,
        max_backoff_s: float = 8.0,
        clock: Callable[[], float] = time.time,
        log_capacity: int = DEFAULT_CAPACITY,
        log_last_n: int = 200,
        screenshot_dir: Path | None = None,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.screenshot_dir = screenshot_dir
        self.main = MainScreen(
            backend,
            refresh_s=refresh_s,
            max_backoff_s=max_backoff_s,
            clock=clock,
            log_capacity=log_capacity,
            log_last_n=log_last_n,
        )

    def on_mount(self) -> None:
        self.push_screen(self.main)

    def notify(self, message: str, *, markup: bool = True, **kwargs: Any) -> None:
        """A notification of run text (markup=False: host errors, agent messages, watch notes) never
        carries its terminal control to the terminal: an ESC in an error went out as it was."""
        if not markup:
            message = printable(message, newlines=True)
        super().notify(message, markup=markup, **kwargs)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """The palette's "Screenshot": Textual saves to the platform's Downloads folder, which a
        server or container usually lacks ("Failed to save screenshot"); save to a folder we made."""
        if path is None:
            directory = self.screenshot_dir or Path.cwd()
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                self.notify(f"cannot save a screenshot in {directory}: {e}", severity="error", markup=False)
                return None
            path = str(directory)
        return super().deliver_screenshot(filename, path, time_format)

    def on_unmount(self) -> None:
        # A tunnel left open would keep TensorBoard and the port forward alive after we quit; close
        # them, but never let a dead host hold the exit for longer than a few seconds.
        threads = [threading.Thread(target=t.close, daemon=True) for t in self.main.tunnels.values()]
        for th in threads:
            th.start()
        deadline = time.monotonic() + TUNNEL_CLOSE_WAIT_S
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))


def make_app(
    backend: Backend,
    *,
    refresh_s: float = 1.0,
    max_backoff_s: float = 8.0,
    clock: Callable[[], float] = time.time,
    log_capacity: int = DEFAULT_CAPACITY,
    log_last_n: int = 200,
    screenshot_dir: Path | None = None,
) -> DashboardApp:
    """Build the dashboard over `backend` (LauncherBackend live, RecordedBackend in tests).
    Screenshots (command palette) go to `screenshot_dir`, default the current directory."""
    if refresh_s <= 0:
        raise ValueError(f"refresh_s must be > 0, got {refresh_s}")
    return DashboardApp(
        backend,
        refresh_s=refresh_s,
        max_backoff_s=max_backoff_s,
        clock=clock,
        log_capacity=log_capacity,
        log_last_n=log_last_n,
        screenshot_dir=screenshot_dir,
    )
