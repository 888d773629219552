"""Packing: every token of every document survives in order, with exactly one EOD after each
document; targets are inputs shifted by one; only a final partial batch is dropped, and counted;
a position taken after any batch restarts the stream at exactly the next token."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nsa.data.packing import Packer, pack_documents

EOD = 99
docs_st = st.lists(st.lists(st.integers(0, 98), min_size=1, max_size=40), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(docs=docs_st, seq_len=st.integers(1, 17), batch_size=st.integers(1, 4))
def test_packing_preserves_tokens_and_separators(docs, seq_len, batch_size):
    batches, dropped = pack_documents([np.array(d) for d in docs], EOD, seq_len, batch_size)
    expected = [t for d in docs for t in (*d, EOD)]
    span = seq_len * batch_size
    assert len(batches) == max(0, (len(expected) - 1) // span)
    for x, y in batches:
        assert x.shape == y.shape == (batch_size, seq_len)
        assert x.dtype == y.dtype == np.int64
    if not batches:
        assert dropped == len(expected)
        return
    stream = [int(batches[0][0].flat[0])] + [int(t) for _, y in batches for t in y.flat]
    assert stream == expected[: len(stream)]  # order kept, nothing truncated, one EOD per document
    assert dropped == len(expected) - len(stream) + 1  # the next batch's first token is unconsumed
    for x, y in batches:  # y is x shifted by one inside the stream
        flat_x, flat_y = x.reshape(-1), y.reshape(-1)
        assert (flat_x[1:] == flat_y[:-1]).all()


@settings(max_examples=100, deadline=None)
@given(docs=docs_st, seq_len=st.integers(1, 9), batch_size=st.integers(1, 3), cut=st.integers(0, 20))
def test_position_after_any_batch_resumes_exactly(docs, seq_len, batch_size, cut):
    arrays = {i: np.array(d, dtype=np.int32) for i, d in enumerate(docs)}

    def packer(start_doc=0, skip=0):
        stream = ((i, str(i)) for i in range(start_doc, len(docs)))
        return Packer(stream, lambda k: arrays[int(k)], EOD, seq_len, batch_size, skip)

    full = []
    p = packer()
    positions = []
    while True:
        try:
            x, y, pos = p.next_batch()
        except StopIteration:
            break
        full.append((x, y))
        positions.append(pos)
    if cut >= len(full) - 1:
        return
    doc, off = positions[cut]
    resumed = packer(doc, off)
    for x, y in full[cut + 1 :]:
        rx, ry, _ = resumed.next_batch()
        assert (rx == x).all() and (ry == y).all()
