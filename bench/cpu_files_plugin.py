"""pytest plugin of bench/cpu_files.py: each pytest process (worker or serial run) moves itself, and the
sshd it started, into the cgroup of the test file it is about to run, so everything the file starts
from then on is counted there. Does nothing without CPU_FILES_CGROUP."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

_ROOT = os.environ.get("CPU_FILES_CGROUP")
_current: list[Path] = []


def _sshd_children() -> list[str]:
    me = str(os.getpid())
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = stat[stat.rindex(")") + 2 :].split()[1]
        if ppid == me and comm == "sshd":
            out.append(p.name)
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if not _ROOT:
        return
    group = Path(_ROOT) / item.nodeid.split("::")[0].replace("/", "__")
    if not _current or _current[-1] != group:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        _current.append(group)
    for pid in _sshd_children():
        with contextlib.suppress(OSError):  # it may have ended
            (group / "cgroup.procs").write_text(pid)
