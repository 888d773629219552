"""The events list: the selected run's recent events.jsonl records (stalls, errors, checkpoints),
one line each, newest last; when the pane is shorter than the list the newest ones stay."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from launcher.core import format as fmt
from launcher.dashboard.logbuffer import printable

KIND_STYLE = {
    "error": "bold red",
    "stalled": "bold yellow",
    "sigterm": "magenta",
    "checkpoint": "green",
    "finished": "blue",
    "first_step": "cyan",
}
SHOWN = 8


class EventsList(Static, can_focus=True):
    ALLOW_MAXIMIZE = True
    DEFAULT_CSS = """
    EventsList {
        height: auto; min-height: 3; max-height: 10; border: round $primary-darken-2; padding: 0 1;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    EventsList:focus { border: round $accent; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("no events yet", **kwargs)
        self.border_title = "events"
        self.events: list[dict[str, Any]] = []

    def show(self, events: list[dict[str, Any]] | None) -> None:
        self.events = [e for e in (events or []) if isinstance(e, dict)][-SHOWN:]
        self.update(self._text(len(self.events)))

    def on_resize(self) -> None:
        self.update(self._text(self.size.height or len(self.events)))

    def _text(self, rows: int) -> Text:
        events = self.events[-max(1, rows) :]
        if not events:
            return Text("no events yet", style="italic")
        out = Text(no_wrap=True, overflow="ellipsis")
        for i, ev in enumerate(events):
            kind = str(ev.get("kind", "?"))
            if i:
                out.append("\n")
            out.append(fmt.clock_time(ev.get("time")), style="dim")
            step = ev.get("step")
            out.append(f" {'step ' + str(step) if step is not None else '':>10} ")
            out.append(f"{kind:<10}", style=KIND_STYLE.get(kind, ""))
            detail = fmt.event_detail(ev)
            if detail:
                out.append(" " + printable(detail)[:80], style="dim")
        return out
