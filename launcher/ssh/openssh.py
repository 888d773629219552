"""Read-only host calls over the system OpenSSH client, sharing one connection across processes.

Owns SSH connection multiplexing: the control sockets (ControlMaster=auto, ControlPersist) in a 0700
directory under $NSA_LAUNCH_HOME/ssh, the OpenSSHTransport that runs a command through them, telling
ssh's own failures from the command's, and stopping masters. A cold `nsa-launch status` then pays
neither the paramiko import nor, while a master lives, an SSH handshake. The host-key policy is
transport.openssh_argv's (BatchMode, StrictHostKeyChecking=yes, the same ssh config and
known_hosts), so a master only ever exists for a verified host. Only commands that are safe to run
twice come here (status, logs): when ssh fails for a reason other than an unreachable host (a
refused or unknown host key, a failed login, a broken master), the command runs again over the
paramiko transport, whose errors name the fix. rsync (launcher/ssh/sync.py) runs through the same
master, so `up` leaves one behind for the `status` that follows. NSA_LAUNCH_SSH_MUX=0 turns all of
it off. This module must not import paramiko or fabric: avoiding that import is half of its point.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.core.errors import RuntimeFailure
from launcher.run.registry import home
from launcher.ssh.hosts import HostSpec
from launcher.ssh.transport import Result, Transport, _short, openssh_argv

if TYPE_CHECKING:
    from launcher.ssh.forward import LocalForward

ENV = "NSA_LAUNCH_SSH_MUX"
PERSIST_S = 300  # an idle master exits after this; `status` in a loop keeps it alive
# sun_path holds 108 bytes on Linux, 104 on macOS, and ssh binds the master to "<path>.<16 random
# chars>" before renaming it: keep the path itself to 86 bytes.
_SOCK_MAX = 104 - 1 - 17
_SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")  # no %-tokens, quotes or spaces for ssh to reinterpret
# ssh's messages for a host it could not reach at all: the same verdict as paramiko's "cannot reach".
_UNREACHABLE = (
    "Connection refused",
    "Connection timed out",
    "timed out during banner exchange",
    "No route to host",
    "Network is unreachable",
    "Could not resolve hostname",
    "Name or service not known",
    "Temporary failure in name resolution",
)
_SSH_FAILED = 255  # ssh's own exit status: connection, host key, login or master trouble


def enabled() -> bool:
    """Multiplexing is on unless NSA_LAUNCH_SSH_MUX=0, and needs an `ssh` binary."""
    flag = os.environ.get(ENV, "1").strip().lower()
    return flag not in ("0", "no", "false", "off") and shutil.which("ssh") is not None


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _private_dir(path: Path) -> bool:
    """Create `path` 0700 if missing; True only if it is a real directory of ours that nobody else can
    enter, in a parent of ours that nobody else can write (else our directory could be swapped for
    theirs): a socket there lets whoever opens it run commands on the host as us."""
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(mode=0o700, parents=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        parent, st = path.parent.lstat(), path.lstat()
    except OSError:
        return False
    me = os.geteuid()
    if not (stat.S_ISDIR(st.st_mode) and st.st_uid == me and stat.S_ISDIR(parent.st_mode)):
        return False
    if parent.st_uid != me or parent.st_mode & 0o022:
        return False
    if st.st_mode & 0o077:
        try:
            path.chmod(0o700)
        except OSError:
            return False
    return True


def control_dirs(root: Path | None = None) -> list[Path]:
    """Where this registry's sockets live: <home>/ssh, and a short fallback under /tmp for a home whose
    path is too long for a unix socket (pytest's tmp dirs are)."""
    root = home() if root is None else root
    short = Path("/tmp") / f"nsa-ssh-{os.geteuid()}" / _digest(str(root))[:10]
    return [root / "ssh", short]


def control_path(spec: HostSpec) -> str | None:
    """The socket for `spec`, or None when no safe place exists (then the caller uses paramiko).

    Named by a hash of everything that decides which host and which checks the connection gets (the
    spec, its ssh config file and that file's mtime), not by ssh's %C (user, host, port only): a
    different ssh config or known_hosts for the same address must not ride an existing master.
    """
    cfg = Path(spec.ssh_config) if spec.ssh_config else Path("~/.ssh/config").expanduser()
    try:
        cfg_mtime = cfg.stat().st_mtime_ns
    except OSError:
        cfg_mtime = None
    root = home()
    name = _digest(str(root), spec.host, spec.user, spec.port, spec.key_filename, spec.ssh_config, cfg_mtime)[
        :16
    ]
    for d in control_dirs(root):
        path = str(d / name)
        if len(path.encode()) <= _SOCK_MAX and _SAFE_PATH.fullmatch(path) and _private_dir(d):
            return path
    return None


def master_options(control_path: str) -> list[str]:
    """ssh options that use (or start) the master on `control_path`. No tty, X11, agent or port
    forwards of the config on it: just commands. A host that vanishes without a reset takes its
    master down within 30 s (ServerAlive)."""
    opts = ["-T", "-x", "-a"]
    for k, v in {
        "ClearAllForwardings": "yes",
        "ControlMaster": "auto",
        "ControlPath": control_path,
        "ControlPersist": str(PERSIST_S),
        "ServerAliveInterval": "10",
        "ServerAliveCountMax": "3",
    }.items():
        opts += ["-o", f"{k}={v}"]
    return opts


def shared_options(spec: HostSpec) -> list[str]:
    """`master_options` for `spec` when multiplexing is on and usable, else []: what rsync adds to its
    ssh argv so that `up` leaves the master a later `status` reuses."""
    path = control_path(spec) if not spec.is_local and enabled() else None
    return master_options(path) if path else []


def reader(spec: HostSpec, fallback: Callable[[], Transport]) -> OpenSSHTransport | None:
    """An OpenSSHTransport for `spec`, or None when multiplexing is off or cannot be used here."""
    if spec.is_local or not enabled():
        return None
    path = control_path(spec)
    return OpenSSHTransport(spec, path, fallback) if path else None


def _ssh_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else "ssh exited with 255 and said nothing"


def _unreachable(stderr: str) -> bool:
    return any(s in stderr for s in _UNREACHABLE)


class OpenSSHTransport(Transport):
    """`ssh` through a shared master connection. For read-only commands only: on ssh's own failure
    (exit 255) that is not an unreachable host, the command runs again over `fallback()`."""

    def __init__(self, spec: HostSpec, control_path: str, fallback: Callable[[], Transport]):
        self.spec = spec
        self.control_path = control_path
        self._fallback = fallback
        self._base = [*openssh_argv(spec), *master_options(control_path)]

    def argv(self, command: str) -> list[str]:
        host = self.spec.host.strip("[]")  # hosts.py keeps IPv6 in brackets; ssh wants the bare address
        return [*self._base, "--", host, command]

    def _unreachable_error(self, stderr: str) -> RuntimeFailure:
        return RuntimeFailure(
            f"cannot reach {self.label}: {_ssh_error(stderr)}",
            "check the host is up, the address/port are right and the network allows SSH",
        )

    def run(
        self, command: str, *, input: str | None = None, timeout: float = 60.0, check: bool = True
    ) -> Result:
        try:
            p = subprocess.run(
                self.argv(command),
                input=(input or "").encode(),
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeFailure(
                f"`{_short(command)}` on {self.label} did not finish within {timeout:.0f} s",
                "the host may be overloaded; re-run, or check it with `nsa-launch doctor`",
            ) from None
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        if p.returncode == _SSH_FAILED:
            if _unreachable(err):
                raise self._unreachable_error(err)
            return self._fallback().run(command, input=input, timeout=timeout, check=check)
        return self._check(command, Result(out, err, p.returncode), check)

    def stream(self, command: str, *, input: str | None = None) -> Iterator[str]:
        """Lines of stdout as they arrive; the command's stderr follows at the end (folded in, as over
        paramiko). Closing the iterator ends the ssh client and with it the remote command."""
        import tempfile

        with tempfile.TemporaryFile() as errf:
            p = subprocess.Popen(
                self.argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf
            )
            assert p.stdin is not None and p.stdout is not None
            got_output = False
            try:
                with contextlib.suppress(BrokenPipeError):
                    p.stdin.write((input or "").encode())
                with contextlib.suppress(BrokenPipeError):
                    p.stdin.close()
                for raw in p.stdout:
                    got_output = True
                    yield raw.decode(errors="replace").rstrip("\n")
                code = p.wait()
            finally:
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=10)
                p.stdout.close()
            errf.seek(0)
            err = errf.read().decode(errors="replace")
        if code == _SSH_FAILED:
            if _unreachable(err):
                raise self._unreachable_error(err)
            if not got_output:
                yield from self._fallback().stream(command, input=input)
                return
            raise RuntimeFailure(f"the connection to {self.label} dropped", "re-run when it is back")
        yield from err.splitlines()

    def forward_local(self, start_port: int, remote_port: int) -> LocalForward:
        return self._fallback().forward_local(start_port, remote_port)


def stop_masters(root: Path | None = None) -> int:
    """Stop every master of this registry (`ssh -O exit`) and remove stale sockets; how many stopped."""
    if shutil.which("ssh") is None:
        return 0
    stopped = 0
    for d in control_dirs(root):
        if not d.is_dir():
            continue
        for sock in d.iterdir():
            if not sock.is_socket():
                continue
            p = subprocess.run(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "nsa-launch-master"],
                capture_output=True,
                timeout=10,
            )
            stopped += p.returncode == 0
            sock.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        control_dirs(root)[1].rmdir()  # the /tmp fallback, once empty
    return stopped
