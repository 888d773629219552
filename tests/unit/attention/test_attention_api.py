"""The public contract of nsa.attention: DenseAttention is correct causal GQA, both modules take any
T >= 1 and `rope_theta`, bad constructor arguments fail with a message naming the argument, the
telemetry hook (`collect_stats` -> `last_stats`), the kernels on their own, and torch.compile.

Run: .venv/bin/pytest tests/unit/attention/test_attention_api.py
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nsa.attention import DenseAttention, NSAAttention
from nsa.attention.reference import _rope_rows
from nsa.attention.selected import selected_attention
from nsa.attention.selection import overlap_weights, top_blocks
from nsa.attention.window import window_attention


def _naive_dense(attn: DenseAttention, x: torch.Tensor) -> torch.Tensor:
    B, T, _ = x.shape
    H, Hkv, D = attn.n_heads, attn.n_kv_heads, attn.head_dim
    q = F.linear(x, attn.wq.weight).view(B, T, H, D)
    kv = F.linear(x, attn.wkv.weight).view(B, T, 2, Hkv, D)
    pos = list(range(T))
    out = torch.zeros(B, T, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            qh = _rope_rows(q[b, :, h], pos, attn.rope_theta)
            kh = _rope_rows(kv[b, :, 0, g], pos, attn.rope_theta)
            s = qh @ kh.T / math.sqrt(D)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            out[b, :, h] = torch.softmax(s, -1) @ kv[b, :, 1, g]
    return F.linear(out.reshape(B, T, H * D), attn.wo.weight)


@pytest.mark.parametrize(("H", "Hkv", "T"), [(4, 4, 9), (6, 2, 33), (4, 1, 1)])
def test_dense_is_causal_gqa_with_rope(H, Hkv, T):
    torch.manual_seed(0)
    attn = DenseAttention(16, H, Hkv, 8, rope_theta=321.0)
    x = torch.randn(2, T, 16)
    torch.testing.assert_close(attn(x), _naive_dense(attn, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", [NSAAttention, DenseAttention])
def test_any_length_and_rope_theta_keyword(cls):
    torch.manual_seed(0)
    attn = cls(32, 4, 2, 8, rope_theta=500000.0)
    for T in (1, 2, 17):
        y = attn(torch.randn(3, T, 32))
        assert y.shape == (3, T, 32) and torch.isfinite(y).all()
    other = cls(32, 4, 2, 8, rope_theta=10.0)
    other.load_state_dict(attn.state_dict())
    x = torch.randn(1, 8, 32)
    assert not torch.allclose(attn(x), other(x)), "rope_theta has no effect"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (dict(n_heads=6, n_kv_heads=4), "n_kv_heads=4"),
        (dict(head_dim=7), "head_dim=7"),
        (dict(block_len=30, block_stride=16), "block_len=30"),
        (dict(sel_block=40), "sel_block=40"),
        (dict(n_sel=2), "n_sel=2"),
        (dict(window=0), "window=0"),
        (dict(compression="conv"), "compression='conv'"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, needle):
    args = dict(dim=32, n_heads=4, n_kv_heads=2, head_dim=8) | kwargs
    with pytest.raises(ValueError, match="NSAAttention") as e:
        NSAAttention(**args)
    assert needle in str(e.value)


def test_stats_only_when_asked_and_stay_tensors():
    torch.manual_seed(0)
    attn = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 16)
    x = torch.randn(2, 90, 32)
    attn(x)
    assert attn.last_stats is None
    attn.collect_stats = True
    attn(x)
    stats = attn.last_stats
    assert set(stats) == {"gate/cmp", "gate/sel", "gate/win", "sel/reach_mean", "sel/reach_max"}
    for k, v in stats.items():
        assert isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad, k
    gates = torch.sigmoid(attn.gate(x)).view(2, 90, 4, 3)
    for i, k in enumerate(["gate/cmp", "gate/sel", "gate/win"]):
        torch.testing.assert_close(stats[k], gates[..., i].mean())
    # Forced initial block: the last query always reaches back to token 0.
    assert stats["sel/reach_max"].item() == 89.0
    assert 0.0 < stats["sel/reach_mean"].item() < 89.0
    attn.collect_stats = False
    attn(x)
    assert attn.last_stats is None


def test_window_kernel_matches_a_masked_dense_softmax():
    torch.manual_seed(0)
    for T, w in [(1, 4), (7, 4), (16, 4), (23, 5), (10, 64)]:
        q = torch.randn(2, 2, T, 3, 8, dtype=torch.float64)
        k, v = torch.randn(2, 2, T, 8, dtype=torch.float64), torch.randn(2, 2, T, 8, dtype=torch.float64)
        outs = [window_attention(q, k, v, window=w, scale=0.3, split=m) for m in (1, 2, 3)]
        t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = (s <= t) & (s > t - w)
        logits = torch.einsum("bhtgd,bhsd->bhgts", q, k) * 0.3
        p = torch.softmax(logits.masked_fill(~allowed, float("-inf")), -1)
        want = torch.einsum("bhgts,bhsd->bhtgd", p, v)
        for out in outs:
            torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_selected_kernel_gradcheck_float64():
    torch.manual_seed(0)
    B, Hkv, T, G, D, lp = 1, 2, 13, 2, 4, 4
    q = torch.randn(B, Hkv, T, G, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, Hkv, T, D, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, Hkv, T, D, dtype=torch.float64, requires_grad=True)
    scores = torch.rand(B, Hkv, T, -(-T // lp))
    idx, valid = top_blocks(scores, torch.arange(T), lp, 3)
    assert not valid[:, :, :4].all() and valid[:, :, -1].all()

    def f(q, k, v):
        return selected_attention(q, k, v, idx, valid, sel_block=lp, scale=0.5, chunk=5)

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_overlap_weights_count_shared_pieces():
    for bl, d, lp in [(32, 16, 64), (8, 8, 8), (16, 4, 8), (64, 16, 64)]:
        w = overlap_weights(bl, d, lp)
        a = bl // d
        j = 5
        for u, wu in enumerate(w):
            i = j * (lp // d) - (a - 1) + u
            shared = max(0, min(i * d + bl, (j + 1) * lp) - max(i * d, j * lp)) // d
            assert wu == shared, (bl, d, lp, u)
    assert overlap_weights(32, 16, 64) == [1, 2, 2, 2, 1]


def test_ties_go_to_the_more_recent_block_and_forced_blocks_win():
    t = torch.tensor([400])
    scores = torch.zeros(1, 7)  # blocks of 64: candidates 0..6, forced 0, 5, 6
    idx, valid = top_blocks(scores, t, 64, 5)
    assert sorted(idx[0].tolist()) == [0, 3, 4, 5, 6] and valid.all()
    scores[0, 1] = 1e-30
    idx, _ = top_blocks(scores, t, 64, 5)
    assert sorted(idx[0].tolist()) == [0, 1, 4, 5, 6]
    scores[0, 0] = -0.0  # the sign of zero must not change the order
    assert torch.equal(top_blocks(scores, t, 64, 5)[0], idx)


def test_compiles_fullgraph_without_graph_breaks_or_syncs():
    """fullgraph=True fails on any graph break, including a host sync such as `.item()`."""
    torch.manual_seed(0)
    attn = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 32, sel_chunk=32, cmp_chunk=64)
    attn.collect_stats = True
    x = torch.randn(2, 100, 32, requires_grad=True)
    y_eager = attn(x)
    g_eager = torch.autograd.grad(y_eager.sum(), [x, *attn.parameters()])
    compiled = torch.compile(attn, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    g = torch.autograd.grad(y.sum(), [x, *attn.parameters()])
    torch.testing.assert_close(y, y_eager)
    for a, b in zip(g, g_eager):
        torch.testing.assert_close(a, b)
    assert attn.last_stats is not None


def test_custom_ops_pass_opcheck():
    """Fake (meta) kernels and the autograd registration agree with the real kernels."""
    torch.manual_seed(0)
    B, Hkv, T, G, D, lp = 1, 2, 9, 2, 4, 4
    q = torch.randn(B, Hkv, T, G, D, requires_grad=True)
    kv = torch.randn(B, Hkv, 12, 2 * D, requires_grad=True)
    idx, valid = top_blocks(torch.rand(B, Hkv, T, 3), torch.arange(T), lp, 3)
    torch.library.opcheck(torch.ops.nsa.selected_fwd, (q, kv, idx, valid, lp, 4, 0.5))
    kc = torch.randn(B, Hkv, 3, D)
    torch.library.opcheck(torch.ops.nsa.select_blocks, (q.detach(), kc, 4, 2, lp, 3, 0.5, 4))


def test_bfloat16_runs_and_tracks_float32():
    """The GPU path runs bf16; on CPU the same code must stay finite and close to fp32."""
    torch.manual_seed(0)
    attn = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 16)
    x = torch.randn(2, 80, 32)
    y32 = attn(x)
    attn16 = attn.to(torch.bfloat16)
    xb = x.to(torch.bfloat16).requires_grad_()
    y16 = attn16(xb)
    y16.float().square().sum().backward()
    assert y16.dtype == torch.bfloat16 and torch.isfinite(xb.grad).all()
    rel = (y16.float() - y32).norm() / y32.norm()
    assert rel < 0.05, f"bf16 output drifts {rel:.3f} from fp32"


@pytest.mark.parametrize("backward_inside", [False, True], ids=["backward-outside", "backward-inside"])
def test_bf16_autocast_over_fp32_weights_gives_fp32_grads(backward_inside):
    """The trainer's bf16 mode: fp32 weights under autocast. The custom ops pick their own dtypes, so
    a backward run inside the autocast region (as user code often does) must work too."""
    torch.manual_seed(0)
    attn = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 16)
    x = torch.randn(2, 80, 32, requires_grad=True)
    y32 = attn(x).detach()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = attn(x)
        if backward_inside:
            y.float().square().sum().backward()
    if not backward_inside:
        y.float().square().sum().backward()
    assert x.grad.dtype == torch.float32 and torch.isfinite(x.grad).all()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in attn.parameters())
    rel = (y.float() - y32).norm() / y32.norm()
    assert rel < 0.05, f"autocast output drifts {rel:.3f} from fp32"


def test_dense_enable_gqa_path_matches_expanded_kv(monkeypatch):
    """CUDA takes SDPA's enable_gqa (no K/V copies); forced on CPU here, it must equal the expanded path."""
    from nsa.attention import dense

    torch.manual_seed(0)
    attn = DenseAttention(32, 4, 2, 8)
    x = torch.randn(2, 24, 32, requires_grad=True)
    y_expand = attn(x)
    (g_expand,) = torch.autograd.grad(y_expand.sum(), [x])
    assert dense.native_gqa(torch.device("cuda")) and not dense.native_gqa(torch.device("cpu"))
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(dense, "native_gqa", lambda device: True)
    monkeypatch.setattr(
        dense.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(k) or real(*a, **k)
    )
    y_gqa = attn(x)
    (g_gqa,) = torch.autograd.grad(y_gqa.sum(), [x])
    assert calls and calls[0].get("enable_gqa") is True
    torch.testing.assert_close(y_gqa, y_expand)
    torch.testing.assert_close(g_gqa, g_expand)
