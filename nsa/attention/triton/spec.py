"""What `python -m nsa.attention.gpucheck` compiles: model shapes and one launch's kernel spec.

Torch-free and triton-free data only. A kernel module's `gpucheck_specs(shape, arch)` returns the
`KernelSpec`s of every kernel it would launch for `shape` on a GPU of compute capability `arch`
(80 = A100, 90 = H100), with the same constexprs and num_warps/num_stages its launcher picks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuShape:
    """One attention layer's static geometry, as a model config fixes it."""

    name: str  # where it comes from, e.g. "m7c_125m" or "long_context"
    head_dim: int  # D
    group: int  # G = n_heads / n_kv_heads (query heads per KV head)
    block_len: int  # l
    block_stride: int  # d
    sel_block: int  # l'
    n_sel: int  # n
    window: int  # w
    compression: str = "mlp"  # "mlp" | "mean" (kernels see only the compressed K/V either way)
    dtype: str = "bf16"  # triton type name of activations: "bf16", "fp16" or "fp32"


@dataclass(frozen=True)
class KernelSpec:
    """One kernel as launched: `signature` maps every argument of `fn` to a triton type string
    ("*bf16", "*fp32", "*i64", "i32", "fp32", ... and "constexpr" for the keys of `constexprs`)."""

    name: str  # e.g. "selected_fwd"
    fn: Any  # the @triton.jit function
    signature: dict[str, str]
    constexprs: dict[str, Any] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 2
    maxnreg: int = 0  # the launcher's register cap (ptxas .maxnreg; 0: none), which gpucheck compiles with
