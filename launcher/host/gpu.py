"""NVIDIA GPUs on the host: the one place that queries them and the one parser of nvidia-smi's CSV.

Owns `gpus()` (one dict per GPU: index, name, util_pct, mem_used_mb, mem_total_mb, temp_c, power_w)
and `gpu_pids()` (pid -> MiB of GPU memory), read through nvidia-ml-py (`pynvml`) when it imports and
finds the driver, else through `nvidia-smi --format=csv`, parsed by `parse_csv` (also what the
dashboard's recorded backend replays). A missing driver or tool, or an "[N/A]" field, gives [] /
None, never an exception. Standard library only and self-contained (no project imports): the agent
imports it, and `up`'s preflight runs this very file with the host's python before the project is
synced there (`python - < gpu.py` prints one JSON line). It must not signal or start processes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

# nvidia-smi --query-gpu column -> key of the gpu dicts in the status snapshot.
GPU_COLUMNS = {
    "index": "index",
    "name": "name",
    "utilization.gpu": "util_pct",
    "memory.used": "mem_used_mb",
    "memory.total": "mem_total_mb",
    "temperature.gpu": "temp_c",
    "power.draw": "power_w",
}


def _num(raw: str) -> float | None:
    # "[N/A]" / "[Not Supported]" are what nvidia-smi prints for sensors a board lacks; values may
    # carry units ("1234 MiB") when the CSV was made without `nounits`.
    try:
        return float(raw.strip().split(" ")[0])
    except (ValueError, IndexError):
        return None


def parse_csv(text: str) -> list[dict[str, Any]]:
    """GPU dicts from `nvidia-smi --query-gpu=... --format=csv[,nounits]` output (header first).

    Unknown columns are ignored and unreadable values become None: the output format is documented
    as not backwards compatible across drivers.
    """
    rows = _rows(text)
    gpus = []
    for row in rows:
        gpu: dict[str, Any] = {}
        for col, raw in row.items():
            key = GPU_COLUMNS.get(col)
            if key == "name":
                gpu[key] = raw.strip()
            elif key == "index":
                idx = _num(raw)
                gpu[key] = int(idx) if idx is not None else len(gpus)
            elif key:
                gpu[key] = _num(raw)
        gpus.append(gpu)
    return gpus


def _rows(text: str) -> list[dict[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [h.strip().split(" [")[0] for h in lines[0].split(",")]
    out = []
    for ln in lines[1:]:
        cells = ln.split(",")
        if len(cells) == len(header):
            out.append(dict(zip(header, cells)))
    return out


def _smi(args: list[str], timeout: float) -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _nvml() -> Any | None:
    """The initialised pynvml module, or None (not installed, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _nvml_gpus(nv: Any) -> list[dict[str, Any]]:
    def get(fn: Any, *a: Any) -> Any:
        try:
            return fn(*a)
        except Exception:
            return None

    rows = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        name = get(nv.nvmlDeviceGetName, h)
        mem = get(nv.nvmlDeviceGetMemoryInfo, h)
        util = get(nv.nvmlDeviceGetUtilizationRates, h)
        temp = get(nv.nvmlDeviceGetTemperature, h, 0)  # 0 = NVML_TEMPERATURE_GPU
        power = get(nv.nvmlDeviceGetPowerUsage, h)
        rows.append(
            {
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "util_pct": float(util.gpu) if util is not None else None,
                "mem_used_mb": mem.used / 2**20 if mem is not None else None,
                "mem_total_mb": mem.total / 2**20 if mem is not None else None,
                "temp_c": float(temp) if temp is not None else None,
                "power_w": power / 1000.0 if power is not None else None,
            }
        )
    return rows


def gpus(timeout: float = 5.0) -> list[dict[str, Any]]:
    """One dict per GPU; [] without a driver or nvidia-smi."""
    nv = _nvml()
    if nv is not None:
        try:
            return _nvml_gpus(nv)
        except Exception:
            pass
    out = _smi([f"--query-gpu={','.join(GPU_COLUMNS)}", "--format=csv,nounits"], timeout)
    return parse_csv(out) if out else []


def gpu_pids(timeout: float = 5.0) -> dict[int, float | None] | None:
    """PID -> MiB of GPU memory for every process holding GPU memory; None when GPUs cannot be asked."""
    nv = _nvml()
    if nv is not None:
        try:
            found: dict[int, float | None] = {}
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                    used = getattr(p, "usedGpuMemory", None)
                    found[int(p.pid)] = used / 2**20 if used is not None else None
            return found
        except Exception:
            pass
    out = _smi(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], timeout)
    if out is None:
        return None
    found = {}
    for line in out.splitlines():
        # By position: the header nvidia-smi prints for this query does not echo the field names.
        parts = line.split(",")
        pid = _num(parts[0])
        if pid is not None:
            found[int(pid)] = _num(parts[1]) if len(parts) > 1 else None
    return found


if __name__ == "__main__":
    print("gpus=" + json.dumps(gpus()))
