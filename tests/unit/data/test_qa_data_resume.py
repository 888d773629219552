"""Resuming a data stream after the user's corpus changed on disk between the save and the resume
(product QA of the data pipeline, 2026-11-27). The saved position names a file by its place in the
sorted file list and a document by its index in that file, so a file added, removed or renamed under
the same `data.paths` moved the position onto other data without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa.data import DataConfig, DataError, build_loader


def write(path: Path, tag: str, n: int = 30) -> None:
    path.write_text(
        "".join(json.dumps({"text": f"{tag} doc {i}: " + "words " * 12}) + "\n" for i in range(n))
    )


def saved_state(cfg: DataConfig) -> dict:
    with build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1) as ld:
        for _ in range(5):
            ld.next_batch()
        return ld.state_dict()


def test_a_file_added_or_removed_under_the_same_paths_is_refused_at_resume(tmp_path: Path) -> None:
    for name in ("b", "c", "d"):
        write(tmp_path / f"{name}.jsonl", name)
    cfg = DataConfig(source="files", paths=[str(tmp_path / "*.jsonl")], val_fraction=0.0, shuffle_files=False)
    sd = saved_state(cfg)
    write(tmp_path / "a.jsonl", "a")  # sorts first: the saved slot 0 (b.jsonl) is now a.jsonl
    (tmp_path / "d.jsonl").unlink()
    with pytest.raises(DataError) as e:
        build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1).load_state_dict(sd)
    msg = str(e.value)
    assert "a.jsonl" in msg and "added" in msg and "d.jsonl" in msg and "removed" in msg, msg
    assert "data.paths" in msg and "restore" in msg, msg


def test_a_file_that_changed_size_is_said_and_the_unchanged_corpus_resumes_quietly(
    tmp_path: Path, capsys
) -> None:
    for name in ("b", "c"):
        write(tmp_path / f"{name}.jsonl", name)
    cfg = DataConfig(source="files", paths=[str(tmp_path)], val_fraction=0.0, shuffle_files=False)
    sd = saved_state(cfg)
    build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1).load_state_dict(sd)
    assert capsys.readouterr().err == ""
    write(tmp_path / "c.jsonl", "c", n=10)  # truncated to a third
    build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1).load_state_dict(sd)
    err = capsys.readouterr().err
    assert "c.jsonl" in err and "changed size" in err, err


def test_the_same_corpus_under_another_home_resumes(tmp_path: Path, capsys, monkeypatch) -> None:
    """A run recovered on another host reads `~/corpus` under another home (root's, ubuntu's)."""
    for home in ("host1", "host2"):
        (tmp_path / home / "corpus").mkdir(parents=True)
        for name in ("b", "c"):
            write(tmp_path / home / "corpus" / f"{name}.jsonl", name)
    cfg = DataConfig(source="files", paths=["~/corpus"], val_fraction=0.0)
    monkeypatch.setenv("HOME", str(tmp_path / "host1"))
    sd = saved_state(cfg)
    monkeypatch.setenv("HOME", str(tmp_path / "host2"))
    build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1).load_state_dict(sd)
    assert capsys.readouterr().err == ""


def test_a_changed_setting_is_refused_with_its_config_key_and_a_fix_nsa_train_can_follow(
    tmp_path: Path,
) -> None:
    """`--resume` with train.seq_len 128 -> 64 said "start the data stream fresh by not loading the
    loader state", which no nsa-train option or config key did; the fix it names now is the config key
    that does it (data.resume: fresh)."""
    write(tmp_path / "a.jsonl", "a")
    cfg = DataConfig(source="files", paths=[str(tmp_path)], val_fraction=0.0)
    sd = saved_state(cfg)
    with pytest.raises(DataError) as e:
        build_loader(cfg, seq_len=32, batch_size=1, rank=0, world_size=1).load_state_dict(sd)
    msg = str(e.value)
    assert "train.seq_len: saved 64, now 32" in msg and "--set data.resume=fresh" in msg, msg
    assert "not loading the loader state" not in msg, msg
