"""Asynchronous checkpoint saves (`ckpt.async: true`): same files, manifest and fsync rules as `ckpt.save`.

At the step boundary every rank gathers the state into private CPU memory (`ckpt.snapshot`), so
training goes on mutating the parameters; a background thread then writes and fsyncs this rank's
files (`ckpt.write_part`). The ranks agree at later step boundaries (`poll`, one small all-reduce a
step while a save is in flight, none otherwise): once every rank's part is on disk, each host
leader's thread writes the manifest, renames the dir and moves `latest` (`ckpt.publish`), which
therefore moves only after everything is fsynced. The background threads run no collective (two
threads issuing collectives on one process group could pair them differently on different ranks).

At most one save is in flight: the next one, SIGTERM's and the end of training wait for it
(`poll(block=True)`). A failure is raised at the next boundary on every rank (the failing rank
re-raises its own error, so the event and log carry the same cause as a synchronous failure), and
its half-written `.tmp-step-N` dir is removed: it never counts as a checkpoint.
"""

from __future__ import annotations

import errno
import functools
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from nsa.train import ckpt
from nsa.train.dist import DistInfo, all_reduce_max

# The agreed state of a save in flight: the max over ranks of each rank's own value.
_DONE, _RUNNING, _FAILED = 0.0, 1.0, 2.0


class _Flight:
    def __init__(self, snap: ckpt.Snapshot, started: float):
        self.snap = snap
        self.started = started
        self.stage = "write"
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def run(self, work: Callable[[], object]) -> None:
        def body() -> None:
            try:
                work()
            except BaseException as e:  # kept for the main thread: it reports and re-raises it
                self.error = e

        self.thread = threading.Thread(target=body, name=f"ckpt-{self.stage}-{self.snap.step}", daemon=True)
        self.thread.start()

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


class AsyncSaver:
    """One rank's in-flight checkpoint. Every rank calls `start` and `poll` at the same boundaries."""

    def __init__(self, info: DistInfo, on_done: Callable[[int, Path, float], None] = lambda *a: None):
        self.info = info
        self.on_done = on_done  # (step, final dir, seconds since the snapshot)
        self.flight: _Flight | None = None

    @property
    def in_flight(self) -> bool:
        return self.flight is not None

    def start(self, snap: ckpt.Snapshot, started: float) -> None:
        """Write `snap` in the background; the previous save must have been finished (`poll(block=True)`)."""
        if self.flight is not None:
            raise RuntimeError("a checkpoint save is already in flight; poll(block=True) first")
        f = self.flight = _Flight(snap, started)
        f.run(lambda: ckpt.write_part(snap, self.info))

    def poll(self, block: bool = False) -> None:
        """Collective at a step boundary: advance the save in flight, or raise its failure on all ranks.

        `block`: wait until the checkpoint is published (or has failed) before returning.
        """
        while self.flight is not None:
            f = self.flight
            if block:
                f.join()
            # running() before error: a writer that fails between the two reads is then seen as failed
            mine = _RUNNING if f.running() else (_FAILED if f.error is not None else _DONE)
            agreed = all_reduce_max(mine, self.info)
            if agreed == _FAILED:
                self._fail(f)
            if agreed == _RUNNING:
                return  # not block: someone is still writing; ask again at the next boundary
            if f.stage == "write":
                f.stage = "publish"
                if self.info.local_rank == 0:
                    f.run(functools.partial(self._publish, f))
                else:
                    f.thread = None
                continue
            self.flight = None
            self.on_done(f.snap.step, f.snap.final, time.time() - f.started)
            return

    def abandon(self) -> None:
        """On the way out after another error: let this rank's writer finish (no collective)."""
        f, self.flight = self.flight, None
        if f is not None:
            f.join()

    def _publish(self, f: _Flight) -> None:
        try:
            ckpt.publish(f.snap)
        except OSError:  # a torn save must not hold the space the run's logs and exit code need
            shutil.rmtree(f.snap.tmp, ignore_errors=True)
            raise

    def _fail(self, f: _Flight) -> None:
        f.join()  # another rank failed: this one's writer may still hold files in the tmp dir
        self.flight = None
        if self.info.local_rank == 0:
            shutil.rmtree(f.snap.tmp, ignore_errors=True)
        if f.error is not None:
            raise f.error
        raise OSError(
            errno.EIO, f"checkpoint {f.snap.final.name} failed on another rank of this run (see its log)"
        )
