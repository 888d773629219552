"""Packing: documents -> one token stream (exactly one EOD after each document) -> [B, T] batches.

This module owns how tokens become batches and how a position in the stream is named, so a run can
resume at the exact window where it stopped. It must not truncate documents, pad, or know where
documents come from. Batches tile the stream with stride T: window b is stream[bT : bT + T + 1],
x = window[:-1], y = window[1:], so every token is a target exactly once; the next batch starts at
the last token of the previous one. A position is (doc_pos, offset): the document where the next
window starts (doc_pos is whatever the source uses to reopen it) and the token offset inside it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

Position = tuple[Any, int]  # (doc_pos, token offset inside that document's tokens + EOD)


class Packer:
    """Pull (doc_pos, text) pairs, tokenize, and cut [B, T] input/target windows.

    `docs` yields documents starting at the one a saved position names; its first `skip` tokens
    are skipped and, with count_first=False, it is not counted again in docs_read / tokens_read. When `docs` ends (finite sources only), `next_batch` raises StopIteration and
    `dropped_tokens` holds what was left over (less than one batch).
    """

    def __init__(
        self,
        docs: Iterator[tuple[Any, str]],
        encode: Callable[[str], np.ndarray],
        eod: int,
        seq_len: int,
        batch_size: int,
        skip: int = 0,
        count_first: bool = True,
    ) -> None:
        if seq_len < 1 or batch_size < 1:
            raise ValueError(f"seq_len and batch_size must be >= 1, got {seq_len}, {batch_size}")
        self._docs = docs
        self._encode = encode
        self._eod = np.array([eod], dtype=np.int32)
        self.seq_len = seq_len
        self.batch_size = batch_size
        self._skip = skip
        # A resumed stream re-reads the document it stopped in; the saved counters already hold it.
        self._uncounted = 0 if count_first else 1
        # Each entry: [doc_pos, tokens (with EOD), offset of the first unconsumed token].
        self._segments: deque[list[Any]] = deque()
        self._buffered = 0
        self.docs_read = 0
        self.tokens_read = 0
        self.dropped_tokens = 0

    def _pull(self) -> bool:
        try:
            pos, text = next(self._docs)
        except StopIteration:
            return False
        toks = np.concatenate([self._encode(text), self._eod])
        if self._uncounted:
            self._uncounted -= 1
        else:
            self.docs_read += 1
            self.tokens_read += len(toks)
        off = 0
        if self._skip:
            off, self._skip = self._skip, 0
            if off >= len(toks):
                raise ValueError(
                    f"resume offset {off} is past the end of document {pos!r} ({len(toks)} tokens)"
                )
        self._segments.append([pos, toks, off])
        self._buffered += len(toks) - off
        return True

    def next_batch(self) -> tuple[np.ndarray, np.ndarray, Position]:
        """Return x, y (int64 [B, T]) and the position where the following batch starts."""
        span = self.batch_size * self.seq_len
        while self._buffered < span + 1:
            if not self._pull():
                self.dropped_tokens = self._buffered
                raise StopIteration
        pieces = []
        need = span + 1
        for _doc, toks, off in self._segments:
            take = min(need, len(toks) - off)
            pieces.append(toks[off : off + take])
            need -= take
            if need == 0:
                break
        window = np.concatenate(pieces).astype(np.int64)
        # Consume span tokens; the last token of this batch starts the next one.
        left = span
        while left:
            seg = self._segments[0]
            avail = len(seg[1]) - seg[2]
            if avail <= left:
                self._segments.popleft()
                left -= avail
            else:
                seg[2] += left
                left = 0
        self._buffered -= span
        head = self._segments[0]
        x = window[:span].reshape(self.batch_size, self.seq_len)
        y = window[1:].reshape(self.batch_size, self.seq_len)
        return x, y, (head[0], int(head[2]))


def pack_documents(
    docs: list[np.ndarray], eod: int, seq_len: int, batch_size: int = 1
) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Pack already-tokenized documents; returns the batches and the dropped token count.

    A reference entry point for tests and benchmarks, running the same Packer the loader uses.
    """
    by_id = {str(i): d for i, d in enumerate(docs)}
    packer = Packer(
        ((i, str(i)) for i in range(len(docs))),
        lambda key: np.asarray(by_id[key], dtype=np.int32),
        eod,
        seq_len,
        batch_size,
    )
    out = []
    while True:
        try:
            x, y, _ = packer.next_batch()
        except StopIteration:
            return out, packer.dropped_tokens
        out.append((x, y))
