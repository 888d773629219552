"""`restart` with bad local input leaves the run as it was (real tmux and torchrun, local transport).

A run started with `--secret HF_TOKEN`, restarted from a shell where HF_TOKEN is not set: restart
used to kill the run first and only then find the secret missing, so exit 2 ("bad input, nothing
started") came with the run stopped. It must refuse before it touches the run: the same processes
alive, no `killed` mark, state `running`, and the secret's value in no message or record. One worker
(launch_support.CPU1).
"""

from __future__ import annotations

import os

import pytest

from launcher.run.api import resolve_run
from nsa.runfiles import RunDir
from tests.e2e.launch_support import CPU1, PACED, cleanup_local_run, invoke, isolate, run_processes, status

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # one paced run: ~25 s on a loaded 2-core VM


def test_restart_without_the_runs_secret_refuses_before_killing(tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"restart-secret-{os.getpid()}"
    cleanup_local_run(run)
    secret = "hf_qa_restart_secret_0815"
    monkeypatch.setenv("HF_TOKEN", secret)
    res = invoke("up", *CPU1, "--name", run, "--set", "train.steps=3000", *PACED, "--secret", "HF_TOKEN")
    assert res.exit_code == 0, res.output
    rec = resolve_run(run)
    try:
        before = run_processes(rec.run_dir)
        assert before, "the run has no live process after up"
        monkeypatch.delenv("HF_TOKEN")
        res = invoke("restart", "--run", run)
        assert res.exit_code == 2, res.output
        assert "HF_TOKEN is not set in your local environment" in res.output, res.output
        assert f"nsa-launch restart --run {run}" in res.output  # the fix says what to run again
        assert f"stopping {run}" not in res.output and "stopped:" not in res.output, res.output
        assert "the run was not stopped" in res.output
        assert run_processes(rec.run_dir) >= before  # nothing was killed
        assert not RunDir(rec.run_dir).killed_file.exists()
        assert status(run)["state"] in ("running", "starting")
        assert secret not in res.output and secret not in (home / "runs" / f"{run}.json").read_text()
    finally:
        invoke("kill", "--run", run, "--yes")
        cleanup_local_run(run)
