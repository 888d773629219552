"""The key-major forward with its forced pairs as one dense pass that merges the rest
(selected.py `_config` "fwd_forced_merge": selected_keys.py `_sel_fwd_forced_merge_kernel`, the keys
kernel's FREE walk over the non-forced pairs, `reverse_index(..., forward=True)`) under
TRITON_INTERPRET=1 on CPU tensors.

It ships at G <= 8 and head_dim <= 64, so test_triton_selected_keys.py's forward and gradients against
the eager op (fp32, fp16, bf16 within bounds, tables with duplicated, invalid, negative, missing and
future entries) run it; here: the keys kernel writes partials for the non-forced pairs only and the
merging pass reads nothing else (PO/PL full of NaN beforehand), and the forward's begin / seg_end_f are
their formula.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules are imported

import pytest
import torch

pytest.importorskip("triton")

from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys as tkeys
from tests.fixtures.launch_spy import LaunchSpy
from tests.unit.attention.triton.test_triton_selected_keys import _inputs, _odd_table


@pytest.fixture
def forced_merge(monkeypatch):
    """`_config` with fwd_forced_merge on; the old merge must not run, the merging pass once a forward."""
    shipped = tsel._config
    monkeypatch.setattr(tsel, "_config", lambda *a, **kw: {**shipped(*a, **kw), "fwd_forced_merge": True})

    class _NotLaunched:
        def __getitem__(self, grid):
            raise AssertionError("the separate merge ran where fwd_forced_merge holds")

    monkeypatch.setattr(tkeys, "_sel_fwd_merge_kernel", _NotLaunched())
    seen: list = []
    monkeypatch.setattr(tkeys, "_sel_fwd_keys_kernel", LaunchSpy(tkeys._sel_fwd_keys_kernel, seen, "FREE"))
    return seen


def _forward_pairs(idx, valid, lp):
    """Which table entries the FREE walk takes: valid, block j >= 1, token t >= (j + 2) * l'."""
    t = torch.arange(idx.shape[2]).view(-1, 1)
    return valid & (idx >= 1) & ((idx + 2) * lp <= t)


def test_the_walk_writes_only_non_forced_partials_and_the_pass_reads_only_those(forced_merge):
    """The kernels by hand with PO/PL full of NaN, as keys_forward launches them: out and lse bitwise
    the launcher's; every non-forced entry's partial written and finite (its row saw the whole chunk),
    every other entry's left NaN (never written, never read)."""
    G, T, D, lp = 2, 70, 16, 8
    q, k, v = _inputs(T, G, D, torch.float32, seed=3)
    idx, valid = _odd_table(1, 1, T, lp, 4, seed=4)
    n = idx.shape[-1]
    want = torch.ops.nsa_triton.selected_fwd(q, k, v, idx, valid, lp, 0.3, True)[:2]
    cfg = tsel._launch_config(G, D, lp)
    valid8 = valid.view(torch.int8)
    order, start, _seg_end, S, nseg, begin, seg_end_f = tkeys.reverse_index(
        idx, valid8, lp, cfg["seg_target"], forward=True
    )
    nb = -(-lp // cfg["BN"])
    po = torch.full((nb, T * n, G, D), float("nan"))
    pl = torch.full((nb, T * n, G), float("nan"))
    ns = -(-T // lp)
    tkeys._sel_fwd_keys_kernel[(nseg, nb)](
        q, k, v, order, begin, start, seg_end_f, po, pl, T, ns, n, ns, ns.bit_length() + 1, S, 0.3,
        G=G, D=D, LP=lp, DP=cfg["DP"], BN=cfg["BN"], BR=cfg["BR_f"], PREC="ieee", DIV32=cfg["keys_div32"], FREE=True,
    )  # fmt: skip
    out, lse = torch.empty_like(q), torch.empty(1, 1, T, G)
    tkeys._sel_fwd_forced_merge_kernel[(-(-T * G // cfg["BM"]), 1)](
        q, k, v, idx, valid8, po, pl, out, lse, T, n, nb, 0.3,
        G=G, D=D, LP=lp, DP=cfg["DP"], BM=cfg["BM"], BK=cfg["BK"], PREC="ieee",
    )  # fmt: skip
    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])
    walked = _forward_pairs(idx, valid, lp).view(-1)
    assert walked.any() and (~walked).any()
    assert torch.isfinite(pl[:, walked]).all() and torch.isfinite(po[:, walked]).all()
    assert pl[:, ~walked].isnan().all()


def test_the_forward_index_is_its_aten_formula():
    """reverse_index(forward=True): the first five outputs are the backward's index unchanged; begin[b]
    is block b's first pair whose token is >= (j + 2) * l' (block 0: none, its end), seg_end_f the
    cumsum of ceil(walked / S), on a table with invalid, future and duplicate entries over B*Hkv 2."""
    B, Hkv, T, lp, n = 1, 2, 150, 16, 5
    g = torch.Generator().manual_seed(11)
    idx = torch.randint(-1, 12, (B, Hkv, T, n), generator=g)
    valid = torch.rand(B, Hkv, T, n, generator=g) < 0.8
    valid8 = valid.view(torch.int8)
    base = tkeys.reverse_index(idx, valid8, lp)
    got = tkeys.reverse_index(idx, valid8, lp, forward=True)
    for a, b in zip(base, got[:5]):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    order, start, S = got[0], got[1], got[3]
    ns = -(-T // lp)
    tok = (order // n) % T
    begin, ends = [], []
    for b in range(B * Hkv * ns):
        s0, s1 = int(start[b]), int(start[b + 1])
        j = b % ns
        late = [x for x in range(s0, s1) if j >= 1 and int(tok[x]) >= (j + 2) * lp]
        begin.append(late[0] if late else s1)
        ends.append(-(-(s1 - begin[-1]) // S))
    assert torch.equal(got[5], torch.tensor(begin)) and torch.equal(
        got[6], torch.cumsum(torch.tensor(ends), 0)
    )
    assert (got[5] > start[:-1]).any() and (got[5] < start[1:]).any()  # forced prefixes and walked suffixes
