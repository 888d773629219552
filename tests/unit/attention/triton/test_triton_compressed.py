"""Triton compressed branch + selection (nsa.attention.triton.compressed) under TRITON_INTERPRET=1
against the eager op: outputs, dq/dkc/dvc, and selection tables identical to eager's (exact ties
included), plus one NSAAttention-level check per compression against eager and reference.py.

Run: .venv/bin/pytest tests/unit/attention/triton/test_triton_compressed.py
(Not test_compressed.py: tests/unit has no __init__.py, so two test modules with one basename collide,
and an __init__.py here would make the package name `triton`.)
"""

from __future__ import annotations

import inspect
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch

from nsa.attention import compressed as eager
from nsa.attention.nsa import NSAAttention, _ops
from nsa.attention.reference import reference_selection
from nsa.attention.triton import compressed as tri
from nsa.attention.triton import compressed_select
from nsa.attention.triton.spec import GpuShape

TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.float16: dict(atol=4e-3, rtol=1e-2)}


def _inputs(B, Hkv, T, G, D, bl, d, dtype, seed, zero_q=False, zero_keys=False):
    g = torch.Generator().manual_seed(seed)
    nc = (T - bl) // d + 1 if bl <= T else 0
    q = torch.randn(B, Hkv, T, G, D, generator=g)
    kc = torch.randn(B, Hkv, nc, D, generator=g)
    vc = torch.randn(B, Hkv, nc, D, generator=g)
    if zero_q:
        q.zero_()
    if zero_keys:
        kc.zero_()
    return q.to(dtype), kc.to(dtype), vc.to(dtype)


def _both(q, kc, vc, bl, d, lp, n):
    """(out, idx, valid, grads) of the triton op and of the eager op on the same inputs and dO."""
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=q.shape[-1] ** -0.5)
    res = []
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(q.dtype)
    for fn, extra in (
        (tri.compressed_attention_and_selection, {}),
        (eager.compressed_attention_and_selection, {"chunk": 1024}),
    ):
        leaves = [t.detach().clone().requires_grad_() for t in (q, kc, vc)]
        out, idx, valid = fn(*leaves, **kw, **extra)
        grads = torch.autograd.grad(out, leaves, dout)
        res.append((out, idx, valid, grads))
    return res


