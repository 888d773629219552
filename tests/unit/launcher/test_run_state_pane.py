"""The agent sees the run's tmux pane whatever the locale, so a run whose wrapper is still writing its
exit code is not "failed" (real tmux, real processes).

A tmux client without a UTF-8 locale (an SSH session that sets no LANG, as on the tests' fake pods
or any host whose sshd passes no locale) prints a tab in `-F` output as "_". The pane lookup split
on tabs, found no pane, and the status fell back to the run's tagged processes, which do not include
the wrapper shell: between torchrun's exit and the wrapper's `exit_code` the run read as "failed"
("the run's tmux session ended without writing exit_code"). That failed the CI run of
tests/e2e/test_launch_recovery.py::test_lost_two_node_pod_is_replaced_with_every_nodes_part_of_the_checkpoint
when the watcher's status landed in that moment on one node.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from launcher.host import state, tmux
from nsa.runfiles import Heartbeat, RunDir


@pytest.mark.parametrize("lang", [None, "C"])
def test_a_live_wrapper_without_its_exit_code_is_running_in_any_locale(
    tmux_server, tmp_path, monkeypatch, lang
):
    for k in ("LANG", "LC_ALL", "LC_CTYPE"):
        monkeypatch.delenv(k, raising=False)
    if lang is not None:
        monkeypatch.setenv("LANG", lang)
    run = f"pane-{uuid.uuid4().hex[:6]}"
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    rd.manifest.write_text(json.dumps({"run": run, "total_steps": 16}))
    req = {"run": run, "run_dir": str(rd.root), "tmux_socket": tmux_server.socket_name, "node": 0}
    # The wrapper after torchrun exited: only the (untagged) pane shell is left, no exit code yet.
    pane = tmux.start_session(req, tmux.session_name(run), "exec sleep 30", str(tmp_path))
    rd.write_heartbeat(Heartbeat(rank=0, step=16, time=time.time(), pid=os.getpid(), phase="done"))
    try:
        st = state.run_status(req, time.time())
        assert st["state"] == "running", st["error"]
        assert tmux.train_pane_pid(req, run) == pane and pane in st["pids"]
        # the wrapper writes its exit code, then its pane ends: finished
        rd.exit_code_file.write_text("0\n")
        tmux.end_sessions(req, tmux.session_name(run))
        assert tmux.train_pane_pid(req, run) is None
        assert state.run_status(req, time.time())["state"] == "finished"
    finally:
        tmux.end_sessions(req, tmux.session_name(run))


def test_a_run_never_sees_the_pane_of_a_run_whose_name_extends_its_own(tmux_server, tmp_path):
    """`kill --run reuse` after reuse finished looked up the pane of `nsa-reuse`, and tmux answered with
    the live `nsa-reuse2`'s: the kill stopped the other run (tests/e2e/test_host_env.py, where it cost
    15 s, 2026-11-27)."""
    req = {"tmux_socket": tmux_server.socket_name}
    pane = tmux.start_session(req, tmux.session_name("reuse2"), "exec sleep 30", str(tmp_path))
    try:
        assert tmux.train_pane_pid(req, "reuse2") == pane
        assert tmux.train_pane_pid(req, "reuse") is None
        assert tmux.train_pane_pid(req, "reuse2", node=1) is None
    finally:
        tmux.end_sessions(req, tmux.session_name("reuse2"))
