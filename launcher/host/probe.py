"""The host's python, probed before the project is there: its version, the packages a run needs, its torch.

Owns the facts `up`'s preflight, `doctor` and the host-env plan (launcher/launch/hostenv.py) decide on:
python version and executable, which of the requested modules are missing (found without importing
them: find_spec, so a probe never pays for `import torch`), the installed torch version and its
build (`cpu`, `cu121`, ... from the wheel's local version; a Linux wheel without one is a CUDA
build), whether pip is there and `venv` can create environments, and the interpreter's site-packages (a venv built on
top of it can see them). Standard library only and self-contained: it is fed to the host's python on
stdin (`python - MODULES_JSON < probe.py`) and prints one line, `probe=<json>`. Read-only.
"""

from __future__ import annotations

import importlib.util
import json
import site
import sys
from typing import Any


def torch_build(version: str | None) -> str | None:
    """`cpu`, `cu121`, `rocm6.1`, ... from a torch version; `cuda` for a bare Linux PyPI version."""
    if not version:
        return None
    local = version.partition("+")[2]
    if local:
        return local
    return "cuda" if sys.platform.startswith("linux") else "cpu"


def probe(modules: list[str]) -> dict[str, Any]:
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            torch_version: str | None = version("torch")
        except PackageNotFoundError:
            torch_version = None
    except ImportError:  # pragma: no cover - python < 3.8
        torch_version = None
    # Every site dir on sys.path, .pth-added ones included: a venv whose packages come from another
    # venv through a .pth file (as on this project's dev machines) must pass them all on.
    dirs = [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    dirs += [p for p in getattr(site, "getsitepackages", lambda: [])() if p not in dirs]
    return {
        "python": "{}.{}".format(*sys.version_info[:2]),
        "executable": sys.executable,
        "missing": missing,
        "torch": torch_version,
        "torch_build": torch_build(torch_version),
        "pip": importlib.util.find_spec("pip") is not None,
        "venv": importlib.util.find_spec("venv") is not None
        and importlib.util.find_spec("ensurepip") is not None,
        "site_packages": dirs,
        "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    }


if __name__ == "__main__":
    print("probe=" + json.dumps(probe(json.loads(sys.argv[1]) if len(sys.argv) > 1 else [])))
