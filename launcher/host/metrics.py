"""`metrics`: the bytes of a run's metrics.jsonl written since a byte offset (the dashboard's charts).

Owns the incremental read on the host: the file's size, where the returned bytes start (the last
`first_read_bytes` on a first read of a long file; 0 again when the file shrank, i.e. was replaced)
and the bytes themselves, base64 in the JSON reply. Parsing the records is the caller's
(launcher/dashboard/metrics_tail.py), so the same reader serves local and remote runs. Read-only.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from nsa.runfiles import RunDir


def read_from(path: str, offset: int, first_read_bytes: int) -> tuple[int, int, bytes]:
    """(size, start, data): the bytes of `path` from `offset` (or its tail on a first read)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < offset:
                offset = 0
            start = max(offset, size - first_read_bytes) if offset == 0 else offset
            f.seek(start)
            return size, start, f.read(size - start)
    except FileNotFoundError:
        return 0, 0, b""


def cmd_metrics(req: dict[str, Any]) -> dict[str, Any]:
    size, start, data = read_from(
        str(RunDir(req["run_dir"]).metrics),
        int(req.get("offset", 0)),
        int(req.get("first_read_bytes", 1 << 20)),
    )
    return {"ok": True, "size": size, "start": start, "data": base64.b64encode(data).decode()}
