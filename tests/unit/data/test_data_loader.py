"""The loader end to end in one process, on real files: full [B, T] batches on every rank, disjoint
rank shards and train/val split, infinite epochs, exact resume across the prefetch queue, stats."""

from __future__ import annotations

import io

import pytest
import torch

from nsa.data import DataConfig, build_loader
from tests.unit.data.data_support import doc_ids, stream_of


def take(loader, n):
    return [loader.next_batch() for _ in range(n)]


def first_epoch_ids(cfg, split, rank, world_size, n_batches=120, seq_len=64):
    with build_loader(
        cfg, seq_len=seq_len, batch_size=1, rank=rank, world_size=world_size, split=split
    ) as ld:
        ids = doc_ids(stream_of(take(ld, n_batches)))
        assert ld.stats()["epoch"] >= 1, "test corpus should be exhausted at least once"
    seen: list[int] = []
    for i in ids:
        if i in seen:  # the first repeat marks the start of epoch 1
            break
        seen.append(i)
    return seen


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("split", ["train", "val"])
def test_every_rank_gets_full_batches_from_the_sample(world_size, split):
    for rank in range(world_size):
        with build_loader(
            DataConfig(), seq_len=48, batch_size=1, rank=rank, world_size=world_size, split=split
        ) as ld:
            for x, y in take(ld, 3):
                assert x.shape == y.shape == (1, 48)
                assert x.dtype == y.dtype == torch.int64
                assert (x[0, 1:] == y[0, :-1]).all()
                assert int(x.max()) <= 256 and int(x.min()) >= 0


@pytest.mark.parametrize("world_size", [3, 8])
def test_one_file_feeds_more_ranks_than_files(corpus, world_size):
    cfg = DataConfig(source="files", paths=corpus(n_files=1, docs_per_file=60), val_fraction=0.2)
    seen = []
    for rank in range(world_size):
        with build_loader(cfg, seq_len=16, batch_size=1, rank=rank, world_size=world_size) as ld:
            batches = take(ld, 6)
            assert all(x.shape == y.shape == (1, 16) for x, y in batches)
            seen.append(set(doc_ids(stream_of(batches))))
    assert all(seen)
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_and_splits_are_disjoint_and_cover_the_corpus(corpus, world_size):
    paths = corpus(n_files=4, docs_per_file=25)  # 4 files: by file for W=2, by document for W=3
    # Unshuffled so each rank reads the same files every epoch and the first repeated id marks
    # the end of epoch 0 (with shuffling, file-sharded ranks trade files between epochs).
    cfg = DataConfig(source="files", paths=paths, val_fraction=0.2, shuffle_files=False)
    train = [first_epoch_ids(cfg, "train", r, world_size) for r in range(world_size)]
    val = [first_epoch_ids(cfg, "val", r, world_size) for r in range(world_size)]
    all_train = [i for ids in train for i in ids]
    all_val = [i for ids in val for i in ids]
    assert all(train) and all(val), "every rank gets documents of both splits"
    assert len(all_train) == len(set(all_train)), "a train document went to two ranks"
    assert len(all_val) == len(set(all_val)), "a val document went to two ranks"
    assert not set(all_train) & set(all_val), "train and val overlap"
    assert sorted(all_train + all_val) == list(range(100))
    assert 5 <= len(all_val) <= 40  # about val_fraction of the documents


def test_parquet_files_shard_by_document_when_files_do_not_divide(corpus):
    paths = corpus(n_files=3, docs_per_file=20, fmt="parquet")
    cfg = DataConfig(source="files", paths=paths, val_fraction=0.1, shuffle_files=False)
    ids = [first_epoch_ids(cfg, "train", r, 2) for r in range(2)]
    assert not set(ids[0]) & set(ids[1])
    assert ids[0] and ids[1]
    val = first_epoch_ids(cfg, "val", 0, 1)
    assert sorted(ids[0] + ids[1] + val) == list(range(60))


