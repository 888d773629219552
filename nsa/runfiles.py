"""The run-dir contract: the one seam between the trainer (writer) and the launcher (reader).

This module owns the file names inside a run dir and the shapes of the records in them, plus the
small atomic read/write helpers both sides use. It is torch-free and imports nothing from `launcher`
or from the rest of `nsa`, so the launcher's host agent can read a run dir on a host that only has
the standard library and PyYAML. Documented for humans in docs/run-dir.md; keep the two in step.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# --- names inside <run-dir>/ -------------------------------------------------------------------
MANIFEST = "manifest.json"  # written by the launcher before start
TRAIN_MANIFEST = "train_manifest.json"  # written by the trainer at boot: versions, git sha, masked env
CONFIG = "config.yaml"  # the resolved config the trainer actually uses
TRAIN_LOG = "train.log"  # everything torchrun printed (tee'd by the wrapper)
METRICS = "metrics.jsonl"  # rank 0, one record per log step
EVENTS = "events.jsonl"  # boot, first_step, checkpoint, eval, stalled, error, finished, ...
HEARTBEAT_DIR = "heartbeat"  # heartbeat/rank<N>.json, overwritten atomically
STACKS_DIR = "stacks"  # per-rank stack dumps (watchdog, SIGUSR1)
CHECKPOINTS_DIR = "checkpoints"  # step-<N>/ and a `latest` pointer file
LATEST = "latest"  # inside checkpoints/: text file holding the name of the newest complete step dir
CHECKPOINT_MANIFEST = (
    "manifest.json"  # inside checkpoints/step-<N>/, written last: every file's size + sha256
)
TB_DIR = "tb"  # TensorBoard event files
EXIT_CODE = "exit_code"  # written by the wrapper when torchrun ends: an integer and a newline
KILLED = "killed"  # written by the agent when nsa-launch killed the run (JSON: time, by)
# Written by the agent before it signals a run: the wrapper's restart loop must not restart a run
# that is being stopped (torchrun exits 1, not 143, when it is SIGTERMed itself).
STOP_REQUESTED = "stop_requested"

EVENT_KINDS = (
    "boot",
    "first_step",
    "checkpoint",
    "eval",
    "stalled",
    "error",
    "finished",
    "resumed",
    "sigterm",
    "checkpoint_fallback",
)
PHASES = ("boot", "data_wait", "forward_backward", "optimizer", "checkpoint", "eval", "done")
RUN_STATES = ("starting", "running", "stalled", "finished", "failed", "killed", "lost")

# Exit codes of one nsa-train rank (torchrun reports the first failing rank's).
EXIT_OK = 0
EXIT_FAILED = 1  # runtime failure: diverged loss, exception (an `error` event says which)
EXIT_BAD_INPUT = 2  # config, --set, CONFIG, NSA_FAULT, data source, resume mismatch
EXIT_STALLED = 3  # the watchdog aborted a stalled rank (telemetry.stall_abort)
EXIT_SIGTERM = 143  # 128 + SIGTERM, after a `sigterm` event


def heartbeat_name(rank: int) -> str:
    return f"rank{rank}.json"


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


_STEP_DIR = re.compile(r"step-(\d+)")


def checkpoint_step(name: str) -> int | None:
    """The step of a `step-<N>` directory name, or None for anything else (`.tmp-*`, `latest`, and a
    pull's `.pull-*` pin: hard links to a checkpoint the trainer may prune, never one to resume from,
    list or prune; launcher/recover/mirror.py)."""
    m = _STEP_DIR.fullmatch(name)
    return int(m.group(1)) if m else None


def stack_dump_name(rank: int, reason: str, unix_time: float) -> str:
    """stacks/ file of one dump: reason is `stalled` (watchdog); SIGUSR1 appends to sigusr1_name."""
    return f"rank{rank}-{reason}-{int(unix_time)}.txt"


def sigusr1_name(rank: int) -> str:
    return f"rank{rank}-sigusr1.txt"


@dataclass
class Heartbeat:
    """One rank's liveness record, rewritten atomically every step and during long phases."""

    rank: int
    step: int
    time: float
    pid: int
    phase: str
    host: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Heartbeat:
        return cls(
            rank=int(d["rank"]),
            step=int(d["step"]),
            time=float(d["time"]),
            pid=int(d["pid"]),
            phase=str(d.get("phase", "")),
            host=str(d.get("host", "")),
        )


