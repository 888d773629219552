"""The reverse index's segment length under selected.py `_config`'s seg_target (selected_keys.py
`_seg_pairs`: at most B*Hkv*T*n / seg_target pairs besides T/4 clamped to [16, 2048]; 0: T/4 alone,
what every GPU run measured, a bench/kernel_probe.py variant). The rule at the model's shapes, and
under TRITON_INTERPRET=1 on CPU: the key-major forward's out and lse and the backward's dq, dk and dv
equal those at seg_target 0 to rounding, and the backward takes the forward's S, or builds its own
index at the same S. Not bitwise: a pair's partials are the same computation at another row of
another tile, and the interpreter's tl.dot (numpy's sgemm) rounds a row by its position in the tile
(a [32, 16] x [16, 16] product with its rows rotated differs in 4,800 of 15,872 elements); dK/dV
also sums its segments' fp32 partials in other groupings."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys as tkeys
from tests.unit.attention.triton.test_triton_selected_keys_bwd import _inputs, _odd_table


def test_the_segments_shrink_only_where_a_launch_has_few_pairs() -> None:
    n, hkv = 16, 2  # M7C: 2 KV heads, 16 blocks a query
    S = {(T, B): tkeys._seg_pairs(T, B * hkv * T * n, 512) for T, B in
         [(8192, 1), (16384, 1), (32768, 1), (65536, 1), (2048, 32), (8192, 8), (16384, 4), (32768, 2)]}  # fmt: skip
    assert S == {
        (8192, 1): 512, (16384, 1): 1024, (32768, 1): 2048, (65536, 1): 2048,
        # B*T = 64k, every GPU run's shapes: T/4 clamped to 2048, as before
        (2048, 32): 512, (8192, 8): 2048, (16384, 4): 2048, (32768, 2): 2048,
    }  # fmt: skip
    for T in (64, 100, 2048, 8192, 65536):
        assert (
            tkeys._seg_pairs(T, 2 * T * n, 0)
            == tkeys._seg_pairs(T)
            == min(2048, max(16, tkeys.next_pow2(T) // 4))
        )
    assert tkeys._seg_pairs(100, 2 * 100 * 4, 512) == 16  # the floor
    assert tkeys.index_bounds(2, 8192, 16, 64, 512) == (512, 2 * 128 + 2 * 8192 * 16 // 512)
    for arch in (80, 90):
        assert tsel._config(6, 64, 64, arch=arch)["seg_target"] == 512
        assert tsel._config(16, 128, 64, arch=arch)["seg_target"] == 0  # the query-major dK/dV: T/4


def _run(monkeypatch, target: int, q, k, v, idx, valid, lp, dout, own_index: bool):
    seen = []
    with monkeypatch.context() as m:
        base = tsel._launch_config
        m.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "seg_target": target})
        for mod, name in ((tkeys, "reverse_index"), (tsel, "reverse_index"), (tsel, "index_bounds")):
            real = getattr(mod, name)

            def spy(*a, _real=real, _name=name, **kw):
                got = _real(*a, **kw)
                seen.append((_name, got[3] if _name == "reverse_index" else got[0]))  # S
                return got

            m.setattr(mod, name, spy)
        scale = q.shape[-1] ** -0.5
        out, lse, *index = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, scale, True)
        if own_index:
            index = [torch.empty(0, dtype=torch.int64)] * 3
        grads = torch.ops.nsa_triton.selected_bwd(
            dout, q, k, v, idx, valid, out, lse, *index, lp, scale, True
        )
        return (out, lse, *grads), seen


@pytest.mark.parametrize("G,dtype,lp,own", [(6, torch.float32, 8, False), (2, torch.float16, 16, True)])
def test_shorter_segments_keep_the_outputs_and_gradients(monkeypatch, G, dtype, lp, own) -> None:
    T, D, n, B, Hkv = 72, 16, 4, 1, 1
    q, k, v, dout = _inputs(B, Hkv, T, G, D, dtype, seed=700 + G)
    idx, valid = _odd_table(T, lp, n, seed=G, B=B, Hkv=Hkv)
    off, seen_off = _run(monkeypatch, 0, q, k, v, idx, valid, lp, dout, own)
    on, seen_on = _run(monkeypatch, 512, q, k, v, idx, valid, lp, dout, own)
    # 288 pairs: T/4 = 32 pairs a segment; at seg_target 512 the floor, 16. The backward's S is the
    # forward's (the index handed over) or its own index's, built at the same S.
    back = "reverse_index" if own else "index_bounds"
    assert seen_off == [("reverse_index", 32), (back, 32)] and seen_on == [("reverse_index", 16), (back, 16)]
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-3, "atol": 2e-3}
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), on, off):
        torch.testing.assert_close(a, b, **tol, msg=name)  # lse: -inf where a row has no key, in both
        assert a.abs().nan_to_num(posinf=0).sum() > 0, name
