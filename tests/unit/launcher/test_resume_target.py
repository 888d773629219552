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
    # where it ran is said first, before the run's recorded inputs are planned (here its config is gone)
    rec = registry.load(run)
    rec.config = str(tmp_path / "gone.yaml")
    registry.save(rec)
    res = invoke("up", "--resume", "--name", run)
    assert res.exit_code == 2 and f"run {run} ran on {HOST} (profile cpu)" in res.output, res.output
    rec.config = "configs/tiny.yaml"
    registry.save(rec)
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


def test_resume_takes_the_runs_own_config_sets_env_and_secrets_unless_given(tmp_path, monkeypatch):
    """`up --resume --name R` without --config / --set / --env / --secret plans R's own (the record's):
    before, it planned the profile's default config and no overrides, which the host wrote over R's
    run dir config while R's wrapper kept its old --set lines, and R's --env was lost (the qa walk of
    2026-11-27). A given option replaces the recorded one. The CLI says what it took."""
    from launcher.launch.plan import with_recorded_inputs

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_API_KEY", "wk-local")
    cfg = str(tmp_path / "mine.yaml")  # the run's own config file, not the profile's configs/tiny.yaml
    (tmp_path / "mine.yaml").write_text((PROJECT_ROOT / "configs" / "tiny.yaml").read_text())
    rec = _record("own")
    rec.config, rec.overrides = cfg, ["train.steps=37", "train.device=cpu"]
    rec.env, rec.secrets = {"NSA_FAULT": "pace:ms=400"}, ["WANDB_API_KEY"]
    registry.save(rec)
    opts, taken = with_recorded_inputs(UpOptions(hosts=[HOST], resume=True, name="own"))
    plan = plan_run(opts)
    assert str(plan.config_path) == cfg and plan.total_steps == 37  # not the profile's tiny.yaml
    assert "train.steps=37" in plan.overrides and plan.env["NSA_FAULT"] == "pace:ms=400"
    assert plan.secret_values == {"WANDB_API_KEY": "wk-local"}
    assert taken == [f"config {cfg}", "--set train.steps=37", "--env NSA_FAULT", "--secret WANDB_API_KEY"]
    given = UpOptions(
        hosts=[HOST], resume=True, name="own", config="configs/tiny.yaml", sets=["train.steps=3"]
    )
    opts, taken = with_recorded_inputs(given)
    assert (opts.config, opts.sets) == ("configs/tiny.yaml", ["train.steps=3"])
    assert taken == ["--env NSA_FAULT", "--secret WANDB_API_KEY"]
    # not a resume, or a run this machine never launched: nothing taken
    assert with_recorded_inputs(UpOptions(hosts=[HOST], name="own")) == (
        UpOptions(hosts=[HOST], name="own"),
        [],
    )
    fresh = UpOptions(hosts=[HOST], resume=True, name="elsewhere")
    assert with_recorded_inputs(fresh) == (fresh, [])
