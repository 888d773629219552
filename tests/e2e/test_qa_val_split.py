"""A corpus whose held-out split is empty stops the real trainer (in-process, one rank) before step 1
with exit 2 and a DataError event naming data.val_fraction. It used to train until the first eval
(`train.eval_every` steps: hours on a real run) and fail there, and again after every resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa.data.loader import is_val_document
from nsa.train.cli import main
from tests.assets.trainrun import TINY, events, explain, run_train

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


def test_one_rank_without_val_documents_stops_both_ranks_with_exit_2_under_torchrun(tmp_path: Path) -> None:
    """One held-out document, two ranks: rank 1 has none. Both ranks agree before step 1 and exit 2;
    the log holds rank 1's reason once. Rank 0 used to enter its first step, wait there for rank 1
    and be SIGTERMed by torchrun (exit 143, a `sigterm` event)."""
    train, val, i = [], None, 0
    while val is None or len(train) < 40:
        text = f"document number {i}: " + "some words of training text. " * 10
        if is_val_document(text, 0.05):
            val = val or text
        elif len(train) < 40:
            train.append(text)
        i += 1
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in [*train[:20], val, *train[20:]]))
    run = tmp_path / "run"
    sets = ["data.source=files", f"data.paths=[{corpus}]", "train.seq_len=64", "telemetry.tensorboard=false"]
    p = run_train(run, sets, nproc=2, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, explain(p)
    assert out.count("got no 'val' documents") == 1, explain(p)
    assert "exitcode  : 143" not in out and "stopping on SIGTERM" not in out, explain(p)
    errors = {e["rank"]: e["detail"]["error"] for e in events(run) if e["kind"] == "error"}
    assert errors == {0: "DataError", 1: "DataError"}, events(run)
    assert "sigterm" not in [e["kind"] for e in events(run)] and not (run / "config.yaml").exists()


def test_no_training_documents_is_exit_2_before_the_run_is_announced(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """The first training batch is read before boot too: a corpus of blank lines (not empty on disk,
    so nsa-train's pre-flight passes it) stops before config.yaml and the `boot` event."""
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    (tmp_path / "blank.jsonl").write_text("\n\n  \n")
    run = tmp_path / "run"
    argv = ["--config", str(TINY), "--run-dir", str(run), "--set", "data.source=files"]
    argv += ["--set", f"data.paths=[{tmp_path / 'blank.jsonl'}]", "--set", "telemetry.tensorboard=false"]
    argv += ["--set", "train.eval_every=0"]  # no held-out check: the training batch alone
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "got no 'train' documents" in err, err
    assert [e["kind"] for e in events(run)] == ["error"] and not (run / "config.yaml").exists()
