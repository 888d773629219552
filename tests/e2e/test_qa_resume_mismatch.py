"""--resume with a changed `model:` (the real trainer, in-process, one rank): exit 2 with one paragraph
naming the checkpoint, the first tensors that do not fit and the model keys changed since it was
written, and the checkpoint left intact. It was a RuntimeError listing every tensor (exit 1, so
nsa-launch restarted it in a loop); under FSDP2 an unrelated-looking size error on every rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsa.runfiles import RunDir, verify_checkpoint
from nsa.train.cli import main
from tests.assets.trainrun import TINY, events

pytestmark = pytest.mark.e2e

SETS = [
    "train.seq_len=64", "train.eval_every=0", "telemetry.tensorboard=false", "train.warmup_steps=0",
    "model.attention=dense",
]  # fmt: skip


def _argv(run: Path, *extra: str) -> list[str]:
    out = ["--config", str(TINY), "--run-dir", str(run)]
    for s in [*SETS, *extra]:
        out += ["--set", s]
    return out


def test_resume_with_another_model_shape_is_exit_2_naming_the_changed_keys(
    tmp_path, capsys, monkeypatch
) -> None:
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    run = tmp_path / "run"
    assert main(_argv(run, "train.steps=2")) == 0
    capsys.readouterr()
    assert main([*_argv(run, "train.steps=4", "model.dim=32"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        "--resume: step-00000002 does not fit this model (tok_emb.weight [257, 64] in the checkpoint, [257, 32] here"
        in err
    ), err
    assert "model.dim: 64 -> 32" in err and "Fix: resume with the model settings" in err, err
    assert "Traceback" not in err and "size mismatch" not in err, err
    errors = [e for e in events(run) if e["kind"] == "error"]
    assert [e["detail"]["error"] for e in errors] == ["ResumeMismatch"], errors
    ck = RunDir(run).newest_intact_checkpoint()
    assert ck is not None and ck.name == "step-00000002" and verify_checkpoint(ck) is None
