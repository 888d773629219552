"""A 2-node run as a user meets it (the qamulti walk of 2026-11-27): two "hosts", each a real sshd of
its own on 127.0.0.1 (so one can die while the other answers), real tmux, real torchrun with gloo.
Node 1's sshd runs in a UTS namespace of its own named 0-qa-node1 (where unshare works: root), so its
processes see another host name, as on two machines, one that sorts before this machine's.

One shared run, 2 nodes x 1 worker, paced: global rank 0 runs on node 0, where `status` reads the
loss, `logs` the log, `tunnel` TensorBoard and `pull` the weights. c10d's rendezvous ranked the nodes
by host name (then PID): rank 0 trained on node 1, status showed no loss, logs no step line, and a
restart resumed rank 0 on a node without the weights."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from launcher.host import procs
from launcher.run.registry import mirror_dir
from nsa.runfiles import RunDir, iter_jsonl
from tests.e2e.launch_support import PACED, PYTHON, invoke, isolate, wait_for
from tests.fixtures import sshd as sshd_mod
from tests.fixtures.sshd import SSHDUnavailable, SSHServer, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


NODE1_HOSTNAME = "0-qa-node1"


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--uts", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class _NamedSSHServer(SSHServer):
    """An sshd whose sessions see another host name (a UTS namespace of its own)."""

    def start(self, timeout: float = 10.0) -> None:
        wrapper = self.tmpdir / "sshd-named"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'exec unshare --uts /bin/sh -c \'hostname "$0" && exec {sshd_mod.SSHD} "$@"\' {NODE1_HOSTNAME} "$@"\n'
        )
        wrapper.chmod(0o755)
        real, sshd_mod.SSHD = sshd_mod.SSHD, str(wrapper)
        try:
            super().start(timeout)
        finally:
            sshd_mod.SSHD = real


class Cluster:
    """Two sshd "hosts" n0 and n1 (separate servers, ports and host keys), one ssh_config naming both."""

    def __init__(self, root: Path) -> None:
        self.root = root
        kinds = [SSHServer, _NamedSSHServer if _unshare_works() else SSHServer]
        self.servers = [
            kind(tmpdir=root / f"sshd{i}", port=free_port(), alias=f"n{i}", aliases=(f"n{i}",))
            for i, kind in enumerate(kinds)
        ]
        self.workdirs = [root / f"w{i}" for i in range(2)]

    def start(self) -> None:
        for s in self.servers:
            s.setup()
        known = "".join(s.known_hosts.read_text() for s in self.servers)
        for s in self.servers:
            s.known_hosts.write_text(known)  # each alias's UserKnownHostsFile knows both hosts
            s.start()
        self.ssh_config.write_text("\n".join(s.ssh_config.read_text() for s in self.servers))

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    def profile(self, name: str = "2x1cpu", **extra: object) -> Path:
        path = self.root / f"{name}.yaml"
        body = {
            "name": name,
            "device": "cpu",
            "nodes": 2,
            "nproc_per_node": 1,
            "config": "configs/tiny.yaml",
            "overrides": ["train.device=cpu"],
            "env": {"OMP_NUM_THREADS": "1"},
            "hosts": [
                {"target": f"n{i}", "workdir": str(self.workdirs[i]), "python": PYTHON} for i in range(2)
            ],
            "expect": {"gpus": 0, "min_free_disk_gb": 0.1},
            "kill_grace_s": 30,
            **extra,
        }
        path.write_text(yaml.safe_dump(body))
        return path

    def run_dir(self, node: int, run: str) -> RunDir:
        return RunDir(self.workdirs[node] / "runs" / run)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


@pytest.fixture
def cluster(tmp_path: Path, tmux_server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    isolate(monkeypatch, tmp_path, tmux_server)
    c = Cluster(tmp_path / "cluster")
    try:
        c.start()
    except SSHDUnavailable as e:
        pytest.skip(str(e))
    try:
        yield c
    finally:
        c.stop()


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _procs(rd: RunDir, what: str) -> list[int]:
    """The live processes of a node's run: `worker` (python -u -m nsa.train) or `torchrun`."""
    want = ["-u", "-m", "nsa.train"] if what == "worker" else ["-m", "torch.distributed.run"]
    return sorted(
        p for p in procs.tagged(str(rd.root)) if procs.alive(p) and _cmdline(p)[1 : 1 + len(want)] == want
    )


