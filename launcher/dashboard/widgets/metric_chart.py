"""One metric against step (loss, tokens/s) drawn with plotext; redrawn only when points change.

Axis labels are ours, not plotext's: steps are integers (plotext would write "5.0 68.8") and values
go through launcher/format.py (tokens/s as 6.8k).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from textual_plotext import PlotextPlot

from launcher import format as fmt

TICKS = 5


def nice_ticks(lo: float, hi: float, n: int = TICKS, integer: bool = False) -> list[float]:
    """About `n` round tick values (1, 2, 2.5 or 5 times a power of ten apart) covering [lo, hi];
    whole numbers only when `integer`."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [round(lo)] if integer else [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    steps = (1, 2, 5, 10) if integer and mag < 10 else (1, 2, 2.5, 5, 10)
    step = next(m * mag for m in steps if m * mag >= raw)
    if integer:
        step = max(1, round(step))
    first = math.ceil(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t) if integer else round(t, 12))
        t += step
    return ticks


class MetricChart(PlotextPlot):
    DEFAULT_CSS = """
    MetricChart { height: 1fr; min-height: 6; border: round $primary-darken-2; }
    """

    def __init__(
        self, title: str, color: str = "cyan", label: Callable[[float], str] = fmt.number, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.color = color
        self.label = label
        self.border_title = title
        self.points: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())

    def on_mount(self) -> None:
        super().on_mount()
        self._draw()

    def set_points(self, steps: list[float], values: list[float]) -> bool:
        """Replace the series; returns False (and draws nothing) when it did not change."""
        pts = (tuple(steps), tuple(values))
        if pts == self.points:
            return False
        self.points = pts
        self._draw()
        return True

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        xs, ys = self.points
        if xs:
            plt.plot(list(xs), list(ys), marker="braille", color=self.color)
            xt = nice_ticks(min(xs), max(xs), integer=True)
            plt.xticks(xt, [str(int(t)) for t in xt])
            yt = nice_ticks(min(ys), max(ys))
            plt.yticks(yt, [self.label(t) for t in yt])
            self.border_title = f"{self.title} · last {self.label(ys[-1])} @ step {int(xs[-1])}"
        else:
            plt.title("no metrics yet")
            self.border_title = self.title
        plt.xlabel("step")
        self.refresh()
