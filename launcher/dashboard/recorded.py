"""A backend that replays recorded data: a run dir, status snapshots and `nvidia-smi` CSV output.

This module owns the recording format the Pilot and snapshot tests (and bench/dashboard.py) build the
app from, so they need no network, no tmux and no GPU. It replays data written by real tools; it is
not a mock of the launcher: kill/restart/tunnel are recorded as calls (so tests can assert the
dashboard really asked for them) and change what later snapshots say, but touch no process.

Layout of a recording directory:
    status.json          {"snapshots": [[status, ...], ...]}: one list of status dicts per poll
                         step; a status whose "gpus" is a string names a CSV file below
    rundirs/<run>/       run dirs (train.log, metrics.jsonl, events.jsonl, heartbeat/ ...); not
                         `runs/`, which the project's .gitignore drops
    *.csv                `nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,
                         memory.total,temperature.gpu,power.draw --format=csv` output
    gpu_processes/<run>.json  {"synthetic": why, "rows": [...]} or {"rows": [...]}: what
                         `launcher.host.gpuprocs.gpu_processes` returns on the run's host; absent: no NVML
A status (or a GPU-process file) with a "synthetic" key was not captured from a real run; the
dashboard says so on screen.
"""

from __future__ import annotations

import copy
import json
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.host.gpu import parse_csv
from nsa.runfiles import RunDir, iter_jsonl


@dataclass
class RecordedTunnel:
    """What `open_tunnel` returns on a recording: the URL a real tunnel would print; no socket."""

    url: str
    local_port: int = 6006
    run: str = ""
    closed: bool = False
    stopped: bool = False  # its TensorBoard was stopped on the "host" (the run killed or restarted)
    _on_close: Any = field(default=None, repr=False)

    def alive(self) -> bool:
        return not (self.closed or self.stopped)

    def close(self) -> None:
        self.closed = True
        if self._on_close:
            self._on_close(self)


class RecordedBackend:
    """Replays a recording directory; see the module docstring for its layout."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        status_file = self.root / "status.json"
        try:
            data = json.loads(status_file.read_text())
            self._snapshots: list[list[dict[str, Any]]] = data["snapshots"]
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(
                f"{status_file}: not a recording ({e}); expected {{'snapshots': [[...]]}}"
            ) from e
        if not self._snapshots:
            raise ValueError(f"{status_file}: key 'snapshots' is empty; record at least one poll")
        self._index = 0
        self._lock = threading.Lock()
        self._killed: set[str] = set()
        self._feeds: dict[str, queue.Queue[str | None]] = {}
        self.calls: list[tuple[Any, ...]] = []
        self._gone_pids: set[int] = set()
        self.tunnels: list[RecordedTunnel] = []
        # A test sets this to hold `restart` mid-way (a real one takes a while: kill, resume, first
        # heartbeat) and look at the screen meanwhile.
        self.hold_restart: threading.Event | None = None

    # --- replay control (tests and benchmarks) ----------------------------------------------
    def advance(self) -> int:
        """Move to the next recorded poll (the last one repeats); returns its index."""
        with self._lock:
            self._index = min(self._index + 1, len(self._snapshots) - 1)
            return self._index

    def feed_log(self, run: str, lines: list[str | None] | None) -> None:
        """Lines that "arrive" after the recorded train.log; a None (or `lines=None`) ends the
        current stream the way a cut connection does; the next `stream_log` call reads on."""
        q = self._feed(run)
        for ln in [None] if lines is None else lines:
            q.put(ln)

    def _feed(self, run: str) -> queue.Queue[str | None]:
        with self._lock:
            return self._feeds.setdefault(run, queue.Queue())

    def run_dir(self, run: str) -> RunDir:
        return RunDir(self.root / "rundirs" / run)

    # --- Backend ------------------------------------------------------------------------------
    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            statuses = copy.deepcopy(self._snapshots[self._index])
            killed = set(self._killed)
        for st in statuses:
            if isinstance(st.get("gpus"), str):
                st["gpus"] = parse_csv((self.root / st["gpus"]).read_text())
            if st.get("run") in killed:
                st["state"] = "killed"
        return statuses

    def stream_log(self, run: str, last_n: int = 200) -> Iterator[str]:
        path = self.run_dir(run).train_log
        lines = path.read_text().splitlines() if path.exists() else []
        yield from lines[-last_n:] if last_n > 0 else []
        q = self._feed(run)
        while True:
            ln = q.get()
            if ln is None:
                return
            yield ln

    def metrics(self, run: str) -> list[dict[str, Any]]:
        return list(iter_jsonl(self.run_dir(run).metrics))

    def kill(self, run: str) -> dict[str, Any]:
        with self._lock:
            self.calls.append(("kill", run))
            self._killed.add(run)
        self._stop_tensorboard(run)
        return {
            "killed": True,
            "remaining_pids": [],
            "message": f"run {run}: recorded kill (no process touched)",
        }

    def restart(self, run: str) -> str:
        if self.hold_restart is not None:
            self.hold_restart.wait(30)
        with self._lock:
            self.calls.append(("restart", run))
            self._killed.discard(run)
        self._stop_tensorboard(run)  # a restart kills first, and TensorBoard with the run
        return run

    def _stop_tensorboard(self, run: str) -> None:
        for t in self.tunnels:
            if t.run == run:
                t.stopped = True

    def open_tunnel(self, run: str, port: int = 6006, live_only: bool = False) -> RecordedTunnel:
        with self._lock:
            self.calls.append(("open_tunnel", run))
        with self._lock:
            killed = run in self._killed
        if live_only and killed:  # as the host agent refuses a reopen for a killed run
            from launcher.run.control import RunStopped

            raise RunStopped(
                f"{run}: run is being stopped or was killed", "`nsa-launch restart` the run first"
            )
        # A killed run has no TensorBoard on its host: a tunnel opened to it forwards to a port nobody
        # answers, as a real one would.
        t = RecordedTunnel(
            url=f"http://127.0.0.1:{port}/",
            local_port=port,
            run=run,
            stopped=killed,
            _on_close=self._tunnel_closed,
        )
        self.tunnels.append(t)
        return t

    def gpu_processes(self, run: str) -> list[dict[str, Any]] | None:
        path = self.root / "gpu_processes" / f"{run}.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        synthetic = data.get("synthetic")
        with self._lock:
            gone = set(self._gone_pids)
        rows = [dict(r) for r in data["rows"] if r["pid"] not in gone]
        if synthetic:
            for r in rows:
                r["synthetic"] = synthetic
        return rows

    def kill_gpu_process(self, run: str, pid: int, node: int = 0) -> dict[str, Any]:
        with self._lock:
            self.calls.append(("kill_gpu_process", run, pid))
            self._gone_pids.add(pid)
        return {
            "killed": True,
            "pid": pid,
            "remaining_pids": [],
            "message": f"pid {pid}: recorded kill (no process touched)",
        }

    def watch(self, statuses: list[dict[str, Any]], say: Any) -> None:
        """A recording has no host to pull from or replace: nothing to do."""

    def _tunnel_closed(self, t: RecordedTunnel) -> None:
        with self._lock:
            self.calls.append(("close_tunnel", t.url))
