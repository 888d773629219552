"""The FLOP account: NSA's keys per query against an independent count, `nsa-train --flops`, peaks.

Run: .venv/bin/pytest tests/unit/train/test_flops.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nsa.attention import NSAAttention
from nsa.train.cli import main
from nsa.train.config import load_config
from nsa.train.flops import flops_account, nsa_keys_per_query, peak_for

REPO = Path(__file__).resolve().parents[3]


def test_keys_per_query_match_the_selection_table_and_masks_within_2_percent() -> None:
    """Independent count: the blocks the model's own selection lists, clipped at the query (causal),
    and brute-force compressed / window visibility, averaged over positions."""
    T, bl, d, lp, n, w = 256, 8, 4, 16, 4, 32
    torch.manual_seed(0)
    attn = NSAAttention(32, 4, 2, 8, bl, d, lp, n, w)
    idx, valid = attn.selected_blocks(torch.randn(1, T, 32))
    t = torch.arange(T)[None, None, :, None]
    start = idx * lp
    sel = ((torch.minimum(start + lp, t + 1) - start).clamp_min(0) * valid).sum(-1).float().mean().item()
    n_cmp = (T - bl) // d + 1
    cmp = sum(sum(1 for i in range(n_cmp) if i * d + bl - 1 <= q) for q in range(T)) / T
    win = sum(sum(1 for k in range(q + 1) if q - k < w) for q in range(T)) / T
    got = nsa_keys_per_query(T, bl, d, lp, n, w)
    for name, want in (("selected", sel), ("compressed", cmp), ("window", win)):
        assert got[name] == pytest.approx(want, rel=0.02), name
    assert got["total"] == pytest.approx(sel + cmp + win, rel=0.02)


def test_m7c_at_2k_attends_1263_keys_and_the_flops_json(capsys) -> None:
    assert main(["--flops", "--config", str(REPO / "configs" / "m7c_125m.yaml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"params", "flops_per_token", "attention_flops_per_token", "keys_per_query"} <= set(out)
    assert set(out["keys_per_query"]) == {"compressed", "selected", "window", "total"}
    assert round(out["keys_per_query"]["total"]) == 1263  # dense: 1024.5
    assert out["params"] == 84_947_376
    dense = flops_account(load_config(REPO / "configs" / "m7c_125m.yaml", ["model.attention=dense"]))
    assert dense["keys_per_query"]["total"] == 1024.5
    # The compression MLP runs once per block and KV head: far less than 6 x its params per token.
    assert out["flops_per_token"] < 6 * out["params"] + out["attention_flops_per_token"]


def test_peak_per_sku() -> None:
    assert peak_for("NVIDIA H100 80GB HBM3") == ("H100 SXM", 989e12)
    assert peak_for("NVIDIA H100 PCIe") == ("H100 PCIe", 756e12)
    assert peak_for("NVIDIA H100 NVL") == ("H100 NVL", 835e12)
    assert peak_for("NVIDIA H200")[0] == "H200 SXM"
    assert peak_for("NVIDIA A100-SXM4-40GB") == ("A100 40GB SXM", 312e12)
    assert peak_for("NVIDIA A100 80GB PCIe")[0] == "A100 80GB PCIe"
    assert peak_for("Tesla T4") is None


def test_meta_account_shows_no_checkpointing_moves_fewer_bytes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_train", REPO / "bench" / "train.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cfg = str(REPO / "configs" / "tiny.yaml")
    none = bench.account(cfg, ["parallel.activation_checkpointing=none"])
    full = bench.account(cfg, ["parallel.activation_checkpointing=full"])
    assert none["memory_bound_gb"] < full["memory_bound_gb"] and none["launches"] < full["launches"]
    assert none["gemm_gflop"] < full["gemm_gflop"]  # full recomputes every block's forward
    assert none["saved_activations_mb"] > full["saved_activations_mb"]  # what it buys: memory
