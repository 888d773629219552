"""The keys backward's key mask as a per-row limit (selected.py `_config` "keys_rowlim",
selected_keys_bwd.py ROWLIM: the column n against min(token - first key, last key in range) instead
of a per-column key position held across the loop) under TRITON_INTERPRET=1 on CPU: dq, dk and dv
bitwise those of the mask every run measured at 32 and at 64 rows a step (sm_80's shipped setting),
fp32, fp16 and bf16 (the honest-bf16 interpreter), over several (batch, KV head) sequences, a partial
last block and a block split into key chunks past T; the switch reaches the launch only with the
32-bit rows. sm_80 ships 64 rows with it at head_dim 64, and one rule (selected_keys_bwd.keys_rows)
keeps the launcher, gpucheck and bench/kernel_probe.py's variants off a spilling 64-row step: a
flipped keys_dq_mma / keys_div32 runs 32 rows without the limit; gpucheck compiles that and sm_80's
32 rows before (`_br32`)."""

from __future__ import annotations

import json
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
        off, seen_off = _grads(monkeypatch, {"BR_keys": br, "keys_rowlim": False}, *args)
        on, seen_on = _grads(monkeypatch, {"BR_keys": br, "keys_rowlim": True}, *args)
        assert (seen_off, seen_on) == ([(br, False)], [(br, True)])
        for name, a, b in zip(("dq", "dk", "dv"), on, off):
            assert torch.equal(a, b), (br, name)
        assert on[0].abs().sum() > 0 and on[1][-1, -1].abs().sum() > 0  # the last sequence got gradients


def test_the_row_limit_needs_the_32_bit_rows(monkeypatch):
    """ROWLIM compares the int32 token of `_pair_rows32`: with keys_div32 off the switch does not
    reach the kernel (the int64 path keeps its three masks; the interpreter runs any rows a step)."""
    assert tkeys.rowlim({"keys_rowlim": True, "keys_div32": True})
    assert not tkeys.rowlim({"keys_rowlim": True, "keys_div32": False})
    T, D, n, lp = 20, 16, 3, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float32, seed=9)
    idx, valid = _odd_table(T, lp, n, seed=9)
    _, seen = _grads(monkeypatch, {"keys_rowlim": True, "keys_div32": False}, q, k, v, idx, valid, lp, dout)
    assert seen == [(64, False)]


def test_sm80_ships_64_rows_with_the_row_limit_and_hopper_is_unchanged():
    """`_config`: on sm_80 at head_dim <= 64 the keys backward takes 64 rows a step with keys_rowlim
    (and the keys_div32 / keys_dq_mma they need); past head_dim 64 32 rows at 8 warps without it;
    sm_90 as before: 64 rows from G 2 (32 at G 1), the mask every run measured."""
    for G in (1, 2, 5, 6, 8):
        c80 = tsel._config(G, 64, 64, arch=80)
        assert c80["BR_keys"] == 64 and c80["keys_rowlim"] and c80["keys_div32"] and c80["keys_dq_mma"]
        assert tkeys.rowlim(c80) and tkeys.keys_rows(c80, 80) == c80
        c90 = tsel._config(G, 64, 64, arch=90)
        assert (c90["BR_keys"], c90["keys_rowlim"]) == (64 if G >= 2 else 32, False)
        for D in (96, 128):
            for arch in (80, 90):
                c = tsel._config(G, D, 64, arch=arch)
                assert (c["BR_keys"], c["warps_keys"], c["keys_rowlim"]) == (32, 8, False)


def test_one_rule_keeps_sm80_off_a_spilling_64_row_step():
    """selected_keys_bwd.keys_rows: 64 rows or more on sm_80 at head_dim <= 64 only with ROWLIM (which
    needs keys_div32) and keys_dq_mma (ptxas: 88-96 B spilled without the limit, 48 B with the
    converted store), otherwise 32 rows without the limit (KEYS_BR32_SM80); Hopper and head_dim > 64
    as given."""
    c80 = tsel._config(6, 64, 64, arch=80)
    for flip in ({"keys_dq_mma": False}, {"keys_div32": False}, {"keys_rowlim": False},
                 {"keys_dq_mma": False, "keys_div32": False}, {"BR_keys": 128, "keys_dq_mma": False}):  # fmt: skip
        fit = tkeys.keys_rows({**c80, **flip}, 80)
        assert fit == {**c80, **flip, **tkeys.KEYS_BR32_SM80}, flip
    assert tkeys.keys_rows({**c80, "warps_keys": 8}, 80)["BR_keys"] == 64  # fits at 8 warps (255 / 0)
    assert tkeys.keys_rows({**c80, "pdq_bits": 32}, 80)["BR_keys"] == 64
    c90 = tsel._config(6, 64, 64, arch=90)
    assert tkeys.keys_rows(c90, 90) == c90 and tkeys.keys_rows({**c90, "keys_div32": False}, 90) == {
        **c90, "keys_div32": False}  # fmt: skip
    c128 = {**tsel._config(6, 128, 64, arch=80), "BR_keys": 64}
    assert tkeys.keys_rows(c128, 80) == c128


