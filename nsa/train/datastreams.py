"""The training data position as a set of streams, so a checkpoint resumes on any world size.

A run of W ranks reads W streams: stream r is the data loader of rank r of W (nsa.data shards
documents by rank and world size, and packs each shard into batches). A checkpoint stores the
position of every stream, gathered from all ranks into every rank's file. A resume on W' ranks
deals the same streams out again, so no batch is read twice and none is skipped:

- W' <= W: rank j reads the streams r with r % W' == j, one batch from each in turn;
- W' > W: stream r is shared by the ranks j with j % W == r; with m sharers, sharer p takes the
  batches p, p+m, p+2m, ... of the stream and steps over the others (each sharer reads and packs
  the whole stream: m times the tokenizing of that stream, not of the data set).

Streams keep their original (rank, world size) sharding for the rest of the run; a later resume
on yet another size deals those streams again. It must not know about models or optimizers.
"""

from __future__ import annotations

from typing import Any

from nsa.data import build_loader
from nsa.data.config import DataConfig


class Stream:
    """One original shard's loader, read every `stride`-th batch starting at `phase`."""

    def __init__(self, loader: Any, stride: int = 1, phase: int = 0):
        self.loader, self.stride, self.phase = loader, stride, phase

    def next_batch(self) -> Any:
        # One round of `stride` batches per call: the others' before and after this sharer's own, so
        # every sharer ends a round at the same position (the one a checkpoint saves).
        for _ in range(self.phase):
            self.loader.next_batch()
        batch = self.loader.next_batch()
        for _ in range(self.stride - 1 - self.phase):
            self.loader.next_batch()
        return batch

    def state(self) -> dict[str, Any]:
        sd = self.loader.state_dict()
        return {"loader": sd, "key": (sd["rank"], sd["world_size"])}


class StreamLoader:
    """What the trainer calls its loader: one or more streams, read in turn."""

    def __init__(self, streams: list[Stream]):
        self.streams = streams
        self._turn = 0

    def next_batch(self) -> Any:
        s = self.streams[self._turn % len(self.streams)]
        self._turn += 1
        return s.next_batch()

    def local_states(self) -> list[dict[str, Any]]:
        """This rank's streams, each at the start of a full round (saves happen at step boundaries)."""
        return [s.state() for s in self.streams]

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in self.streams:
            for k, v in s.loader.stats().items():
                if isinstance(v, (int, float)):
                    out[k] = out.get(k, 0) + v
        return out

    def describe(self) -> str:
        first = self.streams[0].loader.describe()
        if len(self.streams) == 1 and self.streams[0].stride == 1:
            return first
        keys = [f"{s.state()['key'][0]}/{s.state()['key'][1]}" for s in self.streams]
        share = self.streams[0].stride
        return f"{first}; resharded: streams {', '.join(keys)}" + (
            f" (every {share}th batch, phase {self.streams[0].phase})" if share > 1 else ""
        )

    def close(self) -> None:
        for s in self.streams:
            s.loader.close()


def deal(keys: list[tuple[int, int]], rank: int, world: int) -> list[tuple[tuple[int, int], int, int]]:
    """(stream key, stride, phase) this rank reads, for streams `keys` (sorted) dealt over `world` ranks."""
    n = len(keys)
    if world <= n:
        return [(keys[r], 1, 0) for r in range(n) if r % world == rank]
    r = rank % n
    sharers = [j for j in range(world) if j % n == r]
    return [(keys[r], len(sharers), sharers.index(rank))]


def fresh(
    cfg: DataConfig, *, seq_len: int, batch_size: int, rank: int, world: int, seed: int
) -> StreamLoader:
    loader = build_loader(
        cfg, seq_len=seq_len, batch_size=batch_size, rank=rank, world_size=world, split="train", seed=seed
    )
    return StreamLoader([Stream(loader)])


def restore(
    cfg: DataConfig, saved: list[dict[str, Any]], *, seq_len: int, batch_size: int, rank: int, world: int,
    seed: int,
) -> StreamLoader:  # fmt: skip
    """The streams of a checkpoint (all ranks' `local_states`, concatenated) dealt to this rank."""
    by_key = {tuple(s["key"]): s["loader"] for s in saved}  # sharers saved identical positions
    streams = []
    for key, stride, phase in deal(sorted(by_key), rank, world):
        loader = build_loader(
            cfg, seq_len=seq_len, batch_size=batch_size, rank=key[0], world_size=key[1], split="train",
            seed=seed,
        )  # fmt: skip
        loader.load_state_dict(by_key[key])
        streams.append(Stream(loader, stride, phase))
    return StreamLoader(streams)
