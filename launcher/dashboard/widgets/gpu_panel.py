"""The GPU panel: per GPU of the selected run's host, utilisation, memory, temperature and power,
with short sparkline histories; says "no GPU" plainly on a CPU host.

Owns the per-GPU history (a short bounded deque per host and GPU index, fed one sample per status
poll). It renders what the snapshot says and measures nothing itself.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from launcher.core import format as fmt

HISTORY = 24


def _f(v: Any) -> float | None:
    try:
        return None if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        return None


class GpuPanel(Static, can_focus=True):
    ALLOW_MAXIMIZE = True
    DEFAULT_CSS = """
    GpuPanel { height: auto; min-height: 3; border: round $primary-darken-2; padding: 0 1; }
    GpuPanel:focus { border: round $accent; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("waiting for the first status…", **kwargs)
        self.border_title = "GPUs"
        self._util: dict[tuple[str, int], deque[float]] = {}
        self._mem: dict[tuple[str, int], deque[float]] = {}

    def record(self, statuses: list[dict[str, Any]]) -> None:
        """Add one history sample per GPU seen in this poll (every host, not only the selected run)."""
        seen: set[str] = set()
        for st in statuses:
            host = str(st.get("host") or "local")
            gpus = st.get("gpus")
            if host in seen or not isinstance(gpus, list) or st.get("state") == "lost":
                continue
            seen.add(host)
            for i, g in enumerate(gpus):
                key = (host, int(g.get("index", i)))
                util, used, total = _f(g.get("util_pct")), _f(g.get("mem_used_mb")), _f(g.get("mem_total_mb"))
                if util is not None:
                    self._util.setdefault(key, deque(maxlen=HISTORY)).append(util)
                if used is not None and total:
                    self._mem.setdefault(key, deque(maxlen=HISTORY)).append(100.0 * used / total)

    def show(self, status: dict[str, Any] | None) -> None:
        if status is None:
            self.border_title = "GPUs"
            self.update("no run selected")
            return
        host = str(status.get("host") or "local")
        self.border_title = f"GPUs · {host}"
        gpus = status.get("gpus")
        stale = status.get("state") == "lost"
        if not isinstance(gpus, list) or not gpus:
            msg = "host unreachable: no GPU data" if stale else "no GPU on this host (CPU run)"
            self.update(Text(msg, style="italic"))
            return
        table = Table.grid(padding=(0, 1))
        for col in ("gpu", "util", "", "memory", "", "temp", "power"):
            table.add_column(col)
        for i, g in enumerate(gpus):
            key = (host, int(g.get("index", i)))
            util, used, total = _f(g.get("util_pct")), _f(g.get("mem_used_mb")), _f(g.get("mem_total_mb"))
            table.add_row(
                Text(
                    f"{key[1]} {str(g.get('name') or '').removeprefix('NVIDIA ')}"[:22],
                    style="bold",
                    no_wrap=True,
                ),
                Text(fmt.unit(util, "3.0f", "%"), justify="right"),
                Text(fmt.sparkline(list(self._util.get(key, ())), 0, 100), style="green"),
                Text(fmt.mib(used, total), justify="right"),
                Text(fmt.sparkline(list(self._mem.get(key, ())), 0, 100), style="magenta"),
                Text(fmt.unit(g.get("temp_c"), ".0f", "°C"), justify="right"),
                Text(fmt.unit(g.get("power_w"), ".0f", "W"), justify="right"),
            )
        if stale:
            self.border_title = f"GPUs · {host} · stale (host unreachable)"
        elif status.get("synthetic"):
            self.border_title = f"GPUs · {host} · SYNTHETIC"
        self.update(table)
