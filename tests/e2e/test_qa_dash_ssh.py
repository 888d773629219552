"""QA of the dashboard as a user meets it at 80x24 over a real run on the loopback sshd, through an
outage (qadash, 2026-11-27): driven in-process with Textual's Pilot over the real LauncherBackend
(real sshd, tmux, torchrun with gloo; one worker, launch_support.CPU1, paced).

While sshd is down: the row says lost, the keys answer at once (the UI never waits on SSH), the log
pane's outage note is one readable line, and a `t` that cannot reach the host says which action failed
in words. Once sshd is back the row recovers by itself; `k` + `y` kills the run and nothing of it is
left."""

from __future__ import annotations

import os
import time

import pytest

from launcher.dashboard import make_app
from launcher.dashboard.backend import LauncherBackend, Scope, WatchSettings
from launcher.dashboard.widgets.log_view import LogView
from launcher.run.api import resolve_run
from tests.dashboard.helpers import wait_for
from tests.e2e.launch_support import CPU1, PACED, PYTHON, invoke, isolate, run_processes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_dashboard_80x24_through_an_ssh_outage(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    run = f"qa-dash-{os.getpid()}"
    res = invoke(
        "up", *CPU1, "--host", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--python", PYTHON,
        "--workdir", str(tmp_path / "host"), "--name", run, "--set", "train.steps=3000", *PACED,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rec = resolve_run(run)
    app = make_app(LauncherBackend(Scope(run=run), WatchSettings(False)), refresh_s=0.5, max_backoff_s=2.0)
    said: list[tuple[str, str]] = []  # (title, message) of every notification, even expired ones
    notify = app.notify

    def record(message, *a, **k):
        said.append((str(k.get("title", "")), str(message)))
        return notify(message, *a, **k)

    app.notify = record
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            main = app.main
            log = main.query_one(LogView)
            state = lambda: main.statuses.get(run, {}).get("state")  # noqa: E731
            await wait_for(pilot, lambda: (main.statuses.get(run, {}).get("step") or 0) > 0, 90, "a step")
            await wait_for(pilot, lambda: any("[nsa] step" in ln.text for ln in log.view), 30, "log lines")

            sshd.stop()
            try:
                await wait_for(pilot, lambda: state() == "lost", 60, "state lost")
                await wait_for(
                    pilot, lambda: any("log stream lost" in ln.text for ln in log.view), 30, "note"
                )
                note = next(ln.text for ln in log.view if "log stream lost" in ln.text)
                assert "\ufffd" not in note and "fix:" not in note, note
                assert "cannot reach" in note or "dropped" in note or "closed" in note, note
                for key in ("v", "f", "f", "v"):  # every key answers while each SSH call fails
                    t0 = time.monotonic()
                    await pilot.press(key)
                    assert time.monotonic() - t0 < 2.0, key
                await pilot.press("t")
                await wait_for(pilot, lambda: any("tunnel" in m for _, m in said), 60, "the tunnel's answer")
                title, message = next((t, m) for t, m in said if "tunnel" in m)
                assert title == f"tunnel {run}" and message.startswith("opening the tunnel failed: "), said
                assert "tunnel_open" not in title + message
            finally:
                sshd.start()
            await wait_for(pilot, lambda: state() == "running", 60, "the run recovered")

            await pilot.press("k")
            await pilot.pause(0.3)
            await pilot.press("y")
            await wait_for(pilot, lambda: state() == "killed", 90, "state killed")
            assert any(t == f"kill {run}" and "none is left" in m for t, m in said), said
            assert not run_processes(rec.run_dir)
    finally:
        sshd.start()
        invoke("kill", "--run", run)
        for pid in run_processes(rec.run_dir):
            os.kill(pid, 9)
