"""One command at a time per run: the lock that serialises `restart` and `kill` of the same run.

Owns $NSA_LAUNCH_HOME/locks/<run>.lock: an flock held for the whole command, holding the PID, the
action and the time of the holder. A second command on the same run from this machine does not wait
on tmux or signals half-way through the first (two restarts at once ended in a libtmux traceback):
it stops at once with "run X is being restarted by PID Y", exit code 1. The lock is re-entrant
within one process (a restart kills through the same path). It must not contact any host.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator

from launcher import registry
from launcher.errors import RuntimeFailure

_held: dict[str, int] = {}  # run -> depth, in this process
_mutex = threading.Lock()


def lock_path(run: str) -> str:
    return str(registry.home() / "locks" / f"{run}.lock")


@contextlib.contextmanager
def run_lock(run: str, action: str) -> Iterator[None]:
    """Hold the run's lock for `action` ("restarted", "killed"); RuntimeFailure naming the holder
    when another process holds it."""
    with _mutex:
        if _held.get(run):
            _held[run] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _mutex:
                _held[run] -= 1
        return
    path = lock_path(run)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        since = holder.get("time")
        ago = f" for {time.time() - float(since):.0f} s" if since else ""
        raise RuntimeFailure(
            f"run {run} is being {holder.get('action', 'changed')} by PID {holder.get('pid', '?')}{ago}",
            f"wait for that command to end (`nsa-launch status --run {run}` shows the run), then retry",
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "action": action, "time": time.time()}).encode(), 0)
        with _mutex:
            _held[run] = 1
        yield
    finally:
        with _mutex:
            _held.pop(run, None)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing releases the flock


def _holder(fd: int) -> dict[str, object]:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
