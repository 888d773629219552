"""Bad input and failing sources give a DataError naming the source, the key or file, and the fix;
transient read errors are retried from the document where reading stopped."""

from __future__ import annotations

import json
import os
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from nsa.data import DataConfig, DataError, build_loader
from nsa.data.loader import is_transient
from tests.unit.data.data_support import doc_ids, stream_of


def first(cfg, **kw):
    args = dict(seq_len=16, batch_size=1, rank=0, world_size=1) | kw
    with build_loader(cfg, **args) as ld:
        return ld.next_batch()


def test_missing_file_and_empty_glob_name_the_path(tmp_path):
    with pytest.raises(DataError, match=r"data\.paths: file '.*nope\.jsonl' does not exist"):
        build_loader(
            DataConfig(source="files", paths=[str(tmp_path / "nope.jsonl")]),
            seq_len=8,
            batch_size=1,
            rank=0,
            world_size=1,
        )
    with pytest.raises(DataError, match=r"pattern '.*\*\.parquet' matched no files"):
        build_loader(
            DataConfig(source="files", paths=[str(tmp_path / "*.parquet")]),
            seq_len=8,
            batch_size=1,
            rank=0,
            world_size=1,
        )


def test_unsupported_extension_lists_the_supported_ones(tmp_path):
    (tmp_path / "a.csv").write_text("text\nhello\n")
    with pytest.raises(DataError, match=r"unsupported extension.*\.jsonl"):
        build_loader(
            DataConfig(source="files", paths=[str(tmp_path / "a.csv")]),
            seq_len=8,
            batch_size=1,
            rank=0,
            world_size=1,
        )


def test_wrong_text_field_in_jsonl_names_file_line_and_key(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({"content": "hello there"}) + "\n")
    with pytest.raises(
        DataError, match=r"a\.jsonl:1: no text field 'text' \(found \['content'\]\).*data\.text_field"
    ):
        first(DataConfig(source="files", paths=[str(p)]))


def test_wrong_text_column_in_parquet_lists_the_columns(tmp_path):
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"body": ["x" * 50]}), p)
    with pytest.raises(DataError, match=r"no text column 'text' \(columns: \['body'\]\)"):
        first(DataConfig(source="files", paths=[str(p)]))
    x, _ = first(DataConfig(source="files", paths=[str(p)], text_field="body", val_fraction=0.001))
    assert x.shape == (1, 16)


def test_broken_json_line_names_the_line(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({"text": "fine " * 20}) + "\n{not json\n")
    with pytest.raises(DataError, match=r"a\.jsonl:2: not valid JSON"):
        first(DataConfig(source="files", paths=[str(p)], val_fraction=0.001), seq_len=200)


def test_gpt2_without_local_tokenizer_says_how_to_get_one(tmp_path):
    with pytest.raises(DataError, match=r"tokenizer='gpt2'.*tokenizer_path.*tokenizer='byte'"):
        build_loader(
            DataConfig(tokenizer="gpt2", tokenizer_path=str(tmp_path)),
            seq_len=8,
            batch_size=1,
            rank=0,
            world_size=1,
        )


def test_first_batch_timeout_names_the_source(tmp_path):
    fifo = tmp_path / "never-written.txt"
    os.mkfifo(fifo)  # opening it for reading blocks until a writer appears: a real stuck source
    cfg = DataConfig(source="files", paths=[str(fifo)], first_batch_timeout_s=0.5)
    ld = build_loader(cfg, seq_len=8, batch_size=1, rank=0, world_size=1)
    t0 = time.monotonic()
    with pytest.raises(
        DataError, match=r"'files' gave no first batch .* within 0\.5 s on rank 0 .*never-written\.txt"
    ):
        ld.next_batch()
    assert time.monotonic() - t0 < 5
    # Unblock the stuck reader so the producer thread can end.
    threading.Thread(target=lambda: open(fifo, "w").close(), daemon=True).start()
    ld.close()


def test_too_few_val_documents_for_the_ranks_is_explained(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps({"text": f"document number {i}"}) + "\n" for i in range(4)))
    with pytest.raises(DataError, match=r"got no 'val' documents .*larger data\.val_fraction"):
        first(DataConfig(source="files", paths=[str(p)], val_fraction=0.01), split="val", world_size=2)


def test_resume_with_another_world_size_is_refused():
    with build_loader(DataConfig(), seq_len=16, batch_size=1, rank=0, world_size=2) as a:
        a.next_batch()
        sd = a.state_dict()
    b = build_loader(DataConfig(), seq_len=16, batch_size=1, rank=0, world_size=4)
    with pytest.raises(DataError, match=r"world_size: saved 2, now 4"):
        b.load_state_dict(sd)


class FlakySource:
    """Test double for a network source that drops its connection (no real flaky network here):
    wraps the real FilesSource and raises ConnectionError after `after` documents, `times` times."""

    def __init__(self, inner, after: int, times: int):
        self.inner, self.after, self.times, self.opens = inner, after, times, 0

    def describe(self) -> str:
        return "flaky " + self.inner.describe()

    def iter_epoch(self, epoch, start):
        self.opens += 1
        for n, item in enumerate(self.inner.iter_epoch(epoch, start)):
            if n == self.after and self.times > 0:
                self.times -= 1
                raise ConnectionError("connection reset by peer")
            yield item


def test_transient_errors_are_retried_without_repeating_or_skipping(corpus):
    cfg = DataConfig(source="files", paths=corpus(2, 15), retries=3, retry_backoff_s=0.01, val_fraction=0.01)
    with build_loader(cfg, seq_len=32, batch_size=1, rank=0, world_size=1) as clean:
        want = [clean.next_batch() for _ in range(40)]
    with build_loader(cfg, seq_len=32, batch_size=1, rank=0, world_size=1) as ld:
        ld.source = flaky = FlakySource(ld.source, after=4, times=2)
        got = [ld.next_batch() for _ in range(40)]
    assert flaky.opens >= 3
    assert doc_ids(stream_of(got)) == doc_ids(stream_of(want))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(want, got))


def test_persistent_errors_stop_after_the_retries(corpus):
    cfg = DataConfig(source="files", paths=corpus(1, 10), retries=2, retry_backoff_s=0.01)
    with build_loader(cfg, seq_len=32, batch_size=1, rank=0, world_size=1) as ld:
        ld.source = FlakySource(ld.source, after=0, times=99)
        with pytest.raises(
            DataError, match=r"read failed after 2 retries .*ConnectionError: connection reset"
        ):
            ld.next_batch()


def test_transient_classification():
    assert is_transient(ConnectionError("x")) and is_transient(TimeoutError())
    assert not is_transient(FileNotFoundError("x")) and not is_transient(DataError("x"))
    assert not is_transient(KeyError("text"))