@pytest.mark.parametrize("source", ["files", "sample", "synthetic"])
def test_resume_across_the_prefetch_queue_is_exact(corpus, source):
    cfg = DataConfig(source=source, paths=corpus(3, 10) if source == "files" else [], prefetch=4)
    kw = dict(seq_len=32, batch_size=2, rank=1, world_size=2)
    with build_loader(cfg, **kw) as a:
        take(a, 9)  # the producer thread has run ahead; state must describe what we consumed
        buf = io.BytesIO()
        torch.save(a.state_dict(), buf)
        expected = take(a, 40)  # long enough to cross an epoch on the small files corpus
        stats_a = a.stats()
    buf.seek(0)
    with build_loader(cfg, **kw) as b:
        b.load_state_dict(torch.load(buf, weights_only=True))
        got = take(b, 40)
        assert b.stats()["docs_read"] == stats_a["docs_read"]
        assert b.stats()["tokens_read"] == stats_a["tokens_read"]
        assert b.stats()["epoch"] == stats_a["epoch"]
    for (x, y), (gx, gy) in zip(expected, got):
        assert torch.equal(x, gx) and torch.equal(y, gy)


def test_training_stream_is_infinite_and_epochs_are_reshuffled(corpus):
    paths = corpus(n_files=4, docs_per_file=3)
    cfg = DataConfig(source="files", paths=paths, val_fraction=0.01)
    with build_loader(cfg, seq_len=64, batch_size=1, rank=0, world_size=1) as ld:
        ids = doc_ids(stream_of(take(ld, 60)))
        assert ld.stats()["epoch"] >= 2
    n = len(set(ids))
    epochs = [ids[k : k + n] for k in range(0, 2 * n, n)]
    assert sorted(epochs[0]) == sorted(epochs[1])  # the same documents every epoch...
    assert epochs[0] != epochs[1]  # ...in a new file order (seed + epoch)


def test_reset_replays_the_same_batches():
    with build_loader(DataConfig(), seq_len=32, batch_size=2, rank=0, world_size=2, split="val") as ld:
        first = take(ld, 4)
        ld.reset()
        again = take(ld, 4)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again))


def test_stats_track_reads_and_waits():
    with build_loader(DataConfig(source="synthetic"), seq_len=64, batch_size=4, rank=0, world_size=1) as ld:
        take(ld, 5)
        s = ld.stats()
    assert s["batches"] == 5
    assert s["tokens_read"] >= 5 * 4 * 64 and s["docs_read"] > 0
    assert s["fetch_wait_s"] >= s["last_fetch_wait_s"] >= 0.0
    assert s["dropped_tokens"] == 0  # an infinite stream never drops a partial window


def test_describe_names_source_tokenizer_and_shard():
    with build_loader(DataConfig(), seq_len=16, batch_size=1, rank=2, world_size=3) as ld:
        line = ld.describe()
    assert "sample" in line and "byte" in line and "rank 2/3" in line and "\n" not in line


def test_txt_gz_and_directory_inputs_are_read(tmp_path):
    import gzip
    import json

    d = tmp_path / "mixed"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("<doc 0> plain text file")
    with gzip.open(d / "sub" / "b.txt.gz", "wt") as f:
        f.write("<doc 1> gzipped text file")
    with gzip.open(d / "sub" / "c.jsonl.gz", "wt") as f:
        f.write(
            json.dumps({"text": "<doc 2> gzipped jsonl"})
            + "\n\n"
            + json.dumps({"text": "<doc 3> two"})
            + "\n"
        )
    (d / "notes.md").write_text("ignored: not a corpus extension")
    cfg = DataConfig(source="files", paths=[str(d)], val_fraction=0.001, shuffle_files=False)
    with build_loader(cfg, seq_len=16, batch_size=1, rank=0, world_size=1) as ld:
        ids = doc_ids(stream_of(take(ld, 12)))
    assert sorted(set(ids)) == [0, 1, 2, 3]
