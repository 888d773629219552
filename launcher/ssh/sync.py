"""Sync the project checkout to a host's workdir: rsync over the same SSH, sftp when rsync is missing.

Owns what is sent (the project tree, .gitignore respected at every level; .git, .venv, runs/,
checkpoints/ and other artifacts excluded and, with --delete, never removed on the host) and how:
rsync with the exact ssh argv of the verified connection (same host, port, user, key and
known_hosts, strict host key checking) through the shared master connection of launcher/ssh/openssh.py,
or paramiko's sftp as a fallback. It must not start or
stop anything on the host. Local runs need no sync: the workdir is the checkout itself.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.core.errors import RuntimeFailure
from launcher.ssh.openssh import shared_options
from launcher.ssh.transport import SSHTransport

EXCLUDES = (
    ".git",  # a directory, or in a git worktree a file naming the real one: neither is sent
    ".venv/",
    "runs/",
    "checkpoints/",
    "__pycache__/",
    "*.pyc",
    ".pytest_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    "*.egg-info/",
    "build/",
    "dist/",
    "wandb/",
)
_PROGRESS = re.compile(r"(\d+)%")


@dataclass
class SyncResult:
    method: str  # "rsync" | "sftp"
    seconds: float
    files_sent: int


def rsync_argv(src: Path, t: SSHTransport, workdir: str, *, progress: bool = False) -> list[str]:
    # --modify-window=-1: compare mtimes to the nanosecond, so a same-size edit made within the
    # second of the last sync is still sent (the default compares whole seconds).
    argv = ["rsync", "-a", "--delete", "--protect-args", "--modify-window=-1", "--filter=:- .gitignore"]
    argv += [f"--exclude={e}" for e in EXCLUDES]
    argv += ["--stats", "--out-format=%n"] + (["--info=progress2"] if progress else [])
    # ssh through the master that `status` and `logs` share (launcher/ssh/openssh.py): `up` leaves it behind
    argv += ["-e", shlex.join(t.ssh_argv() + shared_options(t.spec))]
    argv += [f"{src}/", f"{t.hostname}:{workdir}/"]
    return argv


def sync(
    src: Path,
    t: SSHTransport,
    workdir: str,
    *,
    host_has_rsync: bool = True,
    on_progress: Callable[[int], None] | None = None,
    timeout: float = 1800.0,
) -> SyncResult:
    """Make <workdir> on the host match `src` (delta). Raises RuntimeFailure with rsync's tail."""
    t0 = time.monotonic()
    t.run(f"mkdir -p -- {shlex.quote(workdir)}", timeout=30)
    if not (host_has_rsync and shutil.which("rsync")):
        n = sftp_sync(src, t, workdir)
        return SyncResult("sftp", time.monotonic() - t0, n)
    argv = rsync_argv(src, t, workdir, progress=on_progress is not None)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    sent = 0
    assert p.stdout is not None
    deadline = time.monotonic() + timeout
    for line in p.stdout:
        m = _PROGRESS.search(line) if on_progress else None
        if m and on_progress:
            on_progress(int(m.group(1)))
        elif _is_sent_file(line):
            sent += 1
        if time.monotonic() > deadline:
            p.kill()
            raise RuntimeFailure(
                f"rsync to {t.label} did not finish within {timeout:.0f} s", "check the link"
            )
    err = p.stderr.read() if p.stderr else ""
    if p.wait() != 0:
        tail = "\n".join(err.strip().splitlines()[-10:])
        raise RuntimeFailure(
            f"rsync to {t.label}:{workdir} failed (exit {p.returncode}):\n{tail}", rsync_fix(err, t)
        )
    return SyncResult("rsync", time.monotonic() - t0, sent)


def rsync_fix(err: str, t: SSHTransport) -> str:
    """The fix for what rsync (or the ssh under it) said, not one text for every failure."""
    if "Permission denied (publickey" in err or "Too many authentication failures" in err:
        keys = ", ".join(t.identities) or "ssh's default keys (~/.ssh/id_*)"
        return (
            f"the host refused the SSH key rsync offered ({keys}): make sure that key's .pub is in "
            f"~/.ssh/authorized_keys of {t.user} on the host, or point IdentityFile (ssh config) or "
            "-i KEY (in --host) at the authorized one"
        )
    if "Host key verification failed" in err:
        return (
            "the host key is not the known one: see `nsa-launch doctor --host ...` and --accept-new-host-key"
        )
    if "No space left on device" in err:
        return "free disk space on the host, or point host.workdir at a larger disk"
    if "Connection refused" in err or "Could not resolve" in err or "timed out" in err:
        return "check the host is up, the address/port are right and the network allows SSH"
    if "Permission denied" in err or "Read-only file system" in err:
        return f"{t.user} cannot write the workdir there: pick a writable host.workdir / --workdir"
    return "check the workdir is writable and there is free disk on the host"


def _is_sent_file(line: str) -> bool:
    """An --out-format=%n line naming a transferred file (not a dir, deletion or --stats line)."""
    line = line.rstrip("\n")
    if not line or line.endswith("/") or line.startswith(("deleting ", " ")):
        return False
    return not re.match(r"^(Number|Total|Literal|Matched|File list|sent |total size)", line)


def project_files(src: Path) -> list[str]:
    """Files to send, relative to src: git's view (tracked + untracked not ignored) when src is a git
    checkout, else every file outside the excluded dirs."""
    if (src / ".git").exists() and shutil.which("git"):
        out = subprocess.run(
            ["git", "-C", str(src), "ls-files", "-z", "-co", "--exclude-standard"],
            capture_output=True,
            timeout=60,
        )
        if out.returncode == 0:
            names = [n for n in out.stdout.decode().split("\0") if n]
            return [n for n in names if not _excluded(n) and (src / n).is_file()]
    files = []
    for root, dirs, names in os.walk(src):
        rel_root = os.path.relpath(root, src)
        dirs[:] = [d for d in dirs if not _excluded(os.path.normpath(os.path.join(rel_root, d)) + "/")]
        files += [os.path.normpath(os.path.join(rel_root, n)) for n in names]
    return [f for f in files if not _excluded(f)]


def _excluded(rel: str) -> bool:
    parts = rel.split("/")
    for e in EXCLUDES:
        if e.endswith("/") and e[:-1] in parts[:-1] + ([parts[-1]] if rel.endswith("/") else []):
            return True
        if e.startswith("*") and rel.endswith(e[1:]):
            return True
        if "/" not in e and not e.startswith("*") and e in parts:
            return True
    return False


def sftp_sync(src: Path, t: SSHTransport, workdir: str) -> int:
    """Upload files whose size or mtime differ (the host lacks rsync). Does not delete extra files."""
    sftp = t.sftp()
    made: set[str] = set()
    sent = 0
    for rel in project_files(src):
        local = src / rel
        remote = f"{workdir}/{rel}"
        st = local.stat()
        try:
            rst = sftp.stat(remote)
            if rst.st_size == st.st_size and int(rst.st_mtime or 0) == int(st.st_mtime):
                continue
        except OSError:
            pass
        parent = os.path.dirname(remote)
        if parent not in made:
            t.run(f"mkdir -p -- {shlex.quote(parent)}", timeout=30)
            made.add(parent)
        sftp.put(str(local), remote)
        sftp.utime(remote, (st.st_atime, st.st_mtime))
        sftp.chmod(remote, stat.S_IMODE(st.st_mode))
        sent += 1
    return sent
