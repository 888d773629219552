"""Data streams dealt to another world size on resume: no batch read twice, none skipped.

Reference: the uninterrupted run's streams (one loader per original rank) read on. A resume on W'
ranks must read exactly the batches those streams would have produced next, as a multiset.

Run: .venv/bin/pytest tests/unit/train/test_datastreams.py
"""

from __future__ import annotations

import pytest

from nsa.data import build_loader
from nsa.data.config import DataConfig
from nsa.train import datastreams

CFG = DataConfig(source="synthetic", tokenizer="byte")
KW = dict(seq_len=16, batch_size=2, seed=7)


def _key(batch) -> bytes:
    return batch[0].numpy().tobytes()


def _reference(world: int, skip: int, take: dict[int, int]) -> list[bytes]:
    """Batches skip..skip+take[r]-1 of each original stream r of a `world`-rank run."""
    out = []
    for r in range(world):
        with build_loader(CFG, rank=r, world_size=world, split="train", **KW) as ld:
            batches = [ld.next_batch() for _ in range(skip + take[r])]
        out += [_key(b) for b in batches[skip:]]
    return out


def _save(world: int, steps: int) -> list[dict]:
    """What a checkpoint stores after `steps` micro-batches per rank of a `world`-rank run."""
    saved = []
    for r in range(world):
        sl = datastreams.fresh(CFG, rank=r, world=world, **KW)
        for _ in range(steps):
            sl.next_batch()
        saved += sl.local_states()
        sl.close()
    return saved


@pytest.mark.parametrize(("old", "new"), [(2, 1), (1, 2), (3, 2)])
def test_resume_on_another_world_size_reads_every_batch_once(old: int, new: int) -> None:
    saved, steps = _save(old, 3), 6  # 6 micro-batches per new rank after the resume
    got, advanced = [], dict.fromkeys(range(old), 0)
    for j in range(new):
        dealt = datastreams.deal([(r, old) for r in range(old)], j, new)
        for (r, _), stride, _phase in dealt:  # batches this rank's reads move stream r forward
            advanced[r] = max(advanced[r], steps // len(dealt) * stride)
        sl = datastreams.restore(CFG, saved, rank=j, world=new, **KW)
        got += [_key(sl.next_batch()) for _ in range(steps)]
        assert len(sl.local_states()) >= 1
        sl.close()
    assert len(got) == len(set(got)) == new * steps  # nothing twice
    # Every batch is the next of its old stream: each stream continues where it stopped, none skipped.
    assert sorted(got) == sorted(_reference(old, 3, advanced))


def test_sharers_save_the_same_position_and_the_deal_is_stable() -> None:
    saved = _save(1, 2)
    states = []
    for j in range(2):
        sl = datastreams.restore(CFG, saved, rank=j, world=2, **KW)
        for _ in range(3):
            sl.next_batch()
        states.append(sl.local_states())
        sl.close()
    assert states[0] == states[1]  # either rank file restores the shared stream
    assert datastreams.deal([(0, 2), (1, 2)], 0, 1) == [((0, 2), 1, 0), ((1, 2), 1, 0)]
    assert datastreams.deal([(0, 1)], 1, 2) == [((0, 1), 2, 1)]
