"""The main screen's workers: status polling (with each open tunnel's liveness), the watch, log
following, metric polling and control actions (kill / restart / tunnel), one exclusive named group
each.

A mixin of MainScreen, kept apart so the screen's file holds its layout, handlers and actions. Every
backend call runs in a daemon thread (`in_daemon_thread`); the workers report back only through
messages (launcher/dashboard/messages.py) and never touch a widget.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from textual import work

from launcher.dashboard.messages import (
    ActionDone,
    LogArrived,
    LogEnded,
    MetricsUpdated,
    PollFailed,
    StatusUpdated,
    WatchNote,
)
from launcher.dashboard.workers import Backoff, LogInbox, in_daemon_thread, pump_log
from launcher.run.control import RunStopped

CHART_POINTS = 500  # plotting more points than a terminal has columns only costs CPU
FINAL_STATES = ("finished", "failed", "killed")
# What each control action is called on screen: a failed `t` read "tunnel_open failed: ..." under the
# title "tunnel_open RUN" (qadash, 2026-11-27).
ACTION_WORDS = {
    "kill": "kill",
    "restart": "restart",
    "tunnel_open": "opening the tunnel",
    "tunnel_reopen": "reopening the tunnel",
    "tunnel_close": "closing the tunnel",
    "tunnel_wait": "tunnel",
}


class MainWorkers:
    """The workers of MainScreen (which supplies backend, statuses, tunnels, refresh_s ...)."""

    @work(group="status", exclusive=True, exit_on_error=False)
    async def poll_status(self) -> None:
        backoff = Backoff(self.refresh_s, self.max_backoff_s)

        def poll() -> tuple[list[dict[str, Any]], dict[str, tuple[Any, bool]]]:
            tunnels = dict(self.tunnels)
            statuses = self.backend.snapshot()
            # Each open tunnel is asked too: a kill or restart stops TensorBoard on the host, and a
            # URL shown after that would be a dead one. The answer names the tunnel it is about: by
            # the time it is read, a reopen may have replaced that one.
            return statuses, {run: (t, bool(t.alive())) for run, t in tunnels.items()}

        while True:
            try:
                statuses, alive = await in_daemon_thread(poll, name="dashboard-status")
            except Exception as e:  # the whole call failed (not one host): show it, retry slower
                delay = backoff.next_delay(False)
                self.post_message(PollFailed(f"status failed: {e}", delay))
            else:
                healthy = not any(s.get("state") == "lost" for s in statuses)
                delay = backoff.next_delay(healthy)
                if statuses and all(s.get("state") in FINAL_STATES for s in statuses):
                    # Nothing can change but a new run appearing: each poll costs an agent exec
                    # on every host, so ask less often.
                    delay = max(delay, min(5 * self.refresh_s, 10.0))
                self.post_message(StatusUpdated(statuses, next_poll_s=delay, tunnels_alive=alive))
            self._poll_now.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), timeout=delay)

    @work(group="watch", exclusive=True, exit_on_error=False)
    async def watch_runs(self) -> None:
        """`nsa-launch watch` for every live run shown, in its own group: a pull or a replacement
        may take minutes and must not hold the status poll."""

        def say(text: str) -> None:
            self.post_message(WatchNote(text))

        while True:
            statuses = [self.statuses[r] for r in self.order]
            if statuses:
                try:
                    await in_daemon_thread(self.backend.watch, statuses, say, name="dashboard-watch")
                except Exception as e:
                    self.post_message(WatchNote(f"watch failed: {e}", error=True))
            await asyncio.sleep(max(self.refresh_s, 1.0))

    @work(group="log", exclusive=True, exit_on_error=False)
    async def follow_log(self, run: str) -> None:
        inbox = LogInbox(self.log_capacity)
        self._inbox = (run, inbox)
        backoff = Backoff(self.refresh_s, self.max_backoff_s)
        last_n = self.log_last_n

        def note(text: str) -> None:
            if inbox.put(text):
                self.post_message(LogArrived(run))

        outage: str | None = None  # said once per outage, not once per retry
        reconnecting = False
        while True:
            stop = threading.Event()

            flowing = threading.Event()  # this stream delivered a line: any outage is over

            def lines(n: int, again: bool, flowing: threading.Event = flowing) -> Iterator[str]:
                for i, line in enumerate(self.backend.stream_log(run, n)):
                    if i == 0:
                        flowing.set()
                        if again:  # lines written while we were away would be missing: a marked tail
                            yield f"── log stream reconnected: the last {n} lines again ──"
                    yield line

            def stream(n: int = last_n, again: bool = reconnecting, stop: threading.Event = stop) -> None:
                pump_log(lines(n, again), inbox, stop, lambda: self.post_message(LogArrived(run)))

            try:
                await in_daemon_thread(stream, name=f"dashboard-log-{run}")
                error = None
            except asyncio.CancelledError:
                stop.set()
                raise
            except Exception as e:
                error = str(e) or type(e).__name__
            # A stream also ends cleanly when its SSH channel is cut, so an end is only final once
            # a fresh status says the run is over; otherwise it is retried like an error.
            delay = backoff.next_delay(False)
            if flowing.is_set():
                outage = None
            if error is not None and outage is None:
                # One line: an SSH error's "\n  fix: re-run when it is back" showed as `�  fix: ...`
                # in the pane, and the fix is what this loop does anyway.
                first = error.splitlines()[0] if error.strip() else error
                note(f"── log stream lost ({first}); retrying every {delay:.0f}s or more, quietly ──")
                outage = error
            await asyncio.sleep(delay)
            if error is None and self.statuses.get(run, {}).get("state") in FINAL_STATES:
                self.post_message(LogEnded(run))
                return
            last_n = min(50, self.log_last_n)
            reconnecting = True

    @work(group="metrics", exclusive=True, exit_on_error=False)
    async def poll_metrics(self, run: str) -> None:
        while True:
            try:
                records = await in_daemon_thread(self.backend.metrics, run, name="dashboard-metrics")
            except Exception:
                records = None  # the status poll already reports an unreachable host
            if records is not None:
                self.post_message(MetricsUpdated(run, records[-CHART_POINTS:]))
            await asyncio.sleep(max(self.refresh_s, 0.5))

    @work(group="control", exclusive=False, exit_on_error=False)
    async def run_action(self, action: str, run: str) -> None:
        try:
            if action == "kill":
                res = await in_daemon_thread(self.backend.kill, run, name="dashboard-kill")
                left = res.get("remaining_pids") or []
                ok = bool(res.get("killed")) and not left
                msg = str(res.get("message") or ("killed" if ok else f"processes left: {left}"))
                self.post_message(ActionDone("kill", run, ok, msg, billing=res.get("billing")))
            elif action == "restart":
                new = await in_daemon_thread(self.backend.restart, run, name="dashboard-restart")
                self.post_message(ActionDone("restart", run, True, f"restarted as {new}", new_run=new))
            elif action == "tunnel_open":
                t = await in_daemon_thread(self.backend.open_tunnel, run, name="dashboard-tunnel")
                self.post_message(
                    ActionDone("tunnel_open", run, True, f"TensorBoard: {t.url}", url=t.url, handle=t)
                )
            elif action == "tunnel_reopen":
                # The run's TensorBoard stopped (a restart): start it again, on the same local port.
                old = self.tunnels.get(run)
                port = getattr(old, "local_port", 6006)
                if old is not None:
                    await in_daemon_thread(old.close, name="dashboard-tunnel-close")
                try:
                    t = await in_daemon_thread(
                        self.backend.open_tunnel, run, port, True, name="dashboard-tunnel"
                    )
                except RunStopped as e:
                    # A kill began after the status poll that said the run lives (its TensorBoard dies
                    # first): no TensorBoard was started. Follow the status, as `nsa-launch tunnel`
                    # does: the next polls close the tunnel if the run ends, reopen it if it lives on.
                    self.post_message(ActionDone("tunnel_wait", run, True, f"TensorBoard not restarted: {e}"))
                    return
                self.post_message(
                    ActionDone(
                        "tunnel_open", run, True, f"TensorBoard reopened: {t.url}", url=t.url, handle=t
                    )
                )
            elif action == "tunnel_close":
                t = self.tunnels.get(run)
                if t is not None:
                    await in_daemon_thread(t.close, name="dashboard-tunnel-close")
                self.post_message(ActionDone("tunnel_close", run, True, "tunnel closed"))
        except Exception as e:
            self.post_message(
                ActionDone(action, run, False, f"{ACTION_WORDS.get(action, action)} failed: {e}")
            )
