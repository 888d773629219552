"""Calling the host agent: the one place that builds the `python -m launcher.host` command line.

Owns the transport cache (one connection per host per process, reopened when it drops), the choice
of transport for read-only calls (`reader_for`: the shared OpenSSH connection of launcher/ssh/openssh.py
where it can be used, else the cached paramiko one) and `agent_call`/`agent_stream`, which send a
JSON request on stdin, so no value is ever part of a shell command except the workdir and python
path, and those only through shlex.quote. Every call has a timeout and names what it waited for.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Iterator
from typing import Any

from launcher.core.errors import RemoteCommandError, RuntimeFailure
from launcher.ssh import openssh
from launcher.ssh.hosts import HostSpec
from launcher.ssh.transport import Transport, open_transport

_cache: dict[tuple[Any, ...], Transport] = {}
_lock = threading.Lock()


def _key(spec: HostSpec) -> tuple[Any, ...]:
    return (spec.kind, spec.host, spec.user, spec.port, spec.key_filename, spec.ssh_config)


def transport_for(spec: HostSpec, *, accept_new_host_key: bool = False) -> Transport:
    """A connected transport for `spec`, shared within this process."""
    with _lock:
        t = _cache.get(_key(spec))
        if t is None:
            t = open_transport(spec, accept_new_host_key=accept_new_host_key)
            _cache[_key(spec)] = t
    return t


def reader_for(spec: HostSpec) -> Transport:
    """A transport for agent calls that only read and are safe to run twice (status, logs): the system
    ssh over a master connection that later processes reuse, when multiplexing is on and usable; else
    `transport_for(spec)`. Not cached: it holds no connection of its own, the master does."""
    t = openssh.reader(spec, fallback=lambda: transport_for(spec))
    return t if t is not None else transport_for(spec)


def drop(spec: HostSpec) -> None:
    with _lock:
        t = _cache.pop(_key(spec), None)
    if t is not None:
        t.close()


def close_all() -> None:
    with _lock:
        items = list(_cache.values())
        _cache.clear()
    for t in items:
        t.close()


def agent_command(workdir: str, python: str, command: str) -> str:
    q = shlex.quote
    return f"cd {q(workdir)} && PYTHONPATH={q(workdir)} exec {q(python)} -m launcher.host {q(command)}"


def agent_call(
    t: Transport, workdir: str, python: str, command: str, request: dict[str, Any], timeout: float = 60.0
) -> dict[str, Any]:
    """Run one agent command on the host and return its JSON reply (ok=False replies are returned)."""
    cmd = agent_command(workdir, python, command)
    try:
        res = t.run(cmd, input=json.dumps(request), timeout=timeout, check=False)
    except RuntimeFailure:
        drop(t.spec)
        raise
    try:
        reply = json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else None
    except json.JSONDecodeError:
        reply = None
    if res.exit_code != 0 or not isinstance(reply, dict):
        raise RemoteCommandError(
            t.label,
            f"python -m launcher.host {command}",
            res.exit_code,
            res.stderr or res.stdout,
            f"is the project synced to {workdir} and does {python} have its dependencies? (nsa-launch doctor)",
        )
    return reply


def agent_stream(
    t: Transport, workdir: str, python: str, command: str, request: dict[str, Any]
) -> Iterator[str]:
    return t.stream(agent_command(workdir, python, command), input=json.dumps(request))
