"""The kill and restart reports tell the truth (issue 21), on real processes and run dirs:

- a final save that failed is named, with the newest saved step N and the lost steps N+1..M, and the
  run's status says "killed" with "final save failed: <cause>";
- a stopped (T state) rank is reported as stopped, and `kill` continues it first, so it ends at once
  instead of after its whole grace;
- restart's boot detection reads the events it needs, not the last five;
- a second restart or a kill of a run being restarted stops at once, naming the holder's PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.core.errors import RuntimeFailure
from launcher.host import kill, procs, state
from launcher.run import registry
from launcher.ssh.hosts import local_host
from nsa.runfiles import Heartbeat, RunDir, atomic_write_json, checkpoint_name, write_checkpoint_manifest


def _beat(rd: RunDir, rank: int, step: int, pid: int) -> None:
    rd.write_heartbeat(Heartbeat(rank=rank, step=step, time=time.time(), pid=pid, phase="checkpoint"))


def _ckpt(rd: RunDir, step: int) -> None:
    d = rd.checkpoints_dir / checkpoint_name(step)
    d.mkdir(parents=True)
    for name in ("model.pt", "optim.pt", "rank0.pt"):
        (d / name).write_bytes(b"x" * 10)
    (d / "meta.json").write_text(json.dumps({"step": step}))
    write_checkpoint_manifest(d, step)


def test_a_failed_final_save_names_the_saved_step_the_lost_steps_and_the_cause(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    _ckpt(rd, 4)
    _beat(rd, 0, 7, 1)
    t_stop = time.time()
    rd.append_event("sigterm", step=7, rank=0, save=True, deadline_s=100)
    rd.append_event(
        "error", step=7, rank=0, error="OSError",
        message="[Errno 28] No space left on device for a checkpoint: x has 1.0 MB free",
    )  # fmt: skip
    final = kill.final_save(rd, t_stop, 0, {"sigkilled": []}, 120.0)
    assert final["ok"] is False and final["saved_step"] == 4 and final["last_step"] == 7
    assert final["cause"].startswith("disk full: ")
    assert "newest saved step 4, steps 5..7 are lost" in final["line"]
    # status of the killed run says so
    atomic_write_json(rd.manifest, {"run": "r"})
    atomic_write_json(rd.killed_file, {"time": time.time(), "by": "nsa-launch", "final_save": final})
    st = state.run_status(
        {"run": f"r-{uuid.uuid4().hex[:6]}", "run_dir": str(rd.root), "tmux_socket": "x"}, time.time()
    )
    assert st["state"] == "killed" and st["error"].startswith("final save failed: disk full")
    # a save that did finish loses nothing
    _ckpt(rd, 7)
    assert kill.final_save(rd, t_stop, 0, {}, 120.0)["ok"] is True


def test_the_grace_running_out_is_a_cause_too(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    _beat(rd, 0, 3, 1)
    final = kill.final_save(rd, time.time(), 0, {"sigkilled": [123]}, 30.0)
    assert final["ok"] is False and final["saved_step"] is None
    assert "within the kill grace of 30 s" in final["cause"] and "steps 1..3 are lost" in final["line"]


def test_a_stopped_rank_is_reported_stopped_and_kill_continues_it_first(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    atomic_write_json(rd.manifest, {"run": "r"})
    env = {**os.environ, procs.TAG: str(rd.root)}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    try:
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while procs.proc_state(p.pid) not in ("T", "t") and time.monotonic() < deadline:
            time.sleep(0.02)
        _beat(rd, 1, 5, p.pid)
        req = {
            "run": f"stop-{uuid.uuid4().hex[:6]}",
            "run_dir": str(rd.root),
            "tmux_socket": f"nsa-none-{uuid.uuid4().hex}",
        }
        st = state.run_status(req, time.time())
        assert f"rank 1 (pid {p.pid}) is stopped (T state)" in st["error"], st["error"]
        assert "memory" not in st["error"] and f"kill -CONT {p.pid}" in st["error"]
        t0 = time.monotonic()
        reply = kill.cmd_kill({**req, "grace_s": 30})
        took = time.monotonic() - t0
        assert reply["killed"] and reply["continued_pids"] == [p.pid], reply
        assert took < 10, f"kill took {took:.1f} s: the stopped rank held its SIGTERM"
        assert p.wait(timeout=10) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_boot_detection_reads_every_event_since_the_restart(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    atomic_write_json(rd.manifest, {"run": "r"})
    since = time.time()
    rd.append_event("boot", step=0)
    rd.append_event("resumed", step=20, checkpoint="step-00000020")
    for s in range(21, 40):  # a run that trains on writes many events after its boot
        rd.append_event("checkpoint", step=s)
    req = {
        "run": "r",
        "run_dir": str(rd.root),
        "tmux_socket": f"nsa-none-{uuid.uuid4().hex}",
        "events_since": since,
    }
    st = state.run_status(req, time.time())
    assert "boot" not in [e["kind"] for e in st["events"]]  # the last five
    assert [e["kind"] for e in st["events_since"]] == ["boot", "resumed"]


HOLD = "import sys, time; from launcher.run.locks import run_lock\nwith run_lock(sys.argv[1], 'nsa-launch restart'):\n    print('held', flush=True); time.sleep(60)"


def test_a_second_restart_or_kill_of_the_same_run_stops_naming_the_holder(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from launcher.cli import cli
    from launcher.run import control

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(control, "CHANGE_WAIT_S", 0.3)
    run = "locked-run"
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(tmp_path / "run"))
    registry.save(registry.RunRecord(run=run, profile="cpu", created=1.0, nodes=[node]))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, run],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        for cmd in (["restart", "--run", run], ["kill", "--run", run, "--yes"]):
            res = CliRunner().invoke(cli, cmd)
            assert res.exit_code == 1, res.output
            assert f"run {run} is being restarted by PID {holder.pid}" in res.output, res.output
            assert "Traceback" not in res.output
        with pytest.raises(RuntimeFailure), control.changing(run, "kill"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with control.changing(run, "kill"), control.changing(run, "restart"):  # free again; re-entrant
        pass


def test_kill_on_a_full_disk_still_signals_and_reports_the_lost_steps(tmp_path):
    """The agent's own marker files cannot be written on a full disk: the kill still stops the run and
    reports the final save as failed (root only: a 2 MB tmpfs is the full disk)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)]).returncode
    ):
        pytest.skip("needs root and mount -t tmpfs")
    p = None
    try:
        rd = RunDir(mnt / "run")
        rd.root.mkdir()
        atomic_write_json(rd.manifest, {"run": "r"})
        _ckpt(rd, 4)
        env = {**os.environ, procs.TAG: str(rd.root)}
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
        _beat(rd, 0, 7, p.pid)
        with open(mnt / "filler", "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        req = {
            "run": "full",
            "run_dir": str(rd.root),
            "tmux_socket": f"nsa-none-{uuid.uuid4().hex}",
            "grace_s": 30,
        }
        reply = kill.cmd_kill(req)
        assert reply["killed"] and p.wait(timeout=10) == -signal.SIGTERM
        assert reply["final_save_failed"] and reply["saved_step"] == 4 and reply["last_step"] == 7
        assert reply["final_save_cause"].startswith("disk full: ")
        assert rd.killed_file.exists() and state.run_status(req, time.time())["state"] == "killed"
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        subprocess.run(["umount", "-l", str(mnt)])
