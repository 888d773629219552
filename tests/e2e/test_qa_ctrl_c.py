"""Ctrl-C on a single-process `nsa-train` (the README's first command) stops it the way SIGTERM does:
a `sigterm` event, a checkpoint at the next step boundary, exit 143, and `--resume` continues at the
step after it. It used to raise KeyboardInterrupt wherever the main thread was: a traceback, no
checkpoint (every step since the last save lost) and nothing in events.jsonl saying why it ended."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nsa.runfiles import RunDir
from nsa.train.cli import main
from tests.assets.trainrun import REPO, TINY, clean_env, events, train_cmd, train_losses

pytestmark = pytest.mark.e2e

SETS = [
    "train.seq_len=64", "train.eval_every=0", "train.log_every=1", "telemetry.tensorboard=false",
    "train.save_every=0", "train.warmup_steps=0",
]  # fmt: skip


def _argv(run: Path, steps: int) -> list[str]:
    out = ["--config", str(TINY), "--run-dir", str(run)]
    for s in [*SETS, f"train.steps={steps}"]:
        out += ["--set", s]
    return out


def _step(run: Path) -> int:
    try:
        return int(json.loads((run / "heartbeat" / "rank0.json").read_text() or "{}").get("step", 0))
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def test_ctrl_c_saves_at_the_next_step_and_resume_continues_there(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "run"
    # A terminal's Ctrl-C: SIGINT with its default disposition (a child of a background job would
    # inherit it ignored, and an ignored SIGINT stays ignored).
    proc = subprocess.Popen(
        [*train_cmd(1), *_argv(run, 100000)], cwd=REPO, env=clean_env(NSA_MALLOC="system"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        end = time.monotonic() + 90
        while _step(run) < 2 and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        assert _step(run) >= 2, "the run never reached step 2"
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert "Ctrl-C (SIGINT)" in out and "checkpoint written" in out, out[-3000:]
    ck = RunDir(run).newest_intact_checkpoint()
    assert ck is not None, out[-3000:]
    saved = json.loads((ck / "meta.json").read_text())["step"]
    kinds = [e["kind"] for e in events(run)]
    assert "sigterm" in kinds and kinds[-1] == "checkpoint" and "error" not in kinds, kinds
    at_signal = next(e["step"] for e in events(run) if e["kind"] == "sigterm")
    assert at_signal <= saved <= at_signal + 2, (at_signal, saved)
    assert max(train_losses(run)) == saved  # every step trained was saved: none lost

    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    assert main([*_argv(run, saved + 2), "--resume"]) == 0
    resumed = [e for e in events(run) if e["kind"] == "resumed"]
    assert [e["step"] for e in resumed] == [saved]
    steps = [r["step"] for r in (json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines())]
    assert steps == list(range(1, saved + 3)), steps  # no step repeated, none skipped