def test_a_flipped_switch_on_sm80_launches_32_rows_not_a_spilling_64(monkeypatch):
    """The launcher (`keys_backward`) takes every config, a probe's patched one included, through
    keys_rows as on a GPU (the interpreter's CPU tensors are sm_80's; the test switches off the
    interpreter's exemption): the shipped config runs 64 rows with ROWLIM, a flipped keys_dq_mma or
    keys_div32 runs 32 rows without it, the gradients the same."""
    T, D, n, lp = 20, 16, 3, 8
    q, k, v, dout = _inputs(1, 1, T, 2, D, torch.float32, seed=11)
    idx, valid = _odd_table(T, lp, n, seed=11)
    monkeypatch.setattr(tkeys, "interpreting", lambda: False)
    shipped, seen = _grads(monkeypatch, {}, q, k, v, idx, valid, lp, dout)
    assert seen == [(64, True)]
    for flip in ({"keys_dq_mma": False}, {"keys_div32": False}):
        got, seen = _grads(monkeypatch, flip, q, k, v, idx, valid, lp, dout)
        assert seen == [(32, False)], flip
        for name, a, b in zip(("dq", "dk", "dv"), got, shipped):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{flip} {name}")


def test_gpucheck_compiles_what_sm80_runs_and_its_32_rows_before():
    """keys_bwd_gpucheck_rows on sm_80 at head_dim 64: the shipped kernel at 64 rows with ROWLIM and
    the product's warps for 64 rows; `_dqcvt` (the converted store) at the 32 rows without ROWLIM it
    runs (64 would spill 48 B); `selected_bwd_keys_br32`, the 32 rows shipped before; neither
    `_br32` on sm_90, past head_dim 64 nor where it is the config; a config handed in that 64 rows do
    not fit is compiled as it runs."""

    def rows(cfg, D=64, arch=80):
        return {r[0]: r[3] for r in tkeys.keys_bwd_gpucheck_rows(cfg, 6, D, 64, "bf16", "ieee", arch)}

    c80 = tsel._config(6, 64, 64, arch=80)
    got = rows(c80)
    main, cvt, br32 = got["selected_bwd_keys"], got["selected_bwd_keys_dqcvt"], got["selected_bwd_keys_br32"]
    assert (main["BR"], main["ROWLIM"], main["DIV32"]) == (64, True, True)
    assert (main["DQ_WM"], main["DQ_WN"]) == tkeys.dq_product_warps(80, 64, 64, 4) == (4, 1)
    assert got["selected_bwd_keys_pdq32"] == main
    assert (cvt["BR"], cvt["ROWLIM"], cvt["DQ_WM"], cvt["DQ_WN"]) == (32, False, 0, 0)
    assert (br32["BR"], br32["ROWLIM"], br32["DIV32"]) == (32, False, True)
    assert (br32["DQ_WM"], br32["DQ_WN"]) == tkeys.dq_product_warps(80, 32, 64, 4) == (1, 4)
    assert "selected_bwd_keys_br32" not in rows(tsel._config(6, 64, 64, arch=90), arch=90)
    assert "selected_bwd_keys_br32" not in rows(tsel._config(6, 128, 64, arch=80), D=128)
    assert "selected_bwd_keys_br32" not in rows({**c80, **tkeys.KEYS_BR32_SM80})
    flipped = rows({**c80, "keys_dq_mma": False})["selected_bwd_keys"]
    assert (flipped["BR"], flipped["ROWLIM"]) == (32, False)


def test_no_probe_variant_launches_a_spilling_64_row_step_on_sm80(capsys):
    """bench/kernel_probe.py's selected variants as an A100 run would launch them (the dry run at
    --arch 80 goes through keys_rows, as the launcher does): none is 64 rows without ROWLIM and the
    product-layout store; sm_80's 32 rows before is a variant there (and not on sm_90), the row limit
    alone at 64 rows one on sm_90; a row names the rows the rule took a variant to."""
    from tests.fixtures.bench import load_bench

    probe = load_bench("kernel_probe")

    def dry(arch: int) -> list[dict]:
        capsys.readouterr()
        args = ["--dry-run", "--arch", str(arch), "--only", "selected", "--shapes", "m7c:8192:8"]
        assert probe.main(args) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    base = tsel._config(6, 64, 64, arch=80)
    rows = dry(80)
    for r in rows:
        cfg = {**base, **r["changes"]}
        assert cfg["BR_keys"] < 64 or (tkeys.rowlim(cfg) and cfg["keys_dq_mma"]), r
    changes = [r["changes"] for r in rows]
    assert tkeys.KEYS_BR32_SM80 in changes
    assert {"BR_keys": 32, "keys_dq_mma": False, "keys_rowlim": False} in changes  # the converted store
    assert all(r["variant"].get("arch", 80) == 80 for r in rows)
    h = dry(90)
    assert all(r["variant"].get("arch", 90) == 90 for r in h)
    assert {"keys_rowlim": True} in [r["changes"] for r in h]
    note = probe._keys_rows_note({**base, "keys_dq_mma": False}, 80)
    assert note == {"keys_rows": tkeys.KEYS_BR32_SM80} and probe._keys_rows_note(base, 80) == {}
