"""Metric history for the charts: an incremental tail of a run's metrics.jsonl, local or over SSH.

A local run's file is read directly, a remote one through the host agent's `metrics` command (one
agent call per poll on the cached SSH connection); both use the same reader
(launcher/host/metrics.py), which returns only the bytes written since the last poll, so a long run
costs a few hundred bytes a second, not the whole file. It keeps only the chart fields (step, loss,
tokens_per_s) of the newest `keep` records. Must not import torch or touch tmux.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from launcher.host.metrics import read_from
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
    return read_from(path, offset, FIRST_READ_BYTES)


def _read_remote(node: Any, path: str, offset: int) -> tuple[int, int, bytes]:
    from launcher.ssh.remote import agent_call, transport_for

    req = {"run_dir": node.run_dir, "offset": int(offset), "first_read_bytes": FIRST_READ_BYTES}
    reply = agent_call(transport_for(node.host), node.workdir, node.python, "metrics", req, timeout=20.0)
    return int(reply["size"]), int(reply["start"]), base64.b64decode(reply["data"])
