"""W&B logging with the real `wandb` client in offline mode (no network): metrics, config, run id.

Run: .venv/bin/pytest tests/unit/telemetry/test_wandb.py
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsa.telemetry import wandb_sink

REPO = Path(__file__).resolve().parents[3]


def test_offline_run_logs_metrics_under_the_run_id(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    run, wdir = tmp_path / "run", tmp_path / "wandb"
    wdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "CONFIG")}
    env.update(
        WANDB_PROJECT="nsa-test", WANDB_MODE="offline", WANDB_DIR=str(wdir), WANDB_SILENT="true",
        NSA_RUN_ID="tiny-20260101-abc", NSA_MALLOC="system", OMP_NUM_THREADS="1",
    )  # fmt: skip
    sets = [
        "train.steps=2",
        "train.log_every=1",
        "train.eval_every=0",
        "train.seq_len=32",
        "model.n_layers=1",
    ]
    cmd = [sys.executable, "-m", "nsa.train", "--config", "configs/tiny.yaml", "--run-dir", str(run)]
    for s in [*sets, "telemetry.tensorboard=false", "train.device=cpu"]:
        cmd += ["--set", s]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    files = list(wdir.rglob("run-tiny-20260101-abc.wandb"))
    assert len(files) == 1, list(wdir.rglob("*"))
    blob = files[0].read_bytes()
    for key in (b"loss/train", b"throughput/tokens_per_s_per_gpu", b"nsa-test", b"first_step"):
        assert key in blob, key
    assert b"activation_checkpointing" in blob  # the resolved config went along


def test_wandb_project_without_the_package_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_PROJECT", "nsa")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a))
    msg = wandb_sink.problem()
    assert msg and "WANDB_PROJECT='nsa'" in msg and "Fix:" in msg and "wandb" in msg
    monkeypatch.delenv("WANDB_PROJECT")
    assert wandb_sink.problem() is None


def test_run_id_is_the_launchers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NSA_RUN_ID", "my.run/1")
    assert wandb_sink.run_id(tmp_path) == "my-run-1"
    monkeypatch.delenv("NSA_RUN_ID")
    assert wandb_sink.run_id(tmp_path / "r2") == "r2"


def test_online_without_credentials_is_bad_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """wandb.init in online mode with no key raises at step 0: refuse at validation instead, with the fix."""
    pytest.importorskip("wandb")
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    netrc_file = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc_file))
    monkeypatch.setenv("WANDB_PROJECT", "nsa")
    msg = wandb_sink.problem()
    assert msg and "no API key" in msg and "--secret WANDB_API_KEY" in msg and "WANDB_MODE=offline" in msg
    netrc_file.write_text("machine api.wandb.ai\n  login user\n  password k123\n")
    netrc_file.chmod(0o600)
    assert wandb_sink.problem() is None  # `wandb login` wrote the key
    netrc_file.unlink()
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_sink.problem() is None
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "k123")
    assert wandb_sink.problem() is None
