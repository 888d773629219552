"""`restart --host` (a run moved off a lost plain SSH host, from the mirror) on bad input: exit 2 (1
for a mirror with nothing to move) naming the option or the run and the fix, before anything is
copied, started or recorded. The move itself runs end to end in tests/e2e/test_qa_recover_new_host.py.
Real parts: the registry and mirror on disk, the CLI in-process."""

from __future__ import annotations

import sys

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.recover.mirror import mirror_dir
from launcher.run import registry
from launcher.ssh.hosts import local_host
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

RUN = "mv1"


@pytest.fixture
def rec(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(tmp_path / "run"))
    r = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node])
    registry.save(r)
    return r


def _restart(*args: str):
    from click.testing import CliRunner

    from launcher.cli import cli

    return CliRunner().invoke(cli, ["restart", "--run", RUN, *args])


@pytest.mark.parametrize(
    "args,code,says",
    [
        (["--host", "a", "--host", "b"], 2, f"run {RUN} has 1 node(s); --host was given 2 time(s)"),
        (["--host", "a", "--no-sync"], 2, "--no-sync with --host: a new host needs the code"),
        (["--python", "/usr/bin/python3"], 2, "--ssh-config, --python, --workdir and --accept-new-host-key go with --host"),
        (["--host", "a", "--ssh-config", "/nonexistent/cfg"], 2, "--ssh-config /nonexistent/cfg: no such file"),
        (["--host", "a"], 1, f"the mirror of {RUN} "),
    ],
)  # fmt: skip
def test_restart_host_refuses_bad_input_before_anything_changes(rec, args, code, says):
    res = _restart(*args)
    assert res.exit_code == code, res.output
    assert says in res.output and "fix: " in res.output, res.output
    assert registry.load(RUN) == rec  # the record unchanged, nothing moved
    assert not (registry.home() / "locks").exists() or not any((registry.home() / "locks").iterdir())


def test_restart_host_of_a_rented_pod_names_watch(rec, tmp_path):
    rec.provider, rec.pod_id = "prime", "p-1"
    registry.save(rec)
    _ckpt(mirror_dir(RUN), 4, b"w4" * 100)
    res = _restart("--host", "root@127.0.0.1:2")
    assert res.exit_code == 2, res.output
    assert f"run {RUN} runs on pod p-1 (--provision prime)" in res.output
    assert f"fix: nsa-launch watch --run {RUN}" in res.output
    assert registry.load(RUN) == rec


@pytest.mark.parametrize("terminated", [None, 2.0])
def test_restart_host_of_a_rented_run_whose_pods_all_ended_moves_it_to_the_host_given(rec, terminated):
    """`up --down-when-done` terminates a failed run's pod after pulling it: with every pod of the run
    terminated in the ledger, `restart --host` is the way to continue it from the mirror (it was refused,
    naming `watch`, which does not resume a failed run: the mirrored checkpoint had no command). A pod
    that bills on keeps the refusal (`watch` replaces it, nothing runs the run twice)."""
    from launcher.providers.pods import PodRecord, save_pod

    rec.provider, rec.pod_id = "prime", "p-1"
    registry.save(rec)
    save_pod(
        PodRecord("p-1", RUN, "A100_80GB", 1, 1.5, 1.0, ["root@127.0.0.1", "-p", "2"], terminated=terminated)
    )
    _ckpt(mirror_dir(RUN), 4, b"w4" * 100)
    res = _restart("--host", "root@127.0.0.1:2")
    if terminated is None:
        assert res.exit_code == 2 and f"fix: nsa-launch watch --run {RUN}" in res.output, res.output
    else:
        assert "runs on pod" not in res.output, res.output
        assert f"run {RUN}'s pod(s) p-1 terminated: it moves to a host you rent" in res.output, res.output
        assert f"moving {RUN} (" in res.output and "to root@127.0.0.1:2" in res.output, res.output
        assert res.exit_code == 1, res.output  # nothing listens on port 2: the start fails there
