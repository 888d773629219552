"""The dashboard's `?` help at 80x24: the box stays on the screen and every line is readable.

The box was a fixed 84 x 26 cells, so at 80x24 its right edge and its last rows were off the screen:
each long line was cut mid-word ("... newest intact checkpoint (asks fir") and the way to close it
was not shown. Now it is at most the screen, wraps its lines, and scrolls what does not fit.
"""

from __future__ import annotations

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from launcher.dashboard.screens.help import HelpScreen
from tests.dashboard.helpers import RECORDED_NOW, RECORDING, wait_for


async def test_help_box_fits_80x24_and_the_keyboard_scrolls_to_its_last_line():
    app = make_app(RecordedBackend(RECORDING), refresh_s=0.1, max_backoff_s=0.2, clock=lambda: RECORDED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.main.polls >= 1, what="first poll")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.pause(0.1)
        box = app.screen.query_one("#help-box")
        keys = app.screen.query_one("#keys")
        assert box.region.right <= 80 and box.region.bottom <= 24, box.region
        assert keys.region.right <= box.region.right - 1, (keys.region, box.region)  # inside the border
        assert keys.virtual_size.width <= keys.region.width  # the lines wrap: none runs off to the right
        closing = box.children[-1]  # "Escape or ? closes this help."
        await pilot.press("end")  # the keyboard scrolls it: the box has the focus
        await pilot.pause(0.3)
        assert box.max_scroll_y > 0 and box.scroll_y == box.max_scroll_y  # 80x24 needs the scroll
        on_screen = min(24, box.region.bottom)
        assert 0 < closing.region.bottom <= on_screen, (closing.region, box.region)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen), what="help closed")
