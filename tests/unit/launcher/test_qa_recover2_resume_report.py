"""`restart` (and `restart --host`, a pod replacement) says where the run resumed from the trainer's
`boot` and `resumed` events (launcher/run/control.py resume_report). The trainer writes `boot` first
and `resumed` just after it (nsa/train/trainer.py, ~0.1 ms apart); the report stopped at `boot`, so a
status read between the two said "started again from step 0" of a run that resumed at step 4 (found by
the second recovery QA walk, 2026-11-27). Real parts: a run dir whose events.jsonl is written with the
trainer's own writer (RunDir.append_event), the real agent reading it on this host, and a live process
tagged with the run dir (the agent's `starting` state)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.run import registry
from launcher.run.control import resume_report
from launcher.ssh.hosts import local_host
from nsa.runfiles import RunDir

RESUMED_4 = "resumed at step 4 from step-00000004 (its newest intact checkpoint)"


@pytest.fixture
def run(tmp_path, monkeypatch):
    """(record, run dir, the run's live process) of a run `starting` on this host."""
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.append_event("boot", step=0, rank=0)  # the previous start's: older than the restart, ignored
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd.root))
    rec = registry.RunRecord(run="rr1", profile="cpu", created=1.0, nodes=[node])
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ, "NSA_LAUNCH_RUN_DIR": str(rd.root)})
    try:
        yield rec, rd, proc
    finally:
        proc.kill()
        proc.wait()


def _since() -> float:
    t = time.time()
    time.sleep(0.01)
    return t


def test_resumed_written_after_boot_is_waited_for(run):
    """The trainer's order: `boot` at step 4, then `resumed`; read in between, the report waits."""
    rec, rd, _ = run
    since = _since()
    rd.append_event("boot", step=4, rank=0)
    later = threading.Timer(
        1.5, lambda: rd.append_event("resumed", step=4, rank=0, checkpoint="step-00000004")
    )
    later.start()
    try:
        ok, line = resume_report(rec, since, timeout=30)
    finally:
        later.cancel()
    assert (ok, line) == (True, RESUMED_4)


def test_resumed_written_before_boot_is_read(run):
    """The order the docstring used to give (and a pair read whole): the same line, at once."""
    rec, rd, _ = run
    since = _since()
    rd.append_event(
        "checkpoint_fallback", step=0, rank=0, checkpoint="step-00000006", reason="model.pt: sha256"
    )
    rd.append_event("resumed", step=4, rank=0, checkpoint="step-00000004")
    rd.append_event("boot", step=4, rank=0)
    ok, line = resume_report(rec, since, timeout=30)
    assert ok and line == (
        "resumed at step 4 from step-00000004 (its newest intact checkpoint, the newer ones failed "
        "verification); skipped step-00000006: model.pt: sha256"
    )


def test_a_boot_at_step_0_is_a_start_from_scratch_without_waiting(run):
    rec, rd, _ = run
    since = _since()
    rd.append_event("boot", step=0, rank=0)
    t0 = time.monotonic()
    ok, line = resume_report(rec, since, timeout=30)
    assert (ok, line) == (True, "started again from step 0: no checkpoint to resume from")
    assert time.monotonic() - t0 < 10  # settled by the boot itself, not by the timeout


def test_a_run_that_ended_between_boot_and_resumed_is_not_said_to_start_from_0(run):
    rec, rd, proc = run
    since = _since()
    rd.append_event("boot", step=4, rank=0)
    proc.kill()
    proc.wait()
    (Path(rd.root) / "exit_code").write_text("1\n")
    ok, line = resume_report(rec, since, timeout=30)
    assert not ok and "step 0" not in line and line.startswith("resumed at step 4 "), line
    assert "; then failed: " in line, line
