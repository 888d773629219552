"""Process facts on the host where the agent runs: who belongs to a run, who listens where, signals.

Owns reading /proc (Linux) to find every process of a run (the tmux pane's tree plus any process
whose environment carries the run's NSA_LAUNCH_RUN_DIR tag: torchrun starts its workers in new
sessions, so a process-group signal alone would miss them) and signalling them. GPUs are
launcher/host/gpu.py's. Standard library only: it runs inside `python -m launcher.host` on the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

TAG = "NSA_LAUNCH_RUN_DIR"


def _ppid_map() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def descendants(pid: int, ppids: dict[int, int] | None = None) -> set[int]:
    ppids = ppids if ppids is not None else _ppid_map()
    children: dict[int, list[int]] = {}
    for p, pp in ppids.items():
        children.setdefault(pp, []).append(p)
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def tagged(run_dir: str, pids: list[int] | None = None) -> set[int]:
    """PIDs whose environment holds NSA_LAUNCH_RUN_DIR=<run_dir> (only our own user's are readable)."""
    needle = f"{TAG}={run_dir}".encode() + b"\0"
    me = os.getpid()
    out: set[int] = set()
    for pid in pids if pids is not None else _ppid_map():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read() + b"\0"
        except OSError:
            continue
        if b"\0" + needle in b"\0" + env:
            out.add(pid)
    return out


def proc_state(pid: int) -> str:
    """The one-letter state of /proc/PID/stat (R, S, D, T, t, Z, ...), or '' when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def stopped(pids: Any) -> set[int]:
    """The processes among `pids` in state T (stopped by SIGSTOP/SIGTSTP) or t (stopped by a tracer)."""
    return {p for p in pids if proc_state(p) in ("T", "t")}


def alive(pid: int) -> bool:
    state = proc_state(pid)
    return bool(state) and state != "Z"  # a zombie holds no resources; its parent just has not reaped it


def listens_on(pid: int, port: int) -> bool | None:
    """Whether `pid` or a descendant holds a TCP socket listening on `port` (any address).

    None when /proc/net/tcp* cannot be read (not Linux): the caller must decide without it. A bare
    "something answers on the port" cannot tell our server from another that took the port first.
    """
    inodes: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for row in rows:
            cols = row.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN; column 9 is the socket inode
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    if not readable:
        return None
    if not inodes:
        return False
    wanted = {f"socket:[{i}]" for i in inodes}
    for p in {pid} | descendants(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{p}/fd/{fd}") in wanted:
                    return True
    return False


def run_pids(run_dir: str, pane_pid: int | None) -> set[int]:
    """Every live process of the run: the pane's tree and every tagged process and their trees."""
    ppids = _ppid_map()
    found = tagged(run_dir, list(ppids))
    if pane_pid and pane_pid in ppids:
        found.add(pane_pid)
    for p in list(found):
        found |= descendants(p, ppids)
    return {p for p in found if alive(p)}


def signal_all(pids: set[int], sig: int) -> None:
    """Send `sig` to each process and to its process group (catches children we have not seen yet)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            pgid = os.getpgid(pid)
            if pgid != os.getpgid(0):
                os.killpg(pgid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# The run's wrapper shell and its log pipe: spared from the SIGTERM so that the trainer's last lines
# (the checkpoint it writes on SIGTERM) still reach train.log, and the wrapper still records the exit
# code. They end by themselves once torchrun has; SIGKILL after the grace spares nothing.
WRAPPER_COMMS = frozenset({"bash", "sh", "tee", "env"})


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def is_wrapper(pid: int) -> bool:
    return comm(pid) in WRAPPER_COMMS


def term_spared(pids: set[int], spare: Any) -> None:
    """SIGTERM each process that `spare` does not spare, and the process groups holding no spared one."""
    spared = {p for p in pids if spare(p)}
    spared_groups = set()
    for p in spared:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            spared_groups.add(os.getpgid(p))
    for pid in pids - spared:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            pgid = os.getpgid(pid)
            if pgid != os.getpgid(0) and pgid not in spared_groups:
                os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


def cont_stopped(pids: Any) -> set[int]:
    """SIGCONT every stopped process among `pids`; the ones that were stopped. A stopped process holds
    a SIGTERM pending: without this a kill waited its whole grace and then SIGKILLed a rank that could
    have saved."""
    held = stopped(pids)
    for pid in held:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)
    return held


def term_then_kill(
    pids_now: Any, grace_s: float, poll: float = 0.05, spare: Any = None, report: dict[str, Any] | None = None
) -> set[int]:
    """TERM every process `pids_now()` returns, wait up to grace_s, KILL what is left, wait 5 s more.

    `pids_now` is called again each poll, so processes started meanwhile are caught too. `spare(pid)`
    true: no SIGTERM for that process (nor its group), only the SIGKILL after the grace. Stopped
    processes get a SIGCONT first. Returns the PIDs still alive at the end (empty on success);
    `report`, when given, receives `continued` (the PIDs that were stopped) and `sigkilled` (the PIDs
    still alive when the grace ran out).
    """
    import time

    report = report if report is not None else {}
    report.setdefault("continued", [])
    report.setdefault("sigkilled", [])
    left = pids_now()
    if not left:
        return set()
    report["continued"] = sorted(cont_stopped(left))
    if spare is None:
        signal_all(left, signal.SIGTERM)
    else:
        term_spared(left, spare)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        left = pids_now()
        if not left:
            return set()
        cont_stopped(left)  # stopped again meanwhile (a job-control SIGTSTP): resume it once more
        time.sleep(poll)
    report["sigkilled"] = sorted(left)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        left = pids_now()
        if not left:
            return set()
        signal_all(left, signal.SIGKILL)
        time.sleep(poll)
    return pids_now()
