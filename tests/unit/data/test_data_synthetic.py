"""The synthetic source has learnable structure: a tiny next-token model trained on its batches for
a few seconds ends far below the loss of a model that only knows which characters occur."""

from __future__ import annotations

import math

import torch
from torch import nn

from nsa.data import DataConfig, build_loader, vocab_size_for


class ContextMLP(nn.Module):
    """Predicts token t+1 from tokens t-K+1..t: enough to continue an arithmetic sequence."""

    def __init__(self, vocab: int, k: int = 8, dim: int = 24):
        super().__init__()
        self.k = k
        self.emb = nn.Embedding(vocab, dim)
        self.net = nn.Sequential(nn.Linear(k * dim, 128), nn.ReLU(), nn.Linear(128, vocab))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.emb(nn.functional.pad(x, (self.k - 1, 0)))  # [B, T+K-1, D]
        windows = e.unfold(1, self.k, 1)  # [B, T, D, K]
        return self.net(windows.transpose(2, 3).flatten(2))


def test_a_small_model_drives_the_synthetic_loss_down():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: extra threads only spin against the other tests' work
    try:
        _train_and_check()
    finally:
        torch.set_num_threads(threads)


def _train_and_check():
    torch.manual_seed(0)
    cfg = DataConfig(source="synthetic")
    model = ContextMLP(vocab_size_for(cfg))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    with build_loader(cfg, seq_len=64, batch_size=8, rank=0, world_size=1) as ld:
        losses = []
        for _ in range(120):
            x, y = ld.next_batch()
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    start, end = losses[0], sum(losses[-20:]) / 20
    assert start > 0.9 * math.log(257)
    # Digits, space and EOD alone give ~ln(12) = 2.48 nats; structure has to be learned to go well below.
    assert end < 1.6, losses[::10]
