"""A new user's own corpus on disk, as it really is (product QA of the data pipeline, 2026-11-27):
symlinked directories and link loops under a `**` glob, truncated and corrupt gzip shards, null
texts, stray invalid UTF-8 bytes. Real files and the real loader, in one process."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

from nsa.data import DataConfig, DataError, build_loader
from nsa.data.sources import resolve_paths


def lines(texts: list[str]) -> str:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts)


def texts(n: int, tag: str = "doc") -> list[str]:
    return [f"{tag} {i}: " + "some words of a user's corpus " * 4 for i in range(n)]


def test_a_file_reached_through_symlinks_is_read_once(tmp_path: Path) -> None:
    """`corpus/latest -> v2` and a link loop inside v2: the glob reaches one file by 81 names, and the
    loader read it 81 times per epoch (the link alone doubled the corpus)."""
    root = tmp_path / "corpus"
    (root / "v2").mkdir(parents=True)
    (root / "v2" / "a.jsonl").write_text(lines(texts(10)))
    os.symlink("v2", root / "latest")
    os.symlink(".", root / "v2" / "loop")
    for pattern in (str(root / "**" / "*.jsonl"), str(root)):
        assert len(resolve_paths([pattern])) == 1, resolve_paths([pattern])[:4]
    cfg = DataConfig(source="files", paths=[str(root / "**" / "*.jsonl")], val_fraction=0.0)
    with build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1) as ld:
        assert "1 file(s)" in ld.describe(), ld.describe()


@pytest.mark.parametrize("fault", ["truncated", "not gzip"])
def test_a_damaged_gzip_shard_is_named_with_the_fix(tmp_path: Path, fault: str) -> None:
    """A download cut short (EOFError) or a file that is not gzip at all (BadGzipFile) in the middle of
    the corpus: the error named only the first file of the corpus ("e.g. a.jsonl.gz")."""
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(lines(texts(3, "a")).encode()))
    data = gzip.compress(lines(texts(200, "b")).encode())
    bad = tmp_path / "b.jsonl.gz"
    bad.write_bytes(data[: len(data) // 2] if fault == "truncated" else b"<html>503</html>\n" * 50)
    cfg = DataConfig(
        source="files", paths=[str(tmp_path)], val_fraction=0.0, shuffle_files=False, retry_backoff_s=0.01
    )
    with (
        build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1) as ld,
        pytest.raises(DataError) as e,
    ):
        for _ in range(500):
            ld.next_batch()
    msg = str(e.value)
    assert f"reading {bad}:" in msg and "fix the file (or its permissions) or remove it" in msg, msg


def test_null_texts_are_skipped_and_stray_bytes_replaced_as_the_other_sources_do(tmp_path: Path) -> None:
    """Web corpora carry nulls and the odd invalid byte. The hub source skips a null text and .txt
    files replace invalid UTF-8; a local .jsonl or .parquet stopped the run there instead (hours in,
    and again at every resume): `field 'text' is NoneType`, `not valid JSON ('utf-8' codec ...)`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.unit.data.data_support import doc_ids, doc_text, stream_of

    rows = [json.dumps({"text": doc_text(i) if i != 10 else None}).encode() + b"\n" for i in range(30)]
    rows[20] = json.dumps({"text": doc_text(20)}).encode()[:-2] + b' caf\xe9 \xff"}\n'  # Latin-1 bytes
    (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + b"".join(rows))  # a BOM too, as Windows tools write
    table = pa.table({"text": [doc_text(i) if i not in (30, 45) else None for i in range(30, 60)]})
    pq.write_table(table, tmp_path / "b.parquet", row_group_size=7)
    cfg = DataConfig(source="files", paths=[str(tmp_path)], val_fraction=0.0, shuffle_files=False)
    with build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1) as ld:
        batches = [ld.next_batch() for _ in range(150)]
        assert ld.stats()["epoch"] >= 1
    stream = stream_of(batches)
    ids = doc_ids(stream)
    assert ids[: ids.index(0, 1)] == [i for i in range(60) if i not in (10, 30, 45)], ids
    assert bytes(t for t in stream if t < 256).count("\ufffd".encode()) >= 2  # \xe9 and \xff, replaced


