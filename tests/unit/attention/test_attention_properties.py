"""Property tests of NSAAttention: absolute causality (to the last bit, through every branch and the
choice of blocks), the selection table (shared by a GQA group, equal to the reference's choice, forced
blocks present, nothing after the query), finite gradients for every parameter.

Run: .venv/bin/pytest tests/unit/attention/test_attention_properties.py
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nsa.attention import NSAAttention
from nsa.attention.reference import reference_selection

PROPS = settings(max_examples=12, deadline=None, derandomize=True)


@st.composite
def configs(draw, max_t: int = 160):
    """A small NSA config plus a sequence length; block sizes obey d | l and d | l'."""
    d = draw(st.sampled_from([2, 4, 8]))
    bl = d * draw(st.sampled_from([1, 2, 4]))
    lp = d * draw(st.sampled_from([1, 2, 4]))
    hkv = draw(st.sampled_from([1, 2]))
    g = draw(st.sampled_from([1, 2, 3, 6]))
    kw = dict(
        dim=16,
        n_heads=hkv * g,
        n_kv_heads=hkv,
        head_dim=draw(st.sampled_from([4, 8])),
        block_len=bl,
        block_stride=d,
        sel_block=lp,
        n_sel=draw(st.integers(3, 6)),
        window=draw(st.sampled_from([1, 5, 16, 40])),
        compression=draw(st.sampled_from(["mlp", "mean"])),
        sel_chunk=draw(st.sampled_from([7, 32])),
        cmp_chunk=draw(st.sampled_from([13, 64])),
    )
    T = draw(st.integers(1, max_t))
    B = draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**16))
    return kw, B, T, seed


def _build(kw, seed):
    torch.manual_seed(seed)
    attn = NSAAttention(**kw)
    with torch.no_grad():
        for p in attn.parameters():
            p.mul_(2.0)
    return attn


@PROPS
@given(configs(), st.data())
def test_past_outputs_are_bit_identical_when_the_future_changes(cfg, data):
    kw, B, T, seed = cfg
    attn = _build(kw, seed)
    t0 = data.draw(st.integers(0, T - 1), label="t0")
    x = torch.randn(B, T, kw["dim"])
    x2 = x.clone()
    x2[:, t0:] = torch.randn(B, T - t0, kw["dim"]) * 10.0
    with torch.no_grad():
        y1, y2 = attn(x), attn(x2)
        idx1, valid1 = attn.selected_blocks(x)
        idx2, valid2 = attn.selected_blocks(x2)
    assert torch.equal(y1[:, :t0], y2[:, :t0])
    assert torch.equal(idx1[:, :, :t0], idx2[:, :, :t0])
    assert torch.equal(valid1[:, :, :t0], valid2[:, :, :t0])
    if t0 < T:
        assert not torch.equal(y1[:, t0:], y2[:, t0:]), "the perturbation must reach the output"


@PROPS
@given(configs(max_t=120), st.data())
def test_no_gradient_flows_from_the_past_to_the_future(cfg, data):
    kw, B, T, seed = cfg
    attn = _build(kw, seed)
    t0 = data.draw(st.integers(1, T), label="t0")
    x = torch.randn(B, T, kw["dim"], requires_grad=True)
    (gx,) = torch.autograd.grad(attn(x)[:, :t0].square().sum(), [x])
    assert not gx[:, t0:].any(), "y[:, :t0] depends on x[:, t0:]"
    assert gx[:, :t0].abs().sum() > 0


@PROPS
@given(configs(max_t=110))
def test_selection_is_group_shared_and_equals_the_reference(cfg):
    kw, B, T, seed = cfg
    attn = _build(kw, seed)
    x = torch.randn(B, T, kw["dim"])
    idx, valid = attn.selected_blocks(x)
    lp, n = kw["sel_block"], kw["n_sel"]
    n_blocks = -(-T // lp)
    assert idx.shape == (B, kw["n_kv_heads"], T, min(n, n_blocks))
    ref = reference_selection(attn, x)
    for b in range(B):
        for g in range(kw["n_kv_heads"]):
            for t in range(T):
                fast = idx[b, g, t][valid[b, g, t]].tolist()
                # The same blocks (rank order is immaterial): one choice per group, from the summed scores.
                assert sorted(fast) == sorted(ref[b][g][t]), (b, g, t)
                candidates = t // lp + 1
                assert len(fast) == min(n, candidates)
                assert len(set(fast)) == len(fast)
                assert all(j * lp <= t for j in fast), "a block starting after the query was selected"
                forced = {0, t // lp} | ({t // lp - 1} if t >= lp else set())
                assert forced <= set(fast), (t, fast)


def test_selection_really_drops_blocks_and_depends_on_content():
    torch.manual_seed(3)
    attn = NSAAttention(16, 4, 2, 8, 8, 4, 16, 4, 32)
    with torch.no_grad():
        for p in attn.parameters():
            p.mul_(2.0)
    x = torch.randn(1, 200, 16)
    idx, valid = attn.selected_blocks(x)
    assert valid[:, :, -1].all() and idx.shape[-1] == 4 < 200 // 16
    free = idx[0, :, 100:, 3]  # the one slot not taken by forced blocks
    assert len(set(free.flatten().tolist())) > 1, "the free choice never changes: selection ignores content"
    assert not torch.equal(idx[0, 0], idx[0, 1]), "both KV groups chose identically everywhere"


@PROPS
@given(configs(max_t=150))
def test_every_parameter_gets_a_finite_gradient(cfg):
    kw, B, T, seed = cfg
    attn = _build(kw, seed)
    x = torch.randn(B, T, kw["dim"], requires_grad=True)
    attn(x).square().mean().backward()
    for name, p in [("x", x), *attn.named_parameters()]:
        if p.grad is None:
            # No compressed block exists before T reaches block_len: those weights are unused.
            assert name.startswith("cmp_") and kw["block_len"] > T, name
            continue
        assert torch.isfinite(p.grad).all(), name
