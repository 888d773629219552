"""How the launcher reaches a host: LocalTransport (this machine) and SSHTransport (fabric/paramiko).

Owns connecting (host key checked against known_hosts with paramiko's RejectPolicy: fabric's default
is AutoAdd, which would trust any impostor; first contact only with accept_new_host_key), running one
shell command with optional stdin and a timeout, streaming a command's output line by line, local
port forwards, and the OpenSSH argv (`openssh_argv`) that rsync and the multiplexed reader of
launcher/ssh/openssh.py reuse, so they go to the very same host under the same host-key policy. Every
command it runs is a string the caller built with shlex; this module never formats a value into a
command. It must not know about runs, profiles or the agent's protocol.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.core.errors import LaunchError, RemoteCommandError, RuntimeFailure
from launcher.ssh.hosts import HostSpec

if TYPE_CHECKING:
    from launcher.ssh.forward import LocalForward

CONNECT_TIMEOUT_S = 10.0


@dataclass
class Result:
    stdout: str
    stderr: str
    exit_code: int


class Transport:
    """One host. `run` executes a shell command (bash -c semantics on both sides)."""

    spec: HostSpec

    @property
    def label(self) -> str:
        return self.spec.label

    def run(
        self, command: str, *, input: str | None = None, timeout: float = 60.0, check: bool = True
    ) -> Result:
        raise NotImplementedError

    def stream(self, command: str, *, input: str | None = None) -> Iterator[str]:
        """Lines of the command's stdout as they arrive (stderr is folded in). Closing stops the command."""
        raise NotImplementedError

    def forward_local(self, start_port: int, remote_port: int) -> LocalForward:
        """Forward the first free local port from `start_port` to the host's 127.0.0.1:`remote_port`.

        The returned forward is already listening; its `local_port` is the port it holds.
        """
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _check(self, command: str, res: Result, check: bool) -> Result:
        if check and res.exit_code != 0:
            raise RemoteCommandError(self.label, _short(command), res.exit_code, res.stderr or res.stdout)
        return res


def _short(command: str, n: int = 200) -> str:
    return command if len(command) <= n else command[:n] + " ..."


class LocalTransport(Transport):
    """This machine, through `bash -c`, so commands mean exactly what they mean over SSH."""

    def __init__(self, spec: HostSpec):
        self.spec = spec

    def run(
        self, command: str, *, input: str | None = None, timeout: float = 60.0, check: bool = True
    ) -> Result:
        try:
            p = subprocess.run(
                ["bash", "-c", command],
                input=input if input is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as e:
            raise RuntimeFailure(
                f"local command did not finish within {timeout:.0f} s: {_short(command)}",
                "see the run's train.log; raise the timeout if the host is just slow",
            ) from e
        return self._check(command, Result(p.stdout, p.stderr, p.returncode), check)

    def stream(self, command: str, *, input: str | None = None) -> Iterator[str]:
        p = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        assert p.stdin is not None and p.stdout is not None
        try:
            p.stdin.write(input or "")
            p.stdin.close()
            for line in p.stdout:
                yield line.rstrip("\n")
        finally:
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=10)

    def forward_local(self, start_port: int, remote_port: int) -> LocalForward:
        # The service already listens on this machine: callers use its port, never a forward.
        raise LaunchError(f"{self.label}: no forward to this machine; use port {remote_port} itself")


def _quiet_paramiko_log() -> None:
    """paramiko's transport thread logs a failed handshake (a port that is not sshd, a dropped
    connection) with its traceback at ERROR. No handler is configured here, so Python's last-resort
    handler printed those ~25 lines to stderr above our own error, which says the same with the fix
    (and inside the dashboard, over its screen). A NullHandler on the "paramiko" logger stops that;
    a program that configures logging still gets the records through its root handlers."""
    import logging

    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())


class UnusableKnownHosts(LaunchError):
    """The known_hosts file SSH is to check the host key with cannot be used: bad input, exit 2."""


class NoLogin(LaunchError):
    """SSH reached the host but had no key to offer (none in the config, the agent, ~/.ssh): exit 2."""


