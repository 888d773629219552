"""The trainer's boot record: train_manifest.json (versions, git sha, host, masked environment).

Owns what the trainer writes about itself at boot, next to the resolved config.yaml. Secrets never
reach the file: any variable whose name looks like a credential (TOKEN, KEY, SECRET, PASSWORD, ...)
is written as "***". Torch-free except for reading torch's version if it is already imported; it
must not fail the run for missing git or a read-only checkout (unknown fields become null).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Environment prefixes worth recording: the runtime knobs that change what a run does.
RECORDED_PREFIXES = ("NSA_", "NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "HF_", "WANDB_", "OMP_", "MASTER_")
RECORDED_NAMES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CONFIG", "PYTHONUNBUFFERED")
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS)


def masked_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    out = {}
    for k, v in sorted(env.items()):
        if k.startswith(RECORDED_PREFIXES) or k in RECORDED_NAMES:
            out[k] = "***" if is_secret(k) and v else v
    return out


def git_sha(repo: Path | None = None) -> str | None:
    """HEAD of the checkout the code runs from (with `-dirty` when it has local changes), or None."""
    root = repo or Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def build_manifest(extra: dict[str, Any]) -> dict[str, Any]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for mod in ("torch", "numpy", "pydantic", "datasets"):
        m = sys.modules.get(mod)
        versions[mod] = getattr(m, "__version__", None) if m else None
    torch = sys.modules.get("torch")
    if torch is not None:
        versions["cuda"] = getattr(torch.version, "cuda", None)
    return {
        "time": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "git_sha": git_sha(),
        "versions": versions,
        "env": masked_env(),
        **extra,
    }
