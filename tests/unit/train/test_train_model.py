"""The model: shapes, parameter counting, tied head, and per-block activation checkpointing that
recomputes each block itself (the old late-bound-lambda bug recomputed the last block everywhere)."""

from __future__ import annotations

from pathlib import Path

import torch

from nsa.model import Transformer
from nsa.train.config import load_config
from nsa.train.parallelize import CheckpointedForward, apply_activation_checkpointing

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "configs" / "tiny.yaml"


def _tiny(*sets: str) -> Transformer:
    cfg = load_config(TINY, ["train.seq_len=32", *sets])
    torch.manual_seed(0)
    return Transformer(cfg.model, cfg.resolved_vocab_size())


def test_logits_and_loss_shapes_for_both_attentions() -> None:
    x = torch.randint(0, 257, (2, 32))
    for attention in ("nsa", "dense"):
        m = _tiny(f"model.attention={attention}")
        assert m(x).shape == (2, 32, 257)
        loss = m(x, x)
        assert loss.dim() == 0 and 4.0 < loss.item() < 7.0  # ~ln(257) = 5.55 at init


def test_dense_parameter_count_matches_the_formula() -> None:
    m = _tiny("model.attention=dense")
    c = m.cfg
    attn = c.dim * c.n_heads * c.head_dim * 2 + 2 * c.dim * c.n_kv_heads * c.head_dim
    mlp = 3 * c.dim * c.ffn_width()
    per_block = attn + mlp + 2 * c.dim
    expected = 257 * c.dim + c.n_layers * per_block + c.dim  # tied head counts once
    assert m.num_params() == expected
    untied = _tiny("model.attention=dense", "model.tie_embeddings=false")
    assert untied.num_params() == expected + 257 * c.dim
    assert m.lm_head.weight is m.tok_emb.weight


def test_m7c_real_parameter_count_is_far_from_its_name() -> None:
    cfg = load_config(REPO / "configs" / "m7c_125m.yaml")
    with torch.device("meta"):
        nsa = Transformer(cfg.model, 257).num_params()
        dense = Transformer(
            load_config(REPO / "configs" / "m7c_125m.yaml", ["model.attention=dense"]).model, 257
        )
    assert 70e6 < dense.num_params() < 80e6  # ~73M with a byte vocabulary, not 125M
    assert dense.num_params() < nsa < 90e6  # NSA adds per-branch K/V, compression MLPs, gates


def test_activation_checkpointing_binds_each_block_and_keeps_gradients() -> None:
    x = torch.randint(0, 257, (2, 33))
    ref = _tiny()
    ref(x[:, :-1], x[:, 1:]).backward()
    ac = _tiny()
    apply_activation_checkpointing(ac)
    for block in ac.blocks:
        assert isinstance(block.forward, CheckpointedForward)
        assert block.forward.forward.__self__ is block  # its own block, not the loop's last one
    assert list(ac.state_dict()) == list(ref.state_dict())  # checkpoints stay portable
    ac(x[:, :-1], x[:, 1:]).backward()
    for (name, p), q in zip(ref.named_parameters(), ac.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=1e-6, msg=name)