class SSHTransport(Transport):
    """A host over SSH. The host key must match known_hosts; new keys only with accept_new_host_key."""

    def __init__(self, spec: HostSpec, *, accept_new_host_key: bool = False):
        import fabric
        import paramiko

        _quiet_paramiko_log()
        self.spec = spec
        self._paramiko = paramiko
        self._lock = threading.RLock()
        cfg = fabric.Config(runtime_ssh_path=spec.ssh_config) if spec.ssh_config else fabric.Config()
        kwargs: dict[str, Any] = {}
        if spec.key_filename:
            kwargs["key_filename"] = spec.key_filename
        self.conn = fabric.Connection(
            host=spec.host,
            user=spec.user,
            port=spec.port,
            config=cfg,
            connect_timeout=CONNECT_TIMEOUT_S,
            connect_kwargs=kwargs,
        )
        self.hostname: str = self.conn.host
        self.port: int = int(self.conn.port)
        self.user: str = self.conn.user
        known = self.conn.ssh_config.get("userknownhostsfile")
        files = known.split() if isinstance(known, str) else list(known or [])
        self.known_hosts = [str(Path(f).expanduser()) for f in files] or [
            str(Path("~/.ssh/known_hosts").expanduser())
        ]
        ident = self.conn.ssh_config.get("identityfile") or []
        self.identities = [str(Path(i).expanduser()) for i in ident] + (
            [spec.key_filename] if spec.key_filename else []
        )
        client = self.conn.client
        # What the host presented on first contact, to show its fingerprint (refused or recorded).
        self.new_host_key: Any = None
        self.recorded_host_key: str | None = None  # "recorded <type> <fingerprint> ... in <file>"
        client.set_missing_host_key_policy(_FirstContact(self, accept_new_host_key))
        # load_host_keys remembers the file, so an accepted new key is saved to the first one.
        f = self.known_hosts[-1]
        try:
            for f in reversed(self.known_hosts):
                if os.path.exists(f):
                    client.load_host_keys(f)
                elif accept_new_host_key:
                    Path(f).parent.mkdir(parents=True, exist_ok=True)
                    Path(f).touch(mode=0o600)
                    client.load_host_keys(f)
        except OSError as e:  # a directory, or a file that cannot be read: it was a traceback
            raise self.unusable_known_hosts(e, f) from None

    def unusable_known_hosts(self, e: OSError, file: str | None = None) -> UnusableKnownHosts:
        """A UserKnownHostsFile that is a directory, cannot be read or (a new key) written: exit 2,
        naming the file and the config that names it."""
        return UnusableKnownHosts(
            f"known_hosts {file or e.filename} is unusable ({e.strerror or e}"
            + (f": {e.filename}" if e.filename and e.filename != (file or e.filename) else "")
            + "): "
            f"the host key of {self.spec.target} cannot be checked",
            f"make UserKnownHostsFile in {self.spec.ssh_config or '~/.ssh/config'} name a file you can "
            "read and write (or drop the line: ~/.ssh/known_hosts), then re-run",
        )

    @property
    def label(self) -> str:
        return (
            f"{self.user}@{self.hostname}:{self.port}"
            if self.spec.host == self.hostname
            else (f"{self.spec.host} ({self.user}@{self.hostname}:{self.port})")
        )

    # --- connection ---------------------------------------------------------------------------
    def connect(self) -> None:
        # The dashboard polls status and streams a log from different threads over one connection.
        with self._lock:
            self._connect()

    def _connect(self) -> None:
        p = self._paramiko
        t = self.conn.client.get_transport()
        if t is not None and t.is_active():
            return
        key_entry = f"[{self.hostname}]:{self.port}" if self.port != 22 else self.hostname
        try:
            self.conn.open()
        except p.BadHostKeyException as e:
            raise LaunchError(
                f"host key MISMATCH for {self.label}: the host presented {e.key.get_name()} "
                f"{fingerprint(e.key)}, which differs from the key in {', '.join(self.known_hosts)}. "
                "Someone may be intercepting the connection, or the host was re-created",
                f"verify the new key out of band, then remove the old one: ssh-keygen -R '{key_entry}' "
                f"-f {self.known_hosts[0]} (and re-run with --accept-new-host-key)",
            ) from None
        except p.AuthenticationException as e:  # keys offered, refused (a new pod's may be on its way)
            raise LaunchError(
                f"SSH authentication to {self.label} failed ({e})",
                "check the user and the key (IdentityFile in the ssh config, or -i KEY in --host)",
            ) from None
        except p.SSHException as e:
            if "No authentication methods available" in str(e):  # sshd is up: it is the key that is not
                raise NoLogin(
                    f"no SSH key to log in with to {self.label}: no IdentityFile in "
                    f"{self.spec.ssh_config or '~/.ssh/config'}, no key in an ssh-agent, no ~/.ssh/id_*",
                    "point ssh at your key: IdentityFile KEY in the ssh config (or -i KEY in --host), or "
                    "`ssh-add KEY`",
                ) from None
            if "not found in known_hosts" in str(e):
                key = self.new_host_key
                shown = f"; it presents {key.get_name()} {fingerprint(key)}" if key is not None else ""
                raise LaunchError(
                    f"the host key of {self.label} is not in {', '.join(self.known_hosts)} (first contact){shown}",
                    "compare that fingerprint with the host's own (`ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` "
                    "on it, or your provider's console), then re-run with --accept-new-host-key to record it",
                ) from None
            raise RuntimeFailure(
                f"SSH to {self.label} failed: {e}", "check the host is up and sshd runs"
            ) from None
        except OSError as e:
            if e.filename and e.filename in self.known_hosts:  # saving a new key: not the network
                raise self.unusable_known_hosts(e) from None
            raise RuntimeFailure(
                f"cannot reach {self.label}: {e.__class__.__name__}: {e}",
                "check the host is up, the address/port are right and the network allows SSH",
            ) from None
        except (EOFError, TimeoutError) as e:
            raise RuntimeFailure(
                f"cannot reach {self.label}: {e.__class__.__name__}: {e}",
                "check the host is up, the address/port are right and the network allows SSH",
            ) from None
        # Keepalives make a dead peer show up as a dropped connection instead of a silent hang.
        self.conn.client.get_transport().set_keepalive(10)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    def _channel(self, command: str) -> Any:
        """An exec channel running `command`. A cached connection that died (host rebooted, sshd
        restarted) is reopened once; nothing ran on the host before the channel opened, so this is safe."""
        for attempt in (0, 1):
            self.connect()
            try:
                chan = self.conn.client.get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
                chan.exec_command(command)
                return chan
            except (self._paramiko.SSHException, OSError, EOFError, AttributeError) as e:
                self.close()
                if attempt:
                    raise RuntimeFailure(
                        f"lost the SSH connection to {self.label} ({e.__class__.__name__}: {e})",
                        "check the host is up and sshd runs",
                    ) from None
        raise AssertionError("unreachable")

    # --- commands -----------------------------------------------------------------------------
    def run(
        self, command: str, *, input: str | None = None, timeout: float = 60.0, check: bool = True
    ) -> Result:
        chan = self._channel(command)
        out, err = bytearray(), bytearray()
        try:
            if input:
                chan.sendall(input.encode())
            chan.shutdown_write()
            deadline = time.monotonic() + timeout
            pause = 0.0005
            while True:
                got = False
                if chan.recv_ready():
                    out += chan.recv(1 << 16)
                    got = True
                if chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                    got = True
                if not got:
                    if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    if chan.closed or not self.conn.client.get_transport().is_active():
                        raise RuntimeFailure(
                            f"the connection to {self.label} dropped during `{_short(command)}`",
                            "check the host is up and re-run",
                        )
                    if time.monotonic() > deadline:
                        raise RuntimeFailure(
                            f"`{_short(command)}` on {self.label} did not finish within {timeout:.0f} s",
                            "the host may be overloaded; re-run, or check it with `nsa-launch doctor`",
                        )
                    time.sleep(pause)
                    pause = min(pause * 2, 0.01)
                else:
                    pause = 0.0005
            code = chan.recv_exit_status()
        except (self._paramiko.SSHException, OSError, EOFError) as e:
            self.close()
            raise RuntimeFailure(
                f"lost the SSH connection to {self.label}: {e}", "check the host is up"
            ) from None
        finally:
            chan.close()
        return self._check(
            command, Result(out.decode(errors="replace"), err.decode(errors="replace"), code), check
        )

    def stream(self, command: str, *, input: str | None = None) -> Iterator[str]:
        chan = self._channel(command)
        chan.set_combine_stderr(True)
        buf = b""
        try:
            if input:
                chan.sendall(input.encode())
            chan.shutdown_write()
            chan.settimeout(0.5)
            while True:
                try:
                    data = chan.recv(1 << 16)
                except TimeoutError:
                    if not self.conn.client.get_transport().is_active():
                        raise RuntimeFailure(
                            f"the connection to {self.label} dropped", "re-run when it is back"
                        ) from None
                    continue
                if not data:
                    break
                buf += data
                *lines, buf = buf.split(b"\n")
                for ln in lines:
                    yield ln.decode(errors="replace")
            if buf:
                yield buf.decode(errors="replace")
        finally:
            chan.close()

    def forward_local(self, start_port: int, remote_port: int) -> LocalForward:
        from launcher.ssh.forward import LocalForward

        self.connect()
        return LocalForward(self.conn.client.get_transport(), start_port, remote_port)

    def sftp(self) -> Any:
        self.connect()
        return self.conn.sftp()

    def ssh_argv(self) -> list[str]:
        """The OpenSSH client argv (without a command) for rsync -e: same host, port, user, keys."""
        return openssh_argv(
            self.spec,
            user=self.user,
            port=self.port,
            known_hosts=self.known_hosts,
            identities=self.identities,
        )


