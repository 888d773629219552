"""The run-dir contract's readers tolerate what a live writer leaves behind: torn lines, missing files."""

from __future__ import annotations

import os

from nsa.runfiles import Heartbeat, RunDir, append_jsonl, atomic_write_text, iter_jsonl, tail_jsonl


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    p = tmp_path / "sub" / "f.txt"
    atomic_write_text(p, "one")
    atomic_write_text(p, "two")
    assert p.read_text() == "two"
    assert os.listdir(p.parent) == ["f.txt"]


def test_jsonl_readers_skip_a_torn_last_line(tmp_path):
    p = tmp_path / "m.jsonl"
    for i in range(3):
        append_jsonl(p, {"step": i})
    with open(p, "a") as f:
        f.write('{"step": 3, "lo')  # a writer caught mid-append
    assert [r["step"] for r in iter_jsonl(p)] == [0, 1, 2]
    assert [r["step"] for r in tail_jsonl(p)] == [0, 1, 2]


def test_tail_jsonl_reads_only_the_end(tmp_path):
    p = tmp_path / "m.jsonl"
    for i in range(5000):
        append_jsonl(p, {"step": i, "pad": "x" * 50})
    recs = tail_jsonl(p, max_bytes=1000)
    assert recs and recs[-1]["step"] == 4999
    assert len(recs) < 20
    assert [r["step"] for r in recs] == list(range(recs[0]["step"], 5000))


def test_rundir_round_trip(tmp_path):
    rd = RunDir(tmp_path / "run")
    assert rd.heartbeats() == {} and rd.exit_code() is None and rd.latest_checkpoint() is None
    rd.write_heartbeat(Heartbeat(rank=1, step=7, time=1.5, pid=42, phase="forward_backward"))
    rd.append_event("boot", rank=0, world_size=2)
    rd.exit_code_file.write_text("3\n")
    (rd.checkpoints_dir / "step-00000007").mkdir(parents=True)
    (rd.checkpoints_dir / "latest").write_text("step-00000007\n")
    assert rd.heartbeats()[1].step == 7
    assert next(iter_jsonl(rd.events))["detail"] == {"world_size": 2}
    assert rd.exit_code() == 3
    assert rd.latest_checkpoint() == rd.checkpoints_dir / "step-00000007"
