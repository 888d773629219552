"""The main screen: runs table on top; the selected run's log, GPUs, charts and events below.

Owns the dashboard's live state (latest snapshot, selection, open tunnels), its layout (compact
below 100 columns), its message handlers and its key actions. Its workers (status polling, log
following, metric polling, control actions) live in main_workers.py; they await the backend in
daemon threads and report back only through messages (messages.py); every widget update happens in
a handler here, on the UI thread. Must not call the backend from a handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from rich.markup import escape
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Input

from launcher.core import format as fmt
from launcher.dashboard.backend import Backend
from launcher.dashboard.messages import (
    ActionDone,
    LogArrived,
    LogEnded,
    MetricsUpdated,
    PollFailed,
    StatusUpdated,
    WatchNote,
)
from launcher.dashboard.screens.confirm import ConfirmScreen
from launcher.dashboard.screens.gpu_procs import GpuProcsScreen
from launcher.dashboard.screens.main_workers import ACTION_WORDS, MainWorkers
from launcher.dashboard.widgets.events_list import EventsList
from launcher.dashboard.widgets.gpu_panel import GpuPanel
from launcher.dashboard.widgets.keys_footer import KeysFooter
from launcher.dashboard.widgets.log_view import LogView
from launcher.dashboard.widgets.metric_chart import MetricChart
from launcher.dashboard.widgets.runs_table import RunsTable
from launcher.dashboard.widgets.summary_bar import SummaryBar
from launcher.dashboard.workers import LogInbox

# Below this many columns the log gets the full width and the side panes (GPUs, loss, tokens/s,
# events) share one slot under it, `v` choosing which: beside a 40-column log neither is readable.
COMPACT_BELOW_COLS = 100
# Below this many rows the runs table shows fewer rows before it scrolls, leaving room for the log.
SHORT_BELOW_ROWS = 30
SIDE_PANES = ("loss", "tps", "gpus", "events")


class MainScreen(MainWorkers, Screen):
    # `?` and `q` first: the footer shows bindings in this order and leaves out what does not fit
    # (widgets/keys_footer.py). At 80 columns it lost `l`, `g`, `? help` and `q quit`, at 120 `q quit`
    # read `q`; now 120 shows every key and 80 (compact footer) `?`, `q`, k, r, t, g and /.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "app.help", "help"),
        Binding("q", "app.quit", "quit"),
        Binding("k", "kill", "kill"),
        Binding("r", "restart", "restart"),
        Binding("t", "tunnel", "tunnel"),
        Binding("g", "gpu_processes", "GPU procs"),
        Binding("slash", "search", "search"),
        Binding("n", "match(1)", "next match", show=False),
        Binding("N", "match(-1)", "prev match", show=False),
        Binding("f", "follow", "follow"),
        Binding("w", "wrap", "wrap"),
        Binding("z", "maximise", "max pane"),
        Binding("v", "side_pane", "next pane", show=False),
        Binding("l", "rank_filter", "ranks"),
        Binding("h", "heartbeats", "heartbeats", show=False),
        Binding("escape", "escape", "clear search", show=False),
    ]

    def __init__(
        self,
        backend: Backend,
        *,
        refresh_s: float,
        max_backoff_s: float,
        clock: Callable[[], float],
        log_capacity: int,
        log_last_n: int,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.refresh_s = refresh_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self.log_capacity = log_capacity
        self.log_last_n = log_last_n
        self.statuses: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.selected: str | None = None
        self.want_selected: str | None = None
        self.tunnels: dict[str, Any] = {}
        self.per_rank_heartbeat = False
        self.last_status_at: float | None = None
        self.poll_error: str | None = None
        self.polls = 0
        self._inbox: tuple[str, LogInbox] | None = None
        self._poll_now = asyncio.Event()
        self.side_pane = SIDE_PANES[0]
        self._last_watch_note: str | None = None
        self.restarting: set[str] = set()  # runs the dashboard is restarting: shown as such
        # open tunnels: run -> "live", "reopening", "down" or "stopping" (a reopen the host refused)
        self.tunnel_state: dict[str, str] = {}
        self.tunnel_waits: set[str] = set()  # runs whose refused reopen was said

    def compose(self) -> ComposeResult:
        yield SummaryBar(id="summary")
        yield RunsTable(id="runs")
        with Horizontal(id="middle"):
            with Vertical(id="left"):
                yield LogView(capacity=self.log_capacity, id="log")
                yield Input(
                    placeholder="search the log (Enter applies, empty clears, Esc cancels)", id="search"
                )
            with Vertical(id="right"):
                yield GpuPanel(id="gpus", classes="side")
                yield MetricChart("loss", color="orange", label=fmt.loss, si=False, id="loss", classes="side")
                yield MetricChart("tokens/s", color="cyan", id="tps", classes="side")
                yield EventsList(id="events", classes="side")
        yield KeysFooter()

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < COMPACT_BELOW_COLS, "-compact")
        self.set_class(event.size.height < SHORT_BELOW_ROWS, "-short")
        self.query_one(KeysFooter).compact = event.size.width < COMPACT_BELOW_COLS
        self._show_side_pane()

    def _show_side_pane(self) -> None:
        compact = self.has_class("-compact")
        for i, pane in enumerate(SIDE_PANES):
            widget = self.query_one(f"#{pane}")
            widget.set_class(pane == self.side_pane, "-shown")
            widget.border_subtitle = f"{i + 1}/{len(SIDE_PANES)} · v: next pane" if compact else ""

    def on_mount(self) -> None:
        self._show_side_pane()
        self.query_one("#search", Input).display = False
        self.query_one(RunsTable).focus()
        self._refresh_summary()
        self.poll_status()
        self.watch_runs()
        self.set_interval(1.0, self._refresh_summary)

    # --- message handlers (UI thread) -------------------------------------------------------
    def on_status_updated(self, msg: StatusUpdated) -> None:
        prev = self.statuses
        statuses = [self._as_shown(s) for s in msg.statuses]
        self.statuses = {str(s.get("run")): s for s in statuses}
        self.order = [str(s.get("run")) for s in statuses]
        self.last_status_at = self.clock()
        self.poll_error = None
        self.polls += 1
        self._alert(prev)
        self._check_tunnels(msg.tunnels_alive)
        self.query_one(GpuPanel).record(statuses)
        table = self.query_one(RunsTable)
        table.show(statuses, self.per_rank_heartbeat)
        if self.want_selected in self.statuses:
            table.move_cursor(row=table.get_row_index(self.want_selected))
            self.want_selected = None
        run = table.selected_run()
        if run != self.selected:
            self._select(run)
        self._show_selected()
        self._refresh_summary()

    def _as_shown(self, st: dict[str, Any]) -> dict[str, Any]:
        """A run this dashboard is restarting reads `restarting` until the restart is done: between
        the kill and the new start its files say `killed` or `failed`, and neither is news."""
        if st.get("run") in self.restarting and st.get("state") != "running":
            return {**st, "state": "restarting", "exit_code": None}
        return st

    def _check_tunnels(self, alive: dict[str, tuple[Any, bool]]) -> None:
        """Follow each open tunnel's TensorBoard: reopen it when the run lives on (it was restarted),
        close it and say so when the run has ended; never keep showing a URL that does not answer."""
        for run, (tunnel, ok) in alive.items():
            if self.tunnels.get(run) is not tunnel or self.tunnel_state.get(run) == "reopening":
                continue  # closed or replaced since that poll asked
            if ok:
                self.tunnel_state[run] = "live"
                continue
            state = str(self.statuses.get(run, {}).get("state"))
            if run in self.restarting:
                self.tunnel_state[run] = "down"  # reopened once the restart is through
            elif state in fmt.LIVE_STATES:
                if self.tunnel_state.get(run) != "stopping":  # else said when the host refused
                    self.notify(
                        f"TensorBoard of {run} stopped (restarted?): reopening the tunnel", markup=False
                    )
                self.tunnel_state[run] = "reopening"
                self.run_action("tunnel_reopen", run)
            else:
                self.tunnel_state.pop(run, None)
                self.run_action("tunnel_close", run)
                self.notify(
                    f"tunnel closed: {run} is {state} and its TensorBoard stopped; t (or `nsa-launch "
                    f"tunnel --run {run}`) opens a new one",
                    title="tunnel",
                    severity="warning",
                    markup=False,
                )

    def on_poll_failed(self, msg: PollFailed) -> None:
        self.poll_error = f"{msg.error} (retry in {msg.next_poll_s:.0f}s)"
        self._refresh_summary()

    def on_watch_note(self, msg: WatchNote) -> None:
        # On change only: a scheduled pull that found nothing new is not news (the top bar shows
        # the mirror's age), nor is the same note twice in a row.
        if "(unchanged)" in msg.text or msg.text == self._last_watch_note:
            return
        self._last_watch_note = msg.text
        error = msg.error or " failed" in msg.text or "lost its host" in msg.text
        self.notify(
            msg.text,
            title="watch",
            severity="error" if error else "information",
            timeout=10 if error else 4,
            markup=False,  # rsync and host errors are run text
        )

    def on_log_arrived(self, msg: LogArrived) -> None:
        if self._inbox is None or self._inbox[0] != msg.run or msg.run != self.selected:
            return
        self.query_one(LogView).append_lines(self._inbox[1].drain())

    def on_log_ended(self, msg: LogEnded) -> None:
        if msg.run == self.selected:
            if self._inbox is not None:
                self.query_one(LogView).append_lines(self._inbox[1].drain())
            self.query_one(LogView).mark_ended(msg.error or "stream ended")

    def on_metrics_updated(self, msg: MetricsUpdated) -> None:
        if msg.run != self.selected:
            return
        loss_pts = [
            (float(r["step"]), float(r["loss"])) for r in msg.records if _num(r, "step") and _num(r, "loss")
        ]
        tps_pts = [
            (float(r["step"]), float(r["tokens_per_s"]))
            for r in msg.records
            if _num(r, "step") and _num(r, "tokens_per_s")
        ]
        self.query_one("#loss", MetricChart).set_points([p[0] for p in loss_pts], [p[1] for p in loss_pts])
        self.query_one("#tps", MetricChart).set_points([p[0] for p in tps_pts], [p[1] for p in tps_pts])

    def on_action_done(self, msg: ActionDone) -> None:
        if msg.action in ("tunnel_open", "tunnel_close"):
            self.tunnel_waits.discard(msg.run)
        if msg.action == "tunnel_open" and msg.ok:
            self.tunnels[msg.run] = msg.handle
            self.tunnel_state[msg.run] = "live"
        elif msg.action == "tunnel_close" or (msg.action in ("tunnel_open", "tunnel_reopen") and not msg.ok):
            self.tunnels.pop(msg.run, None)
            self.tunnel_state.pop(msg.run, None)
        elif msg.action == "tunnel_wait":  # a reopen the host refused: the run is being stopped
            if self.tunnels.get(msg.run) is not None:
                self.tunnel_state[msg.run] = "stopping"  # the next polls close or reopen it
            if msg.run in self.tunnel_waits:
                self._refresh_summary()
                return  # said once: a slow kill is refused at each poll until its status says so
            self.tunnel_waits.add(msg.run)
        elif msg.action == "restart":
            self.restarting.discard(msg.run)
            if msg.new_run:
                self.want_selected = msg.new_run
        self.notify(
            msg.message,
            title=f"{ACTION_WORDS.get(msg.action, msg.action).split()[-1]} {msg.run}",
            severity="information" if msg.ok else "error",
            markup=False,  # the message carries host output (gloo errors start with "[/...")
        )
        if msg.billing:  # as `nsa-launch kill` says it: the trainer stopped, the rented pod did not
            self.notify(
                msg.billing,
                title=f"pod of {msg.run} still billing",
                severity="warning",
                timeout=60,  # money, not news: long enough to be read and acted on
                markup=False,
            )
        self._refresh_summary()
        self._poll_now.set()

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        run = event.row_key.value
        # A stale highlight: the table was rebuilt (new columns after a resize, or a run turning lost
        # widened a cell), which put the cursor on row 0 and then back on the selected run. Selecting
        # row 0's run on the way emptied the selected run's log pane and re-read it (qadash).
        if run != self.query_one(RunsTable).selected_run():
            return
        if run != self.selected:
            self._select(run)
            self._show_selected()

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        term = event.value.strip()
        self._hide_search()
        log = self.query_one(LogView)
        if not log.set_search(term) and term:
            self.notify(
                f"'{term}' is not in the last {len(log.view)} lines", severity="warning", markup=False
            )

    # --- actions ----------------------------------------------------------------------------
    def action_kill(self) -> None:
        st = self._selected_status()
        if st is None:
            return
        run = self.selected
        q = f"Kill run [b]{escape(str(run))}[/b] on [b]{escape(str(st.get('host') or 'local'))}[/b]?\n\nTERM to its process group, KILL after the grace period; the tmux session ends."
        if st.get("pod_id"):  # said before the kill, not only after: a kill stops the run, not the pod
            pod = escape(str(st["pod_id"]))
            q += f"\n\nThe pod {pod} keeps billing: `nsa-launch pods down {escape(str(run))}` ends it."

        def done(yes: bool | None) -> None:
            if yes and run is not None:
                self.run_action("kill", run)

        self.app.push_screen(ConfirmScreen(q, "Kill"), done)

    def action_restart(self) -> None:
        st = self._selected_status()
        if st is None:
            return
        run = self.selected
        if run in self.restarting:
            # A second `r` + `y` started a second restart of the same run, which killed the first
            # one's fresh start or failed on its lock (qadash, 2026-11-27).
            self.notify(f"{run} is already being restarted: wait for `restarted as …`", markup=False)
            return
        q = (
            f"Restart run [b]{escape(str(run))}[/b] from its newest intact checkpoint?\n\n"
            "The running process is stopped first (it checkpoints at its next step)."
        )

        def done(yes: bool | None) -> None:
            if yes and run is not None:
                # restart waits for the first heartbeat, which can take a while: say it started
                self.notify(f"restarting {run}: kill, resume, wait for the first heartbeat…", markup=False)
                self.restarting.add(run)
                self.run_action("restart", run)

        self.app.push_screen(ConfirmScreen(q, "Restart"), done)

    def action_tunnel(self) -> None:
        if self._selected_status() is None or self.selected is None:
            return
        self.run_action("tunnel_close" if self.selected in self.tunnels else "tunnel_open", self.selected)

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.value = self.query_one(LogView).search
        box.focus()

    def action_match(self, direction: int) -> None:
        log = self.query_one(LogView)
        if not log.search:
            self.notify("no search: press / first", severity="warning", markup=False)
        elif not log.find_match(direction):
            self.notify(
                f"no {'later' if direction > 0 else 'earlier'} match for '{log.search}'", markup=False
            )

    def action_follow(self) -> None:
        log = self.query_one(LogView)
        log.set_follow(not log.follow)

    def action_wrap(self) -> None:
        on = self.query_one(LogView).toggle_wrap()
        self.notify("log: long lines wrap" if on else "log: no wrap (← → scroll)", markup=False)

    def action_maximise(self) -> None:
        """Give the focused pane the whole screen (Tab moves the focus), or restore the layout."""
        if self.maximized is not None:
            self.minimize()
            return
        pane = self.focused
        if pane is None or not self.maximize(pane, container=False):
            self.notify("focus a pane first (Tab), then z", severity="warning", markup=False)

    def action_side_pane(self) -> None:
        """In the compact layout, show the next side pane (loss, tokens/s, GPUs, events)."""
        was_focused = self.focused is not None and self.focused.id == self.side_pane
        self.side_pane = SIDE_PANES[(SIDE_PANES.index(self.side_pane) + 1) % len(SIDE_PANES)]
        self._show_side_pane()
        if was_focused:
            self.query_one(f"#{self.side_pane}").focus()
        if not self.has_class("-compact"):
            self.notify(f"every pane is on screen; v picks one below {COMPACT_BELOW_COLS} columns")

    def action_rank_filter(self) -> None:
        rank = self.query_one(LogView).cycle_rank_filter()
        self.notify(
            "log: all ranks" if rank is None else f"log: rank {rank} (and untagged lines)", markup=False
        )

    def action_gpu_processes(self) -> None:
        st = self._selected_status()
        if st is None or self.selected is None:
            return
        self.app.push_screen(GpuProcsScreen(self.backend, self.selected, st, self.refresh_s))

    def action_heartbeats(self) -> None:
        self.per_rank_heartbeat = not self.per_rank_heartbeat
        self.query_one(RunsTable).show([self.statuses[r] for r in self.order], self.per_rank_heartbeat)

    def action_escape(self) -> None:
        box = self.query_one("#search", Input)
        if box.display:
            self._hide_search()
        else:
            self.query_one(LogView).set_search("")

    # --- helpers ----------------------------------------------------------------------------
    def _hide_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = False
        self.query_one(LogView).focus()

    def _selected_status(self) -> dict[str, Any] | None:
        st = self.statuses.get(self.selected or "")
        if st is None:
            self.notify("no run selected", severity="warning", markup=False)
        return st

    def _select(self, run: str | None) -> None:
        self.selected = run
        log = self.query_one(LogView)
        log.reset(run)
        self.query_one("#loss", MetricChart).set_points([], [])
        self.query_one("#tps", MetricChart).set_points([], [])
        if run is None:
            self.workers.cancel_group(self, "log")
            self.workers.cancel_group(self, "metrics")
            return
        self.follow_log(run)
        self.poll_metrics(run)

    def _show_selected(self) -> None:
        st = self.statuses.get(self.selected or "")
        self.query_one(GpuPanel).show(st)
        self.query_one(EventsList).show(st.get("events") if st else None)

    def _alert(self, prev: dict[str, dict[str, Any]]) -> None:
        """Notify on a transition into stalled / failed / lost, and on recovery from lost."""
        for run, st in self.statuses.items():
            old = prev.get(run)
            new_state, old_state = st.get("state"), (old or {}).get("state")
            if old is None or new_state == old_state:
                continue
            if new_state in fmt.ALERT_STATES:
                why = st.get("error") or ""
                if new_state == "lost":
                    why += f"\n{self._lost_explained(st)}"
                self.notify(
                    f"{run} on {st.get('host') or 'local'} is {new_state.upper()}"
                    + (f": {why}" if why else ""),
                    title="run alert",
                    severity="error",
                    timeout=10,
                    markup=False,
                )
            elif old_state == "lost":
                self.notify(f"{run}: host reachable again ({new_state})", title="recovered", markup=False)

    def _lost_explained(self, st: dict[str, Any]) -> str:
        """A lost run in words: where it was, what the mirror holds, what happens next."""
        parts = [fmt.lost_detail(st, self.clock())]
        mirror = st.get("mirror") or {}
        if mirror.get("checkpoint"):
            parts.append(f"mirror {mirror['checkpoint']}")
        else:
            parts.append("no checkpoint mirrored here yet" if "mirror" in st else "no mirror kept here")
        nxt = f"asking again every {fmt.duration(self.max_backoff_s)} at most"
        replacing = bool(st.get("pod_id")) and mirror.get("watcher") == "this dashboard"
        if replacing:
            nxt += "; the pod is replaced and the run resumed from the mirror once lost long enough (--lost-after)"
        cmd = (st.get("resume") or {}).get("command")  # status's own advice (launcher/run/control.py)
        if cmd and not replacing:
            parts.append(f"`{cmd}`" + (" once its host answers" if cmd.startswith("nsa-launch pull") else ""))
        parts.append(nxt)
        return "; ".join(parts)

    def _refresh_summary(self) -> None:
        age = None if self.last_status_at is None else max(0.0, self.clock() - self.last_status_at)
        url = None
        if self.selected in self.tunnels:
            state = self.tunnel_state.get(self.selected, "live")
            # only a tunnel that answered at the last poll shows its URL
            url = self.tunnels[self.selected].url if state == "live" else f"({state})"
        statuses = [self.statuses[r] for r in self.order]
        selected = self.statuses.get(self.selected or "") or {}
        mirror = selected.get("mirror")
        error = self.poll_error
        if error is None and selected.get("state") == "lost":
            error = f"{self.selected} lost: {self._lost_explained(selected)}"
        self.query_one(SummaryBar).show(statuses, age, url, error, mirror, self.clock())


def _num(rec: dict[str, Any], key: str) -> bool:
    v = rec.get(key)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
