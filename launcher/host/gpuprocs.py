"""Processes holding GPU memory on this host, from NVML (nvidia-ml-py), and killing a stray one.

Owns the per-process GPU view (nvitop's: GPU, pid, user, GPU memory, command) that the host agent
answers for the dashboard, and the kill of one such process. GPU-wide numbers (utilisation,
temperature) stay in procs.py. NVML is a parameter (the `pynvml` module by default) so the parsing
is tested on machines without a GPU with recorded NVML-shaped data; user and command always come
from this host's /proc. The kill signals only the one pid (never its process group: a stray
process's group may be someone's shell) and only while NVML still lists it. Runs on the host:
standard library plus pynvml, no torch.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import time
from typing import Any

from launcher.host import procs

UNKNOWN = "?"  # a pid in another PID namespace (a container) has no /proc entry here


def _user(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            uid = next(int(ln.split()[1]) for ln in f if ln.startswith("Uid:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return UNKNOWN
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return UNKNOWN
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace") or UNKNOWN


def _load_nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def gpu_processes(nvml: Any = None) -> list[dict[str, Any]] | None:
    """One dict per (GPU, process) holding GPU memory: gpu, pid, kind (compute/graphics), gpu_mem_mib
    (None when NVML cannot tell), user, command. None when NVML is unavailable (no driver, no GPU)."""
    nvml = nvml or _load_nvml()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: a CPU host
        return None
    try:
        rows: list[dict[str, Any]] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            seen: set[int] = set()
            for kind, query in (
                ("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
                ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses),
            ):
                try:
                    found = query(handle)
                except nvml.NVMLError:  # NOT_SUPPORTED on some boards for graphics
                    continue
                for p in found:
                    pid = int(p.pid)
                    if pid in seen:
                        continue
                    seen.add(pid)
                    mem = getattr(p, "usedGpuMemory", None)
                    rows.append(
                        {
                            "gpu": index,
                            "pid": pid,
                            "kind": kind,
                            "gpu_mem_mib": None if mem is None else round(mem / 2**20, 1),
                            "user": _user(pid),
                            "command": _command(pid),
                        }
                    )
        return sorted(rows, key=lambda r: (r["gpu"], -(r["gpu_mem_mib"] or 0), r["pid"]))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def kill_gpu_process(pid: int, grace_s: float = 5.0, nvml: Any = None) -> dict[str, Any]:
    """TERM `pid`, KILL it after `grace_s`, and verify it is gone. Refused (nothing signalled) unless
    NVML lists `pid` as holding GPU memory right now. Returns killed, pid, remaining_pids, message."""
    rows = gpu_processes(nvml)
    if rows is None:
        return {
            "killed": False,
            "pid": pid,
            "remaining_pids": [],
            "message": "no NVML on this host: nothing killed",
        }
    if pid not in {r["pid"] for r in rows}:
        return {
            "killed": False,
            "pid": pid,
            "remaining_pids": [],
            "message": f"pid {pid} holds no GPU memory now: nothing killed",
        }
    error = ""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError as e:
            error = f" ({e.strerror}: another user's process?)"
            break
        deadline = time.monotonic() + wait_s
        while procs.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not procs.alive(pid):
            break
    left = [pid] if procs.alive(pid) else []
    msg = f"pid {pid} killed" if not left else f"pid {pid} is still alive{error}"
    return {"killed": not left, "pid": pid, "remaining_pids": left, "message": msg}


def cmd_gpu_procs(req: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "rows": gpu_processes()}


def cmd_kill_gpu_proc(req: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, **kill_gpu_process(int(req["pid"]), float(req.get("grace_s", 5.0)))}
