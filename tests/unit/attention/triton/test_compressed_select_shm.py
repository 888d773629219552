"""The selection kernel's Eq. 9 neighbour keys without the [BT, BJ * RP] gathers (`_cmp_select` SHM,
compressed.py `_config` "select_shm", a = l/d = 2 only) under TRITON_INTERPRET=1: its tables are
eager's (exact ties included: all logits 0) and bitwise those of the gathers' loop (select_shm 0) on
broken inputs (a row log-sum-exp that is no softmax's, so probabilities above 1), over several key
tiles (the neighbour of a tile's first block carried from the tile before), r = l'/d no power of two
(padded key columns), tiles merged in halves; and the switch reaches the launch.

Run: .venv/bin/pytest tests/unit/attention/triton/test_compressed_select_shm.py
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (KERNELS rule)

import pytest
import torch

from nsa.attention import compressed as eager
from nsa.attention.triton import compressed as tri
from tests.fixtures.bench import load_bench
from tests.unit.attention.triton.test_compressed_select_cut import _tables_off_and_on

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")

SHM = ("select_shm", "SHM")  # the config key and the kernel's constexpr (_tables_off_and_on)


# (B, Hkv, T, G, D, l, d, l', n), all a = 2: BJ 16 blocks a key tile, so T spans 3 tiles; r 3 (padded
# to 4 columns) and r 4; G 6 and 3 merge in halves (4 and 8 tokens a tile on sm_80's config).
CASES = [
    (1, 1, 100, 6, 32, 2, 1, 3, 5),
    (1, 1, 130, 3, 16, 2, 1, 4, 4),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}T{c[2]}G{c[3]}r{c[7] // c[6]}")
def test_no_gather_neighbours_give_the_gathers_tables_bit_for_bit(monkeypatch, case):
    *_, G, D, bl, d, lp, n = case
    assert tri._config(G, D, n, bl, d, lp)["halves_sel"] == 1
    old, new = _tables_off_and_on(monkeypatch, case, SHM)
    assert torch.equal(new[1], old[1]) and torch.equal(new[0], old[0])
    # Not trivial: late tokens hold n valid blocks, not only the forced ones.
    assert bool(old[1][..., -1, :].all()) and len(set(old[0][0, 0, -1].tolist())) == n


@pytest.mark.parametrize("zero", ["q", "none"])
def test_no_gather_neighbours_give_eagers_tables_ties_included(monkeypatch, zero):
    """Eager's op against the triton op with select_shm on (random inputs, and all logits 0: every
    complete block scores the same, the tie-break by j alone orders them)."""
    B, Hkv, T, G, D, bl, d, lp, n = 1, 1, 100, 6, 32, 2, 1, 3, 6
    g = torch.Generator().manual_seed(5)
    nc = (T - bl) // d + 1
    q = torch.randn(B, Hkv, T, G, D, generator=g) * (zero != "q")
    kc, vc = torch.randn(B, Hkv, nc, D, generator=g), torch.randn(B, Hkv, nc, D, generator=g)
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=0.125)
    real = tri._config
    monkeypatch.setattr(tri, "_config", lambda *a, **k: {**real(*a, **k), "select_shm": 1})
    _, idx, valid = tri.compressed_attention_and_selection(q, kc, vc, **kw)
    _, e_idx, e_valid = eager.compressed_attention_and_selection(q, kc, vc, chunk=1024, **kw)
    assert torch.equal(valid, e_valid) and torch.equal(idx, e_idx)
    free = [j for j in idx[0, 0, -1].tolist() if j not in (0, (T - 1) // lp, (T - 1) // lp - 1)]
    assert len(free) == n - 3 and (zero != "q" or free == sorted(free, reverse=True))


def test_the_switch_ships_at_m7c_shapes_and_the_papers_on_sm90_only_at_a_2():
    """At M7C's shape with select_split: on sm_90 ("shmsplit", measured faster by the H100 of
    2026-11-26c) and on sm_80 ("a100shm", the proxy's word); at the paper's shape on sm_90 alone (with
    the insertion and, since that H100's second call, the split: it measured it faster there, "selshm2",
    "flips2"; off on sm_80,
    unpriced); off at head_dim 32 and where a != 2 (the kernel asserts a = 2)."""
    for arch in (80, 90):
        assert tri._config(6, 64, 16, 32, 16, 64, arch)["select_shm"] == 1
        assert tri._config(6, 32, 16, 32, 16, 64, arch)["select_shm"] == 0
        assert tri._config(6, 64, 16, 48, 16, 64, arch)["select_shm"] == 0  # a = 3
        assert tri._config(16, 128, 16, 48, 16, 64, arch)["select_shm"] == 0  # a = 3
    paper = tri._config(16, 128, 16, 32, 16, 64, 90)
    assert (paper["select_shm"], paper["select_split"], paper["select_insert"]) == (1, 1, 2)
    assert tri._config(12, 96, 16, 32, 16, 64, 90)["select_shm"] == 1  # padded to 16 heads, head_dim 65-128
    assert tri._config(16, 128, 16, 32, 16, 64, 80)["select_shm"] == 0


def test_the_probe_times_the_switch_beside_the_baseline(capsys):
    """bench/kernel_probe.py's selection variants with select_shm off (M7C and the paper's shape)
    resolve to a change of the launch (a dry run: no GPU), so the next GPU session measures it."""
    probe = load_bench("kernel_probe")
    assert {"kernel": "select", "shape": "m7c", "select_split": 0} in probe.CMP_VARIANTS
    assert {"kernel": "select", "shape": "paper", "select_shm": 0} in probe.CMP_VARIANTS
    args = [
        "--only",
        "cmp_fwd",
        "--shapes",
        "m7c:65536:1",
        "paper:32768:1",
        "--match",
        "select_shm",
        "--dry-run",
    ]
    assert probe.main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert any(r["changes"] == {} for r in rows)
    assert any(r["shape"] == "m7c" and r["changes"].get("select_shm") == 0 for r in rows)
    assert any(r["shape"] == "paper" and r["changes"].get("select_shm") == 0 for r in rows)
