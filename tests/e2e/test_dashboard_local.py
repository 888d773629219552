"""The dashboard in a real terminal (tmux) over a real local run (torchrun, gloo; one worker, CPU1).

`nsa-launch up` starts the run; `nsa-launch dashboard` runs as a separate process in a tmux pane;
the test reads the screen with capture-pane: the run appears, its step advances, the dashboard pulls
an intact checkpoint into the mirror (and a `watch` beside it defers to it), `t` opens the real
TensorBoard tunnel (its URL serves TensorBoard) and closes it, `r` + `y` restarts it from its
checkpoint, `k` + `y` kills it through the real launcher, and no process of the run is left.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request

import pytest

from launcher.run.api import resolve_run
from nsa.runfiles import RunDir, verify_checkpoint
from tests.dashboard.terminal import DashboardTerminal, row, row_step
from tests.e2e.launch_support import CPU1, PACED, cleanup_local_run, invoke, isolate, run_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_dashboard_shows_local_run_advancing_and_kills_it(tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"dash-local-{os.getpid()}"
    cleanup_local_run(run)
    res = invoke(
        "up", *CPU1, "--name", run, "--set", "train.steps=3000", "--set", "train.save_every=10", *PACED
    )
    assert res.exit_code == 0, res.output
    rec = resolve_run(run)
    term = DashboardTerminal(tmux_server.socket_name)
    try:
        env = {"NSA_LAUNCH_HOME": str(home), "NSA_LAUNCH_TMUX_SOCKET": tmux_server.socket_name}
        term.start(["--run", run, "--pull-every", "1"], env)
        first = term.wait(
            lambda s: "running" in (row(s, run) or "") and row_step(s, run), 90, "the run running"
        )
        later = term.wait(lambda s: (n := row_step(s, run)) and n > first and n, 60, "the step advancing")
        assert later > first
        screen = term.wait(lambda s: "[nsa] step" in s and s, 30, "trainer lines in the log pane")
        term.wait(lambda s: "loss · last" in s, 30, "the loss chart fed from metrics.jsonl")
        assert "no GPU on this host" in screen
        assert run_processes(rec.run_dir), "the run should have live processes before the kill"

        # t: the real launcher starts TensorBoard and forwards a port; the URL shows and serves it
        term.keys("t")
        url = term.wait(
            lambda s: (m := re.search(r"http://127\.0\.0\.1:\d+/?", s)) and m.group(0), 90, "tunnel URL"
        )
        assert "tensorboard" in urllib.request.urlopen(url, timeout=30).read().decode().lower()
        term.keys("t")
        term.wait(lambda s: url not in s, 30, "the URL gone once the tunnel is closed")

        # r + y: the real restart resumes from the latest checkpoint
        rd = RunDir(rec.run_dir)
        wait_for(rd.latest_checkpoint, 60, "a first checkpoint")

        # While open, the dashboard keeps the mirror (as `watch` does): a checkpoint that verifies
        # arrives with no pull or watch run by anyone, and the summary line says so.
        mirror = RunDir(home / "mirror" / run)
        wait_for(
            lambda: (c := mirror.latest_checkpoint()) and verify_checkpoint(c) is None, 60,
            "an intact checkpoint in the mirror, pulled by the dashboard",
        )  # fmt: skip
        term.wait(lambda s: re.search(r"mirror step-\d{8} .*\(kept by this dashboard\)", s), 30, "mirror")
        # ... and a `watch` started beside it waits instead of pulling into the same mirror
        watcher = subprocess.Popen(
            [sys.executable, "-c", "from launcher.cli import main; main()", "watch", "--run", run],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **env},
        )  # fmt: skip
        try:
            line = watcher.stdout.readline()
            assert "is watched by pid" in line and "(nsa-launch dashboard)" in line, line
        finally:
            watcher.kill()
            watcher.wait()
        term.keys("r")
        term.wait(lambda s: f"Restart run {run}" in s, 10, "the restart confirmation")
        term.keys("y")
        # The notification is on screen for a few seconds only: watch for it while waiting.
        seen: set[str] = set()

        def restarted() -> bool:
            if f"restarted as {run}" in term.screen():
                seen.add("notification")
            if '"resumed"' in rd.events.read_text():
                seen.add("resumed")
            return seen == {"notification", "resumed"}

        wait_for(restarted, 120, "the restart notification and a resumed event", interval=0.2)
        term.wait(lambda s: "running" in (row(s, run) or ""), 60, "running again after the restart")

        term.keys("k")
        term.wait(lambda s: f"Kill run {run}" in s, 10, "the kill confirmation")
        assert run_processes(rec.run_dir)  # asking is not killing
        term.keys("y")
        term.wait(lambda s: "killed" in (row(s, run) or ""), 60, "state killed in the table")
        wait_for(lambda: not run_processes(rec.run_dir), 10, "no process of the run left")
        assert not tmux_server.has_session(f"nsa-{run}")

        term.keys("q")
        term.wait(lambda s: "DASHBOARD-EXITED 0" in s, 10, "the dashboard to quit with 0")
    finally:
        term.close()
        invoke("kill", "--run", run)
        cleanup_local_run(run)
