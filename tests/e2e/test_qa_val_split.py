"""A corpus whose held-out split is empty stops the real trainer (in-process, one rank) before step 1
with exit 2 and a DataError event naming data.val_fraction. It used to train until the first eval
(`train.eval_every` steps: hours on a real run) and fail there, and again after every resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsa.data.loader import is_val_document
from nsa.train.cli import main
from tests.assets.trainrun import TINY, events

pytestmark = pytest.mark.e2e

TEXT = "one short local text file, all of it training data. " * 20


def test_no_val_documents_is_exit_2_before_the_first_step(tmp_path: Path, capsys, monkeypatch) -> None:
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    assert not is_val_document(TEXT, 0.05)  # the one document is a training document
    (tmp_path / "corpus.txt").write_text(TEXT)
    run = tmp_path / "run"
    sets = [
        "data.source=files", f"data.paths=[{tmp_path / 'corpus.txt'}]", "train.seq_len=64",
        "train.steps=4000", "train.eval_every=1000", "train.save_every=1000", "telemetry.tensorboard=false",
    ]  # fmt: skip
    argv = ["--config", str(TINY), "--run-dir", str(run)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no 'val' documents" in err and "data.val_fraction" in err, err
    errors = [e for e in events(run) if e["kind"] == "error"]
    assert [e["detail"]["error"] for e in errors] == ["DataError"] and errors[0]["step"] == 0, errors
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()
    assert "boot" not in [e["kind"] for e in events(run)]  # stopped before the run was announced
