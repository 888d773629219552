"""Rank sharding over real files: for any file layout and world size, the ranks' documents are
disjoint and together cover the source, in every epoch, whether sharded by file or by document."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from nsa.data.sources import FilesSource, SyntheticSource, file_shard


@settings(max_examples=60, deadline=None)
@given(
    layout=st.lists(st.integers(0, 6), min_size=1, max_size=9),
    world_size=st.integers(1, 8),
    epoch=st.integers(0, 2),
    shuffle=st.booleans(),
)
def test_rank_shards_are_disjoint_and_cover_the_source(layout, world_size, epoch, shuffle):
    with tempfile.TemporaryDirectory() as tmp:
        files, n = [], 0
        for f, count in enumerate(layout):
            path = Path(tmp) / f"f{f}.jsonl"
            path.write_text("".join(json.dumps({"text": f"d{n + k}"}) + "\n" for k in range(count)))
            files.append(str(path))
            n += count
        seen: list[str] = []
        for rank in range(world_size):
            src = FilesSource(
                files, "text", rank=rank, world_size=world_size, seed=3, shuffle=shuffle, label="t"
            )
            seen.extend(text for _, text in src.iter_epoch(epoch, None))
        assert sorted(seen) == sorted(f"d{i}" for i in range(n))  # covering, and no document twice


@settings(max_examples=60, deadline=None)
@given(n_files=st.integers(1, 24), world_size=st.integers(1, 8), epoch=st.integers(0, 5))
def test_file_shard_arithmetic(n_files, world_size, epoch):
    shards = [file_shard(n_files, world_size, r, epoch, seed=1, shuffle=True) for r in range(world_size)]
    by_file = n_files % world_size == 0
    assert all(s[1] == by_file for s in shards)
    if by_file:
        flat = [i for s, _ in shards for i in s]
        assert sorted(flat) == list(range(n_files))
        assert {len(s) for s, _ in shards} == {n_files // world_size}
    else:
        assert all(sorted(s) == list(range(n_files)) for s, _ in shards)


def test_resume_cursor_reopens_at_that_document(tmp_path):
    files = []
    for f in range(3):
        p = tmp_path / f"f{f}.jsonl"
        p.write_text("".join(json.dumps({"text": f"f{f}d{k}"}) + "\n" for k in range(5)))
        files.append(str(p))
    for world_size in (1, 2, 3):
        src = FilesSource(
            files, "text", rank=world_size - 1, world_size=world_size, seed=0, shuffle=True, label="t"
        )
        full = list(src.iter_epoch(1, None))
        for j, (cursor, _) in enumerate(full):
            assert list(src.iter_epoch(1, cursor)) == full[j:]


def test_synthetic_shards_disjoint_and_learnable_shape():
    a = SyntheticSource(rank=0, world_size=2, seed=5)
    b = SyntheticSource(rank=1, world_size=2, seed=5)
    ca = [c for _, (c, _text) in zip(range(10), a.iter_epoch(0, None))]
    cb = [c for _, (c, _text) in zip(range(10), b.iter_epoch(0, None))]
    assert len(set(ca)) == 10 and not set(ca) & set(cb)
    nums = [int(v) for v in SyntheticSource.document(5, 7).split()]
    steps = {y - x for x, y in itertools.pairwise(nums)}
    assert len(steps) == 1 and len(nums) >= 16  # an arithmetic sequence: predictable after two numbers
