"""Apply parallelism to a built model, in one documented order.

Order (as in torchtitan's parallelize_llama): activation checkpointing per block (none, every k-th
block = selective, or every block = full) -> torch.compile per block (any device: inductor also
compiles for the CPU, so CI runs the same path) -> data parallel (DDP, or FSDP2 `fully_shard` per block then the root). Owns also the
gradient-sync switch used during accumulation. It takes only the sub-configs it uses and must not
change the model's parameter names (checkpoints are portable between AC on and off, DDP and FSDP).

Activation checkpointing wraps each block's own bound `forward` in a small callable object. The
earlier trainer used a lambda in a loop over blocks, which late-binds the loop variable: every
block recomputed the LAST block in backward, and DDP saw its parameters "marked ready twice".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from nsa.model import Transformer
from nsa.train.config import ParallelConfig
from nsa.train.dist import DistInfo


class CheckpointedForward:
    """Recompute-in-backward wrapper around ONE module's bound forward (bound at construction)."""

    def __init__(self, forward: Callable[..., torch.Tensor]):
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        # Non-reentrant: works with DDP/FSDP hooks and with inputs that do not require grad.
        return checkpoint(self.forward, *args, use_reentrant=False, **kwargs)


def checkpointed_blocks(n_layers: int, mode: str, every: int) -> list[int]:
    """Indices of the blocks recomputed in backward: none, every `every`-th (selective), or all (full)."""
    if mode == "full":
        return list(range(n_layers))
    if mode == "selective":
        return [i for i in range(n_layers) if i % every == every - 1]
    return []


def apply_activation_checkpointing(model: Transformer, mode: str = "full", every: int = 2) -> list[int]:
    chosen = checkpointed_blocks(len(model.blocks), mode, every)
    for i in chosen:
        block = model.blocks[i]
        block.forward = CheckpointedForward(block.forward)
    return chosen


def compile_counts() -> dict[str, int]:
    """Graphs dynamo has compiled and graph breaks it took in this process so far (dynamo's counters)."""
    from torch._dynamo.utils import counters

    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "breaks": int(sum(counters["graph_break"].values())),
    }


def compile_break_reasons(limit: int = 3) -> list[str]:
    from torch._dynamo.utils import counters

    return [r.splitlines()[0][:200] for r, _ in counters["graph_break"].most_common(limit)]


def parallelize(
    model: Transformer, info: DistInfo, cfg: ParallelConfig, param_dtype: torch.dtype | None
) -> nn.Module:
    """Returns the module to call in the training loop (the model itself, DDP(model) or FSDP'd model).

    `param_dtype`: bf16 for FSDP2 mixed precision on GPU (params stay fp32 masters, compute in bf16,
    gradients reduced in fp32); None for full fp32.
    """
    apply_activation_checkpointing(model, cfg.activation_checkpointing, cfg.ac_every)
    if cfg.compile:
        # Per block, not the whole model: one graph per block shape, compiled once and reused by
        # every layer; the DDP/FSDP hooks stay outside the compiled regions.
        # reduce-overhead: inductor records each block's forward and backward as CUDA graphs, replayed
        # by one launch (the trainer marks each micro-batch's start: cudagraph_mark_step_begin, and
        # owns the .grad buffers: own_grads). `auto` resolves here, on the run's device and world.
        resolved = compile_mode(cfg, info)
        mode = None if resolved == "default" else resolved
        for block in model.blocks:
            block.compile(backend=cfg.compile_backend, mode=mode)
    if not info.distributed:
        return model
    if cfg.strategy == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)


def compile_mode(cfg: ParallelConfig, info: DistInfo) -> str:
    """The mode the blocks are compiled with ("default" or "reduce-overhead"; "off" without compile)."""
    if not cfg.compile:
        return "off"
    return cfg.resolved_compile_mode(info.device.type, info.world_size)


def cudagraphs(cfg: ParallelConfig, info: DistInfo) -> bool:
    return compile_mode(cfg, info) == "reduce-overhead"


def own_grads(params: Iterable[torch.Tensor]) -> None:
    """Give every trainable parameter without one a zeroed .grad buffer of its own (once; then the
    optimizer zeroes them in place, `zero_grad(set_to_none=False)`).

    Why, under CUDA graphs: a compiled block's backward returns each parameter's gradient in the CUDA
    graph pool, and the next replay overwrites it. With `.grad` None, autograd's AccumulateGrad STEALS
    that output as `.grad` (no copy: accumulate_grad.h, case 1.1), so the second micro-batch of an
    accumulation overwrites the first's gradient (an error or wrong sums, pytorch/pytorch#169545).
    With `.grad` defined and no grad mode in backward, AccumulateGrad adds in place,
    `variable_grad += new_grad` (case 2.3): the pool tensor is only read, before the next replay
    (same stream). Torch 2.13's own error text for this case says the same: preallocate zeroed .grad.
    """
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


@contextlib.contextmanager
def grad_sync(wrapped: nn.Module, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce for all but the last micro-batch of an accumulation."""
    if enabled:
        yield
        return
    if hasattr(wrapped, "no_sync"):  # DDP
        with wrapped.no_sync():
            yield
        return
    if hasattr(wrapped, "set_requires_gradient_sync"):  # FSDP2
        wrapped.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            wrapped.set_requires_gradient_sync(True)
        return
    yield


def unwrap(wrapped: nn.Module) -> Transformer:
    m = getattr(wrapped, "module", wrapped)
    assert isinstance(m, Transformer)
    return m
