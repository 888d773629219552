"""One metric against step (loss, tokens/s) drawn with plotext; redrawn only when points or size change.

Axis labels are ours, not plotext's: steps are integers (plotext would write "5.0 68.8"), values go
through launcher/core/format.py with one precision for the whole axis (5.0k 7.5k 10.0k, never 5.0k 10k),
the axes run from round tick values below the data to round values above it, and the number of
ticks follows the space the chart has, so a short chart never stacks labels out of order. With no
points yet, or too little room to draw, it says so in words instead of drawing an empty frame.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.console import RenderableType
from rich.text import Text
from textual_plotext import PlotextPlot

from launcher.core import format as fmt

TICKS = 5
# Rows plotext takes besides the plot itself: the frame's top line, the x axis, its tick labels.
CHROME_ROWS = 3
MIN_PLOT_ROWS = 2
Y_LABEL_CELLS = 6  # the widest tick label format.ticks writes ("12.5k"), plus the axis


def _nice_steps(lo: float, hi: float, integer: bool) -> list[float]:
    """Round spacings (1, 2, 2.5 or 5 times a power of ten) from a fiftieth of the range up to it."""
    mag = 10 ** math.floor(math.log10(hi - lo))
    out = [m * mag * 10**e for e in (-2, -1, 0, 1) for m in (1, 2, 2.5, 5)]
    return sorted({max(1, round(s)) for s in out} if integer else set(out))


def nice_ticks(lo: float, hi: float, n: int = TICKS, integer: bool = False) -> list[float]:
    """At most `n` (and at least 2) round ascending tick values inside [lo, hi], as evenly spread as
    the round spacings allow; whole numbers only when `integer`. For the step axis, which spans the
    data exactly."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [round(lo)] if integer else [lo]
    for step in _nice_steps(lo, hi, integer):
        first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
        if last - first + 1 <= n:
            break
    ticks = [k * step for k in range(first, last + 1)]
    return [round(t) if integer else round(t, 12) for t in ticks]


def axis_ticks(lo: float, hi: float, n: int = TICKS) -> list[float]:
    """2 to `n` round ascending ticks from one at or below `lo` to one at or above `hi`: the value
    axis runs between them, choosing the spacing that wastes the least height."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return []
    best: tuple[float, list[float]] | None = None
    for step in _nice_steps(lo, hi, False):
        first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
        if 2 <= last - first + 1 <= n and (best is None or (last - first) * step < best[0]):
            best = ((last - first) * step, [round(k * step, 12) for k in range(first, last + 1)])
    return best[1] if best else [lo, hi]


def _span(lo: float, hi: float, pad: float) -> tuple[float, float]:
    """[lo, hi], widened by `pad` each side when it is a single value (one point, a flat line)."""
    return (lo - pad, hi + pad) if hi <= lo else (lo, hi)


class MetricChart(PlotextPlot, can_focus=True):
    ALLOW_MAXIMIZE = True
    DEFAULT_CSS = """
    MetricChart { height: 1fr; min-height: 7; border: round $primary-darken-2; }
    MetricChart:focus { border: round $accent; }
    """

    def __init__(
        self,
        title: str,
        color: str = "cyan",
        label: Callable[[float], str] = fmt.number,
        si: bool = True,
        **kwargs,
    ) -> None:
        """`label` writes one value (the title's "last"); `si`: tick labels in k/M (tokens/s), or
        plain decimals (loss)."""
        super().__init__(**kwargs)
        self.title = title
        self.si = si
        self.color = color
        self.label = label
        self.border_title = title
        self.points: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
        self.drawn_ticks: tuple[list[str], list[str]] = ([], [])  # (x, y) labels of the last draw

    def set_points(self, steps: list[float], values: list[float]) -> bool:
        """Replace the series; returns False (and draws nothing) when it did not change."""
        pts = (tuple(steps), tuple(values))
        if pts == self.points:
            return False
        self.points = pts
        xs, ys = pts
        if xs:
            self.border_title = f"{self.title} · last {self.label(ys[-1])} @ step {int(xs[-1])}"
        else:
            self.border_title = self.title
        self.refresh()
        return True

    def render(self) -> RenderableType:
        xs, ys = self.points
        width, height = self.size.width, self.size.height
        if not xs:
            self.drawn_ticks = ([], [])
            return Text(f"waiting for data: no {self.title} in metrics.jsonl yet", style="italic")
        plot_rows = height - CHROME_ROWS
        if plot_rows < MIN_PLOT_ROWS or width < 2 * Y_LABEL_CELLS:
            self.drawn_ticks = ([], [])
            return Text(
                f"last {self.label(ys[-1])} @ step {int(xs[-1])} (too small to draw: z maximises)",
                style="italic",
            )
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.plot(list(xs), list(ys), marker="braille", color=self.color)
        x_lo, x_hi = _span(min(xs), max(xs), 1.0)
        y_lo, y_hi = _span(min(ys), max(ys), max(abs(ys[-1]) * 0.05, 1e-3))
        xt = nice_ticks(x_lo, x_hi, n=max(2, min(TICKS, width // 10)), integer=True)
        # At most one label per row: plotext writes a label on every tick it is given, and more
        # ticks than rows come out stacked in the wrong order.
        yt = axis_ticks(y_lo, y_hi, n=max(2, min(TICKS, plot_rows)))
        x_labels = [str(int(t)) for t in xt]
        y_labels = fmt.ticks(yt, si=self.si)
        plt.xticks(xt, x_labels)
        plt.yticks(yt, y_labels)
        plt.xlim(x_lo, x_hi)
        plt.ylim(yt[0], yt[-1])
        self.drawn_ticks = (x_labels, y_labels)
        return super().render()
