"""The `?` help modal: every key of the dashboard and what it does."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("↑ / ↓", "select a run (its log, GPUs, charts and events follow)"),
    ("k", "kill the selected run (asks first): TERM, then KILL, verified gone"),
    ("r", "restart the selected run from its newest intact checkpoint (asks first)"),
    ("t", "open / close the TensorBoard tunnel; the URL shows in the top bar"),
    ("/", "search the log (Enter applies, empty clears); matches highlighted"),
    ("n / N", "next / previous search match"),
    ("f", "follow the log tail / pause it"),
    ("w", "log: wrap long lines / keep them whole and scroll sideways (← →)"),
    ("z", "maximise the focused pane (Tab moves the focus) / restore the layout"),
    ("Tab", "move the focus to the next pane (runs, log, the side panes)"),
    ("v", "below 100 columns: show the next side pane (loss, tokens/s, GPUs, events)"),
    ("l", "filter the log by rank: all, rank 0, rank 1 ... (untagged lines always show)"),
    ("h", "heartbeat column: newest age / every rank's age"),
    ("g", "GPU processes on the run's host (pid, user, GPU memory, command); x kills one (asks first)"),
    ("Esc", "close the search box; again: clear the search"),
    ("Ctrl+P", "command palette; its Screenshot saves an SVG to $NSA_LAUNCH_HOME/screenshots"),
    ("?", "this help"),
    ("q", "quit (the runs keep going)"),
)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 84; height: auto; border: thick $accent; background: $panel; padding: 1 2;
        max-width: 100%; max-height: 100%; overflow-y: auto;
    }
    """
    # max-width/max-height: at 80x24 the fixed 84 x 26 box ran off the screen's right and bottom
    # edges, cutting every long line mid-word ("asks fir") and the closing hint; it now wraps and
    # scrolls inside the screen (focused, so ↑ ↓ PgUp PgDn End scroll it).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "close"),
        Binding("question_mark", "dismiss", "close"),
    ]

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        with VerticalScroll(id="help-box"):
            yield Static("[b]nsa-launch dashboard — keys[/b]\n")
            yield Static(table, id="keys")
            yield Static("\n[dim]Escape or ? closes this help.[/dim]")
