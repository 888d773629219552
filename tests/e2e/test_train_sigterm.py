"""SIGTERM under the real torchrun (2 gloo ranks): every rank agrees at the next step boundary,
writes an intact checkpoint there and exits 143, so `--resume` continues at the step where the run
was stopped (issue 13: a kill used to lose up to `save_every` steps). A bad NSA_TERM_SAVE_S is exit 2."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nsa.runfiles import RunDir
from nsa.train.cli import main
from tests.assets.trainrun import REPO, TINY, clean_env, events, explain, run_train, train_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETS = [
    "train.seq_len=64", "train.eval_every=0", "train.log_every=1", "telemetry.tensorboard=false",
    "train.save_every=0", "train.steps=100000",
]  # fmt: skip


def _sets(extra: list[str] = ()) -> list[str]:
    out = []
    for s in [*SETS, *extra]:
        out += ["--set", s]
    return out


def _step(run: Path, rank: int = 0) -> int:
    hb = run / "heartbeat" / f"rank{rank}.json"
    try:
        return int(json.loads(hb.read_text() or "{}").get("step", 0))
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def test_sigterm_to_torchrun_saves_at_the_next_step_and_resume_continues_there(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [*train_cmd(2), "--config", str(TINY), "--run-dir", str(run), *_sets()]
    proc = subprocess.Popen(cmd, cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 90
        while _step(run) < 3 and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.1)
        assert _step(run) >= 3, "the run never reached step 3"
        proc.send_signal(signal.SIGTERM)  # torchrun forwards it to both workers
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    ck = RunDir(run).newest_intact_checkpoint()
    assert ck is not None, out[-3000:]
    saved = json.loads((ck / "meta.json").read_text())["step"]
    assert "stopped by SIGTERM at step" in out, out[-3000:]  # (torchrun prints its own SignalException)
    kinds = [e["kind"] for e in events(run)]
    assert "sigterm" in kinds and kinds[-1] == "checkpoint" and "error" not in kinds, kinds
    sigs = [e for e in events(run) if e["kind"] == "sigterm"]
    assert all(e["detail"]["save"] is True for e in sigs), sigs
    # Each rank's event names the step in progress when its handler ran (not the heartbeat, which
    # lags under load). The stop vote answers one boundary late (dist.StopVote): the first rank's step
    # s is finished, and the save lands at boundary s + 2 (signal before that boundary's vote) or s + 3.
    at_signal = min(e["step"] for e in sigs)
    assert at_signal + 2 <= saved <= at_signal + 3, (at_signal, saved, sigs)

    p = run_train(run, [*SETS[:-1], f"train.steps={saved + 2}"], nproc=2, resume=True, timeout=120)
    assert p.returncode == 0, explain(p)
    resumed = [e for e in events(run) if e["kind"] == "resumed"][-1]
    assert resumed["step"] == saved  # steps lost by this kill + restart: 0 completed steps


def test_bad_term_save_seconds_is_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CONFIG", raising=False)
    for bad in ("soon", "0", "-5", "inf", "1e400"):
        monkeypatch.setenv("NSA_TERM_SAVE_S", bad)
        rc = main(["--config", str(TINY), "--run-dir", str(tmp_path / "r"), *_sets()])
        err = capsys.readouterr().err
        assert rc == 2 and "NSA_TERM_SAVE_S" in err and "Fix:" in err, err
        assert not (tmp_path / "r").exists()
