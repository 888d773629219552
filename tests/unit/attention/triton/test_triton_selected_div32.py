"""The key-major kernels' rows in 32 bits (selected.py `_config` "keys_div32", the default: the row's
step index, its token by a 32-bit multiply-high (`_magic32`) of the position within its (batch, KV
head), its partial row, and the key mask folded into the causal test; selected_keys_bwd.py
`_pair_rows32`) under TRITON_INTERPRET=1 on CPU: the forward's out and lse and the backward's dq, dk and dv are
bitwise those of the path the GPU runs measured (keys_div32 False: the int64 (pos // NK) % T, a
bench/kernel_probe.py variant), over several (batch, KV head) sequences (the position is taken
within its own) and the broken table of the keys backward's tests; and the switch reaches both
kernels' launches."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported

import pytest
import torch

pytest.importorskip("triton")

import triton
import triton.language as tl

from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys as tkeys_fwd
from nsa.attention.triton import selected_keys_bwd as tkeys
from tests.fixtures.launch_spy import LaunchSpy
from tests.unit.attention.triton.test_triton_selected_keys_bwd import _backward, _inputs, _odd_table


def _run(monkeypatch, div32: bool, q, k, v, idx, valid, lp, dout):
    seen = []
    with monkeypatch.context() as m:
        base = tsel._launch_config
        m.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "bwd_keys": True, "keys_div32": div32})
        m.setattr(tkeys, "_sel_bwd_keys_kernel", LaunchSpy(tkeys._sel_bwd_keys_kernel, seen, "DIV32"))
        m.setattr(tkeys_fwd, "_sel_fwd_keys_kernel", LaunchSpy(tkeys_fwd._sel_fwd_keys_kernel, seen, "DIV32"))
        out, lse = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, q.shape[-1] ** -0.5, True)[:2]
        return (out, lse, *_backward(q, k, v, idx, valid, lp, dout, (out, lse))), seen


@pytest.mark.parametrize("G,dtype,lp", [(1, torch.float32, 8), (6, torch.float16, 32)])
def test_32_bit_rows_give_the_measured_paths_outputs_and_gradients_bit_for_bit(monkeypatch, G, dtype, lp):
    # Two sequences: the kernels see (batch, KV head) as one index bh, a position taken within its
    # own as pos - bh * T * NK, so a second bh is what a wrong origin shows on (B 2 x Hkv 2 ran four,
    # 25-36 s of wall each at load 8, 2026-11-27; both paths share whatever the launcher does with B
    # and Hkv apart, which the eager comparisons of the other files check).
    T, D, n, B, Hkv = 41, 16, 4, 2, 1
    q, k, v, dout = _inputs(B, Hkv, T, G, D, dtype, seed=300 + G)
    idx, valid = _odd_table(T, lp, n, seed=G, B=B, Hkv=Hkv)
    off, seen_off = _run(monkeypatch, False, q, k, v, idx, valid, lp, dout)
    on, seen_on = _run(monkeypatch, True, q, k, v, idx, valid, lp, dout)
    assert (seen_off, seen_on) == ([False, False], [True, True])  # the forward's, then the backward's
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), on, off):
        assert torch.equal(a, b), name
    assert on[2].abs().sum() > 0 and on[3][-1, -1].abs().sum() > 0  # the last sequence got gradients


@triton.jit
def _divide(NKS, X, OUT, N: tl.constexpr):
    # One program per divisor NKS[pid]: OUT[pid, :] = X // NKS[pid] as the kernels take a row's token.
    pid = tl.program_id(0)
    m, lg = tkeys._magic32(tl.load(NKS + pid))
    x = tl.load(X + tl.arange(0, N)).to(tl.uint32)
    tl.store(OUT + pid * N + tl.arange(0, N), tkeys._div32(x, m, lg))


def test_the_multiply_high_token_division_is_exact_up_to_2_31():
    """`_magic32` / `_div32` (a row's token, pos // NK, without a division) against Python's //, for
    every n of 1..64 and a few large ones, at the dividends' edges (0, multiples of a few numbers and
    their neighbours, the top of the range 2**31 - 1: T * NK < 2**31 within a (batch, KV head)) and
    at random ones."""
    nks = [*range(1, 65), 96, 127, 1000, 4097, 65535, 2**20 + 1]
    top = 2**31 - 1
    edges = {0, 1, 2**30 - 1, 2**30, top - 1, top}
    edges |= {v for k in (3, 7, 64, 1000, 999983) for v in (k * 1000 - 1, k * 1000, k * 1000 + 1, top - k)}
    g = torch.Generator().manual_seed(5)
    xs = sorted(edges) + torch.randint(0, top, (64 - len(edges),), generator=g).tolist()
    x = torch.tensor(xs, dtype=torch.int32)
    out = torch.empty(len(nks), len(xs), dtype=torch.int32)
    _divide[(len(nks),)](torch.tensor(nks, dtype=torch.int32), x, out, N=len(xs))
    assert torch.equal(out, torch.tensor([[v // k for v in xs] for k in nks], dtype=torch.int32))
