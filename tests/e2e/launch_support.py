"""Shared helpers for the launcher's end-to-end tests (tests/e2e/test_launch_*.py).

An isolated run registry (NSA_LAUNCH_HOME in a temp dir) and the private tmux server of the
`tmux_server` fixture (NSA_LAUNCH_TMUX_SOCKET), so no test touches ~/.nsa-launch or anyone's tmux;
an in-process CLI runner; waits that say what they waited for; and a /proc scan for the processes
of a run. The host python is the interpreter running the tests (CI: <clone>/.venv), never a path.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from launcher.cli import cli
from launcher.config.profiles import PROJECT_ROOT
from launcher.host import procs

PYTHON = sys.executable
# For a run a test keeps going while it acts on it (kill, restart, tunnel, dashboard): each step
# takes at least 400 ms, the rest slept, so its two ranks leave the CPU to the other pytest worker
# instead of training flat out (NSA_FAULT=pace, docs/training.md "Fault injection").
PACED = ("--env", "NSA_FAULT=pace:ms=400")
# For a run whose test is not about ranks (what a user sees, kill/restart/tunnel, the dashboard, a
# crash loop, bad input): the `cpu` profile with one worker, so each start of the run costs one trainer
# rank less, 5.3-6.4 s of CPU on the 2-core VM (bench/RESULTS.md "citime2", "e2etime"). Tests about
# ranks (a rank dying or hanging, DDP, world size 2, the `cpu` profile itself) keep the default profile.
CPU1 = ("--profile", str(Path(__file__).resolve().parents[1] / "fixtures" / "cpu1.yaml"))


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmux_server: Any) -> Path:
    home = tmp_path / "nsa-launch-home"
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(home))
    monkeypatch.setenv("NSA_LAUNCH_TMUX_SOCKET", tmux_server.socket_name)
    monkeypatch.delenv("NSA_LAUNCH_HOST", raising=False)
    return home


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def status(run: str) -> dict[str, Any]:
    res = invoke("status", "--run", run, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)[0]


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value: {last!r}")


def run_processes(run_dir: str) -> set[int]:
    return {p for p in procs.tagged(run_dir) if procs.alive(p)}


def cleanup_local_run(run: str) -> None:
    shutil.rmtree(PROJECT_ROOT / "runs" / run, ignore_errors=True)
