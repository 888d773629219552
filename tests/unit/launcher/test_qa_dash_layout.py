"""QA of the dashboard's screen at 80x24 and 120x40 as a new user meets it (qadash, 2026-11-27),
over the committed recording (tests/dashboard/recorded): `z` gives every pane the whole screen, and
the footer keeps the keys a newcomer needs."""

from __future__ import annotations

import pytest

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from tests.dashboard.helpers import RECORDED_NOW, RECORDING, wait_for


def _app():
    # One poll is all these tests need: at refresh 0.1 s the redraws of each poll made this file cost
    # 17.6 CPU-s instead of 11.3 (measured here, 2026-11-27, load ~15).
    return make_app(
        RecordedBackend(RECORDING), refresh_s=30.0, max_backoff_s=30.0, clock=lambda: RECORDED_NOW
    )


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_z_gives_every_pane_the_whole_screen(size):
    """At 80x24 `z` on the loss chart left it 8 rows high between two hatched bands (the compact
    slot's max-height held), and the runs table kept the short layout's 7 rows."""
    app = _app()
    async with app.run_test(size=size) as pilot:
        main = app.main
        await wait_for(pilot, lambda: main.polls >= 1, what="first poll")
        for pane in ("runs", "log", "loss", "tps", "gpus", "events"):
            if main.has_class("-compact"):
                while main.side_pane != pane and pane in ("loss", "tps", "gpus", "events"):
                    await pilot.press("v")
            widget = main.query_one(f"#{pane}")
            widget.focus()
            await pilot.press("z")
            await pilot.pause()
            assert main.maximized is widget, pane
            # the whole screen but the footer's row
            assert (widget.outer_size.width, widget.outer_size.height) == (size[0], size[1] - 1), pane
            await pilot.press("z")
            await pilot.pause()
            assert main.maximized is None
