"""The local run registry: which runs this machine launched, and where each one lives.

Owns the records under $NSA_LAUNCH_HOME/runs/<run>.json (default ~/.nsa-launch): run id -> profile,
the node hosts (as parsed HostSpecs), their absolute workdir / python / run dir, the non-secret env
and the names (never the values) of the secrets. Later commands (`status`, `logs`, `kill`, the
dashboard) need no host argument because of it. It must not contact any host.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from launcher.core.errors import LaunchError
from launcher.ssh.hosts import HostSpec

# fullmatch, never `$`: `$` matches before a trailing newline and --name $'x\n' made a run dir.
RUN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def home() -> Path:
    """The registry root: $NSA_LAUNCH_HOME, else ~/.nsa-launch."""
    return Path(os.environ.get("NSA_LAUNCH_HOME") or Path.home() / ".nsa-launch").expanduser()


def runs_dir() -> Path:
    return home() / "runs"


def mirror_dir(run: str) -> Path:
    """Where `pull` and `watch` mirror a run (launcher/recover/mirror.py); here, below both the
    recovery code and the run commands (`status` names the mirror's checkpoint of a lost run)."""
    return home() / "mirror" / run


def check_run_name(name: str) -> str:
    if not isinstance(name, str) or not RUN_NAME_RE.fullmatch(name):
        raise LaunchError(
            f"--name {name[:100]!r} is not a valid run name: it becomes a directory and the tmux session nsa-<name>",
            "use 1-64 letters, digits, '-' or '_', starting with a letter or digit (e.g. --name m7c-lr3e4)",
        )
    return name


@dataclass
class NodeRecord:
    """One node of a run: where it runs and with what."""

    host: HostSpec
    workdir: str
    python: str
    run_dir: str

    @property
    def label(self) -> str:
        return self.host.label

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["host"] = self.host.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeRecord:
        return cls(HostSpec.from_dict(d["host"]), d["workdir"], d["python"], d["run_dir"])


@dataclass
class RunRecord:
    """A run launched from this machine. `host` / `run_dir` are node 0's."""

    run: str
    profile: str
    created: float
    nodes: list[NodeRecord]
    config: str = ""
    overrides: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    tmux_socket: str | None = None
    total_steps: int | None = None
    stall_seconds: float = 300.0
    kill_grace_s: float = 3.0
    first_heartbeat_timeout_s: float = 900.0
    provider: str | None = None  # "prime" when `up --provision` rented the host
    pod_id: str | None = None  # the pod the run is on now (launcher/providers/pods.py keeps its cost)
    workdir_arg: str | None = None  # --workdir as given (a replacement host resolves it anew)
    profile_file: str | None = None  # absolute path when the profile was given as a .yaml (not a name)

    @property
    def host(self) -> str:
        return self.nodes[0].label

    @property
    def run_dir(self) -> str:
        return self.nodes[0].run_dir

    @property
    def is_local(self) -> bool:
        return all(n.host.is_local for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = [n.to_dict() for n in self.nodes]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        d = dict(d)
        d["nodes"] = [NodeRecord.from_dict(n) for n in d["nodes"]]
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


def save(rec: RunRecord) -> Path:
    from nsa.runfiles import atomic_write_json  # here: reading the registry (status) never needs it

    path = runs_dir() / f"{rec.run}.json"
    atomic_write_json(path, rec.to_dict())
    return path


def remove(run: str) -> None:
    (runs_dir() / f"{run}.json").unlink(missing_ok=True)


def exists(run: str) -> bool:
    return (runs_dir() / f"{run}.json").exists()


def load(run: str) -> RunRecord | None:
    path = runs_dir() / f"{run}.json"
    try:
        return RunRecord.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise LaunchError(
            f"run record {path} is damaged ({e})", f"delete {path} to forget that run"
        ) from None


def all_runs() -> list[RunRecord]:
    """Every remembered run, newest first; damaged records are skipped."""
    out = []
    d = runs_dir()
    if d.is_dir():
        for p in d.glob("*.json"):
            try:
                out.append(RunRecord.from_dict(json.loads(p.read_text())))
            except (json.JSONDecodeError, KeyError, TypeError, OSError):
                continue
    out.sort(key=lambda r: r.created, reverse=True)
    return out
