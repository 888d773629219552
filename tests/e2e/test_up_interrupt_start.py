"""Ctrl-C while `up` starts the run on its host leaves nothing running (real tmux and torchrun).

The agent's `start` (run dir, launch.sh, tmux session, torchrun) runs on the host in its own process
while `up` waits for its reply. A Ctrl-C landing in that wait abandoned the call: `up` said
"interrupted" and exited 130, and the host finished the start with no record of the run here, so
the run trained on, unknown to `status`, `kill` and `runs` (seen on this machine with the `cpu`
profile: an orphaned tmux session and two ranks). `up` now lets the start finish, stops the run
again (verified), and says so.

The host python is a wrapper that holds the agent's reply for 2 s after its `start` did its work
(as a slow link would) and says when, so the Ctrl-C lands there every time. One worker
(launch_support.CPU1): what is stopped is the start, whatever its ranks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from tests.e2e.launch_support import CPU1, cleanup_local_run, run_processes, wait_for

pytestmark = pytest.mark.e2e
CLI = str(Path(sys.executable).parent / "nsa-launch")


def test_ctrl_c_during_the_agents_start_stops_what_it_started(tmux_server, tmp_path):
    run = f"int-start-{os.getpid()}"
    cleanup_local_run(run)
    home = tmp_path / "home"
    began = tmp_path / "start-began"
    python = tmp_path / "slowstart-python"
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = launcher.host ] && [ "$3" = start ]; then\n'
        f'  {sys.executable} "$@"; rc=$?; touch {began}; sleep 2; exit $rc\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    env = {**os.environ, "NSA_LAUNCH_HOME": str(home), "NSA_LAUNCH_TMUX_SOCKET": tmux_server.socket_name}
    env.pop("NSA_LAUNCH_HOST", None)
    up = subprocess.Popen(
        [CLI, "up", *CPU1, "--name", run, "--python", str(python), "--set", "train.steps=3000",
         "--env", "NSA_FAULT=pace:ms=400"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Ctrl-C as from a terminal (a suite started with `&` hands its children SIGINT ignored).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    run_dir = str(PROJECT_ROOT / "runs" / run)
    try:
        wait_for(began.exists, 120, "the agent's start to be done")
        up.send_signal(signal.SIGINT)
        _out, err = up.communicate(timeout=120)
        assert up.returncode == 130, err
        assert f"interrupted while starting {run}" in err and "nothing of it runs" in err, err
        assert not any(s.name == f"nsa-{run}" for s in tmux_server.sessions)
        assert not run_processes(run_dir)
        assert not (home / "runs" / f"{run}.json").exists()
    finally:
        if up.poll() is None:
            up.kill()
        for s in tmux_server.sessions:
            if s.name == f"nsa-{run}":
                s.kill()
        for pid in run_processes(run_dir):
            os.kill(pid, signal.SIGKILL)
        cleanup_local_run(run)
