"""A restart from the dashboard reads `restarting` (never `failed`) while it runs, and an open
TensorBoard tunnel follows the run: reopened on the same port after a restart, closed with the
command to reopen it after a kill, and its URL shown only while it answers."""

from __future__ import annotations

import threading

from launcher.dashboard.screens.confirm import ConfirmScreen
from launcher.dashboard.widgets.runs_table import RunsTable
from launcher.dashboard.widgets.summary_bar import SummaryBar
from tests.dashboard.helpers import notifications, plain, wait_for


async def _ready(pilot, app, run: str) -> None:
    await wait_for(pilot, lambda: app.main.polls >= 1, what="first status poll")
    table = app.main.query_one(RunsTable)
    table.move_cursor(row=table.get_row_index(run))
    await wait_for(pilot, lambda: app.main.selected == run, what=f"selection of {run}")


def _state(app, run: str) -> str:
    return str(app.main.query_one(RunsTable).get_cell(run, "state"))


async def _confirm(pilot, app, key: str) -> None:
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
    await pilot.press("y")


async def test_restart_shows_restarting_not_failed_and_reopens_the_tunnel(app, backend):
    backend.hold_restart = threading.Event()
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "m7c-2xa100")
        await pilot.press("t")
        await wait_for(pilot, lambda: "m7c-2xa100" in app.main.tunnels, what="tunnel open")
        first = app.main.tunnels["m7c-2xa100"]
        assert first.url in plain(app.main.query_one(SummaryBar))
        # the recorded failed run: while it restarts, its old exit code is not news
        table = app.main.query_one(RunsTable)
        table.move_cursor(row=table.get_row_index("tiny-failed"))
        await wait_for(pilot, lambda: app.main.selected == "tiny-failed", what="select tiny-failed")
        await _confirm(pilot, app, "r")
        await wait_for(pilot, lambda: _state(app, "tiny-failed") == "restarting", what="restarting")
        await pilot.pause(0.3)  # several polls while the restart is held
        assert _state(app, "tiny-failed") == "restarting"
        assert not any("FAILED" in m for m in notifications(app))
        backend.hold_restart.set()
        await wait_for(pilot, lambda: any("restarted as" in m for m in notifications(app)), what="restarted")
        # the restarted run is selected again at the next poll: let that happen before moving on
        await wait_for(pilot, lambda: app.main.want_selected is None, what="reselected")
        # now the run with the tunnel: its TensorBoard stops with the restart, then comes back
        table.move_cursor(row=table.get_row_index("m7c-2xa100"))
        await wait_for(pilot, lambda: app.main.selected == "m7c-2xa100", what="select m7c")
        await _confirm(pilot, app, "r")
        await wait_for(pilot, lambda: first.stopped, what="TensorBoard stopped by the restart")
        await wait_for(
            pilot,
            lambda: app.main.tunnels.get("m7c-2xa100") not in (None, first),
            what="the tunnel reopened",
        )
        second = app.main.tunnels["m7c-2xa100"]
        assert second.url == first.url and second.alive() and first.closed  # same port, old one shut
        await wait_for(pilot, lambda: second.url in plain(app.main.query_one(SummaryBar)), what="URL")


async def test_kill_closes_the_tunnel_and_says_how_to_reopen(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "m7c-2xa100")
        await pilot.press("t")
        await wait_for(pilot, lambda: "m7c-2xa100" in app.main.tunnels, what="tunnel open")
        url = app.main.tunnels["m7c-2xa100"].url
        await _confirm(pilot, app, "k")
        # Kill -> the next status polls see the run ended and its TensorBoard silent -> the tunnel is
        # closed: a few poll cycles (~2 s here, also under load). It once timed out at 10 s in CI: a
        # poll that raced the kill reopened the tunnel, and the recording's new tunnel answered for a
        # killed run (fixed in RecordedBackend.open_tunnel); the longer wait is margin, not the fix.
        await wait_for(pilot, lambda: "m7c-2xa100" not in app.main.tunnels, timeout=30, what="tunnel dropped")
        assert backend.tunnels[0].closed
        assert any(
            "tunnel closed" in m and "nsa-launch tunnel --run m7c-2xa100" in m for m in notifications(app)
        )
        assert url not in plain(app.main.query_one(SummaryBar))


async def test_watch_notes_notify_on_change_only(app):
    from launcher.dashboard.messages import WatchNote

    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.main.polls >= 1, what="first poll")
        pulled = "mirror of r: checkpoint step-00000040 (new), files in /m (0.1 s)"
        for text in (
            pulled,
            "mirror of r: checkpoint step-00000040 (unchanged), files in /m (0.1 s)",  # every 60 s
            pulled,  # the same note again
            "mirror of r: checkpoint step-00000080 (new), files in /m (0.1 s)",
        ):
            app.main.post_message(WatchNote(text))
        await pilot.pause(0.2)
        assert [m for m in notifications(app) if m.startswith("mirror of r")] == [
            pulled,
            "mirror of r: checkpoint step-00000080 (new), files in /m (0.1 s)",
        ]
