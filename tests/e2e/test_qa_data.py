"""The data pipeline as a new user meets it through the real nsa-train (product QA, 2026-11-27):
their own corpus changing on disk between a checkpoint and its resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa.train.cli import main
from tests.assets.trainrun import TINY, events, metrics

pytestmark = pytest.mark.e2e


def write(path: Path, tag: str) -> None:
    path.write_text(
        "".join(json.dumps({"text": f"{tag} doc {i}: " + "lorem ipsum " * 20}) + "\n" for i in range(20))
    )


def test_resume_after_a_file_was_added_is_exit_2_naming_it_and_data_resume_fresh_goes_on(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """A shard added under the same directory between the save and `--resume`: the saved position
    (file slot 0, document 7) named another file, and the run went on on other documents, silently."""
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for tag in ("b", "c"):
        write(corpus / f"{tag}.jsonl", tag)
    run = tmp_path / "run"
    argv = ["--config", str(TINY), "--run-dir", str(run)]
    for s in (
        "data.source=files", f"data.paths=[{corpus}]", "data.val_fraction=0", "train.eval_every=0",
        "train.steps=2", "train.save_every=2", "train.log_every=1", "telemetry.tensorboard=false",
    ):  # fmt: skip
        argv += ["--set", s]
    assert main(argv) == 0
    write(corpus / "a.jsonl", "a")
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "cannot resume the data stream exactly" in err and "added: a.jsonl" in err, err
    assert "restore the files" in err and "--set data.resume=fresh" in err, err
    assert [m["step"] for m in metrics(run) if "loss" in m] == [1, 2]
    assert [e["detail"]["error"] for e in events(run) if e["kind"] == "error"] == ["DataError"]
    # The fix it names: the weights and step go on (steps 3-4, not 1-2 again), the stream anew over the
    # grown corpus; said in the log and as an event.
    assert main([*argv, "--resume", "--set", "data.resume=fresh", "--set", "train.steps=4"]) == 0
    assert "with a fresh data stream (data.resume: fresh)" in capsys.readouterr().out
    assert [m["step"] for m in metrics(run) if "loss" in m] == [1, 2, 3, 4]
    assert [e["step"] for e in events(run) if e["kind"] == "data_fresh"] == [2]


@pytest.mark.parametrize("paths", ["{root}", "**/*.jsonl", "{root}/**/*.txt"])
def test_data_paths_that_would_read_the_run_dir_are_exit_2_before_torch(
    tmp_path: Path, capsys, monkeypatch, paths: str
) -> None:
    """`data.paths: [data]` with `--run-dir data/run1`, or `**/*.jsonl` from the checkout (runs/ is in
    it): the loader resolved the paths after the trainer had written its run dir, and the run trained
    on its own events.jsonl, metrics.jsonl and stacks/*.txt (seen on a 2-rank torchrun: `5 file(s)`
    for a corpus of 2, the others its own files and the shell's log of it)."""
    from nsa.train.cli import data_problem
    from nsa.train.config import load_config

    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "data"
    root.mkdir()
    write(root / "a.jsonl", "a")
    (root / "b.txt").write_text("a text document " * 20)
    pattern = paths.format(root=root)
    run = root / "run1"
    argv = ["--config", str(TINY), "--run-dir", str(run), "--set", "data.source=files"]
    assert main([*argv, "--set", f"data.paths=['{pattern}']"]) == 2
    err = capsys.readouterr().err
    assert f"--run-dir {run}" in err and "its own files" in err and "narrow data.paths" in err, err
    assert not run.exists()
    narrow = load_config(str(TINY), ["data.source=files", f"data.paths=[{root}/*.jsonl]"], world_size=1)
    assert data_problem(narrow, str(TINY), str(run)) is None  # `*` does not reach into run1/
