"""One metric against step (loss, tokens/s) drawn with plotext; redrawn only when points change."""

from __future__ import annotations

from textual_plotext import PlotextPlot


class MetricChart(PlotextPlot):
    DEFAULT_CSS = """
    MetricChart { height: 1fr; min-height: 6; border: round $primary-darken-2; }
    """

    def __init__(self, title: str, color: str = "cyan", **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.color = color
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
            self.border_title = f"{self.title} · last {ys[-1]:.4g} @ step {int(xs[-1])}"
        else:
            plt.title("no metrics yet")
            self.border_title = self.title
        plt.xlabel("step")
        self.refresh()
