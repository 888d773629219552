"""The keys backward's dQ partial stored in its product's own layout (selected.py `_config`
"keys_dq_mma", the default on sm_80; selected_keys_bwd.py `_store_rows_mma`, `dq_product_warps`) under
TRITON_INTERPRET=1 on CPU: the 8-d store writes exactly what the plain [BR, DP] store writes, for
every warp split the kernels use (rows permuted, rows and columns masked, nothing else touched); the
backward's dq, dk and dv are bitwise those of the converted store the GPU runs measured
(keys_dq_mma False, a bench/kernel_probe.py variant), with the 32-bit rows and with the int64 ones;
and the warp split is triton's for the shipped settings (the SASS side of it: bench/RESULTS.md
"keysmem")."""

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


@triton.jit
def _store_both(X, ROW, RM, OUT, D: tl.constexpr, DP: tl.constexpr, BR: tl.constexpr, WM: tl.constexpr,
                WN: tl.constexpr, ASC: tl.constexpr):  # fmt: skip
    # The tile X [BR, DP] to OUT's rows ROW[r] (where RM[r]) and columns < D, by `_store_rows_mma`.
    r = tl.arange(0, BR)
    c = tl.arange(0, DP)
    x = tl.load(X + r[:, None] * DP + c[None, :])
    tkeys._store_rows_mma(OUT, tl.load(ROW + r), x, tl.load(RM + r) != 0, D, DP, BR, WM, WN, ASC)


@pytest.mark.parametrize(
    "BR,DP,D,WM,WN",
    [(64, 64, 64, 4, 1), (32, 64, 64, 1, 4), (32, 128, 96, 1, 8), (32, 32, 32, 2, 1), (64, 16, 16, 4, 1)],
)
@pytest.mark.parametrize("asc", [True, False])  # triton 3.6's dimension order, 3.9's
def test_the_product_layout_store_writes_what_the_plain_store_writes(BR, DP, D, WM, WN, asc):
    g = torch.Generator().manual_seed(BR + DP + WM)
    x = torch.randn(BR, DP, generator=g)
    row = torch.randperm(2 * BR, generator=g)[:BR].to(torch.int32)  # scattered rows of a taller buffer
    rm = (torch.rand(BR, generator=g) < 0.8).to(torch.int8)
    out = torch.full((2 * BR, D), float("nan"))
    _store_both[(1,)](x, row, rm, out, D=D, DP=DP, BR=BR, WM=WM, WN=WN, ASC=asc)
    want = torch.full((2 * BR, D), float("nan"))
    keep = rm.bool()
    want[row[keep].long()] = x[keep, :D]
    assert torch.equal(out.isnan(), want.isnan()) and torch.equal(out.nan_to_num(), want.nan_to_num())


def _grads(monkeypatch, over: dict, q, k, v, idx, valid, lp, dout):
    seen = []
    with monkeypatch.context() as m:
        base = tsel._launch_config
        m.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "bwd_keys": True, **over})
        m.setattr(
            tkeys, "_sel_bwd_keys_kernel", LaunchSpy(tkeys._sel_bwd_keys_kernel, seen, "DQ_WM", "DQ_WN")
        )
        return _backward(q, k, v, idx, valid, lp, dout), seen


# BR_keys 64 at the interpreter's head_dim 16 (DP 16) takes the rows split (4, 1); the columns split
# (1, 4) needs DP >= 32 at 32 rows, a head_dim the interpreter runs slowly: the store test holds it.
@pytest.mark.parametrize("G,dtype,lp,div32", [(6, torch.float16, 16, True), (1, torch.float32, 8, False)])
def test_dq_in_the_products_layout_gives_the_measured_paths_gradients_bit_for_bit(
    monkeypatch, G, dtype, lp, div32
):
    T, D, n, B, Hkv = 37, 16, 4, 2, 1
    q, k, v, dout = _inputs(B, Hkv, T, G, D, dtype, seed=400 + G)
    idx, valid = _odd_table(T, lp, n, seed=G, B=B, Hkv=Hkv)
    over = {"BR_keys": 64, "keys_div32": div32}
    off, seen_off = _grads(monkeypatch, {**over, "keys_dq_mma": False}, q, k, v, idx, valid, lp, dout)
    on, seen_on = _grads(monkeypatch, {**over, "keys_dq_mma": True}, q, k, v, idx, valid, lp, dout)
    assert (seen_off, seen_on) == ([(0, 0)], [(4, 1)])
    for name, a, b in zip(("dq", "dk", "dv"), on, off):
        assert torch.equal(a, b), name
    assert on[0][-1, -1].abs().sum() > 0  # the last sequence got a dq


