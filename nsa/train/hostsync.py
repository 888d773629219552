"""Where a training step makes the host wait for the GPU, found without a GPU: every sync by its call site.

Owns the list of what synchronizes the host with a CUDA stream, as seen from Python: reading a
value (`.item()`, `float()`, `bool()`, `.tolist()`, `.numpy()`, `.cpu()` and the aten ops of
data-dependent size: `nonzero`, `masked_select`, `unique`...), any copy from the device to the host,
and a copy from the host to the device made with `non_blocking=False` or built from Python data
(`torch.tensor(list, device=...)`): CUDA's copy then ends with `cudaStreamSynchronize`, a full wait
on the stream like `.item()`. On a CPU-only run a CPU "device" hides every copy, so `HostSyncs`
watches a stand-in device (`meta` by default: the model's ops run their shape functions, custom
ops their fake kernels) and answers value reads there with zeros, so the run goes on.
bench/step_host.py `--syncs` runs the real trainer that way; tests/unit/train/test_step_syncs.py
holds an ordinary micro-batch to zero of them.

What it cannot see: syncs inside a custom op's real body (its fake kernel runs on meta: the
attention's own launch-count test runs the bodies on CPU and counts their aten syncs), inside
compiled graphs (dynamo does not trace under a mode), and the CUDA runtime's own (cudaMalloc /
cudaFree of the caching allocator: bench/step_host.py counts them on a GPU).
"""

from __future__ import annotations

import collections
import os
import sys
import sysconfig
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Tensor methods that hand a value to Python: on CUDA each waits for the stream.
READS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "cpu",
        "__float__",
        "__int__",
        "__bool__",
        "__index__",
        "__array__",
        "__format__",
    }
)
# aten ops whose output size depends on the data, or that return a host value (bench/attention_launches.py's too)
ATEN_SYNCS = frozenset(
    {
        "_local_scalar_dense", "item", "nonzero", "nonzero_static_host", "masked_select", "unique", "_unique",
        "_unique2", "unique_dim", "unique_consecutive", "is_nonzero", "equal", "allclose", "bincount", "histc",
        "_assert_async", "masked_scatter",
    }
)  # fmt: skip
_ROOT = str(Path(__file__).resolve().parents[2])


def _lib_dirs(root: str, paths) -> tuple[str, ...]:
    """The folders of installed code a call site skips, each as a `dir/` prefix: torch's frames lie
    inside `root` where the venv is the checkout's .venv (CI, scripts/setup.sh). Not a folder that
    holds the checkout itself: a system python's prefix /usr with the checkout under /usr/src would
    hide every frame (and "/w/nsa" is no prefix of "/w/nsa-launch/...")."""
    dirs = {os.path.join(p, "") for p in paths if p}
    return tuple(sorted(d for d in dirs if not os.path.join(root, "").startswith(d)))


_LIBS = _lib_dirs(
    _ROOT, [*(sysconfig.get_path(k) for k in ("purelib", "platlib", "stdlib")), sys.prefix, sys.base_prefix]
)


def call_site() -> str:
    """The innermost frame of this repository's code outside this module: `path:line function`."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if (
            name.startswith(_ROOT + os.sep)
            and not name.endswith("hostsync.py")
            and not name.startswith(_LIBS)
        ):
            return f"{name[len(_ROOT) + 1 :]}:{f.f_lineno} {f.f_code.co_name}"
        f = f.f_back
    return "?"


def _zeros_like_value(name: str, t: torch.Tensor):
    """What the host would read, as zeros (the stand-in device holds no data)."""
    if name in ("tolist", "numpy", "__array__", "cpu"):
        z = torch.zeros(t.shape, dtype=t.dtype)
        return z if name == "cpu" else z.tolist() if name == "tolist" else z.numpy()
    if name == "__format__":
        return "0"
    if name == "__bool__":
        return False
    return 0.0 if t.dtype.is_floating_point and name not in ("__int__", "__index__") else 0


class _Reads(TorchFunctionMode):
    def __init__(self, owner: HostSyncs) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        dev = self.owner.device
        if name in READS and args and isinstance(args[0], torch.Tensor) and args[0].device.type == dev:
            self.owner.add(f"read .{name.strip('_')}()")
            return _zeros_like_value(name, args[0])
        to = kwargs.get("device")
        python_data = not (args and isinstance(args[0], torch.Tensor))
        if (
            name in ("tensor", "as_tensor")
            and to is not None
            and torch.device(to).type == dev
            and python_data
        ):
            self.owner.add(f"blocking copy to device (torch.{name} of Python data)")
        return func(*args, **kwargs)


class _Ops(TorchDispatchMode):
    def __init__(self, owner: HostSyncs) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, dev = func._opname, self.owner.device
        on_dev = any(isinstance(a, torch.Tensor) and a.device.type == dev for a in args)
        if func.namespace == "aten" and name in ATEN_SYNCS and on_dev:
            self.owner.add(f"aten.{name}")
        elif func.namespace == "aten" and name in ("_to_copy", "copy_"):
            src = args[1] if name == "copy_" else args[0]
            dst = (
                args[0].device.type
                if name == "copy_"
                else torch.device(kwargs.get("device") or src.device).type
            )
            blocking = not (
                args[2] if name == "copy_" and len(args) > 2 else kwargs.get("non_blocking", False)
            )
            if src.device.type == dev and dst != dev:
                self.owner.add(f"copy to host ({name})")
                if dev == "meta":  # meta holds no data: the host gets zeros
                    shape = args[0].shape if name == "copy_" else src.shape
                    z = torch.zeros(shape, dtype=kwargs.get("dtype") or src.dtype)
                    return args[0].copy_(z) if name == "copy_" else z
            elif src.device.type != dev and dst == dev:
                self.owner.add(f"{'blocking' if blocking else 'async'} copy to device ({name})")
        return func(*args, **kwargs)


class HostSyncs:
    """`with HostSyncs() as s: ...`, then `s.sites`: Counter of "what @ path:line function".

    `s.syncs()`: the same without the asynchronous host-to-device copies (a copy of pinned memory,
    which the trainer makes on CUDA, does not wait); `device`: the stand-in GPU's device type."""

    def __init__(self, device: str = "meta") -> None:
        self.device = device
        self.sites: collections.Counter[str] = collections.Counter()
        self._modes = (_Reads(self), _Ops(self))

    def add(self, what: str) -> None:
        self.sites[f"{what} @ {call_site()}"] += 1

    def syncs(self) -> collections.Counter[str]:
        return collections.Counter({k: v for k, v in self.sites.items() if not k.startswith("async copy")})

    def __enter__(self) -> HostSyncs:
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for m in reversed(self._modes):
            m.__exit__(*exc)
