"""Fixtures for the data tests: small real corpora on disk whose documents carry their ids."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.data.data_support import doc_text


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


@pytest.fixture
def corpus(tmp_path: Path) -> Callable[..., list[str]]:
    def make(n_files: int = 4, docs_per_file: int = 25, fmt: str = "jsonl") -> list[str]:
        return write_corpus(tmp_path / f"corpus-{n_files}-{docs_per_file}-{fmt}", n_files, docs_per_file, fmt)

    return make
