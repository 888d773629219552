"""A run's secrets never reach `status` (found after the qa walk of 2026-11-27): a trainer error that
quotes a secret's value (a hub URL with its token) came back verbatim in the status's `error` and
`events`, so `nsa-launch status`, `--json`, the dashboard and `watch` printed it. The status of a real
run dir, read by the real agent on this host."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from launcher.config.profiles import PROJECT_ROOT
from launcher.run import registry
from launcher.run.control import fetch_status
from launcher.ssh.hosts import local_host

SECRET = "hf_qa7Secret0123456789"


def test_a_secret_quoted_by_the_trainers_error_is_masked_in_the_whole_status(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "train.log").write_text(f"Traceback (most recent call last):\nValueError: 401 for token {SECRET}\n")
    (rd / "exit_code").write_text("1\n")
    event = {"kind": "error", "step": 3, "time": time.time(), "detail": {"error": f"401 for token {SECRET}"}}
    (rd / "events.jsonl").write_text(json.dumps(event) + "\n")
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(run="sec1", profile="cpu", created=1.0, nodes=[node], secrets=["HF_TOKEN"])
    registry.save(rec)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    bare = fetch_status([rec])[0]  # not set here: nothing to mask with (logs behaves the same)
    assert bare["state"] == "failed" and SECRET in bare["error"]
    monkeypatch.setenv("HF_TOKEN", SECRET)
    st = fetch_status([rec])[0]
    assert st["state"] == "failed" and "401 for token ****" in st["error"]
    assert SECRET not in json.dumps(st) and any("****" in json.dumps(e) for e in st["events"])
