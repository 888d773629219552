"""Failures reach the user with the truth (local transport, real torchrun, faults injected through
the trainer's test-only NSA_FAULT): a run that dies before its first heartbeat fails `up` fast with
the log tail; a run that fails later makes `up --wait` exit 1 with the true exit code (pipefail
through tee); a rank that hangs shows as `stalled`, and kill still clears it."""

from __future__ import annotations

import os

import pytest

from tests.e2e.launch_support import cleanup_local_run, invoke, isolate, run_processes, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_failures_are_reported_truthfully(tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    runs = [f"{k}-{os.getpid()}" for k in ("boot", "nan", "stall")]
    try:
        res = invoke("up", "--name", runs[0], "--env", "NSA_FAULT=bogus")
        assert res.exit_code == 1, res.output
        assert "before its first step" in res.output, res.output
        assert "NSA_FAULT='bogus': unknown kind" in res.output, res.output  # the cause, from the log
        assert status(runs[0])["state"] == "failed" and status(runs[0])["exit_code"] not in (None, 0)

        res = invoke("up", "--name", runs[1], "--env", "NSA_FAULT=nan:step=3", "--wait")
        assert res.exit_code == 1, res.output
        st = status(runs[1])
        assert st["state"] == "failed" and st["exit_code"] not in (None, 0)
        assert st["error"].startswith("error at step") and "not finite" in st["error"]
        assert f"failed (exit code {st['exit_code']}" in res.output
        assert "is not finite at step 3" in res.output  # the cause, from the log

        res = invoke(
            "up",
            "--name",
            runs[2],
            "--env",
            "NSA_FAULT=stall:step=3:rank=1",
            "--set",
            "telemetry.stall_seconds=3",
            "--set",
            "train.steps=1000",
        )
        assert res.exit_code == 0, res.output
        st = wait_for(lambda: (s := status(runs[2]))["state"] == "stalled" and s, 90, "state stalled")
        assert max(st["heartbeat_age_s"].values()) > 3
        res = invoke("kill", "--run", runs[2])
        assert res.exit_code == 0 and "verified none is left" in res.output
        assert status(runs[2])["state"] == "killed"
        assert run_processes(st["run_dir"]) == set()
    finally:
        for r in runs:
            invoke("kill", "--run", r)
            cleanup_local_run(r)
