"""The `g` modal: every process holding GPU memory on the selected run's host (nvitop's process
view: GPU, pid, user, GPU memory, command), with `x` to kill a stray one after a confirmation.

Owns polling `Backend.gpu_processes` while it is open (in a daemon thread, like every backend call)
and asking `Backend.kill_gpu_process` for the highlighted pid once confirmed. A row whose pid is one
of the run's own is marked "run", so a stray process stands out. Must not call the backend from a
handler; the kill's result arrives as a notification and the list refreshes.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from launcher.core import format as fmt
from launcher.dashboard.backend import Backend
from launcher.dashboard.logbuffer import printable
from launcher.dashboard.screens.confirm import ConfirmScreen
from launcher.dashboard.workers import in_daemon_thread

COLUMNS = (("gpu", "GPU"), ("pid", "pid"), ("owner", "owner"), ("user", "user"), ("mem", "GPU mem"),
           ("command", "command"))  # fmt: skip


class GpuProcsScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    GpuProcsScreen { align: center middle; }
    GpuProcsScreen > Vertical { width: 90%; height: 70%; border: thick $accent; background: $panel; padding: 0 1; }
    GpuProcsScreen #procs-note { height: auto; color: $text-muted; }
    GpuProcsScreen DataTable { height: 1fr; }
    GpuProcsScreen #procs-command { height: auto; max-height: 8; border-top: solid $primary-darken-2; }
    """
    # #procs-command: the highlighted process's whole command line, wrapped. The table's command
    # column is cut at the box's edge: at 80 columns it kept 14 characters ("/home/ubuntu/nsa-"), at
    # 120 it ended before the --config that says which run it is.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "kill_process", "kill process"),
        Binding("escape", "dismiss", "close"),
        Binding("g", "dismiss", "close"),
    ]

    def __init__(self, backend: Backend, run: str, status: dict[str, Any], refresh_s: float) -> None:
        super().__init__()
        self.backend = backend
        self.run = run
        self.status = status
        self.refresh_s = refresh_s
        self.rows: list[dict[str, Any]] | None = None
        self.polls = 0
        self._poll_now = asyncio.Event()

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"GPU processes · {self.status.get('host') or 'local'}"
            yield Static("asking the host…", id="procs-note")
            yield DataTable(id="procs", cursor_type="row", zebra_stripes=True)
            yield Static("", id="procs-command")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        table.focus()
        self.poll()

    @work(group="gpu_procs", exclusive=True, exit_on_error=False)
    async def poll(self) -> None:
        while True:
            try:
                rows = await in_daemon_thread(
                    self.backend.gpu_processes, self.run, name="dashboard-gpu-procs"
                )
                error = None
            except Exception as e:
                rows, error = None, str(e) or type(e).__name__
            self.show(rows, error)
            self._poll_now.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), timeout=max(self.refresh_s, 1.0))

    def show(self, rows: list[dict[str, Any]] | None, error: str | None) -> None:
        self.polls += 1
        note = self.query_one("#procs-note", Static)
        table = self.query_one(DataTable)
        keep = self.selected_pid()
        table.clear()
        self.rows = rows
        self._show_command()  # none while the host cannot say
        if error is not None:
            note.update(Text(f"cannot list GPU processes: {error}", style="bold red"))
            return
        if rows is None:
            note.update(
                Text("no NVIDIA driver (NVML) on this host: no GPU processes to show", style="italic")
            )
            return
        own = {int(p) for p in self.status.get("pids") or []}
        hint = "x kills the highlighted process (asks first) · g / Esc close"
        out = Text()
        synthetic = next((r["synthetic"] for r in rows if r.get("synthetic")), None)
        if synthetic:
            out.append(f"SYNTHETIC DATA ({synthetic}) · ", style="bold black on yellow")
        out.append(f"{len(rows)} process(es) hold GPU memory · {hint}")
        note.update(out)
        for r in rows:
            pid = int(r["pid"])
            mine = pid in own
            table.add_row(
                str(r.get("gpu")),
                Text(str(pid), justify="right"),
                Text("run", style="green") if mine else Text("other", style="bold yellow"),
                Text(printable(str(r.get("user") or "?"))),
                Text(fmt.mib_one(r.get("gpu_mem_mib")), justify="right"),
                Text(printable(str(r.get("command") or "?")), overflow="ellipsis", no_wrap=True),
                key=f"{r.get('node', 0)}:{r.get('gpu')}:{pid}",
            )
        if keep is not None:
            for i, r in enumerate(rows):
                if int(r["pid"]) == keep:
                    table.move_cursor(row=i)
                    break
        self._show_command()

    @on(DataTable.RowHighlighted, "#procs")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_command()

    def _show_command(self) -> None:
        pid = self.selected_pid()
        row = next((r for r in self.rows or [] if int(r["pid"]) == pid), None)
        line = self.query_one("#procs-command", Static)
        line.display = row is not None
        if row is not None:
            line.update(Text.assemble((f"pid {pid}: ", "bold"), printable(str(row.get("command") or "?"))))

    def selected_pid(self) -> int | None:
        table = self.query_one(DataTable)
        if not self.rows or table.row_count == 0:
            return None
        return int(self.rows[min(table.cursor_row, len(self.rows) - 1)]["pid"])

    def action_kill_process(self) -> None:
        pid = self.selected_pid()
        if pid is None:
            self.notify("no process selected", severity="warning")
            return
        row = next(r for r in self.rows or [] if int(r["pid"]) == pid)
        own = pid in {int(p) for p in self.status.get("pids") or []}
        q = Text.assemble(
            "Kill pid ", (str(pid), "bold"), f" ({printable(str(row.get('user')))}, {fmt.mib_one(row.get('gpu_mem_mib'))} on GPU ",
            f"{row.get('gpu')}) on ", (str(self.status.get("host") or "local"), "bold"), "?\n\n",
            (printable(str(row.get("command") or "?"))[:200], "dim"), "\n\nTERM, then KILL after the grace period.",
            ("\nThis process belongs to the run: use k on the main screen to stop the whole run." if own else ""),
        )  # fmt: skip

        def done(yes: bool | None) -> None:
            if yes:
                self.kill(pid, int(row.get("node") or 0))

        self.app.push_screen(ConfirmScreen(q, "Kill"), done)

    @work(group="gpu_procs_kill", exclusive=False, exit_on_error=False)
    async def kill(self, pid: int, node: int) -> None:
        try:
            res = await in_daemon_thread(
                self.backend.kill_gpu_process, self.run, pid, node, name="dashboard-kill-pid"
            )
            ok = bool(res.get("killed"))
            msg = str(res.get("message") or ("killed" if ok else "not killed"))
        except Exception as e:
            ok, msg = False, f"kill pid {pid} failed: {e}"
        self.notify(msg, title=f"kill pid {pid}", severity="information" if ok else "error", markup=False)
        self._poll_now.set()