def _status(run: str) -> tuple[int, dict]:
    res = invoke("status", "--run", run, "--json")
    return res.exit_code, json.loads(res.stdout)[0]


def test_two_node_run_as_a_user_meets_it(cluster: Cluster):
    run = "qa-mn"
    profile = cluster.profile()
    sc = ("--ssh-config", str(cluster.ssh_config))
    res = invoke("up", "--profile", str(profile), *sc, "--name", run, "--set", "train.steps=100000",
                 "--set", "train.save_every=4", "--set", "train.log_every=1", *PACED,
                 "--no-allreduce-check")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "all-reduce" not in res.output  # --no-allreduce-check was dropped as a False flag, and ran
    try:
        wait_for(lambda: (_status(run)[1].get("step") or 0) >= 3, 120, "step 3 of the 2-node run")
        # global rank 0 trains on node 0 (its heartbeat, metrics, TensorBoard and weights are there)
        rd0, rd1 = cluster.run_dir(0, run), cluster.run_dir(1, run)
        assert set(rd0.heartbeats()) == {0} and set(rd1.heartbeats()) == {1}
        assert rd0.metrics.exists() and not rd1.metrics.exists()
        code, st = _status(run)
        assert code == 0 and st["state"] == "running" and st["loss"] is not None, st
        assert set(st["heartbeat_age_s"]) == {"0", "1"}
        logs = invoke("logs", "--run", run, "-n", "50")
        assert "[rank0]:[nsa] step" in logs.output, logs.output

        # node 0's worker, rank 0, dies (SIGKILL: the OOM killer); node 0's torchrun starts again while
        # node 1's lives on. Both resume from the newest intact checkpoint with rank 0 on node 0 again:
        # c10d ranked node 1's older torchrun first, so rank 0 moved to node 1, which holds no weights
        # ("No such file ... model.pt"), and the run failed for good.
        [w0] = _procs(rd0, "worker")
        os.kill(w0, signal.SIGKILL)
        t_kill = time.time()

        def resumed() -> dict | None:
            return next(
                (e for e in iter_jsonl(rd0.events) if e["kind"] == "resumed" and e["time"] > t_kill), None
            )

        at = wait_for(resumed, 120, "node 0's rank 0 resuming after the kill")["step"]
        st = wait_for(lambda: (s := _status(run)[1])["state"] == "running" and s["step"] > at + 2 and s, 90,
                      f"steps after the resume at step {at}")  # fmt: skip
        assert set(rd0.heartbeats()) == {0} and set(rd1.heartbeats()) == {1}, "rank 0 moved off node 0"
        assert rd0.heartbeats()[0].time > t_kill and rd1.heartbeats()[1].time > t_kill
        assert st["loss"] is not None and st["restarts"]["count"] == 1, st
        # node 1's own log (its restart, its rank's lines): `logs` read node 0's only
        logs1 = invoke("logs", "--run", run, "--node", "1", "-n", "400")
        assert logs1.exit_code == 0 and "torchrun exited with 1; restarting (resume)" in logs1.output
        assert "--node-rank 1 " in logs1.output and "[rank0]:" not in logs1.output
        res = invoke("logs", "--run", run, "--node", "2")
        assert res.exit_code == 2 and f"--node 2: run {run} has 2 node(s)" in res.output, res.output

        # node 1's torchrun is SIGKILLed: its worker, in a session of its own, outlived it and trained on
        # with node 0 while the restarted torchrun waited beside it (two rank-1 workers on node 1). The
        # wrapper now kills the orphan, so both nodes restart and resume together.
        [tr1] = _procs(rd1, "torchrun")
        os.kill(tr1, signal.SIGKILL)
        t_kill = time.time()
        at = wait_for(resumed, 120, "node 0's rank 0 resuming after node 1's torchrun was killed")["step"]
        wait_for(lambda: (_status(run)[1].get("step") or 0) > at + 2, 90, f"steps after the resume at {at}")
        assert len(_procs(rd1, "worker")) == 1 and len(_procs(rd1, "torchrun")) == 1
        assert "worker(s) that outlived torchrun" in rd1.train_log.read_text()

        # pull: the newest checkpoint with its weights (rank 0's part, from node 0) and node 1's part
        # (a checkpoint every 1.6 s here: a pull may find node 1 a save ahead of node 0, and copy none yet)
        mirror = RunDir(mirror_dir(run))
        ck = wait_for(lambda: invoke("pull", "--run", run).exit_code == 0 and mirror.latest_checkpoint(), 60,
                      "a pulled checkpoint")  # fmt: skip
        assert (ck / "model.pt").exists() and (ck / "rank0.pt").exists()
        assert (mirror.root / "nodes" / "1" / "checkpoints" / ck.name / "rank1.pt").exists()

        # node 1's sshd dies: status says lost, names the node and exits 1, at once
        cluster.servers[1].stop()
        t0 = time.monotonic()
        res = invoke("status", "--run", run)
        assert res.exit_code == 1 and "lost" in res.output and "cannot reach n1" in res.output, res.output
        assert time.monotonic() - t0 < 30
        # kill stops node 0, and says node 1 was not reached (it used to stop at node 1's error)
        res = invoke("kill", "--run", run, "--yes")
        assert res.exit_code == 1, res.output
        assert "not stopped on node 1 (n1): it did not answer" in res.output, res.output
        assert f"`nsa-launch kill --run {run}` stops the rest" in res.output
        assert not _procs(rd0, "worker") and not _procs(rd0, "torchrun")
        # node 1 answers again: kill again, and nothing of the run is left on either node
        cluster.servers[1].start()
        res = invoke("kill", "--run", run, "--yes")
        assert res.exit_code == 0, res.output
        assert not any(_procs(rd, w) for rd in (rd0, rd1) for w in ("worker", "torchrun"))
    finally:
        invoke("kill", "--run", run, "--yes")


