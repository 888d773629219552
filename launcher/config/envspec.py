"""The registry of environment variables a run may carry, and their validation and masking.

Owns every name `nsa-launch up --env K=V` (or a profile's `env:`) may export to a host: the NSA_*
that `nsa` really reads (declared in nsa/envvars.py and merged here), the runtime families NCCL_*,
TORCH_* / TORCH_NCCL_*, PYTORCH_CUDA_ALLOC_CONF, CUDA_*, OMP_*, HF_*, the secrets passed by name,
the legacy NSA_* knobs of the old trainer with what replaces them, and the user's own variables
(any other safe name, e.g. WANDB_PROJECT, passed as given with a safe value). It validates names (unknown ->
did-you-mean), types and allowed values, and masks secrets for every manifest, log and status line.
It must not read the process environment except where a caller asks for a secret's value, and it
never imports torch. Documented for humans in docs/env.md.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping

from launcher.core.errors import LaunchError
from nsa.envvars import NSA_ENV, EnvVar

MASK = "****"


def _v(name: str, kind: str, help: str, *choices: str, secret: bool = False) -> EnvVar:
    return EnvVar(name, kind, help, choices=tuple(choices), secret=secret)


_BOOL01 = ("0", "1")

RUNTIME_ENV: dict[str, EnvVar] = {
    v.name: v
    for v in (
        # NCCL (GPU collectives). The PCIe A100 profiles set P2P/IB off: see docs/profiles.md.
        _v("NCCL_DEBUG", "enum", "NCCL log level.", "VERSION", "WARN", "INFO", "TRACE"),
        _v("NCCL_DEBUG_SUBSYS", "str", "NCCL subsystems to log (e.g. INIT,NET)."),
        _v("NCCL_DEBUG_FILE", "path", "File NCCL writes its debug log to (%h host, %p pid)."),
        _v(
            "NCCL_P2P_DISABLE",
            "enum",
            "1 = no direct GPU peer-to-peer transfers (PCIe hosts without P2P).",
            *_BOOL01,
        ),
        _v(
            "NCCL_P2P_LEVEL",
            "enum",
            "Max topology distance for P2P.",
            "LOC",
            "NVL",
            "PIX",
            "PXB",
            "PHB",
            "SYS",
        ),
        _v("NCCL_IB_DISABLE", "enum", "1 = do not use InfiniBand/RoCE (hosts without IB).", *_BOOL01),
        _v("NCCL_SHM_DISABLE", "enum", "1 = no shared-memory transport between local GPUs.", *_BOOL01),
        _v("NCCL_SOCKET_IFNAME", "str", "Network interface(s) NCCL uses for sockets (e.g. eth0, ^lo)."),
        _v("NCCL_SOCKET_NTHREADS", "int", "CPU threads per socket connection."),
        _v("NCCL_NSOCKS_PERTHREAD", "int", "Sockets per thread."),
        _v("NCCL_ALGO", "str", "Allowed collective algorithms (Ring, Tree, NVLS, ...)."),
        _v("NCCL_PROTO", "str", "Allowed protocols (LL, LL128, Simple)."),
        _v("NCCL_NET_GDR_LEVEL", "str", "GPUDirect RDMA topology level."),
        _v("NCCL_CROSS_NIC", "enum", "Allow rings/trees to cross NICs.", "0", "1", "2"),
        _v("NCCL_BUFFSIZE", "int", "Bytes of buffer per channel."),
        _v("NCCL_MIN_NCHANNELS", "int", "Minimum channels."),
        _v("NCCL_MAX_NCHANNELS", "int", "Maximum channels."),
        _v("NCCL_NVLS_ENABLE", "enum", "NVLink SHARP (H100 NVSwitch).", *_BOOL01),
        _v("NCCL_CUMEM_ENABLE", "enum", "cuMem-based buffers.", *_BOOL01),
        _v(
            "NCCL_TIMEOUT", "int", "NCCL-internal timeout in seconds (rarely needed; see parallel.timeout_s)."
        ),
        _v("GLOO_SOCKET_IFNAME", "str", "Network interface gloo (CPU collectives) binds to."),
        # torch.distributed / c10d
        _v(
            "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            "enum",
            "What a failed/timed-out NCCL collective does (3 = tear down the process; the safe default).",
            "0",
            "1",
            "2",
            "3",
        ),
        _v("TORCH_NCCL_BLOCKING_WAIT", "enum", "1 = collectives block and raise on timeout.", *_BOOL01),
        _v("TORCH_NCCL_TRACE_BUFFER_SIZE", "int", "Flight recorder entries kept per rank (0 = off)."),
        _v(
            "TORCH_NCCL_DUMP_ON_TIMEOUT",
            "enum",
            "1 = dump the flight recorder when a collective times out.",
            *_BOOL01,
        ),
        _v("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "path", "Path prefix for flight-recorder dumps."),
        _v(
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
            "int",
            "Seconds torchrun waits for its workers after forwarding a SIGTERM before it SIGKILLs them "
            "(torch's default 30; nsa-launch sets it to the profile's kill_grace_s).",
        ),
        _v("TORCH_NCCL_ENABLE_MONITORING", "enum", "Heartbeat monitor thread for hung NCCL.", *_BOOL01),
        _v("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "int", "Seconds before the NCCL monitor declares a hang."),
        _v("TORCH_NCCL_AVOID_RECORD_STREAMS", "enum", "Avoid recordStream in collectives.", *_BOOL01),
        _v("TORCH_DISTRIBUTED_DEBUG", "enum", "c10d consistency checks.", "OFF", "INFO", "DETAIL"),
        _v(
            "TORCH_CPP_LOG_LEVEL",
            "enum",
            "Log level of torch's C++ side.",
            "INFO",
            "WARNING",
            "ERROR",
            "FATAL",
        ),
        _v("TORCH_SHOW_CPP_STACKTRACES", "enum", "C++ stack traces in Python errors.", *_BOOL01),
        _v("TORCH_LOGS", "str", "torch logging artifacts (e.g. +dynamo,recompiles)."),
        _v("TORCH_HOME", "path", "Cache directory of torch hub downloads."),
        _v("TORCHINDUCTOR_CACHE_DIR", "path", "Cache of compiled kernels (parallel.compile)."),
        _v("TORCHELASTIC_ERROR_FILE", "path", "Where torchrun's children write their error reports."),
        _v(
            "PYTORCH_CUDA_ALLOC_CONF",
            "alloc_conf",
            "CUDA caching allocator options, comma-separated key:value (e.g. expandable_segments:True).",
        ),
        # CUDA / threads
        _v("CUDA_VISIBLE_DEVICES", "str", "Comma-separated GPU indices or UUIDs visible to the run."),
        _v("CUDA_LAUNCH_BLOCKING", "enum", "1 = synchronous kernel launches (debugging; slow).", *_BOOL01),
        _v("CUDA_DEVICE_MAX_CONNECTIONS", "int", "Hardware work queues per device."),
        _v("CUDA_DEVICE_ORDER", "enum", "GPU numbering.", "FASTEST_FIRST", "PCI_BUS_ID"),
        _v(
            "OMP_NUM_THREADS", "int", "CPU threads per process for intra-op work (torchrun defaults it to 1)."
        ),
        _v("MKL_NUM_THREADS", "int", "MKL threads per process."),
        # Hugging Face
        _v("HF_HOME", "path", "Hugging Face cache root."),
        _v("HF_DATASETS_CACHE", "path", "datasets cache directory."),
        _v(
            "TIKTOKEN_CACHE_DIR",
            "path",
            "tiktoken's BPE cache (data.tokenizer gpt2); point it at a copied cache on an offline host.",
        ),
        _v("HF_HUB_OFFLINE", "enum", "1 = never contact the Hub.", *_BOOL01),
        _v("HF_DATASETS_OFFLINE", "enum", "1 = datasets uses only its cache.", *_BOOL01),
        _v(
            "HF_HUB_ENABLE_HF_TRANSFER",
            "enum",
            "1 = fast downloads via hf_transfer (must be installed).",
            *_BOOL01,
        ),
        _v("HF_HUB_DISABLE_PROGRESS_BARS", "enum", "1 = no download progress bars in train.log.", *_BOOL01),
        _v("HF_HUB_DOWNLOAD_TIMEOUT", "int", "Seconds before a Hub download times out."),
        _v("TOKENIZERS_PARALLELISM", "enum", "HF tokenizers threads.", "true", "false"),
        # secrets: passed by name from the local environment, masked everywhere
        _v("HF_TOKEN", "str", "Hugging Face token (gated datasets).", secret=True),
        _v("WANDB_API_KEY", "str", "Weights & Biases API key.", secret=True),
        _v("PRIME_API_KEY", "str", "Prime Intellect API key.", secret=True),
    )
}

# Set by nsa-launch itself; a user who sets them is told so.
INTERNAL = {
    "NSA_RUN_ID": "nsa-launch sets it to the run id",
    "NSA_LAUNCH_RUN_DIR": "nsa-launch sets it so the agent can find every process of the run",
    "NSA_MALLOC_REEXEC": "nsa-train sets it on itself when it restarts with tcmalloc preloaded; use NSA_MALLOC",
    "LD_PRELOAD": "nsa-train preloads tcmalloc itself on CPU runs; choose with NSA_MALLOC (auto, tcmalloc or system)",
    "PYTHONUNBUFFERED": "nsa-launch always sets it to 1 so train.log is live",
    "MASTER_ADDR": "torchrun sets it from the rendezvous; multi-node runs use profile `torchrun.rdzv_host`",
    "MASTER_PORT": "torchrun sets it; set profile `torchrun.rdzv_port` instead",
    "RANK": "torchrun sets it for each worker",
    "LOCAL_RANK": "torchrun sets it for each worker",
    "WORLD_SIZE": "torchrun sets it from the profile (nodes x nproc_per_node)",
    "LOCAL_WORLD_SIZE": "torchrun sets it from the profile's nproc_per_node",
}

# Knobs of the old code and what replaces them here (one truth: training knobs live in the config).
LEGACY: dict[str, str] = {
    "NSA_PREFILL_BATCHED": "the batched prefill is the only NSA path here (nsa.attention); there is no switch, "
    "remove the variable",
    "NSA_SEL_RANGES_V2": "block selection has one implementation here (nsa.attention); remove the variable",
    "NSA_DDP_COMPRESS": "gradient compression is not used; DDP/FSDP is chosen by the config key "
    "`parallel.strategy` (--set parallel.strategy=ddp|fsdp)",
    "NSA_DDP_BUCKET_MB": "DDP bucketing uses torch's default; the parallel layout is the config section "
    "`parallel` (strategy, activation_checkpointing); remove the variable",
    "NSA_DDP_DISABLE_GC": "activation checkpointing works under DDP here; set the config key "
    "`parallel.activation_checkpointing` (--set parallel.activation_checkpointing=false to turn it off)",
    "NSA_USE_FA2": "the attention kind is the config key `model.attention` (nsa | dense); "
    "the dense baseline uses torch SDPA, which picks flash kernels itself",
    "NSA_USE_SEL_PACK": "selection packing is not a switch here; remove the variable",
    "NSA_USE_TRITON_SEL": "selection kernels are not switchable by env; remove the variable",
    "NSA_FORCE_PARITY": "the slow reference is nsa/attention/reference.py, used by tests; remove the variable",
    "NSA_TB_DISABLE": "TensorBoard is the config key `telemetry.tensorboard` (--set telemetry.tensorboard=false)",
    "NSA_STALL_SECONDS": "the watchdog threshold is the config key `telemetry.stall_seconds`",
    "NSA_SEQ_LEN": "the sequence length is the config key `train.seq_len`",
    "NSA_BATCH_SIZE": "the batch size is the config key `train.batch_size`",
    "NSA_ACCUM": "gradient accumulation is the config key `train.grad_accum`",
    "NSA_STEPS": "the step count is the config key `train.steps`",
    "NSA_LR": "the learning rate is the config key `train.lr`",
    "NSA_DTYPE": "the compute dtype is the config key `train.dtype`",
    "CONFIG": "the config comes from `nsa-launch up --config PATH` (and --set section.key=value), never from env",
    "NCCL_ASYNC_ERROR_HANDLING": "renamed by PyTorch: use TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "renamed by PyTorch: use TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_TRACE_BUFFER": "the flight recorder size is TORCH_NCCL_TRACE_BUFFER_SIZE",
    "HUGGING_FACE_HUB_TOKEN": "renamed by Hugging Face: use HF_TOKEN (passed by name with --secret HF_TOKEN)",
}

REGISTRY: dict[str, EnvVar] = {**NSA_ENV, **RUNTIME_ENV}
SECRET_NAMES = frozenset(n for n, v in REGISTRY.items() if v.secret)

# Upper bounds of integer variables: a thread count past 1024 is a typo (OMP_NUM_THREADS=1e20 once
# passed as digits), and every other int is read into a C int by NCCL / torch.
THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NCCL_SOCKET_NTHREADS")
INT_LIMIT = 2**31 - 1
INT_MAX: dict[str, int] = {
    **{n: 1024 for n in THREAD_COUNTS},
    "NCCL_NSOCKS_PERTHREAD": 64,
    "NCCL_MIN_NCHANNELS": 1024,
    "NCCL_MAX_NCHANNELS": 1024,
}

_ALLOC_KEYS = (
    "backend",
    "expandable_segments",
    "garbage_collection_threshold",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
)
# Whole-string matches only (fullmatch): `$` also matches before a trailing newline, and
# `--env $'X\n=cmd'` once wrote a line of its own into launch.sh.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What an env value may not hold: any C0 control character (tab included), DEL and the C1 controls.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _did_you_mean(name: str) -> str:
    if len(name) > SHOWN_MAX:
        return ""  # difflib is quadratic: a megabyte-long name must not take minutes
    near = difflib.get_close_matches(name, list(REGISTRY), n=1, cutoff=0.7)
    return f"did you mean {near[0]}? " if near else ""


def check_name(name: str, source: str) -> EnvVar:
    """The registry entry for `name`, or a LaunchError naming the source and what to do instead."""
    if not _NAME_RE.fullmatch(name):
        raise LaunchError(
            f"{source}: {clip(name)!r} is not a valid environment variable name",
            "use letters, digits and underscores, e.g. --env NCCL_DEBUG=INFO",
        )
    if name in LEGACY:
        raise LaunchError(f"{source}: {name} is a knob of the old trainer and is not read here", LEGACY[name])
    if name in INTERNAL:
        raise LaunchError(f"{source}: {name} must not be set by hand", f"{INTERNAL[name]}; remove it")
    var = REGISTRY.get(name)
    if var is None:
        raise LaunchError(
            f"{source}: unknown environment variable {clip(name)}",
            f"{_did_you_mean(name)}Known variables are listed by `nsa-launch profiles --env` and in docs/env.md; "
            "a training knob belongs in the config (--set section.key=value)",
        )
    return var


def check_value(var: EnvVar, value: str, source: str) -> None:
    """Raise a LaunchError when `value` does not fit `var`'s type or allowed values."""
    bad = None
    if var.kind == "enum" and value not in var.choices:
        bad = f"allowed values: {', '.join(var.choices)}"
    elif var.kind == "int":
        top = INT_MAX.get(var.name, INT_LIMIT)
        if not re.fullmatch(r"[0-9]{1,19}", value):
            bad = "must be an integer (digits only, no sign)"
        elif int(value) > top:
            bad = f"must be at most {top}" + (" (a thread count)" if var.name in THREAD_COUNTS else "")
    elif var.kind == "float":
        try:
            if not math.isfinite(float(value)):
                bad = "must be a finite number"
        except ValueError:
            bad = "must be a number"
    elif var.kind == "path" and (not value or "\0" in value):
        bad = "must be a non-empty path"
    elif var.kind == "alloc_conf":
        bad = _check_alloc_conf(value)
    if var.name == "NSA_FAULT" and not bad:
        from nsa.train.faults import parse_fault  # torch-free, the trainer's own parser

        try:
            parse_fault(value)
        except ValueError as e:
            bad = str(e)
    if var.name == "NSA_TERM_SAVE_S" and not bad and not 0 < float(value) <= 86400:
        bad = "must be seconds in (0, 86400]"
    bad = shell_syntax(value) or bad
    if bad:
        shown = MASK if var.secret else repr(clip(value))
        raise LaunchError(f"{source}: {var.name}={shown} is not valid ({var.help})", f"{var.name} {bad}")


