"""launcher/host/gpuprocs.py: the per-process GPU view and the kill of a stray GPU process.

There is no GPU here, so NVML is `FakeNvml`: a FAKE of the pynvml module's calls, answering with
NVML-shaped records (the fields and units `nvmlDeviceGetComputeRunningProcesses` returns: pid,
usedGpuMemory in bytes or None). The processes it lists are real processes of this machine, so the
user and command lookup and the kill are real: the killed process is verified gone.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.host import gpuprocs


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """FAKE pynvml: the calls gpuprocs makes, over `devices` = [[(pid, used_bytes or None), ...], ...]."""

    NVMLError = FakeNvmlError

    def __init__(self, devices, graphics=None, fail_init=False):
        self.devices, self.graphics, self.fail_init = devices, graphics or {}, fail_init
        self.shutdowns = 0

    def nvmlInit(self):
        if self.fail_init:
            raise FakeNvmlError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.devices[h]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        if h not in self.graphics:
            raise FakeNvmlError("Not Supported")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.graphics[h]]


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)  # holds-gpu-memory"])
    deadline = time.monotonic() + 10
    while b"holds-gpu-memory" not in Path(f"/proc/{p.pid}/cmdline").read_bytes():  # exec'd
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield p
    p.kill()
    p.wait()


def test_rows_carry_pid_user_memory_and_command(sleeper):
    stranger = 4_000_000  # beyond pid_max: a pid of another PID namespace, no /proc entry here
    nvml = FakeNvml(
        [[(sleeper.pid, 61234 * 2**20), (stranger, None)], [(sleeper.pid, 512 * 2**20)]],
        graphics={1: [(sleeper.pid, 512 * 2**20)]},  # listed twice on GPU 1: one row
    )
    rows = gpuprocs.gpu_processes(nvml)
    assert [(r["gpu"], r["pid"], r["gpu_mem_mib"]) for r in rows] == [
        (0, sleeper.pid, 61234.0),
        (0, stranger, None),
        (1, sleeper.pid, 512.0),
    ]
    assert rows[0]["user"] == getpass.getuser() and "holds-gpu-memory" in rows[0]["command"]
    assert rows[1]["user"] == "?" and rows[1]["command"] == "?"
    assert nvml.shutdowns == 1


def test_no_nvml_is_none_not_an_error():
    assert gpuprocs.gpu_processes(FakeNvml([], fail_init=True)) is None
    assert gpuprocs.kill_gpu_process(1, nvml=FakeNvml([], fail_init=True))["killed"] is False


def test_kill_really_kills_the_listed_process(sleeper):
    nvml = FakeNvml([[(sleeper.pid, 2**30)]])
    t0 = time.monotonic()
    res = gpuprocs.kill_gpu_process(sleeper.pid, grace_s=2.0, nvml=nvml)
    assert res == {
        "killed": True,
        "pid": sleeper.pid,
        "remaining_pids": [],
        "message": f"pid {sleeper.pid} killed",
    }
    assert sleeper.wait(timeout=5) == -15  # TERM was enough
    assert time.monotonic() - t0 < 5


def test_kill_escalates_to_sigkill(tmp_path):
    ready = tmp_path / "ready"
    code = f"import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path({str(ready)!r}).touch(); time.sleep(120)"
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        while not ready.exists():
            time.sleep(0.02)
        res = gpuprocs.kill_gpu_process(p.pid, grace_s=0.3, nvml=FakeNvml([[(p.pid, 2**30)]]))
        assert res["killed"] is True and p.wait(timeout=5) == -9
    finally:
        p.kill()
        p.wait()


def test_kill_refuses_a_pid_that_holds_no_gpu_memory(sleeper):
    res = gpuprocs.kill_gpu_process(sleeper.pid, nvml=FakeNvml([[(sleeper.pid + 1, 2**30)]]))
    assert res["killed"] is False and "holds no GPU memory" in res["message"]
    time.sleep(0.1)
    assert sleeper.poll() is None  # untouched


def test_agent_commands_on_this_cpu_host(sleeper):
    """The real agent entry point (`python -m launcher.host`), with this machine's real (absent) NVML:
    no rows, and a kill request is refused without touching the process."""

    def agent(command: str, req: dict) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "launcher.host", command],
            input=json.dumps(req),
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert agent("gpu_procs", {}) == {"ok": True, "rows": None}
    reply = agent("kill_gpu_proc", {"pid": sleeper.pid, "grace_s": 0.1})
    assert reply["ok"] is True and reply["killed"] is False and "no NVML" in reply["message"]
    assert sleeper.poll() is None
