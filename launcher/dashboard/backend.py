"""The dashboard's one door to runs: the `Backend` protocol and the real backend over launcher.run.api.

This module owns the small set of calls the dashboard makes (snapshot, log stream, metric history,
kill, restart, tunnel, GPU processes), keyed by run id so widgets never hold launcher objects. `LauncherBackend`
adapts `launcher.run.api` to it; tests use `recorded.RecordedBackend`. Every call here may block on the
network, so the app only ever calls them from worker threads. Must not import torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from launcher.dashboard.metrics_tail import MetricsTail


class Tunnel(Protocol):
    url: str
    local_port: int

    def close(self) -> None: ...

    def alive(self) -> bool:
        """Whether the URL reaches a TensorBoard now (a kill or restart stops it on the host)."""


class Backend(Protocol):
    def snapshot(self) -> list[dict[str, Any]]:
        """One status dict per run shown (shape of `launcher.run.api.fetch_status`)."""

    def stream_log(self, run: str, last_n: int = 200) -> Iterator[str]:
        """The last `last_n` lines of the run's train.log, then new lines as they are written."""

    def metrics(self, run: str) -> list[dict[str, Any]]:
        """The newest metrics.jsonl records of the run, oldest first."""

    def kill(self, run: str) -> dict[str, Any]:
        """`{"killed": bool, "remaining_pids": [...], "message": str}`, and for a run on a pod
        `up --provision` rented `"billing"`: what still bills (launcher.providers.pods.still_billing)."""

    def restart(self, run: str) -> str:
        """Restart from the newest intact checkpoint (the run checkpoints on the kill); returns the run id now running."""

    def open_tunnel(self, run: str, port: int = 6006, live_only: bool = False) -> Tunnel:
        """TensorBoard for the run at a local URL; `live_only` (a reopen): RunStopped, nothing started,
        for a run being killed or killed."""

    def gpu_processes(self, run: str) -> list[dict[str, Any]] | None:
        """Processes holding GPU memory on the run's host(s) (`launcher.host.gpuprocs.gpu_processes` rows:
        gpu, pid, kind, gpu_mem_mib, user, command); None when the host has no NVML."""

    def kill_gpu_process(self, run: str, pid: int, node: int = 0) -> dict[str, Any]:
        """Kill one pid listed by `gpu_processes` on the run's node `node`: `{"killed", "pid", "message"}`."""

    def watch(self, statuses: list[dict[str, Any]], say: Callable[[str], None]) -> None:
        """Do what `nsa-launch watch` does for each live run in `statuses` (pull the mirror on its
        schedule, replace a lost provisioned pod); may block for minutes; `say` reports each step."""


@dataclass(frozen=True)
class WatchSettings:
    """The dashboard's watch: off, or `nsa-launch watch`'s thresholds."""

    enabled: bool = True
    pull_every_s: float | None = None  # None: on each new checkpoint (watcher.auto_pull_every)
    lost_after_s: float = 60.0


@dataclass(frozen=True)
class Scope:
    """Which runs the dashboard shows: one run, every remembered run, or the most recent `limit`."""

    run: str | None = None
    all: bool = False
    limit: int = 10


class LauncherBackend:
    """The real backend: `launcher.run.api` (SSH or local transport, the host agent, the run registry)."""

    def __init__(self, scope: Scope | None = None, watch: WatchSettings | None = None):
        # Imported here so `--help` and the recorded tests never pay for (or depend on) the launcher.
        from launcher.run import api

        self._api = api
        self.scope = scope or Scope()
        self.watch_settings = watch or WatchSettings()
        self._records: dict[str, Any] = {}
        self._metrics = MetricsTail()
        self._watchers: dict[str, Any] = {}  # run -> launcher.recover.watcher.Watcher of a live run
        self._given_up: set[str] = set()

    def _select(self) -> list[Any]:
        if self.scope.run is not None:
            recs = [self._api.resolve_run(self.scope.run)]
        else:
            recs = list(self._api.list_runs())
            if not self.scope.all:
                recs = recs[: self.scope.limit]
        self._records = {record_id(r): r for r in recs}
        return recs

    def check_run(self) -> None:
        """Resolve `--run` now (local registry only), so an unknown run fails before the UI starts."""
        if self.scope.run is not None:
            rec = self._api.resolve_run(self.scope.run)
            self._records = {record_id(rec): rec}

    def _record(self, run: str) -> Any:
        rec = self._records.get(run)
        return rec if rec is not None else self._api.resolve_run(run)

    def snapshot(self) -> list[dict[str, Any]]:
        recs = self._select()
        statuses = list(self._api.fetch_status(recs)) if recs else []
        for st in statuses:
            st["mirror"] = self._mirror(str(st.get("run")))
        return statuses

    def _mirror(self, run: str) -> dict[str, Any]:
        """What the local mirror holds (mirror.json of the last pull) and who keeps it current."""
        from launcher.recover.mirror import mirror_dir

        try:
            info = json.loads((mirror_dir(run) / "mirror.json").read_text())
        except (OSError, ValueError):
            info = {}
        w = self._watchers.get(run)
        watcher = None
        if w is not None:
            watcher = "this dashboard" if w.lock.held else w.waiting_on
        return {"checkpoint": info.get("checkpoint"), "time": info.get("time"), "watcher": watcher}

    def watch(self, statuses: list[dict[str, Any]], say: Callable[[str], None]) -> None:
        if not self.watch_settings.enabled:
            return
        from launcher.recover.watcher import TERMINAL, Watcher

        for st in statuses:
            run = str(st.get("run"))
            w = self._watchers.get(run)
            if w is None:
                if st.get("state") in TERMINAL or run in self._given_up:
                    continue  # over (and pulled by whoever watched it): `nsa-launch pull` if wanted
                ws = self.watch_settings
                w = Watcher(
                    run, say, who="nsa-launch dashboard", pull_every_s=ws.pull_every_s,
                    lost_after_s=ws.lost_after_s,
                )  # fmt: skip
                self._watchers[run] = w
            w.say = say
            try:
                w.tick(st)
            except self._api.LaunchError as e:  # the replacement budget is spent: stop, say it once
                say(e.render())
                self._given_up.add(run)
            if run in self._given_up or (st.get("state") in TERMINAL and w.lock.held):
                w.close()  # a held lock: its final pull is done
                del self._watchers[run]

    def stream_log(self, run: str, last_n: int = 200) -> Iterator[str]:
        return iter(self._api.stream_log(self._record(run), follow=True, last_n=last_n))

    def metrics(self, run: str) -> list[dict[str, Any]]:
        return self._metrics.read(self._record(run))

    def kill(self, run: str) -> dict[str, Any]:
        rec = self._record(run)
        res = dict(self._api.kill_run(rec))
        if getattr(rec, "pod_id", None):  # kill stops the trainer, not a rented pod: say it bills on
            from launcher.providers.pods import still_billing

            res["billing"] = still_billing(rec.run)
        return res

    def restart(self, run: str) -> str:
        return record_id(self._api.restart_run(self._record(run)))

    def open_tunnel(self, run: str, port: int = 6006, live_only: bool = False) -> Tunnel:
        return self._api.open_tunnel(self._record(run), port=port, live_only=live_only)

    def gpu_processes(self, run: str) -> list[dict[str, Any]] | None:
        return self._api.gpu_processes(self._record(run))

    def kill_gpu_process(self, run: str, pid: int, node: int = 0) -> dict[str, Any]:
        return dict(self._api.kill_gpu_process(self._record(run), pid, node))


def record_id(record: Any) -> str:
    """The run id of a launcher RunRecord."""
    return str(record.run)
