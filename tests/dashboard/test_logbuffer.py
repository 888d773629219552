"""The log ring stays bounded and indexes like the tail of the full log; rank tags and search spans."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.dashboard.logbuffer import (
    MAX_LINE_CHARS,
    LogRing,
    find_spans,
    line_rank,
    make_line,
    rank_visible,
)
from tests.dashboard.helpers import RECORDING


@given(capacity=st.integers(1, 50), n=st.integers(0, 300))
def test_ring_holds_exactly_the_last_capacity_lines(capacity, n):
    ring = LogRing(capacity)
    ring.extend(make_line(f"line {i}") for i in range(n))
    kept = [f"line {i}" for i in range(n)][-capacity:]
    assert [ln.text for ln in ring] == kept
    assert len(ring) == len(kept)
    assert ring.dropped == max(0, n - capacity)
    if kept:
        assert ring[0].text == kept[0] and ring[-1].text == kept[-1]


def test_ring_memory_is_flat_after_a_million_lines():
    ring = LogRing(1000)
    for i in range(1_000_000):
        ring.append(make_line(f"[rank{i % 8}]: step {i}"))
    assert len(ring) == 1000 and ring.dropped == 999_000
    assert len(ring._buf) == 1000  # the backing store never grew
    assert ring[-1].text == "[rank7]: step 999999"


def test_ring_rejects_zero_capacity_and_bad_index():
    with pytest.raises(ValueError, match="capacity"):
        LogRing(0)
    ring = LogRing(3)
    ring.append(make_line("a"))
    with pytest.raises(IndexError):
        ring[1]


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[rank0]: Traceback (most recent call last):", 0),
        ("[rank13]:   File x", 13),
        ("[default1]:step 3", 1),
        ("[nsa] step 2/120 loss 5.3507", None),
        ("W1122 03:19:48.657000 9864 torch/distributed/elastic/...", None),
        ("  [rank0]: not at the start", None),
        ("", None),
    ],
)
def test_rank_is_read_only_from_torchrun_prefixes(line, rank):
    assert line_rank(line) == rank


def test_untagged_lines_show_under_every_rank_filter():
    tagged, untagged = make_line("[rank1]: x"), make_line("torchrun says y")
    assert rank_visible(tagged, None) and rank_visible(tagged, 1) and not rank_visible(tagged, 0)
    assert rank_visible(untagged, 0) and rank_visible(untagged, 5)


def test_long_lines_are_cut_and_marked():
    ln = make_line("x" * (MAX_LINE_CHARS * 3) + "\n")
    assert len(ln.text) < MAX_LINE_CHARS + 20 and ln.text.endswith("…[cut]")
    assert make_line("abc\r\n").text == "abc"


def test_find_spans_is_case_insensitive_and_non_overlapping():
    assert find_spans("Eval loss 3.1; EVAL LOSS 2.9", "eval loss") == [(0, 9), (15, 24)]
    assert find_spans("aaaa", "aa") == [(0, 2), (2, 4)]
    assert find_spans("abc", "") == []


def test_rank_filter_on_a_real_two_rank_launcher_log():
    """tests/dashboard/recorded/rundirs/tiny-failed/train.log is a real `nsa-launch up` run (2 gloo
    ranks, torchrun --tee with the launcher's "[rank${rank}]:" template) whose rank 1 got SIGTERM:
    the trainer's own lines, rank 1's exit note and rank 0's gloo error are all tagged."""
    lines = [
        make_line(raw)
        for raw in (RECORDING / "rundirs" / "tiny-failed" / "train.log").read_text().splitlines()
    ]
    ranks = {ln.rank for ln in lines}
    assert ranks == {None, 0, 1}
    rank0 = [ln.text for ln in lines if rank_visible(ln, 0)]
    rank1 = [ln.text for ln in lines if rank_visible(ln, 1)]
    assert any(t.startswith("[rank0]:[nsa] step 10/2000") for t in rank0)
    assert any("gloo/transport/tcp/pair.cc" in t for t in rank0)
    assert not any(t.startswith("[rank0]:") for t in rank1)
    assert "[rank1]:[nsa] rank 1: SIGTERM at step 11; exiting" in rank1
    # torchrun's failure report and the launcher's lines are untagged: shown under both filters
    assert any("ChildFailedError" in t for t in rank1) and any(t.startswith("[nsa-launch]") for t in rank1)


def test_a_doubled_torch_prefix_is_shown_once():
    assert (
        make_line("[rank0]:[rank0]: Traceback (most recent call last):").text
        == "[rank0]: Traceback (most recent call last):"
    )
    assert make_line("[rank0]:[nsa] step 2").text == "[rank0]:[nsa] step 2"
