"""Triton (CUDA) backend of NSA: one module per branch, same call signatures as the eager modules.

Owns the GPU kernels of the three branches and their fusions. Each branch module exposes the eager
module's public function with the same arguments and results (layouts [B, Hkv, T, G, D] for queries,
[B, Hkv, T, D] for keys/values, selection tables (idx int64, valid bool) [B, Hkv, T, k]), plus
`gpucheck_specs(shape, arch)` listing every kernel it launches with the exact constexprs and launch
settings it would use for that model shape (read by `python -m nsa.attention.gpucheck`).

Rules every kernel module follows:
- Configs are chosen deterministically from the shape (no `triton.autotune`: the interpreter's
  autotuner crashes while benchmarking, and gpucheck must compile exactly what runs).
- No host-device sync and no Python loop whose trip count grows with T: the launch count of a
  layer is the same at every sequence length.
- CPU tensors are accepted only under TRITON_INTERPRET=1 (the tests); see `interpreting()`.
- Importing this package must not fail where triton is missing; importing a kernel module may.

Supported triton: >= MIN_TRITON (3.6, what current CUDA images ship with torch 2.11). CI runs the
interpreter tests and gpucheck (sm_80/sm_90, no spills) on 3.6 and on the newest (3.9); older
releases were never checked, so `require_supported()` refuses them where the backend is chosen
(docs/attention.md "Triton versions").
"""

from __future__ import annotations

import functools
import importlib.util
import os

from nsa.versions import release

MIN_TRITON = (3, 6)


def available() -> bool:
    """True when the triton package can be imported (it ships with CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


def device_arch(device) -> int:
    """The launch configs' arch for a tensor's device: major*10 + minor of a CUDA device (80 = A100,
    90 = H100/H200); 80 for the interpreter's CPU tensors and the meta device, where any config runs."""
    if device.type != "cuda":
        return 80
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def check_delta(op: str, delta, rows: int, layout: str) -> bool:
    """A branch backward op's `delta` argument (rowsum(dO * O), already formed: gated.py's delta fold)
    checked before any launch: float32, contiguous, `rows` rows (`layout` names them in the error).
    True when one was given, False for None (the op forms its own)."""
    import torch

    if delta is None:
        return False
    if delta.dtype != torch.float32 or delta.numel() != rows or not delta.is_contiguous():
        raise ValueError(
            f"{op}: delta {tuple(delta.shape)} {delta.dtype} must be rowsum(dO * O), float32, contiguous, "
            f"{rows} rows ({layout}); pass None to form it here"
        )
    return True


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for the launchers' grids: `triton.cdiv`'s value in plain Python. Triton's host
    helpers are `constexpr_function`s (3.6 and 3.9): ~6 us a call on the 2-core CI VM, against
    ~0.1 here, and a layer's launchers called them 57 times a forward+backward (bench/host_cost.py,
    bench/RESULTS.md "Host cost of the NSA layer")."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """`triton.next_power_of_2(n)` in plain Python (0 for n <= 0, as triton's), for the host configs
    (`cdiv` says why)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def frozen_config(fn=None, *, extra=None):
    """`fn` (a launch config of hashable arguments, a dict) computed once per arguments: each call
    returns a fresh copy of the cached dict, so a caller may change its copy (probes and tests build
    theirs from it). The configs are pure functions of their arguments, of module constants and of
    what `extra()` returns (joined to the cache key each call: e.g. the installed triton's version,
    which a test patches); a probe that patches the module's config function replaces this wrapper,
    so it sees its own. Unhashable arguments (symbolic sizes) are computed uncached. The selected
    branch's `_config` cost ~38 us a call on the 2-core CI VM, three calls a layer
    (bench/RESULTS.md "Host cost of the NSA layer")."""
    if fn is None:
        return functools.partial(frozen_config, extra=extra)

    @functools.lru_cache(maxsize=256)
    def cached(key, args, kwargs):
        return fn(*args, **dict(kwargs))

    @functools.wraps(fn)
    def config(*args, **kwargs):
        key = extra() if extra is not None else None
        try:
            return dict(cached(key, args, tuple(sorted(kwargs.items()))))
        except TypeError:  # an unhashable argument: a SymInt of a fake kernel under dynamic shapes
            return fn(*args, **kwargs)

    config.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return config


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1, where kernels run on CPU tensors (fp32/fp16 only: bf16 tl.dot is wrong)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def installed_version() -> str | None:
    """The installed triton's version (None where triton is missing), from its distribution's
    metadata (torch-free and cheap: nsa-train asks before importing torch), else triton.__version__."""
    if not available():
        return None
    from importlib import metadata

    for dist in ("triton", "pytorch-triton"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    import triton

    return str(getattr(triton, "__version__", "0"))


def unsupported_reason() -> str | None:
    """Why the installed triton cannot serve the backend (None when it can)."""
    v = installed_version()
    if v is None:
        return None  # the callers' own "triton is not installed" message covers it
    if release(v) < MIN_TRITON:
        need = ".".join(map(str, MIN_TRITON))
        return (
            f"triton {v} is installed, and the NSA triton kernels need triton >= {need} (the oldest "
            f"release they are compiled and checked on: no register spills on sm_80/sm_90, numerics "
            f"under the interpreter). Fix: install a CUDA build of torch whose bundled triton is >= {need} "
            f"(or `pip install 'triton>={need}'`), or set `model.nsa.backend: eager` in the config (backend='eager')."
        )
    return None


def require_supported() -> None:
    """ValueError naming the installed and the needed triton, and the eager way out."""
    reason = unsupported_reason()
    if reason:
        raise ValueError(f"NSAAttention: backend 'triton': {reason}")
