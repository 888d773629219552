"""The dashboard at the sizes people open terminals at: the runs table's column fitting (whole ids;
run, state, step and loss kept; documented drop order), the compact layout with its `v` side slot,
`z` maximise and `w` log wrap, and charts that say "waiting for data" and keep ascending axes."""

from __future__ import annotations

from launcher.core import format as fmt
from launcher.dashboard.recorded import RecordedBackend
from launcher.dashboard.widgets.log_view import LogView
from launcher.dashboard.widgets.metric_chart import MetricChart, axis_ticks, nice_ticks
from launcher.dashboard.widgets.runs_table import DROP_ORDER, KEPT, RunsTable, fit_columns
from tests.dashboard.helpers import RECORDING, wait_for


def _statuses():
    return RecordedBackend(RECORDING).snapshot()


def test_columns_drop_in_the_documented_order_and_never_the_kept_ones():
    statuses = _statuses()
    every = fit_columns(statuses, 1000)
    assert every[1] is True and len(every[0]) == 10  # wide: every column, with the progress bar
    seen_dropped: list[str] = []
    for width in range(160, 20, -1):
        shown, bar = fit_columns(statuses, width)
        dropped = ([] if bar else ["bar"]) + [c for c in DROP_ORDER if c != "bar" and c not in shown]
        assert dropped == list(DROP_ORDER[: len(dropped)]), (width, dropped)  # a prefix, in order
        assert set(KEPT) <= set(shown)
        seen_dropped = dropped
    assert seen_dropped == list(DROP_ORDER)
    # the table's content width at 120 and 80 columns (minus its border)
    assert fit_columns(statuses, 118)[0] == (
        "host", "run", "profile", "state", "progress", "tps", "loss", "eta", "hb", "elapsed",
    )  # fmt: skip
    assert fit_columns(statuses, 78)[0] == ("run", "state", "progress", "tps", "loss", "hb")


def test_axis_ticks_ascend_and_cover_the_data():
    for lo, hi, n in ((2.45, 5.5, 3), (2744, 12898, 5), (2744, 12898, 2), (3.1, 3.2, 4), (0, 1e6, 5)):
        t = axis_ticks(lo, hi, n)
        assert 2 <= len(t) <= n and t == sorted(t) and t[0] <= lo and t[-1] >= hi, (lo, hi, n, t)
    assert nice_ticks(2, 120, 5, integer=True) == [25, 50, 75, 100]
    assert nice_ticks(2, 120, 3, integer=True) == [50, 100]
    # one unit and one precision per axis: the labels never change form between draws
    assert fmt.ticks([5000, 7500, 10000, 12500]) == ["5.0k", "7.5k", "10.0k", "12.5k"]
    assert fmt.ticks([0, 5000, 10000]) == ["0", "5k", "10k"]
    assert fmt.ticks([2.5, 3.0, 3.5], si=False) == ["2.5", "3.0", "3.5"]


async def test_80x24_whole_ids_compact_layout_and_keys(app):
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main
        await wait_for(pilot, lambda: main.polls >= 1, what="first poll")
        table = main.query_one(RunsTable)
        assert [c.value for c in table.columns] == ["run", "state", "progress", "tps", "loss", "hb"]
        for run in ("tiny-cpu-120", "m7c-2xa100", "tiny-failed"):
            assert str(table.get_cell(run, "run")).startswith(run)
        assert table.virtual_size.width <= table.scrollable_content_region.width  # no sideways scroll
        assert main.has_class("-compact")
        await wait_for(pilot, lambda: main.selected == "tiny-cpu-120", what="selection")
        log = main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) == 76, what="log")
        # wrap (default): no line is cut; every character of a long line is on some row
        width = log.scrollable_content_region.width
        long_line = max(range(len(log.view)), key=lambda i: len(log.view[i].text))
        assert len(log.view[long_line].text) > width
        assert log.row_of(long_line + 1) - log.row_of(long_line) >= 2
        assert log.virtual_size.width <= width  # never a sideways scrollbar while wrapping
        await pilot.press("w")
        assert not log.wrap and log.virtual_size.width >= len(log.view[long_line].text)
        await pilot.press("w")
        assert log.wrap
        # one side pane at a time below 100 columns; v shows the next
        shown = [w.id for w in main.query(".side") if w.display and w.has_class("-shown")]
        assert shown == ["loss"]
        await pilot.press("v")
        assert main.query_one("#tps").has_class("-shown") and not main.query_one("#loss").has_class("-shown")
        # z maximises the focused pane and restores the layout
        log.focus()
        await pilot.press("z")
        assert main.maximized is log
        await pilot.pause()
        assert log.size.width == 80 - 2
        await pilot.press("z")
        assert main.maximized is None


async def test_chart_says_waiting_for_data_without_points(app):
    async with app.run_test(size=(120, 40)) as pilot:
        main = app.main
        await wait_for(pilot, lambda: main.polls >= 1, what="first poll")
        table = main.query_one(RunsTable)
        table.move_cursor(row=table.get_row_index("m7c-2xa100"))  # a synthetic run without metrics
        await wait_for(pilot, lambda: main.selected == "m7c-2xa100", what="selection")
        chart = main.query_one("#loss", MetricChart)
        await pilot.pause(0.1)
        assert chart.points == ((), ())
        assert "waiting for data" in str(chart.render())
