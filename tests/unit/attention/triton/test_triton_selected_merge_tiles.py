"""The selected branch's two merges with their metadata as tiles (selected.py `_config` "merge_tiles":
selected_keys.py `_fwd_merge_tiles`, selected_keys_bwd.py `_dq_merge_tiles`) under TRITON_INTERPRET=1.

Each merge launched by hand at TILES True and False on the same partials: out, lse and dQ bit for
bit the loop's (the path the GPU runs measured), in fp32, fp16 and bf16 (honest-bf16 fixture), at G
1 / 6 / 16, n not a power of two, tokens without a key, entries listed twice, T not a multiple of
TM (BM), 1 to 4 key chunks (NB: (entry, chunk) couples past 16, so NEP 32), head_dim not a power of
two. The partials of the entries that add no keys are NaN (a read of one shows), and the forward
merge is checked against a float64 merge in torch (both kernels could not be wrong alike). The
switch reaches both launches (and ships on).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules are imported

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys as tkeys
from nsa.attention.triton import selected_keys_bwd as tkbwd
from tests.unit.attention.triton.test_triton_selected_keys import _odd_table


def _partials(B, Hkv, T, NK, NB, G, D, lp, dtype, pdq_dtype, seed):
    """A broken table (duplicates, invalid, negative and future entries, tokens 3 and 9 without a key)
    and partials PO / PL / PDQ as the keys kernels leave them: finite where an entry adds keys (PL
    -inf for some: a chunk with no key of the row), NaN where it adds none."""
    idx, valid = _odd_table(B, Hkv, T, lp, NK, seed)
    assert idx.shape[-1] == NK
    t = torch.arange(T).view(T, 1)
    keep = valid & (idx >= 0) & (idx * lp <= t)  # [B, Hkv, T, NK]
    twice = (idx[..., :, None] == idx[..., None, :]) & keep[..., :, None] & keep[..., None, :]
    assert (twice.sum((-1, -2)) > NK).any()  # some token lists a kept block twice
    g = torch.Generator().manual_seed(seed)
    npos = B * Hkv * T * NK
    po = torch.randn(NB, npos, G, D, generator=g)
    pl = torch.randn(NB, npos, G, generator=g) * 4
    pl[torch.rand(pl.shape, generator=g) < 0.1] = float("-inf")
    pdq = torch.randn(NB, npos, G, D, generator=g)
    gone = ~keep.reshape(1, npos, 1)
    po = po.masked_fill(gone[..., None], float("nan")).to(dtype)
    pl = pl.masked_fill(gone, float("nan"))
    pdq = pdq.masked_fill(gone[..., None], float("nan")).to(pdq_dtype)
    return idx, valid, keep, po, pl, pdq


def _fwd_merge(po, pl, idx, valid, T, G, D, lp, tiles):
    B, Hkv, _, NK = idx.shape
    NB = po.shape[0]
    cfg = tsel._config(G, D, lp)
    out = torch.empty(B, Hkv, T, G, D, dtype=po.dtype)
    lse = torch.empty(B, Hkv, T, G)
    tkeys._sel_fwd_merge_kernel[(-(-T // cfg["TM"]), B * Hkv)](
        po, pl, idx, valid.view(torch.int8), out, lse, T, NK, NB,
        G=G, D=D, LP=lp, TM=cfg["TM"], RM=cfg["RM"], DP=cfg["DP"], TILES=tiles, NEP=tkbwd.merge_slots(NK, NB),
    )  # fmt: skip
    return out, lse


def _dq_merge(pdq, idx, valid, T, G, D, lp, dtype, tiles):
    B, Hkv, _, NK = idx.shape
    NB = pdq.shape[0]
    cfg = tsel._config(G, D, lp)
    dq = torch.empty(B, Hkv, T, G, D, dtype=dtype)
    tkbwd._sel_bwd_dq_merge_kernel[(-(-T * G // cfg["BM_merge"]), B * Hkv)](
        pdq, idx, valid.view(torch.int8), dq, T, NK, B * Hkv * T * NK, NB,
        G=G, D=D, LP=lp, DP=cfg["DP"], BM=cfg["BM_merge"], TILES=tiles, NEP=tkbwd.merge_slots(NK, NB),
    )  # fmt: skip
    return dq


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view({4: torch.int32, 2: torch.int16}[x.element_size()])


def _check(dtype, pdq_dtype, G, NK, NB, B, Hkv, T, D, lp, seed):
    idx, valid, keep, po, pl, pdq = _partials(B, Hkv, T, NK, NB, G, D, lp, dtype, pdq_dtype, seed)
    cfg = tsel._config(G, D, lp)
    assert T % cfg["TM"] and (T * G) % cfg["BM_merge"]
    (o0, l0), (o1, l1) = (_fwd_merge(po, pl, idx, valid, T, G, D, lp, tiles) for tiles in (False, True))
    assert torch.equal(_bits(o1), _bits(o0)) and torch.equal(_bits(l1), _bits(l0))
    dq0, dq1 = (_dq_merge(pdq, idx, valid, T, G, D, lp, dtype, tiles) for tiles in (False, True))
    assert torch.equal(_bits(dq1), _bits(dq0))
    # Against a float64 merge: kept entries' partials over every chunk, tokens without a key zeros / -inf.
    k = keep.reshape(1, -1, 1).expand(NB, -1, G)
    lse64 = pl.double().masked_fill(~k, float("-inf")).view(NB, B, Hkv, T, NK, G)
    m = lse64.amax(dim=(0, 4))
    w = torch.exp2(lse64 - m.nan_to_num(neginf=0.0)[None, :, :, :, None])
    o64 = po.double().nan_to_num().view(NB, B, Hkv, T, NK, G, D)
    want = (w[..., None] * o64).sum(dim=(0, 4)) / w.sum(dim=(0, 4)).clamp_min(1e-300)[..., None]
    assert (
        torch.isfinite(o1).all()
        and (o1[:, :, [3, 9]] == 0).all()
        and (l1[:, :, [3, 9]] == float("-inf")).all()
    )
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(o1.double(), want, rtol=tol, atol=tol)
    dq64 = pdq.double().nan_to_num().view(NB, B, Hkv, T, NK, G, D).sum(dim=(0, 4))
    torch.testing.assert_close(dq1.double(), dq64, rtol=tol, atol=tol)


# (dtype, PDQ dtype, G, n, NB, B, Hkv, T, D, l'): n 5 / 3 / 5 (not powers of two); NB 4 at n 5 is 20
# couples (NEP 32); T and T*G multiples of neither TM nor BM; D 24 and 40 pad to 32 / 64.
CASES = [
    (torch.float32, torch.float32, 1, 5, 1, 1, 2, 70, 16, 8),
    (torch.float16, torch.float16, 6, 3, 2, 1, 1, 45, 24, 16),
    (torch.float16, torch.float32, 16, 5, 4, 1, 1, 45, 40, 8),
]


@pytest.mark.parametrize("dtype,pdq_dtype,G,NK,NB,B,Hkv,T,D,lp", CASES)
def test_tiles_merges_are_bitwise_the_loops(dtype, pdq_dtype, G, NK, NB, B, Hkv, T, D, lp):
    _check(dtype, pdq_dtype, G, NK, NB, B, Hkv, T, D, lp, seed=G + NK)


def test_tiles_merges_are_bitwise_the_loops_bf16(bf16_interpreter):
    """bf16 as the GPU does it (conftest fixture): PO and PDQ bf16, G 6, two chunks."""
    _check(torch.bfloat16, torch.bfloat16, 6, 5, 2, 1, 1, 37, 32, 8, seed=7)


def _launched(monkeypatch) -> dict:
    """One forward + backward of the key-major path (G 2); the merges' (TILES, NEP, MU) as launched."""
    seen = {}

    class Spy:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen[self.name] = (kw["TILES"], kw["NEP"], kw["MU"])
                return self.kernel[grid](*args, **kw)

            return launch

    # The separate forward merge runs where fwd_forced_merge is off (it ships on: the merging forced
    # pass takes its place; merge_tiles is that merge's switch).
    shipped = tsel._config
    monkeypatch.setattr(tsel, "_config", lambda *a, **kw: {**shipped(*a, **kw), "fwd_forced_merge": False})
    monkeypatch.setattr(tkeys, "_sel_fwd_merge_kernel", Spy("fwd", tkeys._sel_fwd_merge_kernel))
    monkeypatch.setattr(tkbwd, "_sel_bwd_dq_merge_kernel", Spy("dq", tkbwd._sel_bwd_dq_merge_kernel))
    G, T, D, lp = 2, 40, 16, 16
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 1, T, G, D, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 1, T, D, generator=g, requires_grad=True) for _ in range(2))
    idx, valid = _odd_table(1, 1, T, lp, 3, seed=5)
    out = tsel.selected_attention(q, k, v, idx, valid, sel_block=lp, scale=0.25, forced_blocks=True)
    torch.autograd.grad(out.sum(), (q, k, v))
    return seen