# (B, Hkv, T, G, D, l, d, l', n, dtype). Every kernel takes batch and KV head as one program axis
# (B * Hkv programs, `bh = tl.program_id(1)`, offsets bh * T * G * D and bh * NC * D of contiguous
# tensors), so B = 2 and Hkv = 2 run the same programs: B = 2 (T 77) runs a second one through the
# forward, the selection and both backward kernels; the paper geometry runs one (it ran two, Hkv 2,
# in 79 s of wall at load 8, 2026-11-27), as do the exact ties below, whose table check reads head 0.
CASES = [
    (1, 1, 1, 1, 64, 32, 16, 64, 16, torch.float32),  # T = 1: no compressed key at all
    (1, 2, 20, 2, 64, 32, 16, 64, 16, torch.float16),  # T < l
    (2, 1, 77, 4, 64, 8, 4, 16, 4, torch.float32),  # odd T, B = 2, several selection blocks
    (1, 1, 61, 16, 64, 8, 4, 16, 5, torch.float16),  # G = 16
    (1, 1, 45, 6, 128, 16, 4, 8, 6, torch.float32),  # l' < l, D = 128, G = 6 (padded to 8 rows)
    (1, 1, 53, 8, 64, 8, 8, 8, 5, torch.float16),  # l' = l = d, G = 8
    (1, 1, 90, 1, 128, 64, 16, 16, 4, torch.float16),  # Eq. 9 reaches 3 blocks back, G = 1, D = 128
    (1, 1, 260, 6, 64, 32, 16, 64, 16, torch.float32),  # paper geometry, M7C group, 5 selection blocks
    (1, 1, 40, 3, 96, 16, 4, 8, 6, torch.float32),  # D = 96: padded to 128 columns, masked
    (1, 1, 29, 17, 64, 8, 4, 8, 3, torch.float32),  # G = 17: 1-token tiles, the top-n's 2nd half empty
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}H{c[1]}T{c[2]}G{c[3]}D{c[4]}-{str(c[9])[6:]}")
def test_matches_eager_outputs_gradients_and_table(case):
    B, Hkv, T, G, D, bl, d, lp, n, dtype = case
    (out, idx, valid, grads), (e_out, e_idx, e_valid, e_grads) = _both(
        *_inputs(B, Hkv, T, G, D, bl, d, dtype, seed=T), bl, d, lp, n
    )
    assert out.dtype == dtype and out.shape == (B, Hkv, T, G, D)
    torch.testing.assert_close(out, e_out, **TOL[dtype])
    for got, want in zip(grads, e_grads):
        assert got.dtype == dtype
        torch.testing.assert_close(got, want, **TOL[dtype])
    assert idx.dtype == torch.int64 and valid.dtype == torch.bool
    assert idx.shape == (B, Hkv, T, min(n, -(-T // lp)))
    assert torch.equal(valid, e_valid)
    assert torch.equal(idx, e_idx)
    # Queries that see no compressed token: exactly zero output and gradient, never NaN.
    blind = min(T, bl - 1)
    assert torch.equal(out[:, :, :blind], torch.zeros_like(out[:, :, :blind]))
    assert torch.equal(grads[0][:, :, :blind], torch.zeros_like(grads[0][:, :, :blind]))


GEOMS = {"paper": (1, 1, 200, 6, 64, 32, 16, 64, 16), "small": (1, 1, 130, 3, 64, 8, 4, 16, 5)}


# Both ways to zero every logit at the small geometry; the paper geometry once: the kernel sees the
# same all-zero logits either way (q @ kc^T exactly 0), so its zero_keys case ran zero_q's paths again
# (12-21 s of CI, 2026-11-27).
@pytest.mark.parametrize(
    "geom, tie", [("paper", "zero_q"), ("small", "zero_q"), ("small", "zero_keys")], ids=lambda v: v
)
def test_exact_ties_resolve_like_eager(geom, tie):
    """All logits exactly 0, so uniform probabilities: every complete selection block scores the
    same and the tie-break (larger j first) alone orders them; the tables must be eager's. (Equal
    nonzero keys are no exact tie: eager's own GEMM may round equal columns differently.)"""
    B, Hkv, T, G, D, bl, d, lp, n = GEOMS[geom]
    q, kc, vc = _inputs(B, Hkv, T, G, D, bl, d, torch.float32, seed=3, **{tie: True})
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=0.125)
    _, idx, valid = tri.compressed_attention_and_selection(q, kc, vc, **kw)
    _, e_idx, e_valid = eager.compressed_attention_and_selection(q, kc, vc, chunk=1024, **kw)
    assert torch.equal(valid, e_valid)
    assert torch.equal(idx, e_idx)
    # The ties are real: a late query picks the most recent non-forced blocks first.
    t = T - 1
    jt = t // lp
    free = [j for j in idx[0, 0, t][valid[0, 0, t]].tolist() if j not in (0, jt, jt - 1)]
    assert free == sorted(free, reverse=True) and len(free) > 0


@pytest.mark.parametrize("compression", ["mlp", "mean"])
def test_nsa_attention_branch_inputs_match_eager_and_reference(compression):
    torch.manual_seed(0)
    attn = NSAAttention(
        dim=64, n_heads=4, n_kv_heads=2, head_dim=64, block_len=16, block_stride=8, sel_block=32,
        n_sel=4, window=32, compression=compression,
    )  # fmt: skip
    # One sequence: the kernels still run two programs (2 KV heads, the B * Hkv axis above), and
    # reference.py's selection loops per sequence (a second one ran the same loops again).
    x = torch.randn(1, 75, 64)
    with torch.no_grad():
        eager_ops = _ops("eager")
        inp = attn._branch_inputs(x, eager_ops)
        kw = dict(block_len=16, block_stride=8, sel_block=32, n_sel=4, scale=64**-0.5)
        out, idx, valid = tri.compressed_attention_and_selection(inp["q"], inp["kc"], inp["vc"], **kw)
        e_out, e_idx, e_valid = attn._compressed(inp, eager_ops)
    torch.testing.assert_close(out, e_out, **TOL[torch.float32])
    assert torch.equal(idx, e_idx) and torch.equal(valid, e_valid)
    # The same blocks per query (reference.py ranks forced blocks by score, so compare as sets).
    ref = [[[sorted(r) for r in grp] for grp in seq] for seq in reference_selection(attn, x)]
    got = [
        [[sorted(idx[b, g, t][valid[b, g, t]].tolist()) for t in range(75)] for g in range(2)]
        for b in range(x.shape[0])
    ]
    assert got == ref


def test_meta_device_and_chunk_is_ignored():
    q = torch.empty(1, 2, 4096, 6, 64, device="meta", dtype=torch.bfloat16)
    kc = torch.empty(1, 2, 255, 64, device="meta", dtype=torch.bfloat16)
    out, idx, valid = tri.compressed_attention_and_selection(
        q, kc, kc, block_len=32, block_stride=16, sel_block=64, n_sel=16, scale=0.125, chunk=7
    )
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    assert (
        idx.shape == valid.shape == (1, 2, 4096, 16)
        and idx.dtype == torch.int64
        and valid.dtype == torch.bool
    )


def test_cpu_without_interpreter_is_a_clear_error(monkeypatch):
    q, kc, vc = _inputs(1, 1, 40, 2, 64, 8, 4, torch.float32, seed=0)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        tri.compressed_attention_and_selection(
            q, kc, vc, block_len=8, block_stride=4, sel_block=16, n_sel=4, scale=0.1
        )


def test_forward_is_one_flash_pass_and_selection_one_qk_pass():
    """The forward runs as two kernels (issue 20, after the first GPU run): the attention in one
    flash pass (one QK and one p @ V per key tile, online softmax), and the selection in a kernel of
    its own that recomputes the probabilities from the saved row statistics (one QK per key tile, no
    V). With the selection folded into the attention's second pass, its top-n merge held the whole
    kernel at one 8-warp program per SM: 50 ms of the 80 at 64k on an H100 (bench/RESULTS.md)."""
    fwd = inspect.getsource(tri._cmp_fwd.fn)
    step = inspect.getsource(tri._key_step.fn)  # the QK product of one key tile
    assert fwd.count("for kb in range(") == 1 and fwd.count("_key_step(") == 1
    assert step.count("tl.dot(q, tl.trans(k)") == 1 and step.count("tl.dot(") == 1
    assert fwd.count("tl.dot(") == 1  # p @ V
    assert "_select_tile" not in fwd and "_block_scores" not in fwd
    sel = inspect.getsource(tri._cmp_select.fn)
    # One product a key tile: the measured loop's own, and the CUT loop's in its tile body (one loop,
    # or select_split's three in key order: tile 0, the interior tiles, the edge tiles), whose tile
    # loads its keys once and takes one product in `_tile_scores`; select_pair's body (`_cut_tile2`)
    # the same for both its token groups (their rows one product), in the same three loops.
    assert sel.count("if CUT:") == 1 and sel.count("if PAIR:") == 1 and sel.count("if SPLIT:") == 3
    assert (
        sel.count("for jb in range(") == 8 and sel.count("_cut_tile(") == 4 and sel.count("_cut_tile2(") == 3
    )
    assert sel.count("tl.dot(") == 1 and "V +" not in sel
    assert inspect.getsource(compressed_select._tile_scores.fn).count("tl.dot(") == 1
    for body in (compressed_select._cut_tile, compressed_select._cut_tile2):
        src = inspect.getsource(body.fn)
        assert src.count("tl.dot(") == 0 and src.count("_tile_scores(") == 1 and src.count("_load_k(") == 1


def test_attention_query_tiles_hold_no_padding_rows(monkeypatch):
    """The attention kernels have no group sum, so their query tiles are consecutive (token, head) rows:
    at G = 6 the dQ kernel runs ceil(T * 6 / 128) programs, not ceil(T / 16) tiles of 16 tokens padded to
    8 heads (a quarter of their rows and products padding). Grids recorded from the interpreter's
    own launches, which still run; the results stay eager's."""
    from triton.runtime.interpreter import InterpretedFunction

    grids: dict[str, tuple] = {}
    real = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        grids[self.fn.__name__] = tuple(grid)
        return real(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", run)
    T, G = 100, 6
    (out, idx, _, grads), (e_out, e_idx, _, e_grads) = _both(
        *_inputs(1, 1, T, G, 64, 32, 16, torch.float32, seed=5), 32, 16, 64, 16
    )
    assert grids["_cmp_bwd_dq"] == (-(-T * G // 128), 1)  # 5 programs; 7 with padded tiles
    assert grids["_cmp_fwd"] == (-(-T * G // 128), 1)  # the forward's attention too (D 64: 128 rows)
    torch.testing.assert_close(out, e_out, **TOL[torch.float32])
    assert torch.equal(idx, e_idx)
    for got, want in zip(grads, e_grads):
        torch.testing.assert_close(got, want, **TOL[torch.float32])


def test_gpucheck_specs_list_every_kernel_without_T():
    shape = GpuShape(
        "m7c_125m", head_dim=64, group=6, block_len=32, block_stride=16, sel_block=64, n_sel=16, window=512
    )
    for arch in (80, 90):
        specs = tri.gpucheck_specs(shape, arch)
        assert [s.name for s in specs] == [
            "compressed_fwd",
            "compressed_select",
            "compressed_bwd_dq",
            "compressed_bwd_dq_delta",  # handed the gate fold's delta (gated.FOLD_DELTA)
            "compressed_bwd_dkv",
            "compressed_bwd_dkv_sum",
        ]
        for s in specs:
            assert s.signature.get("T", "i32") == "i32" and "T" not in s.constexprs  # the sum has no T
            assert set(s.constexprs) <= set(s.signature)
            assert all(s.signature[k] == "constexpr" for k in s.constexprs)


def test_the_loops_stages_come_from_the_config(monkeypatch):
    """The attention, dQ and dK/dV kernels' software-pipelining stages are `_config` keys (stages_fwd,
    stages_dq, stages_dkv; 2 as the GPU measured, sm_80's still, and sm_90's dQ past head_dim 64 since
    the H100 of 2026-11-26c; sm_90 ships dK/dV at head_dim 64 unpipelined, bench/flash_proxy.py's
    tiles), and gpucheck compiles what the
    config says: bench/tiles_d128.py and the probe's candidates change them through the config alone."""
    shape = GpuShape("paper", head_dim=128, group=16, block_len=32, block_stride=16, sel_block=64, n_sel=16,
                     window=512)  # fmt: skip
    names = {
        "compressed_fwd": "stages_fwd",
        "compressed_bwd_dq": "stages_dq",
        "compressed_bwd_dkv": "stages_dkv",
    }
    assert {tri._config(16, 128, 16, 32, 16, 64, 80)[k] for k in names.values()} == {2}
    shipped = tri._config(16, 128, 16, 32, 16, 64, 90)
    assert [shipped[k] for k in names.values()] == [2, 2, 2]
    assert tri._config(6, 64, 16, 32, 16, 64, 90)["stages_dkv"] == 1
    real = tri._config
    monkeypatch.setattr(tri, "_config", lambda *a, **k: {**real(*a, **k), "stages_fwd": 1, "stages_dq": 3,
                                                          "stages_dkv": 1})  # fmt: skip
    specs = {s.name: s.num_stages for s in tri.gpucheck_specs(shape, 90)}
    assert {n: specs[n] for n in names} == {
        "compressed_fwd": 1,
        "compressed_bwd_dq": 3,
        "compressed_bwd_dkv": 1,
    }


def test_the_head_dim_128_probe_candidates_match_eager(monkeypatch):
    """The probe's head_dim-128 candidate tiles (bench/kernel_probe.py: bigger query-row and key
    tiles for the attention, dQ and dK/dV, as its `_apply` patches `_config`) run the same kernels to
    eager's results under the interpreter: a GPU session times them, it need not check them. D 128 at
    G 2 (the tiles are rows of (token, head), so G only sets how many tokens a tile holds; G 16's
    rows cost the interpreter 8x), T not a multiple of any tile, two key tiles of 64, dK/dV's split
    over the candidate's query tiles. The combined dQ + dK/dV variants stand for their parts, and
    each run carries a forward candidate too (two runs for all of them)."""
    from tests.fixtures.bench import load_bench

    probe = load_bench("kernel_probe")
    bwd = [v for v in probe.CMP_BWD_VARIANTS if v.get("shape") == "paper"]
    fwd = [v for v in probe.CMP_VARIANTS if v.get("shape") == "paper" and v["kernel"] == "attend"]
    # the backward's variants not contained in a larger one, each run with one forward candidate
    bwd = [v for v in bwd if not any(v != o and v.items() <= o.items() for o in bwd)]
    cands = [
        {**b, **{k: x for k, x in f.items() if k != "kernel"}} for b, f in zip(bwd, fwd + fwd[-1:] * len(bwd))
    ]
    assert len(cands) >= 2
    real = tri._config
    # The selection kernel is none of the candidates' (and 60 % of the interpreter's time here): off.
    monkeypatch.setattr(tri, "launch_select", lambda *a, **k: None)
    q, kc, vc = _inputs(1, 1, 150, 2, 128, 4, 2, torch.float32, seed=128)  # 74 compressed keys
    for over in cands:
        monkeypatch.setattr(tri, "_config", lambda *a, _o=over, **k: probe._apply(real(*a, **k), _o, 2))
        (out, _, _, grads), (e_out, _, _, e_grads) = _both(q, kc, vc, 4, 2, 8, 4)
        torch.testing.assert_close(out, e_out, **TOL[torch.float32])
        for got, want in zip(grads, e_grads):
            torch.testing.assert_close(got, want, **TOL[torch.float32])


@pytest.mark.parametrize("G, D, T", [(2, 64, 140), (4, 128, 140)])
def test_the_sm90_backward_tiles_match_eager(monkeypatch, G, D, T):
    """The dQ and dK/dV tiles `_config` ships on sm_90 only (bench/flash_proxy.py: dK/dV 64 keys a tile,
    32 rows, unpipelined at head_dim 64; dQ 128 rows x 32 keys at 8 warps and 2 stages past it), launched as on an
    H100 (the backward reads the device's arch like the forward), give eager's gradients under the
    interpreter: 69 compressed keys (two key tiles of 64), T not a multiple of any tile; G 4 fills
    dQ's 128 rows (32 tokens), G 2 costs the interpreter least at head_dim 64."""
    c = tri._config(G, D, 4, 4, 2, 8, 90)
    assert c["bn_dkv"] == 64 and (D <= 64 or (c["BT"] * c["GP"], c["warps"], c["stages_dq"]) == (128, 8, 2))
    seen = []
    real = tri._config
    monkeypatch.setattr(tri, "device_arch", lambda device: 90)
    monkeypatch.setattr(tri, "_config", lambda *a, **k: seen.append(a[6:]) or real(*a, **k))
    monkeypatch.setattr(tri, "launch_select", lambda *a, **k: None)  # the selection is none of these tiles
    q, kc, vc = _inputs(1, 1, T, G, D, 4, 2, torch.float32, seed=G)
    (out, _, _, grads), (e_out, _, _, e_grads) = _both(q, kc, vc, 4, 2, 8, 4)
    assert seen and all(arch == (90,) for arch in seen)  # forward and backward at the sm_90 tiles
    torch.testing.assert_close(out, e_out, **TOL[torch.float32])
    for got, want in zip(grads, e_grads):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
