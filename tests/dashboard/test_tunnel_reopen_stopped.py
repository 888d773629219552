"""A tunnel reopen that the host refuses because a kill began after the last status poll (the run's
TensorBoard dies first, the trainer at its next step): the dashboard says so once and follows the
run's status, as `nsa-launch tunnel` does, instead of reporting the reopen as failed: the tunnel is
closed when the status says the run ended (reopened if it lives on, e.g. restarted from outside)."""

from __future__ import annotations

import pytest

from launcher.dashboard.widgets.summary_bar import SummaryBar
from tests.dashboard.helpers import notifications, plain, select_run, wait_for

RUN = "m7c-2xa100"


async def test_a_refused_reopen_is_said_once_and_the_status_closes_the_tunnel(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await select_run(pilot, app, RUN)
        await pilot.press("t")
        await wait_for(pilot, lambda: RUN in app.main.tunnels, what="tunnel open")
        url = app.main.tunnels[RUN].url
        backend.kill(RUN)  # the kill has begun on the host
        app.main.run_action("tunnel_reopen", RUN)  # what a poll that still saw the run live starts
        await wait_for(
            pilot,
            lambda: any("TensorBoard not restarted" in m for m in notifications(app)),
            what="the refusal's notice",
        )
        await wait_for(pilot, lambda: RUN not in app.main.tunnels, what="tunnel closed by the poll")
        said = notifications(app)
        assert sum("TensorBoard not restarted" in m for m in said) == 1, said
        assert any(
            "tunnel closed" in m and "killed" in m and f"nsa-launch tunnel --run {RUN}" in m for m in said
        ), said
        assert not any("failed" in m for m in said), said
        # the open and the refused reopen; under load a poll whose status predates the kill may ask
        # again (refused again, not said again): CI saw 3
        assert backend.calls.count(("open_tunnel", RUN)) >= 2
        assert url not in plain(app.main.query_one(SummaryBar))


async def test_a_run_restarted_from_outside_gets_its_tunnel_back_after_the_refusals(
    app, backend, monkeypatch
):
    """A slow kill (the status says `running` for several polls while the host refuses each reopen),
    then a restart made outside the dashboard: the tunnel comes back on the same port, said once."""
    stopping = {"on": False}
    snapshot = backend.snapshot

    def slow_status():
        rows = snapshot()
        for st in rows:
            if stopping["on"] and st.get("run") == RUN:
                st["state"] = "running"  # the trainer has not reached its next step yet
        return rows

    monkeypatch.setattr(backend, "snapshot", slow_status)
    async with app.run_test(size=(160, 48)) as pilot:
        await select_run(pilot, app, RUN)
        await pilot.press("t")
        await wait_for(pilot, lambda: RUN in app.main.tunnels, what="tunnel open")
        first = app.main.tunnels[RUN]
        stopping["on"] = True
        backend.kill(RUN)
        first.stopped = True  # the kill stops TensorBoard at once
        await wait_for(
            pilot,
            lambda: backend.calls.count(("open_tunnel", RUN)) >= 4,
            what="reopens refused at several polls",
        )
        assert RUN in app.main.tunnels and app.main.tunnel_state[RUN] in ("stopping", "reopening")
        backend.restart(RUN)  # from outside: the run lives on
        stopping["on"] = False
        try:
            # 20 s: the one wait here that spans several polls after a restart (a fresh clone's loaded
            # worker once took over 10 s, and it did not reproduce in 22 runs under load: the failure
            # says what the dashboard was doing, for the next one)
            await wait_for(
                pilot, lambda: app.main.tunnel_state.get(RUN) == "live", 20.0, "the tunnel reopened"
            )
        except pytest.fail.Exception:
            pytest.fail(
                f"the tunnel did not come back: state {app.main.tunnel_state.get(RUN)!r}, tunnels "
                f"{app.main.tunnels.get(RUN)!r}, calls {backend.calls[-8:]}, said {notifications(app)}"
            )
        second = app.main.tunnels[RUN]
        assert second is not first and second.url == first.url and second.alive()
        said = notifications(app)
        assert sum("TensorBoard not restarted" in m for m in said) == 1, said
        assert sum("reopening the tunnel" in m for m in said) == 1, said
        assert not any("failed" in m for m in said), said
