"""The events list: the selected run's recent events.jsonl records (stalls, errors, checkpoints)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from launcher import format as fmt

KIND_STYLE = {
    "error": "bold red",
    "stalled": "bold yellow",
    "sigterm": "magenta",
    "checkpoint": "green",
    "finished": "blue",
    "first_step": "cyan",
}
SHOWN = 8


class EventsList(Static):
    DEFAULT_CSS = """
    EventsList { height: auto; min-height: 3; max-height: 10; border: round $primary-darken-2; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("no events yet", **kwargs)
        self.border_title = "events"

    def show(self, events: list[dict[str, Any]] | None) -> None:
        events = [e for e in (events or []) if isinstance(e, dict)][-SHOWN:]
        if not events:
            self.update(Text("no events yet", style="italic"))
            return
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
                out.append(" " + detail[:80], style="dim")
        self.update(out)
