"""The recovery status of a run: what a replacement of its lost pod in progress is doing.

Owns the progress file $NSA_LAUNCH_HOME/watch/<run>.recovery.json: written by the replacement
(launcher/recover/replace.py) as it goes, read by `status` and the dashboard (launcher/run/control.py)
to say "replacing pod X (lost 12 s ago) -> pod Y provisioning", and valid only while the process
that writes it lives. It sits here, below both, so the replacement can call the run commands without
the run commands importing the replacement (no import cycle). It must not import torch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from launcher.run import registry
from launcher.run.registry import RunRecord


def _progress_path(run: str) -> Path:
    return registry.home() / "watch" / f"{run}.recovery.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Progress:
    """What a replacement in progress is doing, for `status` and the dashboard to say."""

    def __init__(self, rec: RunRecord, lost_at: float):
        self.path = _progress_path(rec.run)
        self.d: dict[str, Any] = {
            "pid": os.getpid(), "old_pod": rec.pod_id, "old_host": rec.host, "lost_at": lost_at,
            "new_pod": None, "new_host": None, "phase": "verifying the mirror",
        }  # fmt: skip

    def set(self, phase: str, **kw: Any) -> None:
        from nsa.runfiles import atomic_write_json

        self.d.update(phase=phase, time=time.time(), **kw)
        atomic_write_json(self.path, self.d)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def recovery_status(run: str) -> dict[str, Any] | None:
    """The replacement in progress for `run` (old/new pod and host, when it was lost, the phase), or
    None (none, or its writer died)."""
    try:
        d = json.loads(_progress_path(run).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or not _alive(int(d.get("pid") or 0)):
        return None
    return d


def recovery_text(d: dict[str, Any], now: float | None = None) -> str:
    """ "replacing pod p-1 at root@1.2.3.4:22 (lost 12 s ago) -> pod p-2 at ... resuming" """
    now = time.time() if now is None else now
    old = f"pod {d.get('old_pod') or '?'}" + (f" at {d['old_host']}" if d.get("old_host") else "")
    lost = f"lost {max(0.0, now - float(d.get('lost_at') or now)):.0f} s ago"
    new = (
        (f"pod {d['new_pod']}" + (f" at {d['new_host']}" if d.get("new_host") else ""))
        if d.get("new_pod")
        else "a new pod"
    )
    return f"replacing {old} ({lost}) -> {new} {d.get('phase') or ''}".rstrip()
