"""tests/conftest.py's timeline (NSA_TEST_TIMELINE): each worker's lines become one span per test file,
in the order run, from the file's first test's start to its last test's end."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import timeline_spans


def test_a_workers_tests_become_one_span_per_file_in_the_order_run(tmp_path: Path) -> None:
    rows = [
        ("a.py::t1", 10.0, 11.0),
        ("a.py::t2", 11.0, 13.5),
        ("b.py::t", 13.5, 20.0),
        ("a.py::t3", 20.0, 21.0),
    ]
    (tmp_path / "gw0.jsonl").write_text(
        "".join(json.dumps({"id": i, "t0": a, "t1": b}) + "\n" for i, a, b in rows)
    )
    spans = timeline_spans([tmp_path / "gw0.jsonl", tmp_path / "gw1.jsonl"])
    # a file that comes back later (a second work unit) is a span of its own; a worker with no log has none
    assert spans == {
        "gw0": [("a.py", 10.0, 13.5, 2), ("b.py", 13.5, 20.0, 1), ("a.py", 20.0, 21.0, 1)],
        "gw1": [],
    }
