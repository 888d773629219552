"""A run killed here and then lost (its host gone, or its run dir) is not said to "go on".

`status` of a lost run tells where the run was when its host last answered, from the last status
it kept. `kill` kept nothing, so a run killed and then lost read `last contact ... (running); the run
may go on on its host`, and a run dir gone from an answering host read `no contact with its host
from here yet`. Real tmux and torchrun on the local transport; the run dir is moved aside to make
the run lost (the host answers that it is gone). One worker (launch_support.CPU1).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from launcher.run.api import resolve_run
from tests.e2e.launch_support import CPU1, PACED, cleanup_local_run, invoke, isolate, status

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # one paced run: ~20 s on a loaded 2-core VM


def test_killed_then_lost_says_it_had_ended(tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    run = f"lost-killed-{os.getpid()}"
    cleanup_local_run(run)
    res = invoke("up", *CPU1, "--name", run, "--set", "train.steps=3000", *PACED)
    assert res.exit_code == 0, res.output
    rec = resolve_run(run)
    aside = tmp_path / "aside"
    try:
        assert status(run)["state"] in ("running", "starting")  # the last answer kept: live
        res = invoke("kill", "--run", run, "--yes")
        assert res.exit_code == 0, res.output
        shutil.move(rec.run_dir, aside)
        res = invoke("status", "--run", run, "--json")
        assert res.exit_code == 1
        [st] = json.loads(res.stdout)
        assert st["state"] == "lost" and st["last_state"] == "killed", st
        assert st["last_contact"] is not None
        res = invoke("status", "--run", run)
        assert res.exit_code == 1
        assert "(killed)" in res.stderr and "it had ended there" in res.stderr, res.stderr
        assert "may go on" not in res.stderr and "no contact with its host" not in res.stderr, res.stderr
    finally:
        if aside.exists():
            shutil.move(aside, rec.run_dir)
        invoke("kill", "--run", run, "--yes")
        cleanup_local_run(run)