def test_one_big_txt_file_without_held_out_text_says_it_is_one_document(tmp_path: Path) -> None:
    """A user's corpus as one 300 KB .txt file: one document, so no held-out split, and the error
    said "Use a bigger corpus", which it is. It now says what the split saw and why."""
    big = tmp_path / "corpus.txt"
    big.write_text("A line of the user's own text, one of many thousands.\n" * 6000)
    cfg = DataConfig(source="files", paths=[str(big)])
    with (
        build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1, split="val") as ld,
        pytest.raises(DataError) as e,
    ):
        ld.next_batch()
    msg = str(e.value)
    assert "1 document(s) in all, 0 of them held out" in msg and "a .txt file is one document" in msg, msg


@pytest.mark.parametrize("fmt", ["jsonl.gz", "parquet-missing", "parquet-int"])
def test_a_wrong_text_field_is_exit_2_before_torch_with_no_run_dir(tmp_path: Path, capsys, fmt: str) -> None:
    """The commonest mistake with one's own corpus: the text is under another key ("content"), or the
    column is not text. Found at the first batch: 10.2 s wall (5.9 s user, torch imported) and a run
    dir left on the loaded dev machine. nsa-train now reads the head of the first files before torch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nsa.train.cli import main
    from tests.assets.trainrun import TINY

    if fmt == "jsonl.gz":
        path = tmp_path / "c.jsonl.gz"
        path.write_bytes(gzip.compress(("\n" + json.dumps({"content": "the text", "id": 1}) + "\n").encode()))
        said = r"c\.jsonl\.gz:2: no text field 'text' \(found \['content', 'id'\]\).*data\.text_field"
    elif fmt == "parquet-missing":
        path = tmp_path / "c.parquet"
        pq.write_table(pa.table({"content": ["the text"]}), path)
        said = r"no text column 'text' \(columns: \['content'\]\)"
    else:
        path = tmp_path / "c.parquet"
        pq.write_table(pa.table({"text": [1, 2]}), path)
        said = r"column 'text' is int64, not text"
    run = tmp_path / "run"
    argv = ["--config", str(TINY), "--run-dir", str(run), "--set", "data.source=files"]
    assert main([*argv, "--set", f"data.paths=[{path}]"]) == 2
    err = capsys.readouterr().err
    assert re.search(said, err) and "data error in" in err, err
    assert not run.exists()


def test_a_file_that_is_not_gzip_is_not_retried(tmp_path: Path) -> None:
    """BadGzipFile is an OSError, so it was retried as a flaky disk is: 1 + 2 + 4 s of backoff with the
    defaults, then the same error. A file's bytes do not heal; a read error of the disk still retries."""
    import time

    from nsa.data.loader import is_transient

    (tmp_path / "a.jsonl.gz").write_bytes(b"<html>503 Service Unavailable</html>\n" * 20)
    cfg = DataConfig(source="files", paths=[str(tmp_path)], val_fraction=0.0)
    t0 = time.monotonic()
    with (
        build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1) as ld,
        pytest.raises(DataError) as e,
    ):
        ld.next_batch()
    assert time.monotonic() - t0 < 5 and "retries" not in str(e.value) and "BadGzipFile" in str(e.value), str(
        e.value
    )
    assert is_transient(OSError(5, "Input/output error"))


def test_a_corpus_smaller_than_one_batch_is_said_once(tmp_path: Path, capsys) -> None:
    """Three short documents, 2 ranks, 4 x 128 tokens a batch (seen on a real 2-rank torchrun): it
    trains, each batch the same text ~20 times over, and nothing said so; the loss falls toward 0 as
    the model learns the text by heart."""
    (tmp_path / "c.jsonl").write_text(lines(["first tiny document", "second tiny document", "third one"]))
    cfg = DataConfig(source="files", paths=[str(tmp_path)], val_fraction=0.0)
    with build_loader(cfg, seq_len=128, batch_size=4, rank=0, world_size=2) as ld:
        ld.next_batch()
        ld.next_batch()
    err = capsys.readouterr().err
    assert err.count("fewer tokens than one batch (4 x 128)") == 1 and "train.batch_size" in err, err
    with build_loader(cfg, seq_len=128, batch_size=4, rank=1, world_size=2) as ld:
        ld.next_batch()
    with build_loader(DataConfig(), seq_len=128, batch_size=4, rank=0, world_size=2) as ld:
        ld.next_batch()
    assert capsys.readouterr().err == ""  # rank 1 leaves it to rank 0; the sample corpus is big enough
