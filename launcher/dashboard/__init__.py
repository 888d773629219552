"""The `nsa-launch dashboard` Textual app: runs, logs, GPUs, charts, events, kill/restart/tunnel.

This package owns everything drawn on screen and the workers that feed it. It reaches runs only
through a small `Backend` (backend.py): the real one wraps `launcher.run.api`, the recorded one replays a
captured run dir and status snapshots for tests. It must never import torch, never block the UI
thread on the network, and never let a widget be touched from a worker thread.
"""

from __future__ import annotations

from launcher.dashboard.app import DashboardApp, make_app

__all__ = ["DashboardApp", "make_app"]
