"""Copying a run's files between a host and this machine, durably: rsync with a stall timeout, resumed
transfers, and fsync before anything points at what was copied.

Owns `rsync_pull` / `rsync_push` (over the run's verified SSH, or a local copy for local runs) and
`fsync_tree`. A transfer is not bounded by a fixed wall-clock limit (a big checkpoint over a slow link
may take long) but by bytes moved: rsync that moves nothing for `STALL_S` is stopped. A transfer cut
off mid-way keeps what it moved in rsync's --partial-dir and is retried while each try makes
progress; after the last try the caller removes its temporary directory. Used by launcher/recover/mirror.py;
it must not decide what to copy.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from launcher.core.errors import RuntimeFailure
from launcher.ssh.transport import SSHTransport, Transport

STALL_S = 120.0  # no byte moved for this long: the transfer is stuck (a dead link, a hung host)
TRIES = 3  # tries of one transfer, while each one moves bytes
PARTIAL_DIR = ".rsync-partial"
_NO_SPACE = ("No space left on device", "ENOSPC", "Disk quota exceeded")
# rsync's receiver (this machine, on a pull) refused a write: not the host's fault, not a full disk.
_NOT_WRITABLE = re.compile(r"\[(?:receiver|generator)\].*(?:Read-only file system|Permission denied)")


def _ssh_e(t: SSHTransport) -> list[str]:
    from launcher.ssh.openssh import shared_options

    return ["-e", shlex.join(t.ssh_argv() + shared_options(t.spec))]


def bytes_under(path: Path) -> int:
    """Bytes of every file under path (hidden ones too: rsync's temporary and partial files)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


@contextlib.contextmanager
def _held_interrupts() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held while rsync is spawned, then acted on as they would have been.
    One landing inside Popen (after its fork, before it returns: KeyboardInterrupt from the handler)
    left the rsync running with no handle to stop it, copying into the mirror after `pull` said it
    stopped (test_qa_recover_pull's SIGTERM tests, which signal within a millisecond of the spawn,
    hit it in about one run of two). Off the main thread signals are not taken: nothing to hold.
    Handlers, not the signal mask as providers/pods.py's `_deferred_signals` holds them: a blocked
    mask is inherited through fork and exec, and rsync would start deaf to SIGINT and SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    sigs = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if callable(signal.getsignal(s))]
    old = {s: signal.signal(s, lambda n, f: held.append((n, f))) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if held:
            old[held[0][0]](*held[0])  # raises KeyboardInterrupt where the caller's try now sees it


def _run_watched(argv: list[str], dest: Path | None, stall_s: float) -> tuple[int, str]:
    """Run rsync; stop it when nothing under `dest` grew for `stall_s` (a push watches rsync's own
    --timeout only). Returns (exit code, stderr); a stopped transfer reads as exit 30 (rsync's own
    code for a timeout in data send/receive)."""
    p: subprocess.Popen[str] | None = None
    last, moved_at = -1, time.monotonic()
    try:
        with _held_interrupts():
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while True:
            try:
                _, err = p.communicate(timeout=1.0)
                return p.returncode, err
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            size = bytes_under(dest) if dest is not None else 0
            if size != last:
                last, moved_at = size, now
            elif dest is not None and now - moved_at > stall_s:
                p.kill()
                _, err = p.communicate()
                return 30, f"{err}\nno byte moved for {stall_s:.0f} s; the transfer was stopped".strip()
    except BaseException:
        if p is not None:
            p.kill()
            p.wait()
        raise


def no_space(text: str) -> bool:
    return any(s in text for s in _NO_SPACE)


def rsync_pull(
    t: Transport, remote: list[str], dest: Path, *, stall_s: float | None = None, name: str | None = None
) -> None:
    """rsync remote paths (absolute, on t; local paths for local runs) into dest/, keeping their names.
    Retries while a try moves bytes; raises RuntimeFailure naming the files (or `name`: what they
    are, e.g. the checkpoint a pin holds) and rsync's last words."""
    stall_s = STALL_S if stall_s is None else stall_s
    dest.mkdir(parents=True, exist_ok=True)
    argv = [
        "rsync",
        "-a",
        "--ignore-missing-args",
        f"--partial-dir={PARTIAL_DIR}",
        f"--timeout={int(stall_s)}",
    ]
    if isinstance(t, SSHTransport):
        argv += ["--protect-args", *_ssh_e(t), *(f"{t.hostname}:{p}" for p in remote)]
    else:
        argv += list(remote)
    argv.append(f"{dest}/")
    for attempt in range(1, TRIES + 1):
        before = bytes_under(dest)
        code, err = _run_watched(argv, dest, stall_s)
        if code == 0:
            return
        if no_space(err) or bytes_under(dest) <= before or attempt == TRIES:
            break  # no progress (or a full disk): another try would do the same
    if no_space(err):  # what it moved only fills the disk further
        shutil.rmtree(dest / PARTIAL_DIR, ignore_errors=True)
    names = name or ", ".join(Path(r.rstrip("/")).name for r in remote)
    if no_space(err):
        fix = "free space on this machine (the mirror is under $NSA_LAUNCH_HOME), then `nsa-launch pull`"
    elif _NOT_WRITABLE.search(err):
        fix = f"make {dest} writable on this machine (or set $NSA_LAUNCH_HOME to a writable disk), then pull again"
    else:
        fix = "check the host is reachable (`nsa-launch status`), then `nsa-launch pull` again"
    raise RuntimeFailure(
        f"pulling {names} from {t.label} failed (rsync exit {code}, {attempt} tries): {err.strip()[-500:]}",
        fix,
    )


def rsync_push(t: Transport, local: list[str], dest: str, *, stall_s: float | None = None) -> None:
    """rsync local paths into dest/ on t (a run dir on a replacement host)."""
    stall_s = STALL_S if stall_s is None else stall_s
    argv = ["rsync", "-a", f"--timeout={int(stall_s)}"]
    if isinstance(t, SSHTransport):
        argv += ["--protect-args", *_ssh_e(t), *local, f"{t.hostname}:{dest}/"]
    else:
        argv += [*local, f"{dest}/"]
    code, err = _run_watched(argv, None, stall_s)
    if code != 0:
        raise RuntimeFailure(
            f"pushing {', '.join(Path(p).name for p in local)} to {t.label} failed (rsync exit {code}): "
            f"{err.strip()[-500:]}",
            "check the new host, then retry",
        )


def fsync_tree(path: Path) -> None:
    """fsync every file under path, then each directory bottom-up: the bytes and the names are on
    disk before anything (a rename, a `latest` pointer) makes them count."""
    for root, _dirs, files in os.walk(path, topdown=False):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_write_text(path: Path, text: str) -> None:
    """Write path atomically (temp file + rename) with the file and its directory fsynced."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
