"""What a rank tells the world while it trains: heartbeats, events, metrics, TensorBoard scalars.

`Recorder` owns the writing side of the run-dir contract (nsa/runfiles.py; docs/run-dir.md) for
one rank: every rank rewrites its heartbeat on every phase change; rank 0 alone appends metrics
and the run's life-cycle events (any rank may append `stalled`, `error` and `sigterm`, tagged with
its rank). It also holds the progress clock the watchdog reads. It must stay cheap enough to call
every step and must never block on anything but the local filesystem; it knows nothing of torch
except the lazily created TensorBoard writer.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from typing import Any

from nsa.runfiles import Heartbeat, RunDir

# Metric keys the launcher reads at the top level of every metrics.jsonl record.
TOP_LEVEL_KEYS = ("step", "loss", "lr", "tokens_per_s", "time")


class Recorder:
    def __init__(self, run_dir: RunDir, rank: int, tensorboard: bool = True):
        self.run_dir = run_dir
        self.rank = rank
        self.is_main = rank == 0
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.step = 0
        self.phase = "boot"
        # Monotonic time of the last sign of progress; the watchdog compares against it.
        self.progress_time = time.monotonic()
        self._lock = threading.Lock()
        self._tb_enabled = tensorboard and self.is_main
        self._tb: Any = None
        self.sink: Any = None  # rank 0: an extra destination (W&B, nsa.telemetry.wandb_sink)

    # --- liveness -------------------------------------------------------------------------------
    def beat(self, phase: str, step: int | None = None) -> None:
        """Record progress: new phase (and step), heartbeat file rewritten atomically."""
        with self._lock:
            if step is not None:
                self.step = step
            self.phase = phase
            self.progress_time = time.monotonic()
            hb = Heartbeat(
                rank=self.rank, step=self.step, time=time.time(), pid=self.pid, phase=phase, host=self.host
            )
        self.run_dir.write_heartbeat(hb)

    def seconds_since_progress(self) -> float:
        return time.monotonic() - self.progress_time

    # --- events ---------------------------------------------------------------------------------
    def event(self, kind: str, step: int | None = None, all_ranks: bool = False, **detail: Any) -> None:
        """Append to events.jsonl: rank 0 only, unless `all_ranks` (a rank-local fact like a stall)."""
        if not (self.is_main or all_ranks):
            return
        at = self.step if step is None else step
        self.run_dir.append_event(kind, step=at, rank=self.rank, **detail)
        if self.sink is not None and self.is_main:
            self.sink.event(kind, at, detail)

    # --- metrics --------------------------------------------------------------------------------
    def metrics(self, step: int, values: dict[str, float]) -> None:
        """Rank 0: one metrics.jsonl record (namespaced keys + the launcher's top-level keys) and TB."""
        if not self.is_main:
            return
        rec: dict[str, Any] = {"step": step, "time": time.time()}
        for k, v in values.items():
            rec[k] = _jsonable(v)
        self.run_dir.append_metrics(rec)
        if self.sink is not None:
            self.sink.metrics(step, values)
        if self._tb_enabled:
            tb = self._writer()
            for k, v in values.items():
                if "/" in k and isinstance(v, (int, float)) and math.isfinite(v):
                    tb.add_scalar(k, v, step)
            tb.flush()

    def _writer(self) -> Any:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir.tb_dir), flush_secs=30)
        return self._tb

    def close(self, exit_code: int = 0) -> None:
        if self.sink is not None:
            self.sink.close(exit_code)
            self.sink = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _jsonable(v: Any) -> Any:
    # json.dumps would write NaN/Infinity, which strict JSON readers reject; a diverged loss is a string.
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v
