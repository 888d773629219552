"""Reading train.log on the host: the tail (never the whole file), following it, finding the cause.

Owns the log-reading half of the host agent (`python -m launcher.host logs`, and the log tail that
`up` prints when a run dies early). Standard library + nsa.runfiles only, like the agent; it never
writes to a run dir.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from nsa.runfiles import RunDir


def log_tail(path: Path, n: int, max_bytes: int = 1 << 20, end: int | None = None) -> list[str]:
    """Last n lines of a file (up to byte `end`), reading at most max_bytes: huge logs are never read whole."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell() if end is None else min(end, f.tell())
            block, data = 8192, b""
            while size > 0 and data.count(b"\n") <= n and len(data) < max_bytes:
                step = min(block, size)
                size -= step
                f.seek(size)
                data = f.read(step) + data
                block *= 2
    except FileNotFoundError:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines[-n:] if n > 0 else []


_ERROR_HINTS = ("Error", "error:", "Fix:", "Exception", "Traceback")
_BOILERPLATE = (
    "torch/distributed/elastic",
    "ChildFailedError",
    "error_file",
    "errors.html",
    "elastic_launch",
    "Traceback (most recent call last)",
)


def error_lines(lines: list[str], n: int = 5) -> list[str]:
    """The first few lines that look like the cause (the trainer's own error, an exception), skipping
    torchrun's failure summary, which fills the end of the log and names no cause."""
    out: list[str] = []
    for ln in lines:
        if any(h in ln for h in _ERROR_HINTS) and not any(b in ln for b in _BOILERPLATE) and ln not in out:
            out.append(ln)
            if len(out) == n:
                break
    return out


def follow_log(req: dict[str, Any]) -> None:
    """Print the last n lines of train.log, then (follow) new lines as they arrive until the run ends."""
    rd = RunDir(req["run_dir"])
    out = sys.stdout
    # Fix the follow position before printing history, so a line written meanwhile is not lost.
    pos = rd.train_log.stat().st_size if rd.train_log.exists() else 0
    for line in log_tail(rd.train_log, int(req.get("last_n", 200)), end=pos):
        out.write(line + "\n")
    out.flush()
    if not req.get("follow"):
        return
    parent = os.getppid()
    partial = b""
    quiet_since = time.monotonic()
    while True:
        try:
            with open(rd.train_log, "rb") as f:
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            data = b""
        if data:
            pos += len(data)
            partial += data
            *lines, partial = partial.split(b"\n")
            if lines:
                out.write(b"\n".join(lines).decode(errors="replace") + "\n")
                out.flush()
            quiet_since = time.monotonic()
        elif (rd.exit_code_file.exists() or rd.killed_file.exists()) and time.monotonic() - quiet_since > 0.5:
            if partial:
                out.write(partial.decode(errors="replace") + "\n")
            return
        if os.getppid() != parent:  # the SSH session went away: nobody is reading
            return
        time.sleep(0.1)