@dataclass
class Event:
    """One line of events.jsonl."""

    kind: str
    time: float
    step: int | None = None
    rank: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


# --- atomic file helpers ------------------------------------------------------------------------
def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = False) -> None:
    """Write `text` to `path` so that readers see either the old or the new file, never a torn one.
    durable=True also fsyncs the file's bytes before the rename and the directory entry after it, so
    the new file survives a power loss (`durable_write_text`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_path(path.parent, directory=True)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, sort_keys=True) + "\n")


def append_jsonl(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append one record as a single write (one line), so concurrent readers never see half a line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """The parsed file, or None when it is absent or (being replaced) unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError, NotADirectoryError):
        return None


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Complete records of a jsonl file; a torn last line (writer mid-append) is skipped."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec


def tail_jsonl(path: str | os.PathLike[str], max_bytes: int = 65536) -> list[dict[str, Any]]:
    """Complete records from the last `max_bytes` of a jsonl file: never reads a huge file whole."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return []
    if start > 0:
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else b""
    out = []
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is incomplete
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


# --- checkpoint manifests ----------------------------------------------------------------------
def file_sha256(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fsync_path(path: str | os.PathLike[str], *, directory: bool = False) -> None:
    """Flush a file's data (or a directory's entries) to the disk. Durable means fsynced: a manifest
    that verifies bytes the disk never got is worse than none after a power loss."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_write_text(path: str | os.PathLike[str], text: str) -> None:
    """atomic_write_text, fsynced: the file's bytes, then the directory entry of the rename."""
    atomic_write_text(path, text, durable=True)


# The files a checkpoint of an older manifest (one without `required`) must list all the same: the
# step's metadata and at least one rank's data-loader state; the host of rank 0 also holds the weights
# and the optimizer. A manifest that omits one of them is not intact, whatever it verifies.
def _floor_problem(files: dict[str, Any]) -> str | None:
    if "meta.json" not in files:
        return "meta.json"
    if not any(re.fullmatch(r"rank\d+\.pt", f) for f in files):
        return "rank<N>.pt (the data-loader state)"
    if "rank0.pt" in files:
        return next((f for f in ("model.pt", "optim.pt") if f not in files), None)
    return None


