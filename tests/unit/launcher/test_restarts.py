"""The restart decision of the host wrapper (launcher/host/restarts.py) on real run dirs: restart
with or without --resume, stop on bad input / SIGTERM / a spent budget / a crash loop, and the
status summary built from the events it writes."""

from __future__ import annotations

import json
import time

from launcher.host.restarts import decide, summary
from nsa.runfiles import (
    Heartbeat,
    RunDir,
    atomic_write_json,
    checkpoint_name,
    iter_jsonl,
    write_checkpoint_manifest,
)


def _beat(rd: RunDir, step: int) -> None:
    for r in (0, 1):
        hb = Heartbeat(rank=r, step=step, time=time.time(), pid=1, phase="forward_backward", host="h")
        atomic_write_json(rd.heartbeat_dir / f"rank{r}.json", hb.__dict__)


def _ckpt(rd: RunDir, step: int) -> None:
    d = rd.checkpoints_dir / checkpoint_name(step)
    d.mkdir(parents=True)
    (d / "model.pt").write_bytes(b"x" * 10)
    write_checkpoint_manifest(d, step)


def test_restart_fresh_then_resume_then_crash_loop(tmp_path):
    rd = RunDir(tmp_path)
    _beat(rd, 3)
    assert decide(rd, 3, 1) == "fresh"  # no checkpoint yet: start over
    _ckpt(rd, 5)
    _beat(rd, 7)
    assert decide(rd, 3, 137) == "resume"
    _beat(rd, 7)  # failed at step 7 again: a crash loop, stopped with 1 restart left unused
    assert decide(rd, 3, 137) == "stop"
    s = summary(rd, 3)
    assert s["count"] == 2 and s["max"] == 3 and "crash loop" in s["stopped"]
    assert [c["step"] for c in s["causes"]] == [3, 7] and s["causes"][1]["cause"]


def test_budget_bad_input_sigterm_killed(tmp_path):
    rd = RunDir(tmp_path / "a")
    rd.root.mkdir()
    for step in (1, 2):
        _beat(rd, step)
        assert decide(rd, 2, 1) == "fresh"
    _beat(rd, 3)
    assert decide(rd, 2, 1) == "stop" and "budget spent (2/2)" in summary(rd, 2)["stopped"]
    for code, why in ((2, "bad input"), (143, "SIGTERM")):
        rd = RunDir(tmp_path / str(code))
        rd.root.mkdir()
        assert decide(rd, 3, code) == "stop" and why in summary(rd, 3)["stopped"]
    rd = RunDir(tmp_path / "k")
    rd.root.mkdir()
    rd.killed_file.write_text("{}")
    assert decide(rd, 3, 1) == "stop" and summary(rd, 3)["count"] == 0


def test_a_run_being_stopped_is_never_restarted_whatever_torchrun_exits_with(tmp_path):
    """`kill` SIGTERMs torchrun too, which then exits 1 (not the trainer's 143): the agent's
    stop_requested marker, written before any signal, is what keeps the wrapper from restarting."""
    rd = RunDir(tmp_path)
    _ckpt(rd, 5)
    _beat(rd, 7)
    atomic_write_json(rd.stop_requested_file, {"time": time.time(), "by": "nsa-launch"})
    assert decide(rd, 3, 1) == "stop"
    assert summary(rd, 3)["stopped"] == "killed by nsa-launch"
    [stop] = [e for e in iter_jsonl(rd.events) if e["kind"] == "restarts_stopped"]
    assert stop["detail"]["cause"] == "killed by nsa-launch"  # not "exited with code 1 and no rank said why"
    assert "no rank said why" not in json.dumps(stop)
    rd.stop_requested_file.unlink()  # a resume removes it (launcher/host/start.py)
    assert decide(rd, 3, 1) == "resume"


def test_a_rank_that_exited_with_bad_input_is_not_restarted_though_torchrun_exits_1(tmp_path):
    """torchrun's own exit code is 1 whatever its ranks exited with: the decision reads the first
    failing rank's code from torchrun's summary in train.log (a real one, tests/assets/faults/)."""
    from pathlib import Path

    rd = RunDir(tmp_path)
    log = (Path(__file__).resolve().parents[2] / "assets" / "faults" / "kill9_train.log").read_text()
    rd.train_log.write_text(
        log.replace("exitcode  : -9 (pid: 21076)  (SIGKILL)", "exitcode  : 2 (pid: 21076)")
    )
    _beat(rd, 0)
    assert decide(rd, 3, 1) == "stop"
    assert "bad input" in summary(rd, 3)["stopped"] and "rank 1" in summary(rd, 3)["stopped"]


def test_a_new_launch_after_a_stop_has_the_whole_budget_and_no_stale_reason(tmp_path):
    """`nsa-launch restart` after the wrapper gave up (budget spent) starts a new launch: its first crash
    is restarted again, and status shows neither the old reason nor the old restarts once it booted."""
    rd = RunDir(tmp_path)
    _ckpt(rd, 5)
    for step in (6, 7):
        _beat(rd, step)
        assert decide(rd, 1, 1) == ("resume" if step == 6 else "stop")
    assert summary(rd, 1)["count"] == 1 and "budget spent (1/1)" in summary(rd, 1)["stopped"]
    # The user restarts it: until it boots, status still tells why the last launch stopped.
    rd.append_event("boot", step=5, rank=0, config_hash="x")
    assert summary(rd, 1) == {"count": 0, "max": 1, "causes": [], "stopped": None}
    _beat(rd, 9)
    assert decide(rd, 1, 1) == "resume"  # the old launch's restart does not count against this one
    _beat(rd, 10)
    assert decide(rd, 1, 1) == "stop"
    s = summary(rd, 1)
    assert (
        s["count"] == 1 and [c["step"] for c in s["causes"]] == [9] and "budget spent (1/1)" in s["stopped"]
    )
