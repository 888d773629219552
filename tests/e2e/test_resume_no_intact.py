"""`up --resume` of a run dir whose checkpoints all fail verification (issue 21): it used to start,
report "running" from the boot heartbeat and exit 0, while the trainer then stopped with exit 2. Now
the agent refuses before any process starts: "no intact checkpoint; N found, each failed: ...",
offering --from-scratch, which moves the checkpoints aside (never deletes them)."""

from __future__ import annotations

import json
import os

import pytest

from launcher.config.profiles import PROJECT_ROOT
from launcher.host.start import _move_aside, no_intact_checkpoint
from nsa.runfiles import RunDir, checkpoint_name, write_checkpoint_manifest
from tests.e2e.launch_support import cleanup_local_run, invoke, isolate

pytestmark = pytest.mark.e2e


def _damaged_run_dir(root) -> RunDir:
    rd = RunDir(root)
    rd.root.mkdir(parents=True)
    rd.manifest.write_text(json.dumps({"run": root.name}))
    for step in (10, 20):
        d = rd.checkpoints_dir / checkpoint_name(step)
        d.mkdir(parents=True)
        for name in ("model.pt", "optim.pt", "rank0.pt", "rank1.pt"):
            (d / name).write_bytes(b"w" * 64)
        (d / "meta.json").write_text(json.dumps({"step": step}))
        write_checkpoint_manifest(d, step)
        (d / "model.pt").write_bytes(b"w" * 10)  # truncated after the manifest: not intact
    return rd


def test_up_resume_with_no_intact_checkpoint_exits_non_zero_and_starts_nothing(
    tmp_path, monkeypatch, tmux_server
):
    isolate(monkeypatch, tmp_path, tmux_server)
    run = f"noresume-{os.getpid()}"
    cleanup_local_run(run)
    rd = _damaged_run_dir(PROJECT_ROOT / "runs" / run)
    try:
        res = invoke("up", "--resume", "--name", run)
        assert res.exit_code == 2, res.output
        out = " ".join(res.output.split())
        assert "no intact checkpoint in" in out and "2 found, each failed: step-00000020:" in out, out
        assert "model.pt: 10 bytes" in out and "--from-scratch" in out
        assert not tmux_server.sessions and rd.exit_code() is None and not rd.heartbeat_dir.exists()
    finally:
        cleanup_local_run(run)


def test_from_scratch_moves_every_checkpoint_aside(tmp_path):
    rd = _damaged_run_dir(tmp_path / "run")
    assert "; 2 found, each failed: " in no_intact_checkpoint(rd)
    _move_aside(rd)
    assert rd.checkpoints() == [] and no_intact_checkpoint(rd) is None
    assert sorted(p.name.split("-step-")[1] for p in rd.checkpoints_dir.iterdir()) == ["00000010", "00000020"]
