"""The key-major backward's row token by an int32 division (selected.py `_config` "keys_div32";
selected_keys_bwd.py `_dkdv_walk` DIV32, a probe switch priced by bench/keys_proxy.py) under
TRITON_INTERPRET=1 on CPU: the same token as the int64 (pos // NK) % T, so dq, dk and dv are bitwise
those of the default, over several (batch, KV head) sequences (the position is taken within its own)
and the broken table of the keys backward's tests; and the switch reaches the launch."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys_bwd as tkeys
from tests.unit.attention.triton.test_triton_selected_keys_bwd import _backward, _inputs, _odd_table


def _run(monkeypatch, div32: bool, *args):
    seen = []
    real = tkeys._sel_bwd_keys_kernel

    class _Spy:  # records the DIV32 each launch of the keys kernel gets
        def __getitem__(self, grid):
            def launch(*a, **k):
                seen.append(k["DIV32"])
                return real[grid](*a, **k)

            return launch

    with monkeypatch.context() as m:
        base = tsel._launch_config
        m.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "bwd_keys": True, "keys_div32": div32})
        m.setattr(tkeys, "_sel_bwd_keys_kernel", _Spy())
        return _backward(*args), seen


@pytest.mark.parametrize("G,dtype,lp", [(1, torch.float32, 8), (6, torch.float16, 32)])
def test_int32_token_gives_the_default_gradients_bit_for_bit(monkeypatch, G, dtype, lp):
    T, D, n, B, Hkv = 41, 16, 4, 2, 2
    q, k, v, dout = _inputs(B, Hkv, T, G, D, dtype, seed=300 + G)
    idx, valid = _odd_table(T, lp, n, seed=G, B=B, Hkv=Hkv)
    off, seen_off = _run(monkeypatch, False, q, k, v, idx, valid, lp, dout)
    on, seen_on = _run(monkeypatch, True, q, k, v, idx, valid, lp, dout)
    assert (seen_off, seen_on) == ([False], [True])
    for name, a, b in zip("qkv", on, off):
        assert torch.equal(a, b), f"d{name}"
    assert on[0].abs().sum() > 0 and on[1][1, 1].abs().sum() > 0  # the last sequence got gradients
