"""Per-run locks on the launching machine: who watches a run, and who may change it right now.

Owns two flocks under $NSA_LAUNCH_HOME (the kernel drops an flock when its process dies, so a crash or
a closed laptop lid leaves no stale lock; each file says who holds it):
- `WatchLock` (watch/<run>.lock), held for as long as one watcher (`watch`, a dashboard) acts on the
  run; the others wait to take over.
- `run_lock` (locks/<run>.lock), held only while something changes the run's mirror, pods or registry
  record: one pull, one replacement, one `pods down`. `watch`, the dashboard, `pull` and `pods down`
  all take it, so two writers never interleave (a concurrent `pull` could otherwise leave `latest`
  naming a directory the other one was replacing). It is re-entrant within one thread (a
  replacement pulls; `pods down` pulls), and excludes other threads and processes.
It must not contact any host.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.core.errors import RuntimeFailure
from launcher.run import registry

RUN_LOCK_TIMEOUT_S = 120.0  # a pull waits this long for another writer (a replacement holds it longer)


def _try_flock(path: Path, who: str) -> int | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} ({who})".encode())
    return fd


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "another process"
    except OSError:
        return "another process"


class WatchLock:
    """One watcher per run: an flock on $NSA_LAUNCH_HOME/watch/<run>.lock. The file says who holds
    it. Two locks on one run exclude each other within one process too (flock is per open)."""

    def __init__(self, run: str, who: str):
        self.path = registry.home() / "watch" / f"{run}.lock"
        self.who = who
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        if self._fd is None:
            self._fd = _try_flock(self.path, self.who)
        return self._fd is not None

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it (`pid N (nsa-launch watch)`)."""
        return _holder(self.path)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


class RunLocked(RuntimeFailure):
    """Another process (or thread) holds the run's write lock past the wait."""


_held: dict[tuple[str, int], list[int]] = {}  # (run, thread id) -> [fd, depth]
_held_guard = threading.Lock()


def run_lock_path(run: str) -> Path:
    return registry.home() / "locks" / f"{run}.lock"


def run_lock_holder(run: str) -> str:
    return _holder(run_lock_path(run))


@contextmanager
def run_lock(run: str, who: str, timeout: float = RUN_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the run's write lock for the block; wait up to `timeout` s for another holder, then raise
    RuntimeFailure naming it (exit 1). Re-entrant in the thread that holds it."""
    key = (run, threading.get_ident())
    with _held_guard:
        mine = _held.get(key)
        if mine is not None:
            mine[1] += 1
    if mine is None:
        path = run_lock_path(run)
        deadline = time.monotonic() + timeout
        while (fd := _try_flock(path, who)) is None:
            if time.monotonic() >= deadline:
                raise RunLocked(
                    f"run {run} is being changed by {_holder(path)} (waited {timeout:.0f} s)",
                    "try again when it is done; one writer at a time keeps the mirror and the pods consistent",
                )
            time.sleep(0.1)
        with _held_guard:
            _held[key] = mine = [fd, 1]
    try:
        yield
    finally:
        with _held_guard:
            mine[1] -= 1
            if mine[1] == 0:
                del _held[key]
                os.close(mine[0])


def note_doing(run: str, who: str) -> None:
    """Rewrite what the holder of the run's write lock says it is doing (`pid N (watch: replacing
    pod p-1)`), for a writer that waits on it. A no-op unless this thread holds it."""
    with _held_guard:
        mine = _held.get((run, threading.get_ident()))
        if mine is not None:
            os.ftruncate(mine[0], 0)
            os.pwrite(mine[0], f"pid {os.getpid()} ({who})".encode(), 0)
