"""The one-line summary above the table: run count, state counts, data age, the selected run's
mirror (checkpoint, age, who keeps it current), tunnel URL, poll errors."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.text import Text
from textual.widgets import Static

from launcher.core import format as fmt


class SummaryBar(Static):
    DEFAULT_CSS = """
    SummaryBar { height: 1; background: $boost; padding: 0 1; }
    """

    def show(
        self,
        statuses: list[dict[str, Any]],
        age_s: float | None,
        tunnel_url: str | None,
        error: str | None,
        mirror: dict[str, Any] | None = None,
        now: float | None = None,
    ) -> None:
        out = Text()
        out.append(f"{len(statuses)} run{'s' if len(statuses) != 1 else ''}", style="bold")
        counts = Counter(str(s.get("state", "?")) for s in statuses)
        for state in fmt.STATE_STYLE:
            if counts.get(state):
                out.append("  ")
                out.append(f"{counts[state]} {state}", style=fmt.STATE_STYLE[state])
        out.append(f"  · updated {fmt.ago(age_s)}" if age_s is not None else "  · no status yet")
        if tunnel_url:
            out.append("  · TensorBoard ")
            out.append(tunnel_url, style="bold underline")
        if mirror is not None:
            out.append(f"  · mirror {mirror.get('checkpoint') or 'empty'}")
            if mirror.get("time") and now is not None:
                out.append(f" {fmt.ago(max(0.0, now - float(mirror['time'])))}")
            if mirror.get("watcher"):
                out.append(f" (kept by {mirror['watcher']})")
        if error:
            out.append(f"  · {error}"[:120], style="bold red")
        self.update(out)
