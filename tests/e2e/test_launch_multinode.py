"""Multi-node over SSH: two "hosts" (the nsa-test and nsa-test-b aliases of the loopback sshd, with
different workdirs), 2 nodes x 1 worker, c10d rendezvous on node 0 at 127.0.0.1; the run finishes.
And a 2-node pod rented with `up --provision prime` from the FAKE Prime API (a multi-node offer; one
real sshd per node): trains on both nodes, is pulled and terminated; no cluster in stock: exit 1,
no pod."""

from __future__ import annotations

import json

import pytest
import yaml

from launcher.run.api import resolve_run
from nsa.runfiles import RunDir
from tests.e2e.launch_support import PYTHON, invoke, isolate, status
from tests.e2e.prime_support import listening
from tests.fixtures.fake_prime import pod_profile

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
    # the all-reduce preflight of a multi-node `up` (on by default with > 1 node) ran across both
    # nodes over SSH; the pod tests (here and in test_launch_recovery) skip it with --no-allreduce-check
    assert "all-reduce ok across 2 ranks (gloo)" in res.output, res.output
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


def test_two_node_pod_is_rented_trained_on_and_terminated(fake_prime, tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    profile = pod_profile(tmp_path)
    up = ("up", "--profile", str(profile), "--provision", "prime", "--gpu-type", "CPU_NODE", "--python", PYTHON,
          "--ssh-config", str(fake_prime.ssh_config), "--set", "train.steps=4", "--set", "train.save_every=4",
          # the preflight's own torchrun on both nodes: checked over SSH by the test above
          "--no-allreduce-check")  # fmt: skip
    fake_prime.no_multinode = True  # single-node offers in stock, but no cluster
    res = invoke(*up, "--name", "mn-none")
    assert res.exit_code == 1, res.output
    assert "no Prime Intellect offer has a multi-node cluster of 2x CPU_NODE (2 nodes x 1)" in res.output
    assert "--multi-node" in res.output and not fake_prime.pods
    assert not any(m == "POST" for m, _ in fake_prime.requests)

    fake_prime.no_multinode = False
    res = invoke(*up, "--name", "mn-pod", "--down-when-done")
    assert res.exit_code == 0, res.output
    assert "renting 2x CPU_NODE as 2 nodes" in res.output and res.output.count("recorded the host key") == 2
    assert sum(m == "POST" for m, _ in fake_prime.requests) == 1
    assert any(p.endswith("/availability/multi-node") for m, p in fake_prime.requests)
    rec = resolve_run("mn-pod")
    ports = {n.host.port for n in rec.nodes}
    assert len(rec.nodes) == 2 and len(ports) == 2 and rec.provider == "prime"
    # both nodes trained in one world of 2, each node with its own HOME and run dir (separate machines)
    node_dirs = [RunDir(d) for d in sorted(fake_prime.root.glob("*/home/nsa-launch/runs/mn-pod"))]
    assert len(node_dirs) == 2 and all(rd.exit_code() == 0 for rd in node_dirs)
    assert sorted(r for rd in node_dirs for r in rd.heartbeats()) == [0, 1]
    mirror = RunDir(home / "mirror" / "mn-pod")
    assert mirror.latest_checkpoint() is not None and mirror.latest_checkpoint().name == "step-00000004"
    assert "terminated pod" in res.output and not fake_prime.pods
    assert not any(listening(p) for p in ports)