def test_the_warp_split_is_tritons_and_the_switch_is_on_for_sm80_only():
    """M7C (G 6 x D 64): sm_90's 64 rows on one warpgroup take the rows split, sm_80's 64 rows at 4
    warps (with keys_rowlim) too, its 32 rows before the columns split (the compiled kernels: no
    shared memory moves the tile); head_dim 128 at 8
    warps and 32 rows, the columns; the dimension order this triton's coalesce pass takes (DQ_ASC). Shipped on sm_80 only (on sm_90 the proxy's point lies further
    outside its calibration: bench/RESULTS.md "keysmem"). The switch off or a tile its warps do not
    cover: the converted store (0, 0)."""

    def split(c: dict, arch: int) -> tuple[int, int]:
        out = tkeys.dq_store_consts(c, arch)
        assert out["DQ_ASC"] is (tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 7))
        return out["DQ_WM"], out["DQ_WN"]

    cfg = {arch: tsel._config(6, 64, 64, arch=arch) for arch in (80, 90)}
    assert (cfg[80]["keys_dq_mma"], cfg[90]["keys_dq_mma"]) == (True, False)
    assert split(cfg[80], 80) == (4, 1) and split(cfg[90], 90) == (0, 0)
    assert split({**cfg[80], **tkeys.KEYS_BR32_SM80}, 80) == (1, 4)
    assert split({**cfg[90], "keys_dq_mma": True}, 90) == (4, 1)
    assert split({**tsel._config(6, 128, 64, arch=90), "keys_dq_mma": True}, 90) == (1, 8)
    small = {**tsel._config(6, 16, 64, key_tile=16, arch=80), "BR_keys": 32}  # 32 rows, DP 16, 4 warps
    assert split(small, 80) == (0, 0)


def _forward(monkeypatch, on: bool, seen: list, q, k, v, idx, valid, lp):
    with monkeypatch.context() as m:
        base = tsel._launch_config
        m.setattr(tsel, "_launch_config", lambda *a: {**base(*a), "fwd_keys": True, "keys_fwd_mma": on})
        m.setattr(
            tkeys_fwd, "_sel_fwd_keys_kernel", LaunchSpy(tkeys_fwd._sel_fwd_keys_kernel, seen, "O_WM", "O_WN")
        )
        return torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, q.shape[-1] ** -0.5, True)[:2]


def test_the_forward_partials_in_the_products_layout_are_the_measured_paths_bit_for_bit(monkeypatch):
    """keys_fwd_mma (a probe switch, off): the keys forward's partial output stored by
    `_store_rows_mma` (BR_f 128 at the interpreter's DP 16: the rows split (4, 1), two row
    repetitions) gives bitwise the out and lse of the converted store."""
    T, D, n, B, Hkv, G, lp = 37, 16, 4, 2, 1, 6, 16
    q, k, v, _ = _inputs(B, Hkv, T, G, D, torch.float16, seed=7)
    idx, valid = _odd_table(T, lp, n, seed=3, B=B, Hkv=Hkv)
    seen: list = []
    off = _forward(monkeypatch, False, seen, q, k, v, idx, valid, lp)
    on = _forward(monkeypatch, True, seen, q, k, v, idx, valid, lp)
    assert seen == [(0, 0), (4, 1)]
    assert torch.equal(off[0], on[0]) and torch.equal(off[1], on[1])
    assert on[0][-1].abs().sum() > 0
