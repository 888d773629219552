"""Fixtures for the data tests: small real corpora on disk whose documents carry their ids."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

ID_RE = re.compile(r"^<doc (\d+)>")


def doc_text(i: int) -> str:
    # Lengths vary from a few bytes to several windows so packing crosses document boundaries.
    words = " ".join(f"w{i}x{k}" for k in range((i * 7) % 23 + 1))
    return f"<doc {i}> {words}"


def write_corpus(root: Path, n_files: int, docs_per_file: int, fmt: str = "jsonl") -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    i = 0
    for f in range(n_files):
        rows = []
        for _ in range(docs_per_file):
            rows.append({"id": i, "text": doc_text(i)})
            i += 1
        path = root / f"part-{f:03d}.{fmt}"
        if fmt == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
        paths.append(str(path))
    return paths


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


@pytest.fixture
def corpus(tmp_path: Path) -> Callable[..., list[str]]:
    def make(n_files: int = 4, docs_per_file: int = 25, fmt: str = "jsonl") -> list[str]:
        return write_corpus(tmp_path / f"corpus-{n_files}-{docs_per_file}-{fmt}", n_files, docs_per_file, fmt)

    return make
