"""Dtype rules shared by the attention custom ops (`nsa::compressed_*`, `nsa::selected_*`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

F = TypeVar("F", bound=Callable)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype of logits, softmax and gradient sums: float32 for half types, else the input's."""
    return torch.promote_types(dtype, torch.float32)


def autocast_off(fn: F) -> F:
    """Run a custom op's body with autocast off on the device of its first tensor argument.

    The ops choose every compute dtype themselves (`acc_dtype`); autocast would recast their float32
    GEMMs to bf16 behind their back and mix dtypes in in-place ops (`baddbmm_`), e.g. when a
    backward runs inside an autocast region.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        dev = next(a.device.type for a in args if isinstance(a, Tensor))
        # Already off (the trainer's backward runs outside its autocast region; fp32 runs): the context
        # would only cost its enter/exit, ~14 us a call on the 2-core CI VM, with up to twelve calls
        # a layer forward+backward in the triton backend (bench/RESULTS.md "Host cost of the NSA layer").
        if not torch.is_autocast_enabled(dev):
            return fn(*args, **kwargs)
        with torch.autocast(dev, enabled=False):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
