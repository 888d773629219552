"""What a user sees while waiting and steering, over the real loopback sshd, tmux and torchrun:
the first-heartbeat ticker, the next-commands hint, Ctrl-C on `up --wait` and `logs -f` (the run keeps
going, exit 130), `restarting` after a restart, restart re-syncing (or not) and refusing a finished
run, kill's confirmation on a terminal, `runs` with states and `runs forget`, `ssh-close`, and a
user's own --env variable reaching the workers. Nothing here is about ranks: the runs have one worker
(launch_support.CPU1), which saves a trainer rank at each of the four starts.

The host python is a wrapper that starts torchrun late (a real delay, as a slow host's imports would
be), so the waits are long enough to be seen; agent calls go straight to the interpreter. The delay is
read from a file at each start: 8 s for `up`, whose subprocess prints a ticker line only after
TICK_PRINT_S (5 s) of waiting, and 3 s for the two restarts, which only need the new start not to beat
at once (the in-process CLI restart prints its ticker line after the first wait slice, TICK_PRINT_S=0).
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.run.api import resolve_run, restart_run
from tests.e2e.launch_support import CPU1, PACED, PYTHON, invoke, isolate, run_processes, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CLI = str(Path(sys.executable).parent / "nsa-launch")
UP_DELAY_S = 8  # > launcher.cli.up.TICK_PRINT_S: `up`'s subprocess prints one ticker line
RESTART_DELAY_S = 3  # > one status call: `restarting` is seen before the new start beats


def _slow_python(tmp_path: Path) -> Path:
    """The host python: torchrun starts as many seconds late as the file `slowpython.delay` says."""
    delay = tmp_path / "slowpython.delay"
    delay.write_text(f"{UP_DELAY_S}\n")
    p = tmp_path / "slowpython"
    p.write_text(
        f'#!/bin/sh\ncase "$2" in torch.distributed.run) sleep "$(cat {delay})";; esac\nexec {PYTHON} "$@"\n'
    )
    p.chmod(0o755)
    return p


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as from a terminal (a suite started with `&` hands its children SIGINT ignored).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kw,
    )


def _read_until(stream, needle: str, timeout: float) -> str:
    seen, deadline = "", time.monotonic() + timeout
    while needle not in seen:
        assert time.monotonic() < deadline, f"no {needle!r} within {timeout} s; got:\n{seen}"
        line = stream.readline()
        assert line, f"stream ended before {needle!r}; got:\n{seen}"
        seen += line
    return seen


def test_waits_ctrl_c_restart_kill_and_runs(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    wd = tmp_path / "wd"
    host = ["--host", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--workdir", str(wd)]
    up = _cli(
        "up", *CPU1, *host, "--python", str(_slow_python(tmp_path)), "--name", "ux", "--wait",
        "--set", "train.steps=3000", "--set", "train.save_every=10", "--env", "MY_TAG=nsa-demo", *PACED,
    )  # fmt: skip
    try:
        seen = _read_until(up.stderr, "nsa-launch dashboard", 180)
        # the wait for the first heartbeat was not silent; the next commands come one a line
        assert "waiting for the first heartbeat of ux:" in seen and "log:" in seen, seen
        assert "next:\n  nsa-launch status --run ux\n  nsa-launch logs -f --run ux\n" in seen
        assert " | " not in seen
        up.send_signal(signal.SIGINT)  # Ctrl-C on `up --wait`: the run keeps going
        assert up.wait(timeout=60) == 130
        rest = up.stderr.read()
        assert (
            "run ux keeps going on" in rest and "nsa-launch kill --run ux" in rest and "Aborted" not in rest
        )
    finally:
        if up.poll() is None:
            up.kill()
    rec = resolve_run("ux")
    try:
        wait_for(lambda: status("ux")["state"] == "running", 120, "ux running after Ctrl-C on up")
        envs = [Path(f"/proc/{p}/environ").read_bytes() for p in run_processes(rec.run_dir)]
        assert any(b"MY_TAG=nsa-demo" in e for e in envs)  # the user's own variable arrived
        listing = invoke("runs")
        assert listing.exit_code == 0 and "ux" in listing.output and "running" in listing.output

        # Ctrl-C on `logs -f`: exit 130, the run goes on
        logs = _cli("logs", "-f", "--run", "ux", "-n", "5")
        try:
            assert logs.stdout.readline()
            logs.send_signal(signal.SIGINT)
            assert logs.wait(timeout=30) == 130
            err = logs.stderr.read()
            assert "stopped following the log; run ux keeps going on" in err and "Aborted" not in err
        finally:
            if logs.poll() is None:
                logs.kill()
        assert status("ux")["state"] == "running"

        # restart without waiting and without sync: `restarting` until the new start beats; the
        # host's edited file stays
        readme = wd / "README.md"
        readme.write_text(readme.read_text() + "\nedited on the host\n")
        (tmp_path / "slowpython.delay").write_text(f"{RESTART_DELAY_S}\n")
        # in process: a ticker line after each wait slice (launcher.run.control.TICK_S), not after 5 s
        monkeypatch.setattr("launcher.cli.up.TICK_PRINT_S", 0.0)
        restart_run(rec, wait=False, sync=False)
        st = status("ux")
        assert st["state"] == "restarting", st
        wait_for(lambda: status("ux")["state"] == "running", 180, "running again after the restart")
        assert "edited on the host" in readme.read_text()
        # the CLI restart re-syncs: the host's copy is this checkout's again, and it is not silent
        res = invoke("restart", "--run", "ux")
        assert res.exit_code == 0, res.output
        assert "stopping ux" in res.output and "synced the project" in res.output
        assert "waiting for the first heartbeat of ux:" in res.output
        assert readme.read_text() == (PROJECT_ROOT / "README.md").read_text()

        # kill on a terminal asks first; "n" leaves the run alone
        answer = _kill_on_a_terminal("ux", b"n\n")
        assert "kill run ux" in answer and "stop it?" in answer and "ux: not stopped" in answer
        assert status("ux")["state"] == "running"
        res = invoke("kill", "--run", "ux", "--yes")
        assert res.exit_code == 0 and "verified none is left" in res.output

        assert "killed" in invoke("runs").output
        res = invoke("runs", "forget", "ux")
        assert res.exit_code == 0 and "forgot ux" in res.output
        assert "no runs yet" in invoke("runs").output
        assert (wd / "runs" / "ux" / "manifest.json").exists()  # the host's files stay
        res = invoke("ssh-close")
        assert res.exit_code == 0 and "closed" in res.output
    finally:
        subprocess.run([CLI, "kill", "--run", "ux", "--yes"], capture_output=True, timeout=120)
    for pid in run_processes(rec.run_dir):
        os.kill(pid, 9)


def _kill_on_a_terminal(run: str, reply: bytes) -> str:
    """`nsa-launch kill` with a pty as stdin/stderr (an interactive user), answering `reply`."""
    master, slave = pty.openpty()
    p = subprocess.Popen([CLI, "kill", "--run", run], stdin=slave, stderr=slave, stdout=subprocess.PIPE)
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 60
        while b"stop it?" not in out:
            assert time.monotonic() < deadline, out
            if select.select([master], [], [], 1)[0]:
                out += os.read(master, 4096)
        os.write(master, reply)
        assert p.wait(timeout=120) == 0
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    return out.decode(errors="replace").replace("\r\n", "\n")


def test_restart_refuses_a_finished_run(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    wd = tmp_path / "wd"
    host = ["--host", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--workdir", str(wd)]
    res = invoke("up", *CPU1, *host, "--python", PYTHON, "--name", "done", "--set", "train.steps=2", "--wait")
    assert res.exit_code == 0, res.output
    assert "eta - s" not in res.output
    res = invoke("restart", "--run", "done")
    assert res.exit_code == 2 and "finished" in res.output and "nothing to resume" in res.output
    assert "restarts" not in json.loads((wd / "runs" / "done" / "manifest.json").read_text())
    res = invoke("runs", "forget", "done")  # not live: no --force needed
    assert res.exit_code == 0