def test_bad_multinode_inputs_start_nothing(cluster: Cluster, tmux_server, tmp_path: Path):
    """Exit 2 with the value and the fix, and nothing started on either node (no run dir, no tmux
    session, no record): the same host twice in one workdir (node 1's start used to be refused after
    node 0's, as "run dir exists: pick another --name"), a rendezvous port another process holds on
    node 0 (the preflight hung 120 s on it, then blamed NCCL), and a rendezvous host a node cannot
    resolve (torchrun retried it until up's 15-minute first-heartbeat limit)."""
    sc = ("--ssh-config", str(cluster.ssh_config))
    same = tmp_path / "same"
    res = invoke("up", "--profile", str(cluster.profile()), *sc, "--host", "n0", "--host", "n0",
                 "--workdir", str(same), "--name", "qa-dup")  # fmt: skip
    assert res.exit_code == 2, res.output
    assert f"nodes 0 and 1 are both n0 in workdir {same}: they would share one run dir" in res.output
    assert not same.exists()  # refused before any host was touched

    with socket.socket() as holder:  # a listener on every address, as another program would hold it
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        profile = cluster.profile("taken", torchrun={"rdzv_port": port})
        res = invoke("up", "--profile", str(profile), *sc, "--name", "qa-port")
    assert res.exit_code == 2, res.output
    assert f"profile {profile}: torchrun.rdzv_port = {port}, but that port is taken on node 0" in res.output
    assert f"by pid {os.getpid()} (" in res.output and "set torchrun.rdzv_port to a free port" in res.output

    profile = cluster.profile("nohost", torchrun={"rdzv_host": "no-such-host.invalid"})
    res = invoke("up", "--profile", str(profile), *sc, "--name", "qa-host")
    assert res.exit_code == 2, res.output
    assert (
        "node 0 (n0 " in res.output
        and "cannot resolve the rendezvous host, torchrun.rdzv_host = " in res.output
    )
    assert "'no-such-host.invalid'" in res.output and "set torchrun.rdzv_host in the profile" in res.output

    for run in ("qa-dup", "qa-port", "qa-host"):
        assert not any((w / "runs" / run).exists() for w in cluster.workdirs), run
        assert invoke("status", "--run", run).exit_code != 0  # no record
    assert not tmux_server.sessions
