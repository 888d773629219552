"""nsa.train.nsastats.read folds the layers' stats with one copy to the host (was one per value)."""

from __future__ import annotations

import torch
from torch import nn

from nsa.train import nsastats
from nsa.train.hostsync import HostSyncs


class _Attn(nn.Module):
    def __init__(self, stats: dict[str, float], device: str) -> None:
        super().__init__()
        self.collect_stats = True
        self.last_stats = {k: torch.tensor(v, device=device) for k, v in stats.items()}


class _Block(nn.Module):
    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.attn = attn


def _model(device: str) -> nn.Module:
    m = nn.Module()
    layers = [{"gate/cmp": 0.25, "sel/reach_max": 10.0, "sel/reach_min": 3.0},
              {"gate/cmp": 0.75, "sel/reach_max": 30.0, "sel/reach_min": 1.0}]  # fmt: skip
    m.blocks = nn.ModuleList([_Block(_Attn(s, device)) for s in layers] + [_Block(nn.Linear(1, 1))])
    return m


def test_read_folds_by_max_min_and_mean() -> None:
    out = nsastats.read(_model("cpu"))
    assert out == {"nsa/gate/cmp": 0.5, "nsa/sel/reach_max": 30.0, "nsa/sel/reach_min": 1.0}
    quiet = _model("cpu")
    for b in quiet.blocks[:2]:
        b.attn.last_stats = None  # a step that collected nothing
    assert nsastats.read(quiet) == {}


def test_read_copies_to_the_host_once() -> None:
    model = _model("meta")
    with HostSyncs() as spy:
        nsastats.read(model)
    assert sum(spy.syncs().values()) == 1, spy.sites
