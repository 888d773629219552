"""The launcher's Python API for the dashboard and scripts: runs, status, logs, kill, restart, tunnel,
GPU processes.

The stable surface other areas import; the work lives in launcher/run/control.py (and launcher/launch/
for starting runs). Status dicts have the keys documented in docs/launcher.md: run, host, profile,
state, step, total_steps, loss, tokens_per_s, eta_s, elapsed_s, heartbeat_age_s ({rank: seconds}),
gpus, exit_code, pids, events, time, error. The registry location is $NSA_LAUNCH_HOME (default
~/.nsa-launch). Never imports torch.
"""

from __future__ import annotations

from launcher.core.errors import LaunchError, RuntimeFailure
from launcher.run.control import (
    Tunnel,
    fetch_status,
    gpu_processes,
    kill_gpu_process,
    kill_run,
    open_tunnel,
    resolve_run,
    restart_run,
    stream_log,
)
from launcher.run.registry import NodeRecord, RunRecord
from launcher.run.registry import all_runs as list_runs

__all__ = [
    "LaunchError",
    "NodeRecord",
    "RunRecord",
    "RuntimeFailure",
    "Tunnel",
    "fetch_status",
    "gpu_processes",
    "kill_gpu_process",
    "kill_run",
    "list_runs",
    "open_tunnel",
    "resolve_run",
    "restart_run",
    "stream_log",
]
