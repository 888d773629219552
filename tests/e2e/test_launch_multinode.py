"""Multi-node over SSH: two "hosts" (the nsa-test and nsa-test-b aliases of the loopback sshd, with
different workdirs), 2 nodes x 1 worker, c10d rendezvous on node 0 at 127.0.0.1; the run finishes."""

from __future__ import annotations

import json

import pytest
import yaml

from launcher.api import resolve_run
from nsa.runfiles import RunDir
from tests.e2e.launch_support import PYTHON, invoke, isolate, status

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_two_nodes_one_worker_each_finish(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    a, b = tmp_path / "node-a", tmp_path / "node-b"
    profile = tmp_path / "2x1cpu.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "name": "2x1cpu",
                "device": "cpu",
                "nodes": 2,
                "nproc_per_node": 1,
                "config": "configs/tiny.yaml",
                "overrides": ["train.device=cpu"],
                "env": {"OMP_NUM_THREADS": "1"},
                "hosts": [
                    {"target": sshd.aliases[0], "workdir": str(a), "python": PYTHON},
                    {"target": sshd.aliases[1], "workdir": str(b), "python": PYTHON},
                ],
                "expect": {"gpus": 0, "min_free_disk_gb": 0.1},
            }
        )
    )
    res = invoke(
        "up",
        "--profile",
        str(profile),
        "--ssh-config",
        str(sshd.ssh_config),
        "--name",
        "mn-e2e",
        "--set",
        "train.steps=12",
        "--set",
        "train.log_every=2",
        "--wait",
    )
    assert res.exit_code == 0, res.output
    rec = resolve_run("mn-e2e")
    assert [n.label for n in rec.nodes] == [f"{sshd.aliases[0]}", f"{sshd.aliases[1]}"] or len(rec.nodes) == 2
    rd_a, rd_b = RunDir(a / "runs" / "mn-e2e"), RunDir(b / "runs" / "mn-e2e")
    assert rd_a.exit_code() == 0 and rd_b.exit_code() == 0
    # one rank on each node, both in one world of 2, same rendezvous endpoint
    assert set(rd_a.heartbeats()) | set(rd_b.heartbeats()) == {0, 1}
    assert len(rd_a.heartbeats()) == 1 and len(rd_b.heartbeats()) == 1
    cmd_a = json.loads(rd_a.manifest.read_text())["command"]
    cmd_b = json.loads(rd_b.manifest.read_text())["command"]
    ep = cmd_a[cmd_a.index("--rdzv-endpoint") + 1]
    assert ep.startswith("127.0.0.1:") and cmd_b[cmd_b.index("--rdzv-endpoint") + 1] == ep
    assert cmd_a[cmd_a.index("--node-rank") + 1] == "0" and cmd_b[cmd_b.index("--node-rank") + 1] == "1"
    st = status("mn-e2e")
    assert st["state"] == "finished" and st["step"] == 12 and set(st["heartbeat_age_s"]) == {"0", "1"}
    assert not tmux_server.sessions
