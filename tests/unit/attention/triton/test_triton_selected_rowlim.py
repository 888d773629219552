"""The keys backward's key mask as a per-row limit (selected.py `_config` "keys_rowlim",
selected_keys_bwd.py ROWLIM: the column n against min(token - first key, last key in range) instead
of a per-column key position held across the loop) under TRITON_INTERPRET=1 on CPU: dq, dk and dv
bitwise those of the shipped mask at 32 and at 64 rows a step (sm_80's candidate), fp32, fp16 and bf16
(the honest-bf16 interpreter), over several (batch, KV head) sequences, a partial last block and a
block split into key chunks past T; the switch reaches the launch only with the 32-bit rows; gpucheck
compiles the 64-row candidate on sm_80 only."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys_bwd as tkeys
from tests.fixtures.launch_spy import LaunchSpy
from tests.unit.attention.triton.test_triton_selected_keys_bwd import _backward, _inputs, _odd_table


def _grads(monkeypatch, over: dict, q, k, v, idx, valid, lp, dout, fwd=None):
    seen = []
    with monkeypatch.context() as m:
        base = tsel._launch_config
        m.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "bwd_keys": True, **over})
        m.setattr(tkeys, "_sel_bwd_keys_kernel", LaunchSpy(tkeys._sel_bwd_keys_kernel, seen, "BR", "ROWLIM"))
        return _backward(q, k, v, idx, valid, lp, dout, fwd), seen


# (G, dtype, l', B, Hkv): T 41 leaves the last block partial; l' 32 is two key chunks of the
# interpreter's 16, the second of the last block wholly past T.
CASES = [(1, torch.float32, 8, 1, 2), (6, torch.float16, 32, 1, 1), (2, torch.bfloat16, 32, 2, 1)]


@pytest.mark.parametrize("G,dtype,lp,B,Hkv", CASES)
def test_the_row_limit_gives_the_shipped_masks_gradients_bit_for_bit(
    monkeypatch, bf16_interpreter, G, dtype, lp, B, Hkv
):
    T, D, n = 41, 16, 3
    q, k, v, dout = _inputs(B, Hkv, T, G, D, dtype, seed=700 + G)
    idx, valid = _odd_table(T, lp, n, seed=G, B=B, Hkv=Hkv)
    fwd = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, D**-0.5, True)[:2]  # one forward
    for br in (32, 64):
        args = (q, k, v, idx, valid, lp, dout, fwd)
        off, seen_off = _grads(monkeypatch, {"BR_keys": br}, *args)
        on, seen_on = _grads(monkeypatch, {"BR_keys": br, "keys_rowlim": True}, *args)
        assert (seen_off, seen_on) == ([(br, False)], [(br, True)])
        for name, a, b in zip(("dq", "dk", "dv"), on, off):
            assert torch.equal(a, b), (br, name)
        assert on[0].abs().sum() > 0 and on[1][-1, -1].abs().sum() > 0  # the last sequence got gradients


def test_the_row_limit_needs_the_32_bit_rows(monkeypatch):
    """ROWLIM compares the int32 token of `_pair_rows32`: with keys_div32 off the switch does not
    reach the kernel (the int64 path keeps its three masks)."""
    assert not tsel._config(6, 64, 64, arch=80)["keys_rowlim"]  # a probe switch, off on both archs
    assert not tsel._config(6, 64, 64, arch=90)["keys_rowlim"]
    assert tkeys.rowlim({"keys_rowlim": True, "keys_div32": True})
    assert not tkeys.rowlim({"keys_rowlim": True, "keys_div32": False})
    T, D, n, lp = 20, 16, 3, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float32, seed=9)
    idx, valid = _odd_table(T, lp, n, seed=9)
    _, seen = _grads(monkeypatch, {"keys_rowlim": True, "keys_div32": False}, q, k, v, idx, valid, lp, dout)
    assert seen == [(32, False)]


def test_gpucheck_compiles_the_64_row_candidate_on_sm80_only():
    """keys_bwd_gpucheck_rows: `selected_bwd_keys_br64` (64 rows, ROWLIM, the product's warps for 64
    rows) on sm_80 at head_dim <= 64, not on sm_90, not past head_dim 64, not where it is the config."""

    def rows(cfg, D=64, arch=80):
        return {r[0]: r for r in tkeys.keys_bwd_gpucheck_rows(cfg, 6, D, 64, "bf16", "ieee", arch)}

    c80 = tsel._config(6, 64, 64, arch=80)
    row = rows(c80)["selected_bwd_keys_br64"]
    assert row[3]["BR"] == 64 and row[3]["ROWLIM"] and row[3]["DIV32"]
    assert (row[3]["DQ_WM"], row[3]["DQ_WN"]) == tkeys.dq_product_warps(80, 64, 64, 4) == (4, 1)
    assert rows(c80)["selected_bwd_keys"][3]["ROWLIM"] is False  # the shipped kernel: the old mask
    assert "selected_bwd_keys_br64" not in rows(tsel._config(6, 64, 64, arch=90), arch=90)
    assert "selected_bwd_keys_br64" not in rows(tsel._config(6, 128, 64, arch=80), D=128)
    assert "selected_bwd_keys_br64" not in rows({**c80, **tkeys.KEYS_BR64_PROBE})
