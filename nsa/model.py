"""The language model: a Llama-style decoder whose attention is NSA or dense.

This module owns the network only: token embedding, `n_layers` pre-norm blocks (RMSNorm ->
attention -> residual, RMSNorm -> SwiGLU MLP -> residual), a final RMSNorm and the output head
(optionally tied to the embedding), plus the parameter-count helper (FLOPs per token: nsa.train.flops). Attention (and RoPE, applied
inside it) comes from `nsa.attention`, so the NSA model and its dense baseline differ in that one
module. It must not know about ranks, devices, precision or checkpointing: `nsa.train.parallelize`
wraps the blocks from outside.

    python -c "from nsa.model import Transformer; from nsa.train.config import load_config; \
m = Transformer(load_config('configs/tiny.yaml').model, 257); print(m.num_params())"
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nsa.attention import DenseAttention, NSAAttention
from nsa.train.config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 even under bf16 autocast: the mean of squares loses precision otherwise.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


def build_attention(cfg: ModelConfig) -> nn.Module:
    if cfg.attention == "dense":
        return DenseAttention(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, rope_theta=cfg.rope_theta)
    n = cfg.nsa
    return NSAAttention(
        cfg.dim,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        block_len=n.block_len,
        block_stride=n.block_stride,
        sel_block=n.sel_block,
        n_sel=n.n_sel,
        window=n.window,
        rope_theta=cfg.rope_theta,
        compression=n.compression,
        backend=n.backend,
    )


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = build_attention(cfg)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.dim, cfg.ffn_width())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """tokens [B, T] -> logits [B, T, vocab], or the mean next-token loss when targets are given."""

    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.tok_emb = nn.Embedding(vocab_size, cfg.dim)
        # A ModuleList (not Sequential) so parallelize can wrap or shard each block in place.
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue  # norm gains and biases (e.g. NSA gate biases) keep their modules' init
            nn.init.normal_(p, mean=0.0, std=std)
            # GPT-2 scaling: residual-branch outputs shrink with depth so the stream's variance stays put.
            if name.endswith(("w_down.weight", "o_proj.weight", "wo.weight", "out_proj.weight")):
                p.mul_((2 * self.cfg.n_layers) ** -0.5)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = self.tok_emb(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm(x))
        if targets is None:
            return logits
        # Cross-entropy in fp32: under bf16 autocast the log-softmax over the vocabulary is lossy.
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))

    def num_params(self, exclude_embedding: bool = False) -> int:
        """Unique parameters (a tied head counts once); optionally without the input embedding."""
        n = sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())
        if exclude_embedding and not self.cfg.tie_embeddings:
            n -= self.tok_emb.weight.numel()
        return n
