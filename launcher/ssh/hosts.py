"""Host targets: parse what a user types after --host into one typed HostSpec.

Owns the accepted forms: an OpenSSH alias (resolved later through ~/.ssh/config or --ssh-config),
`user@host[:port]`, and the string Prime Intellect shows for a pod (`ubuntu@1.2.3.4 -p 22`, also
with a leading `ssh` and `-i KEY`). It only parses and checks; it opens no connection. The env var
NSA_LAUNCH_HOST supplies a default target when neither --host nor the profile names one.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher.core.errors import LaunchError

LOCAL = "local"
_HOST_RE = re.compile(r"[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]")  # fullmatch: `$` passes a trailing \n
_USER_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-]*")


@dataclass(frozen=True)
class HostSpec:
    """Where a node runs. `kind` local: this machine, no SSH. Otherwise host is an alias or address."""

    target: str  # what the user typed, for messages
    kind: str  # "local" | "ssh"
    host: str = ""
    user: str | None = None
    port: int | None = None
    key_filename: str | None = None
    ssh_config: str | None = None

    @property
    def is_local(self) -> bool:
        return self.kind == LOCAL

    @property
    def label(self) -> str:
        if self.is_local:
            return LOCAL
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{who}{self.host}{port}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostSpec:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})


def local_host() -> HostSpec:
    return HostSpec(target=LOCAL, kind=LOCAL)


def _bad(target: str, why: str) -> LaunchError:
    return LaunchError(
        f"--host {target!r}: {why}",
        "use an OpenSSH alias (e.g. gpu-pod), user@host[:port], or the string Prime Intellect shows "
        "(e.g. 'ubuntu@1.2.3.4 -p 22')",
    )


def parse_target(target: str, ssh_config: str | None = None) -> HostSpec:
    """Parse one --host value. `local` means this machine. Raises LaunchError on anything else odd."""
    target = target.strip()
    if not target:
        raise _bad(target, "empty host")
    if target == LOCAL:
        return local_host()
    if ssh_config is not None:
        cfg = Path(ssh_config).expanduser()
        if not cfg.is_file():
            raise LaunchError(
                f"--ssh-config {ssh_config}: no such file", "pass an existing OpenSSH config file"
            )
        ssh_config = str(cfg.resolve())
    try:
        words = shlex.split(target)
    except ValueError as e:
        raise _bad(target, f"cannot split it ({e})") from None
    if words and words[0] == "ssh":
        words = words[1:]
    port: int | None = None
    key: str | None = None
    dest: str | None = None
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-p", "-i"):
            if i + 1 >= len(words):
                raise _bad(target, f"{w} needs a value")
            if w == "-p":
                port = _port(target, words[i + 1])
            else:
                key = str(Path(words[i + 1]).expanduser())
            i += 2
            continue
        if w.startswith("-"):
            raise _bad(target, f"option {w} is not supported (only -p PORT and -i KEY)")
        if dest is not None:
            raise _bad(target, f"two destinations ({dest!r} and {w!r})")
        dest = w
        i += 1
    if dest is None:
        raise _bad(target, "no host in it")
    user: str | None = None
    if "@" in dest:
        user, _, dest = dest.rpartition("@")
        if not _USER_RE.fullmatch(user):
            raise _bad(target, f"user {user!r} is not a valid user name")
    if dest.count(":") == 1:
        dest, _, p = dest.partition(":")
        if port is not None:
            raise _bad(target, "port given twice (host:port and -p)")
        port = _port(target, p)
    if not _HOST_RE.fullmatch(dest):
        raise _bad(target, f"{dest!r} is not a host name, address or alias")
    if key is not None and not Path(key).is_file():
        raise LaunchError(
            f"--host {target!r}: key file {key} does not exist", "pass an existing private key with -i"
        )
    return HostSpec(
        target=target, kind="ssh", host=dest, user=user, port=port, key_filename=key, ssh_config=ssh_config
    )


# What `up --provision` binds as the host until the pod is rented (launcher/cli/up.py): no name to check.
PENDING_POD_HOST = "pod.pending"
_ADDRESS_RE = re.compile(r"^[0-9.]+$|^\[[0-9A-Fa-f:.]+\]$|:")


def check_known_name(spec: HostSpec) -> None:
    """A bare name must be an alias the ssh config maps to a host, or a name DNS resolves; else
    LaunchError (exit 2) naming the config it looked in, before any run is announced or host
    touched. A typo'd alias would otherwise fail only at connect time, with a misleading "check the
    host is up". The config is read as OpenSSH reads it (`ssh -G`, so Include and Match count);
    paramiko's parser stands in where there is no ssh binary."""
    if spec.is_local or spec.host == PENDING_POD_HOST or _ADDRESS_RE.search(spec.host):
        return
    cfg = Path(spec.ssh_config) if spec.ssh_config else Path("~/.ssh/config").expanduser()
    if _config_hostname(spec.host, spec.ssh_config) not in (None, spec.host):
        return
    import socket

    try:
        socket.getaddrinfo(spec.host, None)
        return
    except (OSError, UnicodeError):
        pass
    raise LaunchError(
        f"--host {spec.target!r}: {spec.host!r} is not a Host in the ssh config ({cfg}"
        f"{'' if cfg.is_file() else ': no such file'}) and not a name DNS resolves",
        f"add `Host {spec.host}` with its HostName, User and Port to {cfg} (or pass --ssh-config FILE), "
        "or give user@host[:port]",
    )


def _config_hostname(host: str, ssh_config: str | None) -> str | None:
    """The HostName the ssh config gives `host` (`host` itself when it has none); None if unknown."""
    import shutil
    import subprocess

    ssh = shutil.which("ssh")
    if ssh is not None:
        argv = [ssh, *(["-F", ssh_config] if ssh_config else []), "-G", host]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return next((ln.split(None, 1)[1] for ln in out.splitlines() if ln.startswith("hostname ")), None)
    cfg = Path(ssh_config) if ssh_config else Path("~/.ssh/config").expanduser()
    if not cfg.is_file():
        return host
    try:
        import paramiko

        return str(paramiko.SSHConfig.from_path(str(cfg)).lookup(host).get("hostname", host))
    except Exception:  # a config paramiko cannot read: OpenSSH will say what is wrong with it
        return None


def _port(target: str, text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise _bad(target, f"port {text!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise _bad(target, f"port {port} is out of range 1..65535")
    return port


def default_target() -> str | None:
    """The NSA_LAUNCH_HOST override, if set."""
    return os.environ.get("NSA_LAUNCH_HOST") or None
