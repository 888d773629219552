"""The watchdog in-process: a stalled progress clock yields one stack dump and one `stalled` event
per episode, within the threshold plus one poll; progress resets it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from nsa.runfiles import RunDir, iter_jsonl
from nsa.telemetry import Recorder, Watchdog, dump_stacks


def _wait_for(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_stall_dumps_stacks_once_then_rearms(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rec = Recorder(rd, rank=0, tensorboard=False)
    marker = threading.Event()

    def stuck_somewhere_recognisable() -> None:
        marker.wait(10)

    t = threading.Thread(target=stuck_somewhere_recognisable, name="victim", daemon=True)
    t.start()
    rec.beat("forward_backward", 5)
    started = time.monotonic()
    wd = Watchdog(rec, stall_seconds=0.5, abort=False)
    wd.start()
    try:
        assert _wait_for(lambda: list(rd.stacks_dir.glob("rank0-stalled-*.txt")), 3)
        elapsed = time.monotonic() - started
        assert 0.5 <= elapsed <= 0.5 + wd.poll_s + 0.5
        assert _wait_for(lambda: any(e["kind"] == "stalled" for e in iter_jsonl(rd.events)), 1)
        dump = next(rd.stacks_dir.glob("rank0-stalled-*.txt")).read_text()
        assert "stuck_somewhere_recognisable" in dump and "phase forward_backward" in dump
        time.sleep(0.8)  # same episode: no second dump
        assert len([e for e in iter_jsonl(rd.events) if e["kind"] == "stalled"]) == 1
        rec.beat("forward_backward", 6)  # progress, then a second stall -> a second event
        assert _wait_for(lambda: len([e for e in iter_jsonl(rd.events) if e["kind"] == "stalled"]) == 2, 3)
        ev = [e for e in iter_jsonl(rd.events) if e["kind"] == "stalled"][-1]
        assert (
            ev["step"] == 6 and ev["detail"]["phase"] == "forward_backward" and ev["detail"]["idle_s"] >= 0.5
        )
    finally:
        wd.stop()
        marker.set()


def test_dump_stacks_names_threads(tmp_path: Path) -> None:
    path = dump_stacks(tmp_path / "stacks", 3, "sigusr1")
    text = path.read_text()
    assert path.name.startswith("rank3-sigusr1-") and "thread MainThread" in text and "faulthandler" in text
