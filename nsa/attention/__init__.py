"""Attention for the `nsa` models: Native Sparse Attention and the dense causal GQA baseline.

Owns the public names `NSAAttention` and `DenseAttention` (x [B, T, dim] -> [B, T, dim], RoPE applied
inside, opt-in telemetry via `collect_stats` / `last_stats`). It must not import the model, trainer
or launcher. The slow obviously-correct NSA lives in `nsa.attention.reference`.
"""

from nsa.attention.dense import DenseAttention
from nsa.attention.nsa import NSAAttention

__all__ = ["DenseAttention", "NSAAttention"]