def openssh_argv(
    spec: HostSpec,
    *,
    user: str | None = None,
    port: int | None = None,
    known_hosts: list[str] | None = None,
    identities: list[str] | None = None,
) -> list[str]:
    """The OpenSSH client argv (options only: no destination, no command) with this module's host-key
    policy: BatchMode (never a prompt), StrictHostKeyChecking=yes (an unknown or changed key is refused,
    never accepted implicitly) and no system-wide known_hosts (paramiko never reads it either).

    rsync (through SSHTransport.ssh_argv) passes what paramiko resolved; the multiplexed reader
    (launcher/ssh/openssh.py) must not import paramiko, so it passes nothing and lets ssh resolve the same
    ssh config itself: the spec's own user, port and key still win, as they do for paramiko.
    """
    argv = ["ssh"]
    if spec.ssh_config:
        argv += ["-F", spec.ssh_config]
    port = port or spec.port
    user = user or spec.user
    if port:
        argv += ["-p", str(port)]
    if user:
        argv += ["-l", user]
    argv += ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null"]
    if known_hosts:
        argv += ["-o", "UserKnownHostsFile=" + " ".join(shlex.quote(f) for f in known_hosts)]
    argv += ["-o", f"ConnectTimeout={int(CONNECT_TIMEOUT_S)}"]
    if identities is None:
        identities = [spec.key_filename] if spec.key_filename else []
    for ident in identities:
        argv += ["-i", ident]
    return argv


