"""A tunnel reopen that the host refuses because a kill began after the last status poll (the run's
TensorBoard dies first, the trainer at its next step): the dashboard closes the tunnel and says why,
as `nsa-launch tunnel` waits for the status, instead of reporting the reopen as failed."""

from __future__ import annotations

from launcher.dashboard.widgets.summary_bar import SummaryBar
from tests.dashboard.helpers import notifications, plain, wait_for

RUN = "m7c-2xa100"


async def test_a_refused_reopen_closes_the_tunnel_and_says_the_run_is_stopping(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.main.polls >= 1, what="first status poll")
        app.main.selected = RUN
        await pilot.press("t")
        await wait_for(pilot, lambda: RUN in app.main.tunnels, what="tunnel open")
        url = app.main.tunnels[RUN].url
        backend.kill(RUN)  # the kill has begun on the host
        app.main.run_action("tunnel_reopen", RUN)  # what a poll that still saw the run live starts
        await wait_for(
            pilot,
            lambda: any("is being stopped" in m for m in notifications(app)),
            what="the refusal's notice",
        )
        await wait_for(pilot, lambda: RUN not in app.main.tunnels, what="tunnel dropped")
        said = [m for m in notifications(app) if "is being stopped" in m]
        assert f"nsa-launch tunnel --run {RUN}" in said[0]
        assert not any("failed" in m for m in notifications(app)), notifications(app)
        assert backend.calls.count(("open_tunnel", RUN)) == 2  # the open and the refused reopen
        assert url not in plain(app.main.query_one(SummaryBar))
