"""The dashboard's top bar at 80 columns: after `t`, the TensorBoard URL is on the screen.

The bar is one row; it used to be a Static that wrapped what did not fit onto a second row nobody
sees, so at 80 columns `t` opened the tunnel and its URL (and a status error) never showed. Read
here is what the bar's row really draws (`render_lines`), not the text it was given.
"""

from __future__ import annotations

from textual.geometry import Region

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from launcher.dashboard.widgets.summary_bar import SummaryBar, fit
from tests.dashboard.helpers import RECORDED_NOW, RECORDING, wait_for


def _row(bar: SummaryBar) -> str:
    [strip] = bar.render_lines(Region(0, 0, bar.size.width, 1))
    return strip.text


async def test_the_tunnel_url_shows_at_80_columns_and_everything_at_160():
    app = make_app(RecordedBackend(RECORDING), refresh_s=0.1, max_backoff_s=0.2, clock=lambda: RECORDED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(
            pilot, lambda: app.main.polls >= 1 and app.main.selected is not None, what="first poll"
        )
        await pilot.press("t")
        await wait_for(pilot, lambda: app.main.tunnels, what="tunnel open")
        bar = app.main.query_one(SummaryBar)
        url = "http://127.0.0.1:6006/"
        await wait_for(pilot, lambda: url in _row(bar), what=f"{url} on the bar's row: {_row(bar)!r}")
        assert _row(bar).lstrip().startswith("3 runs")
        await pilot.resize_terminal(160, 24)
        await wait_for(pilot, lambda: "updated" in _row(bar), what=f"the data age back at 160: {_row(bar)!r}")
        assert url in _row(bar) and "1 running" in _row(bar)


def test_parts_give_way_in_order_and_a_long_error_ends_in_an_ellipsis():
    parts = [
        ("runs", "3 runs", "bold"),
        ("counts", "  1 running", ""),
        ("age", "  · updated 1s ago", ""),
        ("url", "  · TensorBoard http://127.0.0.1:6006/", ""),
        ("mirror", "  · mirror step-00000040 12s ago", ""),
        ("keeper", " (kept by this dashboard)", ""),
    ]
    whole = "".join(t for _, t, _ in parts)
    assert fit(parts, 200).plain == whole
    assert fit(parts, 0).plain == whole  # not laid out yet: everything, cut at the next draw
    assert "kept by" not in fit(parts, len(whole) - 1).plain
    age_kept = "3 runs  1 running  · updated 1s ago  · TensorBoard http://127.0.0.1:6006/"
    assert fit(parts, len(age_kept)).plain == age_kept  # the mirror went
    assert fit(parts, len(age_kept) - 1).plain == "3 runs  1 running  · TensorBoard http://127.0.0.1:6006/"
    assert fit(parts, 50).plain == "3 runs  · TensorBoard http://127.0.0.1:6006/"
    error = [("runs", "3 runs", ""), ("age", "  · updated 1s ago", ""), ("error", "  · " + "x" * 100, "")]
    shown = fit(error, 78).plain
    assert len(shown) == 78 and shown.endswith("…") and "updated" not in shown


async def test_no_runs_yet_says_how_to_start_one():
    from textual.app import App

    class One(App):
        def compose(self):
            yield SummaryBar()

    app = One()
    async with app.run_test(size=(80, 3)) as pilot:
        bar = app.query_one(SummaryBar)
        bar.show([], 0.0, None, None)
        await pilot.pause()
        assert "0 runs yet: `nsa-launch up` starts one" in _row(bar), _row(bar)
        bar.show([{"run": "a", "state": "running"}], 0.0, None, None)
        await pilot.pause()
        assert _row(bar).lstrip().startswith("1 run  1 running"), _row(bar)
