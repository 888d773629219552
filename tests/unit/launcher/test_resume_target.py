"""`up --resume --name R` of a run launched elsewhere names where R is, before any host is touched.

`up --resume` takes the profile and hosts from its own options like any `up`. The documented
`nsa-launch up --resume [--from-scratch] --name R` (and the agent's fix for a run dir with no intact
checkpoint) therefore looked for a remote run R on this machine with the `cpu` profile and answered
`run dir .../runs/R has no manifest.json: nothing to resume`. It now says where R ran and the
command that continues it there. The record is a real one in a temp registry; nothing is started.
"""

from __future__ import annotations

import time

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.launch.plan import UpOptions, check_resume_target, plan_run
from launcher.run import registry
from launcher.run.registry import NodeRecord, RunRecord
from launcher.ssh.hosts import parse_target
from tests.e2e.launch_support import invoke

HOST = "root@127.0.0.1:2222"


def _record(run: str) -> RunRecord:
    node = NodeRecord(parse_target(HOST, None), "/srv/nsa", "/usr/bin/python3", f"/srv/nsa/runs/{run}")
    return RunRecord(run=run, profile="cpu", created=time.time(), nodes=[node], config="configs/tiny.yaml")


def test_resume_without_the_runs_host_names_it_and_touches_nothing(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NSA_LAUNCH_HOST", raising=False)
    run = "far-away-run"
    registry.save(_record(run))
    for extra in ([], ["--from-scratch"]):
        res = invoke("up", "--resume", *extra, "--name", run)
        assert res.exit_code == 2, res.output
        assert f"run {run} ran on {HOST} (profile cpu)" in res.output, res.output
        assert (
            f"nsa-launch up --resume{' --from-scratch' if extra else ''} --name {run} --profile cpu --host {HOST}"
            in res.output
        )
        assert f"nsa-launch restart --run {run}" in res.output
        assert "preflight" not in res.output and "no manifest.json" not in res.output
    assert not (PROJECT_ROOT / "runs" / run).exists()
    # named as it was launched, the check passes (the host is only contacted later, by execute)
    plan = plan_run(UpOptions(hosts=[HOST], resume=True, name=run))
    check_resume_target(plan)
    # a pod replacement resumes the run on a new host on purpose: plan_run itself does not refuse it
    moved = plan_run(UpOptions(hosts=["root@127.0.0.2:22"], resume=True, name=run))
    assert [h.label for h in moved.hosts] == ["root@127.0.0.2:22"]


def test_a_name_in_use_says_restart_continues_only_a_run_that_stopped_early(tmp_path, monkeypatch):
    """`up --name R` for an R launched before: exit 2 before any host; the fix names restart for a run
    that stopped before its last step, not as the way to "continue" any run (restart refuses a
    finished one: the qa walk of 2026-11-27)."""
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    registry.save(_record("taken"))
    res = invoke("up", "--name", "taken")
    assert res.exit_code == 2, res.output
    assert "a run named 'taken' was already launched from this machine" in res.output
    assert "stopped before its last step continues with `nsa-launch restart --run taken`" in res.output
    assert "a finished one has nothing to continue" in res.output
