"""Helpers of the data tests that are not fixtures, imported by module path
(`tests.unit.data.data_support`): a test importing `conftest` by name gets whichever conftest.py
pytest imported first under that name (tests/e2e's, when e2e files are collected first)."""

from __future__ import annotations

import re

ID_RE = re.compile(r"^<doc (\d+)>")


def doc_text(i: int) -> str:
    # Lengths vary from a few bytes to several windows so packing crosses document boundaries.
    words = " ".join(f"w{i}x{k}" for k in range((i * 7) % 23 + 1))
    return f"<doc {i}> {words}"


def stream_of(batches: list) -> list[int]:
    """Reassemble the token stream from consecutive batches (stride T: y holds every next token)."""
    toks = [int(batches[0][0].flatten()[0])]
    for _, y in batches:
        toks.extend(int(t) for t in y.flatten())
    return toks


def doc_ids(tokens: list[int], eod: int = 256) -> list[int]:
    """Ids of the documents that START inside a byte-token stream (the first one may be partial)."""
    out = []
    start = 0
    for j, t in enumerate([*tokens, eod]):
        if t == eod:
            text = bytes(tokens[start:j]).decode("utf-8", "replace")
            m = ID_RE.match(text)
            if m:
                out.append(int(m.group(1)))
            start = j + 1
    return out
