"""The token tiles' branch-free loop (selected.py `_config` "tok_pipe"; selected_query.py PIPE, a probe
switch for pipelining the gathered K/V loads) under TRITON_INTERPRET=1 on CPU: a skipped step leaves
the online softmax's state bit for bit as it was (an all -inf logit row); the token-tile forward and
dQ in both modes (1: every slot a step, 2: the tile's union) are bitwise the branchy loop's at TP = 1
(G 16), 2 (G 6, two key chunks a block) and 8 (G 2), on tables with duplicates, invalid, negative and
future entries, in fp32, fp16 and bf16 (the honest-bf16 fixture); the union mode takes exactly the
branchy loop's key steps; the probe's variant reaches both launches, and the union mode falls back
where its compare would not fit."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported

import pytest
import torch

pytest.importorskip("triton")

import triton
import triton.language as tl

from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_query as tq
from nsa.attention.triton.selected_forced import online_softmax_step
from tests.fixtures.launch_spy import LaunchSpy
from tests.unit.attention.triton.test_triton_selected import (
    _adjacent_table,
    _compare_any_table,
    _inputs,
    _odd_table,
)


@triton.jit
def _step_kernel(S, V, M, L, ACC, R: tl.constexpr, C: tl.constexpr, DD: tl.constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    d = tl.arange(0, DD)
    s = tl.load(S + r[:, None] * C + c[None, :])
    v = tl.load(V + c[:, None] * DD + d[None, :])
    m, lsum, acc = online_softmax_step(
        s, v, tl.load(M + r), tl.load(L + r), tl.load(ACC + r[:, None] * DD + d[None, :]), "ieee"
    )
    tl.store(M + r, m)
    tl.store(L + r, lsum)
    tl.store(ACC + r[:, None] * DD + d[None, :], acc)


def test_an_all_minus_inf_step_leaves_the_softmax_state_bit_for_bit():
    """What a skipped step of the branch-free loop does: logits all -inf, values zero (masked loads).
    Rows with a state (finite max) and a row without one (max -inf, sum 0, output 0) keep every bit."""
    R, C, DD = 16, 16, 16
    g = torch.Generator().manual_seed(1)
    m = torch.randn(R, generator=g) * 30
    m[3] = float("-inf")
    lsum = torch.rand(R, generator=g) * 50 + 1
    lsum[3] = 0.0
    acc = torch.randn(R, DD, generator=g)
    acc[3] = 0.0
    state = (m.clone(), lsum.clone(), acc.clone())
    _step_kernel[(1,)](torch.full((R, C), float("-inf")), torch.zeros(C, DD), m, lsum, acc, R=R, C=C, DD=DD)
    for name, a, b in zip(("m", "l", "acc"), (m, lsum, acc), state):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), name


def _tok_kernels(pipe: int, G, q, k, v, idx, valid, lp, dout, state, bk: int = 16):
    """The token-tile forward and dQ alone (the launch config's tiles, `bk` keys a step), from a given
    forced-part state (OF, LSEF; DELTA, DQF, the forward's LSE): (out, lse, dq)."""
    B, Hkv, T, _, D = q.shape
    cfg = {**tsel._launch_config(G, D, lp), "BK": bk}
    of, lsef, delta, dqf = state
    consts = dict(G=G, D=D, LP=lp, TP=cfg["TP"], RP=cfg["RP"], NKP=tsel._slots(idx.shape[-1]), DP=cfg["DP"],
                  BK=cfg["BK"], PREC="ieee", PIPE=pipe)  # fmt: skip
    grid = (-(-T // cfg["TP"]), B * Hkv)
    valid8, n = valid.view(torch.int8), idx.shape[-1]
    out, lse, dq = torch.empty_like(q), torch.empty_like(lsef), torch.empty_like(q)
    tq._sel_fwd_tok_kernel[grid](q, k, v, idx, valid8, out, lse, of, lsef, T, n, D**-0.5, **consts)
    tq._sel_bwd_dq_tok_kernel[grid](
        q, k, v, idx, valid8, dout, lse, delta, dq, dqf, T, n, D**-0.5, **consts
    )  # fmt: skip
    return out, lse, dq


def _state(B, Hkv, T, G, D, seed):
    """A forced-part state as the forced kernels leave it: a normalized output and its lse (-inf and
    zeros for a few rows without a forced key), delta and the forced entries' dQ in fp32."""
    g = torch.Generator().manual_seed(seed)
    lsef = torch.randn(B, Hkv, T, G, generator=g) * 4
    none = torch.rand(B, Hkv, T, G, generator=g) < 0.15
    lsef[none] = float("-inf")
    of = torch.randn(B, Hkv, T, G, D, generator=g) * ~none[..., None]
    return of, lsef, torch.randn(B, Hkv, T, G, generator=g), torch.randn(B, Hkv, T, G, D, generator=g)


# (G, dtype, T, l', keys a step, table, modes): TP = 1, 2, 8 tokens a tile; G 6 takes a block in
# two steps of 2 keys (the step arithmetic both modes share) and two (batch, KV head) sequences.
CASES = [
    (16, torch.float32, 18, 4, 16, "odd", (1, 2)),
    (6, torch.float16, 13, 4, 2, "odd", (2,)),
    (2, torch.float32, 21, 4, 16, "adjacent", (1, 2)),
]


@pytest.mark.parametrize("G,dtype,T,lp,bk,table,modes", CASES)
def test_branch_free_loop_gives_the_branchy_results_bit_for_bit(G, dtype, T, lp, bk, table, modes):
    D, n = 16, 4
    B, Hkv = (2, 1) if G == 6 else (1, 1)
    q, k, v = (x.detach() for x in _inputs(B, Hkv, T, G, D, dtype, seed=50 + G))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(G)).to(dtype)
    if table == "odd":
        idx, valid = _odd_table(B, Hkv, T, lp, n, seed=G)
    else:
        idx, valid = _adjacent_table(T, lp, 6, False, seed=G)
    state = _state(B, Hkv, T, G, D, seed=G)
    off = _tok_kernels(0, G, q, k, v, idx, valid, lp, dout, state, bk)
    for mode in modes:
        on = _tok_kernels(mode, G, q, k, v, idx, valid, lp, dout, state, bk)
        for name, a, b in zip(("out", "lse", "dq"), on, off):
            assert torch.equal(a, b), f"PIPE {mode}: {name}"
    assert not torch.equal(off[0].float(), state[0]) and not torch.equal(off[2].float(), state[3] * D**-0.5)


def test_branch_free_loop_bf16_bit_for_bit(bf16_interpreter):
    """bf16 as the GPU does it (honest-bf16 fixture) at the paper's G 16 (one token a tile), the union."""
    G, T, D, lp = 16, 16, 16, 4
    g = torch.Generator().manual_seed(60)
    q, dout = (torch.randn(1, 1, T, G, D, generator=g).bfloat16() for _ in range(2))
    k, v = (torch.randn(1, 1, T, D, generator=g).bfloat16() for _ in range(2))
    idx, valid = _odd_table(1, 1, T, lp, 4, seed=G)
    state = _state(1, 1, T, G, D, seed=61)
    off = _tok_kernels(0, G, q, k, v, idx, valid, lp, dout, state)
    for mode in (2,):  # the probe's mode (the masked steps' arithmetic: fp32 above)
        on = _tok_kernels(mode, G, q, k, v, idx, valid, lp, dout, state)
        for name, a, b in zip(("out", "lse", "dq"), on, off):
            assert torch.equal(a, b), f"PIPE {mode}: {name}"


def test_the_kernel_probe_variant_reaches_both_launches(monkeypatch):
    """bench/kernel_probe.py's variant {tok_pipe 2, 3 stages}, applied as probe_sel patches the launch
    config, passes PIPE 2 and 3 stages to the token-tile forward and dQ (G 16: the query-major path
    as shipped), and selected_attention's output and gradients are the eager op's."""
    from tests.fixtures.bench import load_bench

    probe = load_bench("kernel_probe")
    over = tsel.TOK_PIPE_PROBE  # what gpucheck compiles beside the shipped loop
    assert over in [{k: v for k, v in o.items() if k not in probe.META} for o in probe.SEL_VARIANTS]
    seen = []

    G, T, D, lp = 16, 13, 16, 4
    q, k, v = _inputs(1, 1, T, G, D, torch.float32, seed=70)
    idx, valid = _odd_table(1, 1, T, lp, 4, seed=70)
    base = tsel._launch_config
    monkeypatch.setattr(
        tsel, "_launch_config", lambda G, D, LP, *a: probe._apply(base(G, D, LP, *a), over, G)
    )
    monkeypatch.setattr(
        tsel, "_sel_fwd_tok_kernel", LaunchSpy(tq._sel_fwd_tok_kernel, seen, "PIPE", "num_stages")
    )
    monkeypatch.setattr(
        tsel, "_sel_bwd_dq_tok_kernel", LaunchSpy(tq._sel_bwd_dq_tok_kernel, seen, "PIPE", "num_stages")
    )
    _compare_any_table(q, k, v, idx, valid, lp)
    assert seen == [(2, 3), (2, 3)]


def test_tok_pipe_ships_at_g_over_8_on_sm90_and_the_union_mode_falls_back_past_64_entries():
    """The union mode at 2 stages, the dQ at 2 warps, ships where the token tiles run (G > 8) on sm_90
    (bench/gather_proxy.py's price); the branchy loop the GPU measured elsewhere (sm_80, and G <= 8,
    where the key-major kernels run). The union mode's [E, E] compare of the tile's E = TP x NKP
    entries spilled at G 1 (256 entries) and filled the registers at G 2 (128): there the launch takes
    every slot a step instead; gpucheck compiles the probe's build beside a shipped branchy loop."""
    from nsa.attention.triton.spec import GpuShape

    for G, D in ((16, 128), (16, 64), (6, 64), (1, 64)):
        for arch in (80, 90):
            cfg = tsel._config(G, D, 64, arch=arch)
            shipped = arch == 90 and G > 8
            assert cfg["tok_pipe"] == (2 if shipped else 0), (G, D, arch)
            assert (cfg["stages_tok"], cfg["stages_dq"], cfg["warps_q"]) == (
                (2, 2, 2) if shipped else (2 if D <= 64 else 1, 1, 4)
            )
    modes = {G: tsel._pipe_mode({**tsel._config(G, 64, 64), "tok_pipe": 2}, 16) for G in (1, 2, 6, 16)}
    assert modes == {1: 1, 2: 1, 6: 2, 16: 2}
    assert tsel._pipe_mode({**tsel._config(16, 128, 64), "tok_pipe": 2}, 128) == 1  # n 128: 128 entries
    for G in (1, 16):
        shape = GpuShape(
            "s", head_dim=64, group=G, block_len=32, block_stride=16, sel_block=64, n_sel=16, window=512
        )
        specs = {sp.name: sp for sp in tsel.gpucheck_specs(shape, 90)}
        if G == 16:  # shipped: the launch's own rows hold it
            assert specs["selected_fwd"].constexprs["PIPE"] == 2 and specs["selected_bwd_dq"].num_stages == 2
            assert "selected_fwd_pipe" not in specs
            continue
        assert specs["selected_fwd"].constexprs["PIPE"] == 0
        assert specs["selected_fwd_pipe"].constexprs["PIPE"] == modes[G]
        assert specs["selected_bwd_dq_pipe"].num_stages == tsel.TOK_PIPE_PROBE["stages_dq"]


def test_the_union_mode_takes_the_branchy_loops_key_steps_and_every_slot_mode_all_slots(monkeypatch):
    """Dot products issued by the forward (2 a step) and dQ (3 a step), counted in the interpreter:
    the union mode takes exactly the branchy loop's key steps (key_steps' count: what the cost model
    prices), every-slot mode one step per table slot of each token (masked or not)."""
    from triton.runtime import interpreter

    dots = []
    create_dot = interpreter.InterpreterBuilder.create_dot

    def counting_dot(self, *args):
        dots.append(1)
        return create_dot(self, *args)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", counting_dot)
    G, T, D, lp, n = 6, 14, 16, 4, 4
    q, k, v = (x.detach() for x in _inputs(1, 1, T, G, D, torch.float32, seed=80))
    idx, valid = _odd_table(1, 1, T, lp, n, seed=80)
    state = _state(1, 1, T, G, D, seed=80)
    want = tq.key_steps(idx, valid, lp, G, key_tile=16)["steps_tiles"]
    got = {}
    for mode in (0, 1, 2):
        dots.clear()
        _tok_kernels(mode, G, q, k, v, idx, valid, lp, q, state)
        got[mode] = len(dots)
    assert want > 0 and got == {0: 5 * want, 1: 5 * T * n, 2: 5 * want}
