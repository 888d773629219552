"""The one-line summary above the table: run count, state counts, data age, the selected run's
mirror (checkpoint, age, who keeps it current), tunnel URL, poll errors.

The bar is one row. A Static wraps what does not fit onto rows nobody sees, so at 80 columns the
TensorBoard URL and the error (the last parts) vanished while `t` said the tunnel was open: the
parts give way instead, least useful first (the mirror's keeper, the mirror, the data age, the
per-state counts), and what still does not fit ends in an ellipsis.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

from launcher.core import format as fmt
from launcher.dashboard.logbuffer import printable

# Parts in the order they give way when the bar is too narrow; the run count, the TensorBoard URL and
# the error never do (an error is cut with an ellipsis instead).
DROP_ORDER = ("keeper", "mirror", "age", "counts")


class SummaryBar(Static):
    DEFAULT_CSS = """
    SummaryBar { height: 1; background: $boost; padding: 0 1; }
    """

    _parts: tuple[tuple[str, str, str], ...] = ()  # (part name, text, style), in display order

    def show(
        self,
        statuses: list[dict[str, Any]],
        age_s: float | None,
        tunnel_url: str | None,
        error: str | None,
        mirror: dict[str, Any] | None = None,
        now: float | None = None,
    ) -> None:
        parts: list[tuple[str, str, str]] = []
        if not statuses:  # a first open, before any `up`: an empty table said nothing of what to do
            parts.append(("runs", "0 runs yet: `nsa-launch up` starts one, and it shows here", "bold"))
        else:
            parts.append(("runs", f"{len(statuses)} run{'s' if len(statuses) != 1 else ''}", "bold"))
        counts = Counter(str(s.get("state", "?")) for s in statuses)
        for state in fmt.STATE_STYLE:
            if counts.get(state):
                parts.append(("counts", "  ", ""))
                parts.append(("counts", f"{counts[state]} {state}", fmt.STATE_STYLE[state]))
        parts.append(
            ("age", f"  · updated {fmt.ago(age_s)}" if age_s is not None else "  · no status yet", "")
        )
        if tunnel_url:
            parts.append(("url", "  · TensorBoard ", ""))
            parts.append(("url", tunnel_url, "bold underline"))
        if mirror is not None:
            parts.append(("mirror", f"  · mirror {mirror.get('checkpoint') or 'empty'}", ""))
            if mirror.get("time") and now is not None:
                parts.append(("mirror", f" {fmt.ago(max(0.0, now - float(mirror['time'])))}", ""))
            if mirror.get("watcher"):
                parts.append(("keeper", f" (kept by {mirror['watcher']})", ""))
        if error:
            one_line = printable(" ".join(error.splitlines()))  # run text: no terminal control
            parts.append(("error", f"  · {one_line}"[:120], "bold red"))
        self._parts = tuple(parts)
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        self.update(fit(self._parts, self.size.width))


def fit(parts: Sequence[tuple[str, str, str]], width: int) -> Text:
    """The parts as one line of at most `width` cells (0: not laid out yet, everything)."""
    dropped: set[str] = set()
    for name in DROP_ORDER:
        if width <= 0 or sum(cell_len(t) for n, t, _ in parts if n not in dropped) <= width:
            break
        dropped.add(name)
    out = Text(no_wrap=True, overflow="ellipsis")
    for name, text, style in parts:
        if name not in dropped:
            out.append(text, style=style)
    if width > 0:
        out.truncate(width, overflow="ellipsis")
    return out
