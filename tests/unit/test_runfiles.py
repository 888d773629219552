"""The run-dir contract's readers tolerate what a live writer leaves behind: torn lines, missing files."""

from __future__ import annotations

import json
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


def _fake_checkpoint(rd, step: int, payload: bytes = b"weights"):
    from nsa.runfiles import checkpoint_name, write_checkpoint_manifest

    d = rd.checkpoints_dir / checkpoint_name(step)
    d.mkdir(parents=True)
    (d / "model.pt").write_bytes(payload * 100)
    (d / "optim.pt").write_bytes(b"optim" * 50)
    (d / "meta.json").write_text(json.dumps({"step": step}))
    (d / "rank0.pt").write_bytes(b"rank0")
    write_checkpoint_manifest(d, step)
    return d


def test_checkpoint_manifest_round_trip_and_every_kind_of_damage_is_named(tmp_path):

    from nsa.runfiles import CHECKPOINT_MANIFEST, RunDir, verify_checkpoint

    rd = RunDir(tmp_path)
    d = _fake_checkpoint(rd, 20)
    man = json.loads((d / CHECKPOINT_MANIFEST).read_text())
    assert man["step"] == 20 and set(man["files"]) == {"model.pt", "optim.pt", "meta.json", "rank0.pt"}
    assert man["files"]["rank0.pt"]["size"] == 5 and len(man["files"]["rank0.pt"]["sha256"]) == 64
    assert verify_checkpoint(d) is None

    # truncated model.pt: the size check names it, with and without hashing
    data = (d / "model.pt").read_bytes()
    (d / "model.pt").write_bytes(data[:10])
    for hashes in (True, False):
        reason = verify_checkpoint(d, hashes=hashes)
        assert reason is not None and "model.pt" in reason and "truncated" in reason
    (d / "model.pt").write_bytes(data)
    # same size, different bytes: only the hash sees it
    (d / "rank0.pt").write_bytes(b"junk!")
    assert verify_checkpoint(d, hashes=False) is None
    assert "rank0.pt" in verify_checkpoint(d) and "sha256" in verify_checkpoint(d)
    (d / "rank0.pt").write_bytes(b"rank0")
    (d / "meta.json").unlink()
    assert "meta.json: missing" in verify_checkpoint(d)
    (d / CHECKPOINT_MANIFEST).unlink()
    assert CHECKPOINT_MANIFEST in verify_checkpoint(d)
    assert "not a directory" in verify_checkpoint(tmp_path / "nope")
    assert "\n" not in verify_checkpoint(d)


def test_intact_checkpoints_are_newest_first_and_ignore_latest_and_debris(tmp_path):
    from nsa.runfiles import LATEST, RunDir

    rd = RunDir(tmp_path)
    assert rd.checkpoints() == [] and rd.newest_intact_checkpoint() is None
    c20, c40, c100 = (_fake_checkpoint(rd, s) for s in (20, 40, 100))
    (rd.checkpoints_dir / ".tmp-step-00000120").mkdir()
    (rd.checkpoints_dir / LATEST).write_text("step-00000140\n")  # names a dir that is gone
    assert rd.checkpoints() == [c100, c40, c20]
    assert rd.intact_checkpoints() == [c100, c40, c20]
    (c100 / "optim.pt").write_bytes(b"")
    assert rd.intact_checkpoints() == [c40, c20]
    assert rd.newest_intact_checkpoint() == c40