def write_checkpoint_manifest(
    ckpt_dir: str | os.PathLike[str], step: int, required: list[str] | None = None, *, durable: bool = False
) -> dict[str, Any]:
    """Hash every file of a checkpoint dir (recursively) and write manifest.json into it, last.

    Called once every other file of the checkpoint is complete; a dir without a manifest, or whose
    files disagree with it, is not a checkpoint anyone may resume from (`verify_checkpoint`).
    `required` names the files this checkpoint must hold (default: every file present); one that is
    absent raises FileNotFoundError here, and verification refuses a manifest that does not list it.
    `durable`: the manifest is fsynced (its data files must have been fsynced by their writers).
    """
    root = Path(ckpt_dir)
    files: dict[str, dict[str, Any]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel != CHECKPOINT_MANIFEST:
            files[rel] = {"size": p.stat().st_size, "sha256": file_sha256(p)}
    need = sorted(files) if required is None else sorted(required)
    absent = [f for f in need if f not in files]
    if absent:
        raise FileNotFoundError(f"{root}: required checkpoint file(s) {', '.join(absent)} were not written")
    manifest = {"step": int(step), "time": time.time(), "required": need, "files": files}
    write = durable_write_text if durable else atomic_write_text
    write(root / CHECKPOINT_MANIFEST, json.dumps(manifest, sort_keys=True) + "\n")
    return manifest


def verify_checkpoint(path: str | os.PathLike[str], *, hashes: bool = True) -> str | None:
    """None when the checkpoint dir is intact, else one line naming the bad file and what is wrong.

    Intact: manifest.json parses, it lists every file of its `required` set (a manifest without one:
    meta.json, a rank<N>.pt and, beside rank0.pt, model.pt and optim.pt), and every file it lists
    exists with the recorded size (and, with `hashes`, the recorded sha256). Files the manifest does
    not list are ignored (a later copy may add nothing it needs). `hashes=False` is the cheap check
    (sizes only) for frequent callers.
    """
    root = Path(path)
    if not root.is_dir():
        return f"{root}: not a directory"
    man = root / CHECKPOINT_MANIFEST
    try:
        data = json.loads(man.read_text())
    except FileNotFoundError:
        return f"{man}: missing (the save never finished, or the checkpoint predates manifests)"
    except (OSError, ValueError) as e:
        return f"{man}: unreadable ({e})"
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not files:
        return f"{man}: lists no files"
    required = data.get("required")
    if required is None:
        lacking = _floor_problem(files)
    elif not isinstance(required, list) or not all(isinstance(f, str) for f in required):
        return f"{man}: `required` is not a list of file names"
    else:
        lacking = next((f for f in required if f not in files), None)
    if lacking is not None:
        return f"{man}: does not list the required file {lacking} (an incomplete save)"
    for rel, rec in sorted(files.items()):
        f = root / rel
        try:
            size = f.stat().st_size
        except FileNotFoundError:
            return f"{f}: missing"
        except OSError as e:
            return f"{f}: unreadable ({e.strerror})"
        want = rec.get("size") if isinstance(rec, dict) else None
        if size != want:
            return f"{f}: {size} bytes, the manifest says {want} (truncated or rewritten)"
        if hashes:
            try:
                digest = file_sha256(f)
            except OSError as e:
                return f"{f}: unreadable ({e.strerror})"
            if digest != rec.get("sha256"):
                return f"{f}: sha256 differs from the manifest (corrupt)"
    return None


def checkpoint_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of every file under a checkpoint dir (0 when it is gone)."""
    total = 0
    for p in Path(path).rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            continue
    return total


# --- the run dir as an object -------------------------------------------------------------------
class RunDir:
    """Paths and typed readers/writers for one run dir. Creating the object touches no file."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    # paths
    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def train_manifest(self) -> Path:
        return self.root / TRAIN_MANIFEST

    @property
    def config(self) -> Path:
        return self.root / CONFIG

    @property
    def train_log(self) -> Path:
        return self.root / TRAIN_LOG

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def events(self) -> Path:
        return self.root / EVENTS

    @property
    def heartbeat_dir(self) -> Path:
        return self.root / HEARTBEAT_DIR

    @property
    def stacks_dir(self) -> Path:
        return self.root / STACKS_DIR

    @property
    def checkpoints_dir(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    @property
    def tb_dir(self) -> Path:
        return self.root / TB_DIR

    @property
    def exit_code_file(self) -> Path:
        return self.root / EXIT_CODE

    @property
    def killed_file(self) -> Path:
        return self.root / KILLED

    @property
    def stop_requested_file(self) -> Path:
        return self.root / STOP_REQUESTED

    def heartbeat_path(self, rank: int) -> Path:
        return self.heartbeat_dir / heartbeat_name(rank)

    # writers (trainer side)
    def write_heartbeat(self, hb: Heartbeat) -> None:
        atomic_write_json(self.heartbeat_path(hb.rank), asdict(hb))

    def append_event(
        self, kind: str, step: int | None = None, rank: int | None = None, **detail: Any
    ) -> None:
        rec: dict[str, Any] = {"kind": kind, "time": time.time()}
        if step is not None:
            rec["step"] = step
        if rank is not None:
            rec["rank"] = rank
        if detail:
            rec["detail"] = detail
        append_jsonl(self.events, rec)

    def append_metrics(self, record: dict[str, Any]) -> None:
        append_jsonl(self.metrics, record)

    # readers (launcher side)
    def heartbeats(self) -> dict[int, Heartbeat]:
        out: dict[int, Heartbeat] = {}
        if not self.heartbeat_dir.is_dir():
            return out
        for p in sorted(self.heartbeat_dir.glob("rank*.json")):
            d = read_json(p)
            if isinstance(d, dict):
                try:
                    hb = Heartbeat.from_dict(d)
                except (KeyError, TypeError, ValueError):
                    continue
                out[hb.rank] = hb
        return out

    def last_metrics(self) -> dict[str, Any] | None:
        recs = tail_jsonl(self.metrics, 16384)
        return recs[-1] if recs else None

    def exit_code(self) -> int | None:
        try:
            return int(self.exit_code_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint dir named by checkpoints/latest, or None."""
        try:
            name = (self.checkpoints_dir / LATEST).read_text().strip()
        except FileNotFoundError:
            return None
        p = self.checkpoints_dir / name
        return p if name and p.is_dir() else None

    def checkpoints(self) -> list[Path]:
        """Every `step-<N>` dir under checkpoints/, newest step first, intact or not."""
        try:
            entries = list(self.checkpoints_dir.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        steps = [(checkpoint_step(p.name), p) for p in entries if p.is_dir()]
        return [p for s, p in sorted(((s, p) for s, p in steps if s is not None), reverse=True)]

    def intact_checkpoints(self, *, hashes: bool = True) -> list[Path]:
        """The `step-<N>` dirs that pass `verify_checkpoint`, newest first."""
        return [p for p in self.checkpoints() if verify_checkpoint(p, hashes=hashes) is None]

    def newest_intact_checkpoint(self, *, hashes: bool = True) -> Path | None:
        """The newest checkpoint that verifies (whatever `latest` says), or None."""
        for p in self.checkpoints():
            if verify_checkpoint(p, hashes=hashes) is None:
                return p
        return None


# --- why a run failed ---------------------------------------------------------------------------
# torchrun's summary of the first failing rank (its "Root Cause (first observed failure)" block).
_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):\s*\[\d+\]:\s*"
    r"time\s*:\s*(?P<time>\S+)\s*host\s*:\s*(?P<host>\S+)\s*"
    r"rank\s*:\s*(?P<rank>-?\d+)\s*\(local_rank:\s*(?P<local>-?\d+)\)\s*"
    r"exitcode\s*:\s*(?P<code>-?\d+)"
)
# One entry of torchrun's failure summary (under "Failures:" or "Root Cause").
_FAILURE = re.compile(
    r"\[\d+\]:\s*time\s*:\s*\S+\s*host\s*:\s*(?P<host>\S+)\s*"
    r"rank\s*:\s*(?P<rank>-?\d+)\s*\(local_rank:\s*-?\d+\)\s*exitcode\s*:\s*(?P<code>-?\d+)"
)
_ENOSPC = re.compile(r"No space left on device|ENOSPC|\[Errno 28\]")
_ENOSPC_PATH = re.compile(r"No space left on device: '([^']+)'")
# With no ENOSPC text (on a full disk the trainer's traceback and train.log writes fail too), a failed
# run whose filesystem has no room for one more checkpoint (the newest one's size plus 5% and this
# margin, the trainer's own check before a save) is reported as disk full.
DISK_MARGIN_MB = 16


def disk_need_mb(rd: RunDir) -> float:
    """MB the run needs free to save once more: its newest checkpoint's size plus 5% and a margin."""
    done = rd.checkpoints()
    return (checkpoint_bytes(done[0]) if done else 0) * 1.05 / 2**20 + DISK_MARGIN_MB


def read_tail(path: str | os.PathLike[str], max_bytes: int = 65536) -> str:
    """The last `max_bytes` of a text file ('' when absent), decoded leniently."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def torchrun_root_cause(text: str) -> dict[str, Any] | None:
    """The first failing rank from torchrun's last failure summary: {rank, host, exitcode}, or None.

    torchrun's "Root Cause" is the failure it observed first, which is not always the first to
    happen: a SIGKILLed rank writes no error file, so it is timestamped when the agent notices it,
    after its peers have already raised gloo/NCCL "Connection reset" errors of their own. So a rank
    killed by a signal (other than the SIGTERM torchrun sends the survivors) listed under "Failures:"
    of the same summary is the cause. Likewise a rank that stopped on purpose (the watchdog's
    EXIT_STALLED, EXIT_BAD_INPUT) outranks a Root Cause that exited 1: its peers, blocked in a
    collective, fail with "Connection closed by peer" in the same instant and may be observed first.
    """
    found = list(_ROOT_CAUSE.finditer(text))
    if not found:
        return None
    m = found[-1]
    root = {"rank": int(m["rank"]), "host": m["host"], "exitcode": int(m["code"])}
    start = text.rfind("Failures:", 0, m.start())
    if root["exitcode"] > 0 and start >= 0:
        failures = [
            {"rank": int(o["rank"]), "host": o["host"], "exitcode": int(o["code"])}
            for o in _FAILURE.finditer(text, start, m.start())
        ]
        # torchrun SIGTERMs the ranks still alive when one fails: those signals are its own.
        own = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        for f in failures:
            if f["exitcode"] < 0 and -f["exitcode"] not in own:
                return f
        if root["exitcode"] == EXIT_FAILED:
            for f in failures:
                if f["exitcode"] in (EXIT_STALLED, EXIT_BAD_INPUT):
                    return f
    return root


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def disk_free(path: str | os.PathLike[str]) -> tuple[Path, float, float] | None:
    """(the nearest existing ancestor, MB free, MB total) of `path`'s filesystem, or None."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        u = shutil.disk_usage(p)
    except OSError:
        return None
    return p, u.free / 2**20, u.total / 2**20


def disk_full_cause(rd: RunDir, text: str) -> str | None:
    """`disk full: PATH: N MB free of M MB` when the text shows ENOSPC or the run dir's disk is full."""
    m = _ENOSPC_PATH.search(text)
    path = Path(m.group(1)) if m else rd.root
    df = disk_free(path)
    if df is None:
        return None
    where, free, total = df
    if not (_ENOSPC.search(text) or free < disk_need_mb(rd)):
        return None
    return (
        f"disk full: {path} ({where} has {free:.1f} MB free of {total:.0f} MB; No space left on device). "
        "Fix: free space there (old runs, fewer checkpoints: train.keep_last), then restart"
    )


def _who(ev: dict[str, Any]) -> str:
    """Who said an event: "rank N", or "the trainer" for one written before (or without) a rank."""
    return "the trainer" if ev.get("rank") is None else f"rank {ev['rank']}"


def _event_text(ev: dict[str, Any]) -> str:
    d = ev.get("detail") or {}
    if ev.get("kind") == "stalled":
        return f"stalled in phase {d.get('phase')!r} at step {ev.get('step')} (no progress for {d.get('idle_s')}s)"
    what = ": ".join(str(d[k]) for k in ("error", "message") if d.get(k))
    return f"{what or ev.get('kind')} at step {ev.get('step')}"


def failure_cause(rd: RunDir, exit_code: int | None = None, log_text: str | None = None) -> str | None:
    """One line saying why a failed run failed, from the run dir alone (torch-free, never raises on
    run text): disk full (path, MB free); else torchrun's first failing rank with its exit code or
    signal (SIGKILL: likely out of memory) and that rank's own `error`/`stalled` event (a rank that
    exited by itself without one: the first peer's); else the first `error` event; else the exit code. None when there is nothing to say (exit 0)."""
    text = read_tail(rd.train_log) if log_text is None else log_text
    events = tail_jsonl(rd.events, 65536)
    errors = [e for e in events if e.get("kind") in ("error", "stalled")]
    text_all = text + "\n" + "\n".join(json.dumps(e.get("detail") or {}) for e in errors)
    disk = disk_full_cause(rd, text_all)
    if disk:
        return _one_line(disk)
    root = torchrun_root_cause(text)
    if root is not None:
        r, code = root["rank"], root["exitcode"]
        own = next((e for e in errors if e.get("rank") == r), None)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            line = f"rank {r} on {root['host']} was killed by {name} (exit code {code})"
            if -code == signal.SIGKILL:
                line += ": likely out of memory (the kernel's OOM killer; see `dmesg`), or a kill -9"
        else:
            meaning = {
                EXIT_FAILED: "runtime failure",
                EXIT_BAD_INPUT: "bad input",
                EXIT_STALLED: "stalled and aborted (telemetry.stall_abort)",
                EXIT_SIGTERM: "SIGTERM",
            }.get(code, "")
            line = f"rank {r} on {root['host']} exited with code {code}" + (
                f" ({meaning})" if meaning else ""
            )
        if own is not None:
            line += f"; {_event_text(own)}"
        elif errors and code >= 0:
            # A rank that exited by itself but said nothing stopped because a peer said why (a NaN loss
            # is all-reduced and reported by rank 0). A signalled rank's peers only report its death.
            line += f"; {_who(errors[0])}: {_event_text(errors[0])}"
        return _one_line(line)
    if errors:
        first = errors[0]
        return _one_line(f"{_who(first)}: {_event_text(first)}")
    if exit_code:
        return f"torchrun exited with code {exit_code} and no rank said why; see train.log"
    return None
