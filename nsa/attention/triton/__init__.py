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
"""

from __future__ import annotations

import importlib.util
import os


def available() -> bool:
    """True when the triton package can be imported (it ships with CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1, where kernels run on CPU tensors (fp32/fp16 only: bf16 tl.dot is wrong)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
