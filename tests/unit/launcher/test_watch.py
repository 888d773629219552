"""`recovery.Watcher` and `WatchLock`: one watcher acts on a run at a time (`watch` in a terminal, the
dashboard, a second dashboard), the others say who does and take over when it stops; the pull
schedule; the dashboard backend's watch. Real parts: a local run dir with a checkpoint verified by
its manifest, the real `mirror.pull` (rsync, the host-side check in a real python), a real second
process holding the lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.core.errors import LaunchError
from launcher.dashboard.backend import LauncherBackend, Scope, WatchSettings
from launcher.recover.mirror import mirror_dir
from launcher.recover.watcher import Watcher, WatchLock, lost_advice
from launcher.run import registry
from launcher.ssh.hosts import local_host
from nsa.runfiles import RunDir, atomic_write_text, verify_checkpoint, write_checkpoint_manifest

RUN = "w1"


@pytest.fixture
def run_rec(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    rd = tmp_path / "run"
    ck = rd / "checkpoints" / "step-00000004"
    ck.mkdir(parents=True)
    (ck / "model.pt").write_bytes(b"weights" * 100)
    write_checkpoint_manifest(ck, 4)
    atomic_write_text(rd / "checkpoints" / "latest", "step-00000004\n")
    (rd / "train.log").write_text("[nsa] step 4\n")
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node])
    registry.save(rec)
    return rec


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


RUNNING = {"run": RUN, "state": "running", "error": None}


def _hold_lock_in_another_process() -> subprocess.Popen:
    code = (
        "import time; from launcher.recover.watcher import WatchLock\n"
        f"assert WatchLock({RUN!r}, 'nsa-launch watch').acquire()\n"
        "print('held', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_watcher_waits_names_the_holder_and_takes_over(run_rec):
    holder = _hold_lock_in_another_process()
    said: list[str] = []
    clock = Clock()
    w = Watcher(RUN, said.append, who="nsa-launch dashboard", pull_every_s=60, clock=clock)
    try:
        w.tick(RUNNING)
        w.tick(RUNNING)
        assert said == [
            f"run {RUN} is watched by pid {holder.pid} (nsa-launch watch); this one takes over when it stops"
        ]
        assert not mirror_dir(RUN).exists()  # it pulled nothing while another held the run
        holder.kill()
        holder.wait()
        w.tick(RUNNING)
        assert said[1] == f"run {RUN}: took over watching from pid {holder.pid} (nsa-launch watch)"
        assert "checkpoint step-00000004 (new)" in said[2]
        ck = RunDir(mirror_dir(RUN)).latest_checkpoint()
        assert ck is not None and ck.name == "step-00000004" and verify_checkpoint(ck) is None
        assert (mirror_dir(RUN) / "train.log").read_text() == "[nsa] step 4\n"
        # the lock file now names this watcher, for the next one to say
        assert WatchLock(RUN, "x").holder() == f"pid {os.getpid()} (nsa-launch dashboard)"
        # the schedule: nothing before pull_every_s, a pull at it, and a last one when the run ends
        clock.t += 59
        w.tick(RUNNING)
        assert len(said) == 3
        clock.t += 1
        w.tick(RUNNING)
        assert len(said) == 4 and "(unchanged)" in said[3]
        w.tick({**RUNNING, "state": "finished"})
        assert len(said) == 5
    finally:
        w.close()
        if holder.poll() is None:
            holder.kill()


def test_two_watchers_in_one_process_exclude_each_other_and_a_lost_run_is_advised_once(run_rec):
    said: list[str] = []
    a = Watcher(RUN, said.append, who="nsa-launch watch", clock=Clock())
    b = Watcher(RUN, said.append, who="nsa-launch dashboard", clock=Clock())
    try:
        a.tick({**RUNNING, "state": "lost", "error": "ssh: connection refused"})
        a.tick({**RUNNING, "state": "lost", "error": "ssh: connection refused"})
        assert len(said) == 1 and said[0].startswith(f"run {RUN} is lost: ssh: connection refused")
        # not provisioned, nothing mirrored: advice only, and only a new `up` can start it again
        assert "a new host and a new `nsa-launch up` (from step 0)" in said[0]
        b.tick(RUNNING)
        assert "is watched by pid" in said[1] and "(nsa-launch watch)" in said[1]
        a.close()
        b.tick(RUNNING)
        assert "took over watching" in said[2]
    finally:
        a.close()
        b.close()


def test_a_lost_runs_advice_leads_with_the_command_that_resumes_it(run_rec):
    """With a checkpoint in the mirror, `restart --host` resumes the run on a new host: named first, and
    no `up` from step 0 offered; with none, `restart --host` refuses (nothing to move): a new `up`."""
    assert "`nsa-launch up`" in lost_advice(run_rec) and "restart --run" not in lost_advice(run_rec)
    ck = mirror_dir(RUN) / "checkpoints"
    ck.mkdir(parents=True)
    atomic_write_text(ck / "latest", "step-00000004\n")
    # `latest` naming a checkpoint that is not there: restart --host would refuse, so not offered
    assert "restart --run" not in lost_advice(run_rec)
    (ck / "step-00000004").mkdir()
    advice = lost_advice(run_rec)
    assert (
        f"`nsa-launch restart --run {RUN} --host NEW` resumes it on a new host from step-00000004" in advice
    )
    assert "nsa-launch up" not in advice


def test_the_dashboard_backend_watches_live_runs_and_shows_the_mirror(run_rec):
    backend = LauncherBackend(Scope(run=RUN), WatchSettings(pull_every_s=3600))
    said: list[str] = []
    assert backend._mirror(RUN) == {"checkpoint": None, "time": None, "watcher": None}
    backend.watch([RUNNING], said.append)
    assert len(said) == 1 and "step-00000004 (new)" in said[0]
    m = backend._mirror(RUN)
    assert m["checkpoint"] == "step-00000004" and m["watcher"] == "this dashboard" and m["time"] > 0
    # a finished run gets its last pull, then the dashboard lets go of it
    backend.watch([{**RUNNING, "state": "finished"}], said.append)
    assert len(said) == 2 and backend._mirror(RUN)["watcher"] is None
    assert WatchLock(RUN, "test").acquire()
    backend.watch([{**RUNNING, "state": "finished"}], said.append)
    assert len(said) == 2  # an ended run is not watched again
    off = LauncherBackend(Scope(run=RUN), WatchSettings(enabled=False))
    off.watch([RUNNING], said.append)
    assert len(said) == 2


def test_a_lost_multi_node_pod_without_every_nodes_part_in_the_mirror_is_reported_not_replaced(
    run_rec, monkeypatch
):
    """A multi-node checkpoint is split across the nodes: with node 0's part mirrored but not node
    1's, a replacement could not resume, so watch says what is missing and advises (no PRIME_API_KEY
    here: an attempt to rent would raise)."""
    import shutil

    monkeypatch.delenv("PRIME_API_KEY", raising=False)
    registry.save(
        registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[run_rec.nodes[0]] * 2, provider="prime",
                           pod_id="p-1")
    )  # fmt: skip
    src = RunDir(run_rec.run_dir).checkpoints_dir
    shutil.copytree(src / "step-00000004", mirror_dir(RUN) / "checkpoints" / "step-00000004")
    atomic_write_text(mirror_dir(RUN) / "checkpoints" / "latest", "step-00000004\n")
    said: list[str] = []
    clock = Clock()
    w = Watcher(RUN, said.append, who="nsa-launch watch", lost_after_s=60, clock=clock)
    try:
        lost = {**RUNNING, "state": "lost", "error": "timed out"}
        w.tick(lost)
        clock.t += 120
        w.tick(lost)
        assert len(said) == 1 and said[0].startswith(f"run {RUN} is lost: timed out") and not w.replacements
        assert "not replaced: the mirror holds node 0's step-00000004 but not node 1's part of it" in said[0]
    finally:
        w.close()


def test_a_provisioned_host_is_replaced_only_after_lost_after_and_within_the_budget(run_rec):
    """The lost-after threshold counts from the first `lost` status, a status that is not lost resets
    it, and with the replacement budget spent the watcher stops with the count (no pod is rented: the
    record has no pod id, so no API is asked). The run dir is gone, so the status the watcher fetches
    again before it would rent says `lost` too."""
    run_rec.provider = "prime"
    run_rec.nodes[0].run_dir += "-gone"
    registry.save(run_rec)
    said: list[str] = []
    clock = Clock()
    lost = {"run": RUN, "state": "lost", "error": "ssh: connection refused"}
    w = Watcher(
        RUN, said.append, who="test", pull_every_s=1e9, lost_after_s=30, max_replacements=0, clock=clock
    )
    try:
        w.tick(lost)
        clock.t += 29
        w.tick(lost)
        clock.t += 2
        w.tick(RUNNING)  # back before acting: the count starts over
        clock.t += 29
        w.tick(lost)
        clock.t += 29
        w.tick(lost)
        with pytest.raises(LaunchError, match=rf"run {RUN} lost its host 1 time; stopped replacing"):
            clock.t += 1
            w.tick(lost)
        assert not any("replacing it" in s for s in said), said
    finally:
        w.close()


def _ckpt(rd: Path, step: int, files: dict[str, bytes]) -> None:
    ck = rd / "checkpoints" / f"step-{step:08d}"
    ck.mkdir(parents=True)
    for name, data in files.items():
        (ck / name).write_bytes(data)
    write_checkpoint_manifest(ck, step)
    atomic_write_text(rd / "checkpoints" / "latest", ck.name + "\n")


def test_pull_mirrors_every_nodes_part_only_when_the_nodes_agree(run_rec, tmp_path):
    """Node 0 holds the weights, node 1 its rank's state: both parts are mirrored (node 1's under
    nodes/1/), and a step that only node 0 has finished saving is not mirrored until node 1 has it."""
    from launcher.recover.mirror import missing_parts, node_mirror, pull

    rd1 = tmp_path / "node1"
    _ckpt(rd1, 4, {"rank1.pt": b"r1" * 50})
    node1 = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd1))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[run_rec.nodes[0], node1])
    registry.save(rec)
    said: list[str] = []
    assert pull(rec, said.append)["pulled"] == "step-00000004"
    part = node_mirror(RUN, 1) / "checkpoints"
    assert sorted(p.name for p in (part / "step-00000004").iterdir()) == ["manifest.json", "rank1.pt"]
    assert "model.pt" not in {p.name for p in (part / "step-00000004").iterdir()}
    assert missing_parts(rec) is None and "of 2 nodes" in said[-1]
    # node 0 finished step 8, node 1 not yet: the mirror keeps step 4 whole
    _ckpt(Path(run_rec.run_dir), 8, {"model.pt": b"w8" * 50})
    res = pull(rec, said.append)
    assert res["pulled"] is None and res["checkpoint"] == "step-00000004"
    assert "not step-00000008: node 1 has no intact checkpoint newer than step-00000004" in said[-1]
    _ckpt(rd1, 8, {"rank1.pt": b"r8" * 50})
    assert pull(rec, said.append)["pulled"] == "step-00000008"
    assert [p.name for p in RunDir(node_mirror(RUN, 1)).checkpoints()] == ["step-00000008"]
    # a damaged part is named, and a restore would refuse it
    (part / "step-00000008" / "rank1.pt").write_bytes(b"x")
    assert "not node 1's part of it" in (missing_parts(rec) or "")


def test_by_default_a_new_checkpoint_in_the_status_is_pulled_at_once(run_rec):
    """No --pull-every: the first status pulls, a `checkpoint` event newer than the mirror pulls at the
    next status (the mirror trails by at most one checkpoint), the same event again does not, and the
    fallback interval is half a checkpoint interval (train.save_every x the measured step time)."""
    import json

    from launcher.recover.watcher import AUTO_PULL_S, auto_pull_every

    said: list[str] = []
    clock = Clock()
    w = Watcher(RUN, said.append, who="test", clock=clock)
    try:
        w.tick(RUNNING)
        assert len(said) == 1 and "step-00000004 (new)" in said[0]
        _ckpt(Path(run_rec.run_dir), 8, {"model.pt": b"w8" * 50})
        saved = {**RUNNING, "events": [{"kind": "checkpoint", "step": 8, "time": 1.0}]}
        clock.t += 1
        w.tick(saved)
        assert len(said) == 2 and "step-00000008 (new)" in said[1]
        clock.t += 1
        w.tick(saved)
        assert len(said) == 2  # nothing newer: no pull before the interval
    finally:
        w.close()
    rd = mirror_dir(RUN)
    assert auto_pull_every(RUN) == AUTO_PULL_S[0]  # nothing measured yet
    (rd / "config.yaml").write_text("train:\n  save_every: 100\n")
    (rd / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1.0, "time": 1000.0 + 0.4 * s}) + "\n" for s in range(1, 20))
    )
    assert auto_pull_every(RUN) == pytest.approx(20.0)  # 100 steps x 0.4 s / 2
