"""How much GPU memory a run needs per rank, estimated before it starts (printed in the boot banner).

Owns one estimate: weights + gradients + AdamW state (16 bytes per parameter, divided by the world
size under FSDP) plus the activations autograd saves. The saved activations are not a formula:
one block's forward runs on the meta device (no memory, no compute) under a saved-tensors hook that
adds up what backward would keep, with the NSA ops the run will use on its device (on a GPU the
triton kernels' meta functions: the eager ops keep about twice as much). Checkpointed blocks keep
only their input (fp32 under autocast: the residual stream follows the fp32 master embedding),
plus one block's worth while it is recomputed. It is an estimate: allocator fragmentation, the CUDA
context (~0.5 GB) and transient buffers are not in it, so the boot line compares it with the
device's size to leave room. bench/memory.py counts a whole step's peak on meta instead (seconds;
within ~25 % of this line for M7C at 8k-64k, bench/RESULTS.md).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from nsa.train.config import TrainConfig
from nsa.train.parallelize import checkpointed_blocks

GIB = 2**30


def saved_bytes_per_block(
    cfg: TrainConfig, vocab: int, batch: int, dtype: torch.dtype, device: torch.device | None = None
) -> int:
    """Bytes one block's forward saves for backward at (batch, train.seq_len), measured on meta tensors,
    with the attention ops a run on `device` uses (None: the meta device's own, eager)."""
    from nsa.attention import NSAAttention
    from nsa.attention import nsa as nsa_module
    from nsa.model import Block

    with torch.device("meta"):
        block = Block(cfg.model).to(dtype)
        x = torch.empty(batch, cfg.train.seq_len, cfg.model.dim, dtype=dtype, requires_grad=True)
    if device is not None and isinstance(block.attn, NSAAttention):
        # The meta kernels of the run's ops (triton's on CUDA) save what the run's ops save. A
        # backend that cannot run on `device` is the trainer's error to report, not the estimate's.
        with contextlib.suppress(ValueError):
            block.attn._dispatch["meta"] = nsa_module._ops(block.attn.resolved_backend(device))
    params = {id(p) for p in block.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if id(base) not in params:  # parameters are counted with the weights, not the activations
            seen[id(base)] = base.nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    return sum(seen.values())


def estimate(
    cfg: TrainConfig, vocab: int, world_size: int, bf16: bool, fsdp: bool, device: torch.device | None = None
) -> dict[str, Any]:
    """GiB per rank: {"states", "activations", "total", "per_block_gb", "checkpointed"} of a run on
    `device` (its attention ops; None: the eager ops)."""
    from nsa.model import Transformer

    with torch.device("meta"):
        n_params = Transformer(cfg.model, vocab).num_params()
    states = 16 * n_params / (world_size if fsdp else 1)
    t, m = cfg.train, cfg.model
    act_dtype = torch.bfloat16 if bf16 else torch.float32
    elt = 2 if bf16 else 4
    per_block = saved_bytes_per_block(cfg, vocab, t.batch_size, act_dtype, device)
    ckpt = checkpointed_blocks(m.n_layers, cfg.parallel.activation_checkpointing, cfg.parallel.ac_every)
    # Autocast over fp32 masters (bf16 without FSDP) leaves the residual stream, hence a checkpointed
    # block's input, in fp32; FSDP2's bf16 parameters make it bf16.
    block_input = t.batch_size * t.seq_len * m.dim * (4 if (bf16 and not fsdp) else elt)
    acts = (m.n_layers - len(ckpt)) * per_block + len(ckpt) * block_input + (per_block if ckpt else 0)
    # Logits (compute dtype), their fp32 copy for the loss and its gradient: the largest single buffer.
    acts += t.batch_size * t.seq_len * vocab * (elt + 4 + 4)
    return {
        "states_gb": states / GIB,
        "activations_gb": acts / GIB,
        "total_gb": (states + acts) / GIB,
        "per_block_gb": per_block / GIB,
        "checkpointed_blocks": len(ckpt),
    }


def describe(est: dict[str, Any], mode: str, device_total_gb: float | None) -> str:
    """The boot banner's memory line, with a warning when the estimate leaves less than 10 % free."""
    line = (
        f"~{est['total_gb']:.1f} GiB/rank estimated (weights+grads+AdamW {est['states_gb']:.1f}, "
        f"activations {est['activations_gb']:.1f} with activation_checkpointing={mode}: "
        f"{est['checkpointed_blocks']} blocks recomputed)"
    )
    if device_total_gb:
        line += f" of {device_total_gb:.0f} GiB"
        if est["total_gb"] > 0.9 * device_total_gb:
            line += (
                "; WARNING: may not fit: set parallel.activation_checkpointing=selective or full, "
                "or lower train.batch_size (raise train.grad_accum to keep the global batch)"
            )
    return line
