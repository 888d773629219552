"""Metric history for the charts: an incremental tail of a run's metrics.jsonl, local or over SSH.

The launcher API has no metrics call, so this module adds one on top of the launcher's transports:
a local run's file is read directly; a remote one with one shell exec per poll on the cached SSH
connection (`launcher.remote.transport_for`) that returns only the bytes written since the last
poll, so a long run costs a few hundred bytes a second, not the whole file. It keeps only the chart
fields (step, loss, tokens_per_s) of the newest `keep` records. Paths are shlex-quoted; nothing is
interpolated raw. Must not import torch or touch tmux.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from nsa.runfiles import METRICS

FIRST_READ_BYTES = 1 << 20  # first poll: the last MiB is plenty for a chart of a few hundred points
CHART_FIELDS = ("step", "loss", "tokens_per_s")


def _slim(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(rec, dict) or "step" not in rec:
        return None
    return {k: rec[k] for k in CHART_FIELDS if k in rec}


@dataclass
class _Cursor:
    offset: int = 0  # bytes of the file already consumed (always at a line boundary)
    records: deque[dict[str, Any]] = field(default_factory=deque)


class MetricsTail:
    """Per-run cursors into metrics.jsonl; `read` returns the newest `keep` slim records."""

    def __init__(self, keep: int = 500):
        self.keep = keep
        self._cursors: dict[str, _Cursor] = {}
        # An abandoned (cancelled) poll may still be running in its thread when the next starts.
        self._lock = threading.Lock()

    def read(self, record: Any) -> list[dict[str, Any]]:
        with self._lock:
            return self._read(record)

    def _read(self, record: Any) -> list[dict[str, Any]]:
        node = record.nodes[0]
        cur = self._cursors.setdefault(record.run, _Cursor(records=deque(maxlen=self.keep)))
        path = os.path.join(node.run_dir, METRICS)
        if node.host.is_local:
            size, start, data = _read_local(os.path.join(os.path.expanduser(node.workdir), path), cur.offset)
        else:
            size, start, data = _read_remote(node, path, cur.offset)
        self._consume(cur, size, start, data)
        return list(cur.records)

    @staticmethod
    def _consume(cur: _Cursor, size: int, start: int, data: bytes) -> None:
        if size < cur.offset:  # the file was replaced (a fresh run under the same name)
            cur.records.clear()
            cur.offset = 0
        if start != cur.offset:
            # We skipped ahead (first read of a long file): the first line may be cut in half.
            nl = data.find(b"\n")
            start, data = (start + nl + 1, data[nl + 1 :]) if nl >= 0 else (start, b"")
            cur.records.clear()
        end = data.rfind(b"\n") + 1  # the part after the last newline is still being written
        for line in data[:end].split(b"\n")[:-1]:
            rec = _slim(line)
            if rec is not None:
                cur.records.append(rec)
        cur.offset = start + end


def _read_local(path: str, offset: int) -> tuple[int, int, bytes]:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < offset:
                offset = 0
            start = max(offset, size - FIRST_READ_BYTES) if offset == 0 else offset
            f.seek(start)
            return size, start, f.read(size - start)
    except FileNotFoundError:
        return 0, 0, b""


def _read_remote(node: Any, path: str, offset: int) -> tuple[int, int, bytes]:
    from launcher.remote import transport_for

    q = shlex.quote
    # Prints the file size on the first line, then the bytes from `start`; nothing if absent.
    script = (
        f'cd {q(node.workdir)} 2>/dev/null || exit 0; f={q(path)}; [ -f "$f" ] || exit 0; '
        f'size=$(wc -c < "$f"); off={int(offset)}; [ "$size" -lt "$off" ] && off=0; '
        f'start=$off; [ "$off" -eq 0 ] && [ "$size" -gt {FIRST_READ_BYTES} ] && start=$((size - {FIRST_READ_BYTES})); '
        f'echo "$size $start"; tail -c +$((start + 1)) "$f" | head -c $((size - start))'
    )
    res = transport_for(node.host).run(script, timeout=20.0, check=True)
    out = res.stdout.encode()
    head, _, data = out.partition(b"\n")
    if not head.strip():
        return 0, 0, b""
    size, start = (int(x) for x in head.split())
    return size, start, data
