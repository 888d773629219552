"""DenseAttention: plain causal grouped-query attention through SDPA, the baseline for NSA.

Owns its q/k/v/o projections and RoPE; it is the `attention: dense` choice of the model and the
reference point of bench/attention.py. It must not grow NSA features: it exists to be the simplest
fast causal attention with the same constructor and call interface as `NSAAttention`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nsa.attention.rope import apply_rope, rope_tables


def native_gqa(device: torch.device) -> bool:
    """SDPA's enable_gqa where it is the fast path (CUDA); expanded K/V elsewhere."""
    return device.type == "cuda"


class DenseAttention(nn.Module):
    """Causal GQA attention: x [B, T, dim] -> [B, T, dim], token positions 0..T-1."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        rope_theta: float = 10000.0,
    ) -> None:
        super().__init__()
        if n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads} (grouped-query attention)"
            )
        self.dim, self.n_heads, self.n_kv_heads, self.head_dim = dim, n_heads, n_kv_heads, head_dim
        self.rope_theta = rope_theta
        self.wq = nn.Linear(dim, n_heads * head_dim, bias=False)
        self.wkv = nn.Linear(dim, 2 * n_kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(n_heads * head_dim, dim, bias=False)
        # Same telemetry contract as NSAAttention; dense has nothing to report.
        self.collect_stats = False
        self.last_stats: dict[str, Tensor] | None = None

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.wq(x).view(B, T, H, D)
        kv = self.wkv(x).view(B, T, 2, Hkv, D)
        k, v = kv[:, :, 0], kv[:, :, 1]
        rope_dtype = torch.promote_types(x.dtype, torch.float32)
        cos, sin = rope_tables(T, D, self.rope_theta, rope_dtype, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if Hkv != H and native_gqa(x.device):
            # CUDA: the flash / cuDNN kernels read each K/V head once for its whole query group.
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            if Hkv != H:
                # Expanding K/V measured faster than enable_gqa on the CPU flash kernel (bench/attention.py).
                k = k.repeat_interleave(H // Hkv, dim=1)
                v = v.repeat_interleave(H // Hkv, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, H * D))
