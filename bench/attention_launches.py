"""Kernel launches and host-device syncs of one attention layer, forward + backward, counted without a GPU.

Owns the launch-budget measurement of issue 12 (docs/attention.md "Launch budget"; the test
tests/unit/attention/triton/test_launches.py uses `count_layer`). It runs the layer on CPU tensors:
the triton backend under TRITON_INTERPRET=1 with every kernel launch replaced by a counting no-op
(`InterpretedFunction.run`, which triton 3.9's `kernel[grid](...)` calls; the kernels do not execute,
so outputs are garbage and only the counts mean anything), and every aten op counted by a
TorchDispatchMode (custom ops are entered, so the aten ops inside them count; views and allocations
without a kernel do not). Sync ops (`_local_scalar_dense`, i.e. `.item()`/`bool(t)`, `nonzero`,
`masked_select`, `unique`, `repeat_interleave` without output_size, ...) are listed separately.
Prints one JSON row per (backend, T). It measures, it asserts nothing.

  TRITON_INTERPRET=1 .venv/bin/python bench/attention_launches.py               # T 2k..64k, all backends
  TRITON_INTERPRET=1 .venv/bin/python bench/attention_launches.py --T 2048 --backends triton
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nsa.train.hostsync import ATEN_SYNCS

# Ops that move no data on a device (metadata, allocation) and so launch no kernel.
_NO_KERNEL = {
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "detach", "alias",
    "lift_fresh", "_to_copy_noop", "set_", "resize_", "_reshape_alias", "unbind", "split",
    "split_with_sizes", "chunk", "unsafe_split", "unsafe_chunk", "tensor_split", "_unsafe_view",
    "promote_types", "result_type",
}  # fmt: skip
# Ops that make the host wait for the device (a value or a data-dependent shape comes back): the
# trainer's sync finder's list, one for both.
_SYNC = ATEN_SYNCS
M7C = dict(dim=768, n_heads=12, n_kv_heads=2, head_dim=64)


class LaunchCounter(TorchDispatchMode):
    """Counts aten ops that launch a kernel and flags syncs; custom ops are entered, not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.syncs: collections.Counter[str] = collections.Counter()
        self.triton: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ns = func.namespace
        if ns not in ("aten", "prims"):
            from torch._library.custom_ops import _maybe_get_opdef

            opdef = _maybe_get_opdef(func._name)
            if opdef is not None:  # run its Python body under this mode, so its aten ops count
                with self:
                    return opdef._init_fn(*args, **kwargs)
            self.ops[f"{ns}::{func._opname} (opaque)"] += 1
            return func(*args, **kwargs)
        name = func._opname
        if name in _SYNC or (
            name == "repeat_interleave" and kwargs.get("output_size") is None and len(args) == 1
        ):
            self.syncs[str(func)] += 1
        if not func.is_view and name not in _NO_KERNEL:
            self.ops[str(func)] += 1
        return func(*args, **kwargs)

    @property
    def aten(self) -> int:
        return sum(self.ops.values())


@contextlib.contextmanager
def no_triton_execution(counter: LaunchCounter):
    """Every `kernel[grid](...)` of an interpreted kernel is counted and skipped."""
    from triton.runtime.interpreter import InterpretedFunction

    real = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            counter.triton[self.fn.__name__] += 1

    InterpretedFunction.run = run
    try:
        yield
    finally:
        InterpretedFunction.run = real


def count_layer(kind: str, T: int, B: int = 1, dtype: torch.dtype = torch.float32, warm: bool = True) -> dict:
    """Launches of one M7C layer (dim 768, 12 heads, 2 KV heads, head_dim 64, paper defaults),
    forward + backward of y.sum(), on CPU. kind: "triton" (needs TRITON_INTERPRET=1), "eager", "dense".
    warm: count a second pass (RoPE tables cached, as for every layer but the first of a step)."""
    from nsa.attention import DenseAttention, NSAAttention

    torch.manual_seed(0)
    if kind == "dense":
        mod = DenseAttention(M7C["dim"], M7C["n_heads"], M7C["n_kv_heads"], M7C["head_dim"])
    else:
        mod = NSAAttention(**M7C, backend=kind)
    mod = mod.to(dtype)
    x = torch.randn(B, T, M7C["dim"], dtype=dtype, requires_grad=True)
    counter = LaunchCounter()
    patch = no_triton_execution(counter) if kind == "triton" else contextlib.nullcontext()
    with patch:
        if warm:  # RoPE tables are cached per length, shared by all layers
            mod(x).sum().backward()
            counter.triton.clear()
            x.grad = None
        with counter:
            y = mod(x)
            y.sum().backward()
    return {
        "backend": kind,
        "T": T,
        "B": B,
        "warm": warm,
        "launches": counter.aten + sum(counter.triton.values()),
        "aten": counter.aten,
        "triton": sum(counter.triton.values()),
        "triton_kernels": dict(sorted(counter.triton.items())),
        "syncs": dict(counter.syncs),
        "aten_ops": dict(counter.ops.most_common()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[2048, 8192, 32768, 65536])
    ap.add_argument(
        "--backends", nargs="+", default=["triton", "eager", "dense"], choices=["triton", "eager", "dense"]
    )
    ap.add_argument("--ops", action="store_true", help="also print the aten ops by name")
    ap.add_argument("--cold", action="store_true", help="count the first pass (RoPE tables built)")
    args = ap.parse_args()
    if "triton" in args.backends and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit(
            "bench/attention_launches.py: the triton backend on CPU needs TRITON_INTERPRET=1 in the environment"
        )
    for kind in args.backends:
        for T in args.T:
            row = count_layer(kind, T, warm=not args.cold)
            if not args.ops:
                row.pop("aten_ops")
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