def fingerprint(key: Any) -> str:
    """OpenSSH's form of a host key's fingerprint: SHA256:<base64, unpadded>."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class _FirstContact:
    """paramiko's policy for a host not in known_hosts: refuse (RejectPolicy's behaviour), or with
    --accept-new-host-key record the key (AutoAddPolicy's); either way remember the key, so the refusal
    and the record can show its fingerprint."""

    def __init__(self, t: SSHTransport, accept: bool):
        self.t, self.accept = t, accept

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        self.t.new_host_key = key
        if not self.accept:
            raise self.t._paramiko.SSHException(f"Server {hostname!r} not found in known_hosts")
        client._host_keys.add(hostname, key.get_name(), key)
        if client._host_keys_filename is not None:
            client.save_host_keys(client._host_keys_filename)
        self.t.recorded_host_key = (
            f"recorded the host key of {self.t.label}: {key.get_name()} {fingerprint(key)} "
            f"in {client._host_keys_filename}"
        )


def open_transport(spec: HostSpec, *, accept_new_host_key: bool = False) -> Transport:
    """A connected transport for `spec` (SSH connects now, so a bad host fails here, before any work)."""
    if spec.is_local:
        return LocalTransport(spec)
    t = SSHTransport(spec, accept_new_host_key=accept_new_host_key)
    t.connect()
    return t
