"""How numbers and states from a status snapshot are written on screen (durations, rates, colours).

This module owns the text of every cell; it computes no number itself (ages, ETAs and rates come from
the agent's snapshot, so the dashboard shows what the files say) and imports nothing from Textual.
"""

from __future__ import annotations

import math
import time
from typing import Any

from rich.text import Text

STATE_STYLE = {
    "starting": "bold cyan",
    "running": "bold green",
    "stalled": "bold yellow",
    "finished": "bold blue",
    "failed": "bold red",
    "killed": "bold magenta",
    "lost": "bold white on red",
}
ALERT_STATES = ("stalled", "failed", "lost")
SPARK_CHARS = "▁▂▃▄▅▆▇█"


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _clamp0(v: float | None) -> float | None:
    return None if v is None else max(0.0, v)


def duration(seconds: Any) -> str:
    s = _num(seconds)
    if s is None or s < 0:
        return "–"
    if s < 60:
        return f"{s:.1f}s" if s < 10 else f"{s:.0f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def rate(v: Any) -> str:
    f = _num(v)
    if f is None:
        return "–"
    if f >= 1e6:
        return f"{f / 1e6:.2f}M"
    if f >= 1e4:
        return f"{f / 1e3:.1f}k"
    return f"{f:.0f}"


def loss(v: Any) -> str:
    f = _num(v)
    return "–" if f is None else f"{f:.4f}"


def state_text(state: str) -> Text:
    return Text(state or "?", style=STATE_STYLE.get(state, "bold"))


def progress(step: Any, total: Any, width: int = 10) -> Text:
    s, t = _num(step), _num(total)
    if s is None:
        return Text("–")
    if not t:
        return Text(f"{int(s)}")
    frac = min(max(s / t, 0.0), 1.0)
    filled = round(frac * width)
    out = Text(f"{int(s)}/{int(t)} ")
    out.append("█" * filled, style="green")
    out.append("░" * (width - filled), style="grey50")
    out.append(f" {frac * 100:3.0f}%")
    return out


def heartbeat(ages: Any, per_rank: bool) -> Text:
    """Newest heartbeat age, or every rank's age when `per_rank` (keys may arrive as JSON strings)."""
    if not isinstance(ages, dict) or not ages:
        return Text("–")
    # A heartbeat written just after the agent read its clock (or a host clock slightly ahead)
    # gives a small negative age: that is "just now", not "unknown".
    pairs = sorted(((int(k), _clamp0(_num(v))) for k, v in ages.items()), key=lambda kv: kv[0])
    if per_rank:
        return Text(" ".join(f"r{r}:{duration(a)}" for r, a in pairs))
    vals = [a for _, a in pairs if a is not None]
    if not vals:
        return Text("–")
    newest = min(vals)
    style = "yellow" if max(vals) > 60 else ""
    return Text(duration(newest), style=style)


def sparkline(values: list[float], lo: float | None = None, hi: float | None = None) -> str:
    """Block-character sparkline; `lo`/`hi` fix the scale (0–100 % for utilisation) when given."""
    if not values:
        return ""
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    span = hi - lo
    out = []
    for v in values:
        frac = 0.0 if span <= 0 else (min(max(v, lo), hi) - lo) / span
        out.append(SPARK_CHARS[min(int(frac * len(SPARK_CHARS)), len(SPARK_CHARS) - 1)])
    return "".join(out)


def clock_time(t: Any) -> str:
    """UTC wall time HH:MM:SS: fixed across time zones, so recorded screens compare equal anywhere."""
    f = _num(t)
    if f is None:
        return "--:--:--"
    return time.strftime("%H:%M:%S", time.gmtime(f))
