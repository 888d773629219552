"""The NSA_* environment variables that `nsa` really reads, declared once.

Training knobs live in the config YAML; the few NSA_* variables here are runtime switches. The
launcher validates a run's environment against this registry (launcher/config/envspec.py adds NCCL_*,
TORCH_*, HF_*, ... on top), so a variable that is not declared here cannot be exported by mistake and
silently ignored. Torch-free: read by the launcher on machines without torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvVar:
    """One known environment variable: its type, allowed values and what it does."""

    name: str
    kind: str  # "str" | "int" | "float" | "bool" | "enum" | "path"
    help: str
    choices: tuple[str, ...] = ()
    secret: bool = False


NSA_ENV: dict[str, EnvVar] = {
    v.name: v
    for v in (
        EnvVar(
            "NSA_RUN_ID", "str", "Run id set by nsa-launch; recorded in the trainer's manifest and events."
        ),
        EnvVar(
            "NSA_LOG_LEVEL",
            "enum",
            "Verbosity of the trainer's own log lines (not of torch).",
            choices=("debug", "info", "warning", "error"),
        ),
        EnvVar(
            "NSA_MALLOC",
            "enum",
            "C allocator of nsa-train. auto (default): tcmalloc on CPU runs when the host has it "
            "(Debian: libtcmalloc-minimal4), glibc otherwise and on GPU runs; tcmalloc: always (exit 2 if "
            "missing); system: glibc. tcmalloc reuses freed memory instead of page-faulting large "
            "activations again every step (docs/training.md).",
            choices=("auto", "tcmalloc", "system"),
        ),
        EnvVar(
            "NSA_TERM_SAVE_S",
            "float",
            "Seconds nsa-train may spend, after SIGTERM, reaching the next step boundary and saving a "
            "checkpoint there before it exits 143 (default 120). nsa-launch sets it below its kill grace. "
            "A rank that reaches no step boundary within max(10 s, 6 step times) exits at once without one.",
        ),
        EnvVar(
            "NSA_FAULT",
            "str",
            "Test-only fault injection read by nsa-train: <stall|nan|kill|ckpt>[:step=N][:rank=R][:once] "
            "(once: only the first time in a run dir; e.g. stall:step=3:rank=1 makes rank 1 hang at step 3 to exercise the watchdog), "
            "kill:step=N:rank=R:ordered (the other ranks wait for torchrun's SIGTERM before meeting the dead rank), "
            "or pace[:step=N][:rank=R][:ms=M] (each step from N takes at least M ms, default 250, the rest slept). Never set it "
            "for a real run.",
        ),
    )
}
