"""MetricsTail: incremental reads of metrics.jsonl, locally and through the real loopback sshd.

The remote half uses the `sshd` fixture (a real OpenSSH server), the launcher's own transport and
the host agent's `metrics` command run from this checkout (the host's synced workdir); the run dir
path carries quotes and `$(...)` to prove no value reaches a shell unquoted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.dashboard import metrics_tail
from launcher.dashboard.metrics_tail import MetricsTail
from launcher.run.registry import NodeRecord, RunRecord
from launcher.ssh.hosts import local_host, parse_target


def _record(host, workdir: Path, run_dir: str) -> RunRecord:
    return RunRecord(
        run="m", profile="cpu", created=0.0, nodes=[NodeRecord(host, str(workdir), sys.executable, run_dir)]
    )


def _append(path: Path, records: list[dict], tail: str = "") -> None:
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records) + tail)


def _check_incremental(tail: MetricsTail, rec: RunRecord, metrics: Path) -> None:
    assert tail.read(rec) == []  # no file yet: empty, not an error
    metrics.parent.mkdir(parents=True, exist_ok=True)
    _append(metrics, [{"step": 1, "loss": 5.0, "tokens_per_s": 10.0, "lr": 1e-3}, {"loss/val": 4.0}])
    assert tail.read(rec) == [{"step": 1, "loss": 5.0, "tokens_per_s": 10.0}]
    # a record still being written (no newline yet) is not read until it is complete
    _append(metrics, [{"step": 2, "loss": 4.5}], tail='{"step": 3, "lo')
    assert [r["step"] for r in tail.read(rec)] == [1, 2]
    _append(metrics, [], tail='ss": 4.0}\n')
    assert [r["step"] for r in tail.read(rec)] == [1, 2, 3]


def test_local_reads_only_new_complete_records(tmp_path):
    tail = MetricsTail(keep=100)
    rec = _record(local_host(), tmp_path, "runs/m")
    _check_incremental(tail, rec, tmp_path / "runs" / "m" / "metrics.jsonl")


def test_first_read_of_a_long_file_skips_the_cut_line_and_keep_bounds_it(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics_tail, "FIRST_READ_BYTES", 200)
    metrics = tmp_path / "metrics.jsonl"
    _append(metrics, [{"step": i, "loss": 1.0 / (i + 1)} for i in range(100)])
    tail = MetricsTail(keep=3)
    steps = [r["step"] for r in tail.read(_record(local_host(), tmp_path, str(tmp_path)))]
    assert steps == [97, 98, 99]


def test_a_replaced_file_is_read_again_from_the_start(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    _append(metrics, [{"step": i, "loss": 1.0} for i in range(10)])
    tail, rec = MetricsTail(), _record(local_host(), tmp_path, str(tmp_path))
    assert len(tail.read(rec)) == 10
    metrics.write_text(json.dumps({"step": 0, "loss": 2.0}) + "\n")
    assert tail.read(rec) == [{"step": 0, "loss": 2.0}]


@pytest.mark.e2e
def test_remote_reads_through_real_sshd_with_a_hostile_path(sshd, tmp_path):
    host = parse_target(sshd.alias, str(sshd.ssh_config))
    run_dir = tmp_path / "work dir" / "runs" / "a'b $(touch CANARY) `x`"
    tail = MetricsTail()
    _check_incremental(tail, _record(host, PROJECT_ROOT, str(run_dir)), run_dir / "metrics.jsonl")
    assert not (PROJECT_ROOT / "CANARY").exists() and not Path("CANARY").exists()
    assert not list(tmp_path.rglob("CANARY"))
