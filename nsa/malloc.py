"""nsa-train's C allocator: NSA_MALLOC=auto|tcmalloc|system. Torch-free.

glibc's malloc hands every block above its mmap threshold (at most 32 MB) back to the kernel on
free. A training step frees and reallocates the same large activations every step, so under glibc
each step page-faults and zeroes them again: ~3 s of a 13.6 s NSA attention forward+backward at
T=32k on the 2-core dev machine (bench/RESULTS.md, "Attention"). tcmalloc keeps freed memory for
reuse, as PyTorch's caching allocator does on the GPU. It can only be chosen before the process
starts (LD_PRELOAD), so nsa-train re-executes itself once with it preloaded, before importing torch;
the PID stays the same, so torchrun and nsa-launch see the same worker.

`auto` (the default) preloads tcmalloc on CPU runs when the host has it (Debian:
libtcmalloc-minimal4, which scripts/setup.sh installs) and leaves GPU runs and hosts without it on
glibc. glibc's own knobs are no substitute: with mmap turned off, torch's posix_memalign blocks are
not reused and the heap grows every step (measured, bench/RESULTS.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

VAR = "NSA_MALLOC"
MODES = ("auto", "tcmalloc", "system")
PACKAGE = "libtcmalloc-minimal4"
TCMALLOC_LIBS = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)
_REEXEC_MARK = "NSA_MALLOC_REEXEC"  # set on the re-executed process: never loop


@dataclass(frozen=True)
class Plan:
    """What nsa-train does about its allocator: `lib` to preload (None: nothing), `note` for the banner."""

    lib: str | None
    note: str


def find_library(names: Sequence[str], dirs: Sequence[str] = _DIRS) -> str | None:
    """Absolute path of the first of `names` (shared-library file names) in the usual lib dirs, or None."""
    for d in dirs:
        for name in names:
            p = Path(d) / name
            if p.is_file():
                return str(p)
    return None


def find_tcmalloc(dirs: Sequence[str] = _DIRS) -> str | None:
    """Absolute path of an installed tcmalloc shared library, or None."""
    return find_library(TCMALLOC_LIBS, dirs)


def loaded_allocator(maps: str = "/proc/self/maps") -> str:
    """'tcmalloc', 'jemalloc' or 'mimalloc' when one is mapped into this process, else 'glibc'."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return "glibc"
    return next((n for n in ("tcmalloc", "jemalloc", "mimalloc") if f"lib{n}" in text), "glibc")


def plan(value: str | None, device: str, *, gpu_present: bool, lib: str | None) -> Plan:
    """Decide for NSA_MALLOC=value (unset = auto) and the config's train.device (auto|cpu|cuda).

    `gpu_present`: whether an NVIDIA device node exists (what device=auto will most likely pick);
    `lib`: the tcmalloc found on this host. Raises ValueError naming the variable, the value and the
    fix for an unknown value, or for `tcmalloc` on a host without it.
    """
    mode = (value or "auto").strip().lower()
    if mode not in MODES:
        raise ValueError(
            f"{VAR}={value!r}: expected one of {', '.join(MODES)}. Fix: unset it (auto) or use one of those."
        )
    if mode == "system":
        return Plan(None, f"{VAR}=system")
    if mode == "tcmalloc":
        if lib is None:
            raise ValueError(
                f"{VAR}=tcmalloc but no tcmalloc library is installed (looked for {', '.join(TCMALLOC_LIBS)}). "
                f"Fix: apt-get install -y {PACKAGE}, or set {VAR}=auto or system."
            )
        return Plan(lib, f"{VAR}=tcmalloc")
    on_cpu = device == "cpu" or (device == "auto" and not gpu_present)
    if not on_cpu:
        return Plan(None, f"{VAR}=auto: GPU run")
    if lib is None:
        return Plan(None, f"{VAR}=auto: no tcmalloc here; apt-get install -y {PACKAGE} for faster CPU steps")
    return Plan(lib, f"{VAR}=auto: CPU run")


def gpu_present() -> bool:
    return Path("/dev/nvidiactl").exists()


def reexec_with(lib: str) -> None:
    """Replace this process by the same command with `lib` preloaded (same PID); returns only if it
    is loaded already or this process was re-executed once before."""
    if os.environ.get(_REEXEC_MARK) or loaded_allocator() != "glibc":
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [lib, env.get("LD_PRELOAD", "")]))
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(sys.orig_argv), env)