def test_the_loops_ship_and_merge_tiles_reaches_both_launches(monkeypatch):
    """`_config` ships the loops (merge_tiles False) at every G, head_dim and arch since the H100 of
    2026-11-26c measured the tiles no faster (4 loads a step where they run); the launchers hand it
    to both merges as TILES, with NEP = merge_slots (>= 16, one compile for every T) and MU."""
    for G in (1, 6, 16):
        for D in (64, 128):
            for arch in (80, 90):
                cfg = tsel._config(G, D, 64, arch=arch)
                assert (cfg["merge_tiles"], cfg["MU_m"], cfg["MU_merge"]) == (False, 4, 4)
    assert tkbwd.merge_slots(16, 1) == 16 and tkbwd.merge_slots(5, 1) == 16 and tkbwd.merge_slots(7, 3) == 32
    assert _launched(monkeypatch) == {"fwd": (False, 16, 4), "dq": (False, 16, 4)}


def test_the_kernel_probe_variant_runs_the_tiles(monkeypatch):
    """bench/kernel_probe.py's selected variant {"merge_tiles": True} (M7C), applied as probe_sel patches
    the launch config, launches both merges' tiles."""
    from tests.fixtures.bench import load_bench

    probe = load_bench("kernel_probe")
    over = {"shape": "m7c", "merge_tiles": True}
    assert over in probe.SEL_VARIANTS
    shipped = tsel._launch_config
    monkeypatch.setattr(
        tsel, "_launch_config", lambda G, D, LP, *a: probe._apply(shipped(G, D, LP, *a), over, G)
    )
    assert _launched(monkeypatch) == {"fwd": (True, 16, 4), "dq": (True, 16, 4)}
