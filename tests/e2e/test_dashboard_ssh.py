"""The dashboard in a real terminal (tmux) over a run on the loopback sshd, through an outage.

`nsa-launch up --host` starts a real run over SSH; `nsa-launch dashboard` runs as its own process in
a tmux pane. The test stops sshd (every connection dropped): the run shows `lost` while training
goes on untouched; sshd comes back: the dashboard recovers by itself and the step moves on; then
`k` + `y` kills the run over SSH and no process of it is left. During the outage the log pane's
note is one line and a `t` that cannot reach the host says "opening the tunnel failed" (qadash).
One worker (launch_support.CPU1).
"""

from __future__ import annotations

import os

import pytest

from launcher.run.api import resolve_run
from nsa.runfiles import RunDir
from tests.dashboard.terminal import DashboardTerminal, row, row_step
from tests.e2e.launch_support import CPU1, PACED, PYTHON, invoke, isolate, run_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_dashboard_over_ssh_shows_lost_then_recovers_then_kills(sshd, tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"dash-ssh-{os.getpid()}"
    res = invoke(
        "up", *CPU1, "--host", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--python", PYTHON,
        "--workdir", str(tmp_path / "host"), "--name", run, "--set", "train.steps=3000", *PACED,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rec = resolve_run(run)
    rd = RunDir(rec.run_dir)
    term = DashboardTerminal(tmux_server.socket_name)
    try:
        env = {"NSA_LAUNCH_HOME": str(home), "NSA_LAUNCH_TMUX_SOCKET": tmux_server.socket_name}
        term.start(["--run", run, "--refresh", "0.5"], env)
        first = term.wait(
            lambda s: "running" in (row(s, run) or "") and row_step(s, run), 90, "the run running"
        )
        term.wait(lambda s: (n := row_step(s, run)) and n > first, 60, "the step advancing")
        term.wait(lambda s: "[nsa] step" in s, 30, "trainer lines in the log pane")
        term.wait(lambda s: "loss · last" in s, 30, "the loss chart fed from metrics.jsonl over SSH")

        sshd.stop()
        try:
            screen = term.wait(lambda s: "lost" in (row(s, run) or "") and s, 60, "state lost")
            assert "LOST" in screen or "lost" in screen
            hb_step = rd.heartbeats()[0].step
            # The log pane says the outage once, on one line: the SSH error's "\n  fix: re-run when
            # it is back" went into the pane too (qadash, 2026-11-27), and retrying is this loop's job.
            screen = term.wait(
                lambda s: "log stream lost (" in s and s, 30, "the outage note in the log pane"
            )
            assert "fix: re-run" not in screen and "\ufffd" not in screen, screen
            # t while the host is away: the keys answer, and the failure names the action in words
            term.keys("t")
            term.wait(lambda s: "opening the tunnel failed" in s, 60, "the failed t said in words")
            assert "tunnel_open" not in term.screen()
            wait_for(lambda: rd.heartbeats()[0].step > hb_step, 30, "training going on during the outage")
        finally:
            sshd.start()
        lost_step = rd.heartbeats()[0].step
        term.wait(
            lambda s: "running" in (row(s, run) or "") and (row_step(s, run) or 0) > lost_step,
            60,
            "recovery: running again with the step past the outage",
        )
        term.wait(lambda s: "reconnected" in s or "[nsa] step" in s, 30, "the log pane streaming again")

        term.keys("k")
        term.wait(lambda s: f"Kill run {run}" in s, 10, "the kill confirmation")
        term.keys("y")
        term.wait(lambda s: "killed" in (row(s, run) or ""), 60, "state killed in the table")
        wait_for(lambda: not run_processes(rec.run_dir), 10, "no process of the run left")
        assert not tmux_server.has_session(f"nsa-{run}")

        term.keys("q")
        term.wait(lambda s: "DASHBOARD-EXITED 0" in s, 15, "the dashboard to quit with 0")
    finally:
        term.close()
        sshd.start()
        invoke("kill", "--run", run)
        for pid in run_processes(rec.run_dir):
            os.kill(pid, 9)