def _check_alloc_conf(value: str) -> str | None:
    for part in value.split(","):
        key, sep, val = part.partition(":")
        if not sep or not val:
            return f"entries look like key:value, got {clip(part)!r}"
        if key.strip() not in _ALLOC_KEYS:
            near = difflib.get_close_matches(key.strip()[:SHOWN_MAX], _ALLOC_KEYS, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            return f"keys are {', '.join(_ALLOC_KEYS)}; got {clip(key)!r}{hint}"
    return None


def parse_assignments(items: Iterable[str], source: str = "--env") -> dict[str, str]:
    """`K=V` strings -> dict, every name and value validated. Secrets may not be given by value."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise LaunchError(
                f"{source}: {clip(item)!r} is not NAME=VALUE",
                "write it as --env NAME=VALUE, e.g. --env NCCL_DEBUG=INFO",
            )
        if is_user_variable(name):
            check_user_value(name, value, source)
            out[name] = value
            continue
        var = check_name(name, source)
        if var.secret:
            raise LaunchError(
                f"{source}: {name} is a secret and must not be written on the command line",
                f"export {name} in your shell and pass it by name: --secret {name}",
            )
        check_value(var, value, source)
        out[name] = value
    return out


# Families this registry owns: an unknown name in one of them is a typo (did-you-mean), not a
# user's own variable.
RESERVED_PREFIXES = ("NSA_", "NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "OMP_", "HF_")
# What a run's shell, loader or interpreter reads: never a user's variable.
UNSAFE_NAMES = frozenset(
    [
        "PATH",
        "HOME",
        "SHELL",
        "USER",
        "LOGNAME",
        "IFS",
        "ENV",
        "BASH_ENV",
        "PS4",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "BASHOPTS",
        "CDPATH",
        "GLOBIGNORE",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PYTHONSAFEPATH",
        "TMUX",
        "TMUX_PANE",
        "TERM",
    ]
)
_SECRET_LOOKING = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY|CREDENTIALS?)\Z", re.IGNORECASE
)
USER_VALUE_MAX = 4096


def is_user_variable(name: str) -> bool:
    """A name that is the user's own (WANDB_PROJECT, MY_FLAG): well formed, not declared here, not a
    legacy or internal name, not in a family this registry owns, not something the shell, the loader
    or python reads. Such a variable is passed as given, validated only for a safe value."""
    return (
        bool(_NAME_RE.fullmatch(name))
        and name not in REGISTRY
        and name not in LEGACY
        and name not in INTERNAL
        and name not in UNSAFE_NAMES
        and not name.upper().startswith(RESERVED_PREFIXES)
        and not name.startswith(("BASH_FUNC_", "LD_"))
    )


def shell_syntax(value: str) -> str | None:
    """Why a value must be refused whatever its name, or None. A value reaches the workers through a
    shell script; these would be (or end) shell syntax there. Refused rather than quoted so no reader
    of launch.sh has to wonder what ran."""
    ctl = _CONTROL.search(value)
    if ctl is not None:
        what = {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL byte", "\t": "a tab"}.get(
            ctl.group(), f"the control character {ctl.group()!r}"
        )
        return f"must not contain {what} (values reach the workers through a shell script)"
    for seq, what in (("`", "a backtick"), ("$(", "'$('")):
        if seq in value:
            return f"must not contain {what} (values reach the workers through a shell script)"
    return None


SHOWN_MAX = 200


def clip(value: str, limit: int = SHOWN_MAX) -> str:
    """At most `limit` characters of a bad value for an error message: a 200 MB value must not
    become a 200 MB error."""
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


def check_user_value(name: str, value: str, source: str) -> None:
    """A user variable's value: printable text (tab allowed), at most USER_VALUE_MAX characters; and
    no secret-looking name, whose value would land in the manifest and the registry."""
    if _SECRET_LOOKING.search(name):
        raise LaunchError(
            f"{source}: {name} looks like a secret, and a value given with --env is written to the manifest",
            "nsa-launch passes only declared secrets, by name (--secret NAME; `nsa-launch profiles --env` "
            "lists them); set this one in the host's environment instead",
        )
    ctl = _CONTROL.search(value)
    if ctl is not None or len(value) > USER_VALUE_MAX:
        why = f"control character {ctl.group()!r}" if ctl is not None else f"{len(value)} characters"
        raise LaunchError(
            f"{source}: the value of {name} is not safe to pass ({why})",
            f"user variables take printable text up to {USER_VALUE_MAX} characters, no control characters",
        )
    syntax = shell_syntax(value)
    if syntax:
        raise LaunchError(f"{source}: the value of {name} is not safe to pass", f"{name} {syntax}")


def validate_env(env: Mapping[str, str], source: str) -> dict[str, str]:
    """Validate a mapping (a profile's `env:`) the same way as --env."""
    return parse_assignments((f"{k}={v}" for k, v in env.items()), source)


def resolve_secrets(
    names: Iterable[str], environ: Mapping[str, str], source: str = "--secret"
) -> dict[str, str]:
    """Values of the named secrets from the local environment; every name must be a declared secret."""
    out: dict[str, str] = {}
    for name in names:
        var = check_name(name, source)
        if not var.secret:
            raise LaunchError(
                f"{source}: {name} is not a secret",
                f"pass it by value with --env {name}=VALUE (secrets: {', '.join(sorted(SECRET_NAMES))})",
            )
        if not environ.get(name):
            raise LaunchError(
                f"{source}: {name} is not set in your local environment", f"export {name}=... first"
            )
        if _CONTROL.search(environ[name]):
            raise LaunchError(
                f"{source}: the value of {name} in your local environment holds a control character "
                "(a newline pasted with the token?)",
                f"export {name} again without it",
            )
        out[name] = environ[name]
    return out


def mask(env: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to print or store: every secret's value replaced by ****."""
    return {k: (MASK if k in SECRET_NAMES else v) for k, v in env.items()}


def scrub(text: str, secrets: Mapping[str, str]) -> str:
    """`text` with every secret value replaced by ****, for log lines and error messages."""
    for value in secrets.values():
        if value:
            text = text.replace(value, MASK)
    return text
