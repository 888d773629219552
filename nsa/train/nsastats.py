"""NSA telemetry of a training step: gate means and selection reach, folded over layers.

Owns switching the attention modules' `collect_stats` on for one micro-batch and folding their
`last_stats` (0-dim device tensors) into `nsa/*` metrics; read on stats steps only (the one place a
host sync is allowed then). Compiled blocks cannot write module attributes from inside a
checkpointed region (dynamo refuses the side effect and compiles nothing), so under
parallel.compile the stats come from `side_pass`: one extra uncompiled no-grad forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _attn_modules(model: nn.Module) -> list[Any]:
    return [b.attn for b in model.blocks if hasattr(b.attn, "collect_stats")]


def set_collect(model: nn.Module, on: bool) -> None:
    for a in _attn_modules(model):
        a.collect_stats = on


def read(model: nn.Module) -> dict[str, float]:
    """Per-layer stats folded over layers: `*max*` keys by max, `*min*` by min, the rest by mean."""
    keys: list[str] = []
    vals: list[torch.Tensor] = []
    for a in _attn_modules(model):
        for k, v in (getattr(a, "last_stats", None) or {}).items():
            keys.append(k)
            vals.append(v.detach().float().reshape(()))
    # One copy to the host for all of them: float() of each was a sync apiece, 60 a stats step at
    # M7C's 12 layers (bench/step_host.py --syncs, bench/RESULTS.md "Host syncs of a training step").
    host = torch.stack(vals).tolist() if vals else []
    per_key: dict[str, list[float]] = {}
    for k, v in zip(keys, host, strict=True):
        per_key.setdefault(k, []).append(v)
    fold = {"max": max, "min": min}
    out = {}
    for k, vs in per_key.items():
        how = next((f for name, f in fold.items() if name in k.rsplit("/", 1)[-1]), None)
        out[f"nsa/{k}"] = how(vs) if how else sum(vs) / len(vs)
    return out


@torch.no_grad()
def side_pass(model: nn.Module, x: torch.Tensor, autocast: Any) -> dict[str, float]:
    """Stats from an uncompiled forward of one micro-batch (block.forward skips the compiled __call__)."""
    set_collect(model, True)
    try:
        with autocast():
            h = model.tok_emb(x)
            for block in model.blocks:
                h = block.forward(h)
        return read(model)
    finally:
        set_collect(model, False)
