"""`status` of a lost run says what it can be resumed from and how (found by the second recovery QA
walk, 2026-11-27): it named neither the mirror's checkpoint nor a command, though `watch` replaces a
rented pod from it, `restart --host NEW` moves a self-rented run with it, and an empty mirror can only
be filled by a `pull` once the host answers again. Real parts: the registry and the mirror on disk, a
host whose port refuses connections (the real ssh client says so), the CLI in-process."""

from __future__ import annotations

import json
import socket
import time
from types import SimpleNamespace

import pytest

from launcher.recover.mirror import mirror_dir
from launcher.run import registry
from launcher.ssh.hosts import parse_target
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

RUN = "rs1"


@pytest.fixture
def dead_port():
    """A port bound but not listening: a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def _record(port: int, nodes: int = 1, **kw) -> registry.RunRecord:
    node = [
        registry.NodeRecord(parse_target(f"root@127.0.0.1:{port}"), "/w", "python", "/r")
        for _ in range(nodes)
    ]
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=node, **kw)
    registry.save(rec)
    return rec


def _mirror_step(step: int, saved_ago_s: float) -> None:
    """The mirror holds `step`, saved on its host `saved_ago_s` ago (the manifest's time)."""
    ck = _ckpt(mirror_dir(RUN), step, b"w" * 64)
    man = json.loads((ck / "manifest.json").read_text())
    (ck / "manifest.json").write_text(json.dumps({**man, "time": time.time() - saved_ago_s}))


def _seen(state: str, step: int) -> None:
    (registry.home() / "seen").mkdir(parents=True, exist_ok=True)
    (registry.home() / "seen" / f"{RUN}.json").write_text(
        json.dumps({"time": time.time() - 120, "step": step, "state": state})
    )


def _status(*args: str):
    from click.testing import CliRunner

    from launcher.cli import cli

    return CliRunner().invoke(cli, ["status", "--run", RUN, *args])


@pytest.mark.parametrize(
    "nodes,rented,step,command,says",
    [
        (1, False, 12, f"nsa-launch restart --run {RUN} --host NEW",
         "the mirror holds step-00000012 (step 12, saved 5m ago): if its host is gone, "
         f"`nsa-launch restart --run {RUN} --host NEW` resumes it on a host you rent"),
        (2, False, 12, f"nsa-launch restart --run {RUN} --host NEW0 --host NEW1", "--host NEW0 --host NEW1"),
        (1, True, 12, f"nsa-launch watch --run {RUN}",
         f"the mirror holds step-00000012 (step 12, saved 5m ago): `nsa-launch watch --run {RUN}` replaces "
         "the pod once it is lost for --lost-after seconds and resumes there"),
        (1, False, None, f"nsa-launch pull --run {RUN}",
         f"the mirror holds no checkpoint of {RUN}: nothing to resume elsewhere; if its host comes back, "
         f"`nsa-launch pull --run {RUN}` copies its newest one here"),
        (1, True, None, f"nsa-launch pull --run {RUN}", "nothing to resume elsewhere"),
    ],
)  # fmt: skip
def test_a_lost_run_names_the_mirrors_checkpoint_and_the_command_that_resumes_it(
    tmp_path, monkeypatch, dead_port, nodes, rented, step, command, says
):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    _record(dead_port, nodes, **({"provider": "prime", "pod_id": "p-1"} if rented else {}))
    _seen("running", 14)
    if step is not None:
        _mirror_step(step, 300)
    res = _status()
    assert res.exit_code == 1, res.output
    assert f"error: run {RUN} is lost: " in res.output and says in res.output, res.output
    assert "last contact 2m ago at step 14 (running)" in res.output
    js = _status("--json")
    assert js.exit_code == 1
    [st] = json.loads(js.stdout)
    r = st["resume"]
    assert r["command"] == command
    if step is None:
        assert r["checkpoint"] is r["step"] is r["saved_at"] is r["age_s"] is None
    else:
        assert (r["checkpoint"], r["step"]) == (f"step-{step:08d}", step)
        assert 299 <= r["age_s"] <= 330 and abs(time.time() - 300 - r["saved_at"]) < 30


def test_a_lost_run_that_had_finished_is_offered_no_resume(tmp_path, monkeypatch, dead_port):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    _record(dead_port)
    _seen("finished", 20)
    _mirror_step(20, 60)
    res = _status()
    assert res.exit_code == 1 and "it had ended there" in res.output, res.output
    assert "nsa-launch restart" not in res.output and "nsa-launch pull" not in res.output
    [st] = json.loads(_status("--json").stdout)
    assert st["resume"]["command"] is None and st["resume"]["checkpoint"] == "step-00000020"


def test_a_killed_run_on_a_lost_host_is_offered_the_move(tmp_path, monkeypatch, dead_port):
    """restart --host moves a killed run too (restart.MOVABLE): the ended line is followed by it."""
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    _record(dead_port)
    _seen("killed", 9)
    _mirror_step(8, 30)
    res = _status()
    assert "it had ended there" in res.output, res.output
    assert f"the mirror holds step-00000008 (step 8, saved 30s ago): if its host is gone, `nsa-launch restart --run {RUN} --host NEW`" in res.output  # fmt: skip


def test_the_dashboards_lost_line_carries_the_command(tmp_path, monkeypatch, dead_port):
    """The dashboard's alert and summary line for a lost run (MainScreen._lost_explained) name the
    command from status's `resume`, except where this dashboard replaces the pod itself."""
    from launcher.dashboard.screens.main import MainScreen
    from launcher.run.control import fetch_status

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    rec = _record(dead_port)
    _mirror_step(12, 300)
    [st] = fetch_status([rec])
    assert st["state"] == "lost"
    screen = SimpleNamespace(clock=time.time, max_backoff_s=8.0)
    line = MainScreen._lost_explained(screen, {**st, "mirror": {"checkpoint": "step-00000012"}})
    assert f"mirror step-00000012; `nsa-launch restart --run {RUN} --host NEW`; asking again" in line, line
    rec.provider, rec.pod_id = "prime", "p-1"
    registry.save(rec)
    [st] = fetch_status([rec])
    mine = {**st, "mirror": {"checkpoint": "step-00000012", "watcher": "this dashboard"}}
    line = MainScreen._lost_explained(screen, mine)
    assert "nsa-launch watch" not in line and "the pod is replaced" in line, line
    theirs = {**st, "mirror": {"checkpoint": "step-00000012", "watcher": "pid 7 (nsa-launch watch)"}}
    assert f"`nsa-launch watch --run {RUN}`" in MainScreen._lost_explained(screen, theirs)


def test_a_run_whose_host_answers_has_no_resume_advice(tmp_path, monkeypatch):
    import sys

    from launcher.config.profiles import PROJECT_ROOT
    from launcher.run.control import fetch_status
    from launcher.ssh.hosts import local_host

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w" * 64)
    (rd / "exit_code").write_text("1\n")
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node])
    _mirror_step(4, 10)
    [st] = fetch_status([rec])
    assert st["state"] == "failed" and st["resume"] is None
