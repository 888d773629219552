"""Runs that look after themselves, end to end with real tmux, sshd and torchrun (gloo, 2 CPU workers):

- a crash injected with NSA_FAULT (rank 1 SIGKILLed once) is restarted by the wrapper on the same
  host from the newest intact checkpoint and ends with the loss of an uninterrupted run;
- a crash at the same step every time stops as a crash loop before the restart budget is spent;
- `up --provision prime` against the FAKE Prime API: the pod's sshd (and its processes) die, `watch`
  replaces the pod, restores the mirrored checkpoint, resumes to the uninterrupted run's loss;
  `pods down` leaves no pod in the fake's list and nothing listening on the pods' loopback ports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.assets.trainrun import run_train, train_losses
from tests.e2e.launch_support import CPU1, PYTHON, cleanup_local_run, invoke, isolate, status, wait_for
from tests.e2e.prime_support import listening
from tests.fixtures.fake_prime import pod_profile

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 16
SETS = [f"train.steps={STEPS}", "train.save_every=6", "train.eval_every=100", "train.log_every=1"]


def _set_args() -> list[str]:
    return [a for s in SETS for a in ("--set", s)]


@pytest.fixture(scope="module")
def reference_losses(tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """The same config and world size, uninterrupted (plain torchrun, no launcher)."""
    rd = tmp_path_factory.mktemp("reference") / "run"
    p = run_train(rd, [*SETS, "train.device=cpu"], nproc=2, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return train_losses(rd)


def _watch(run: str) -> subprocess.Popen:
    """`nsa-launch watch` in its own process, pulling every second, a host lost after 2 s."""
    return subprocess.Popen(
        [sys.executable, "-c", "from launcher.cli import main; main()", "watch", "--run", run,
         "--pull-every", "1", "--lost-after", "2", "--poll", "1", "--json"],
        env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _why(out: str, err: str) -> str:
    """What a failed `watch` said, and the final status's state and error (which node, which cause):
    the CI failure this file once had showed only "failed at step 16"."""
    try:
        st = json.loads(out)
        head = f"final status: {st.get('state')}: {st.get('error')}\n"
    except ValueError:
        head = f"stdout: {out[-1000:]}\n"
    return head + err[-3000:]


def _final_loss(run_dir: str | Path) -> tuple[int, float]:
    recs = [json.loads(ln) for ln in Path(run_dir, "metrics.jsonl").read_text().splitlines()]
    last = [r for r in recs if "loss" in r][-1]
    return last["step"], last["loss"]


def test_crash_is_restarted_on_the_host_with_the_same_final_loss(
    tmux_server, tmp_path, monkeypatch, reference_losses
):
    isolate(monkeypatch, tmp_path, tmux_server)
    run = f"crash-{os.getpid()}"
    try:
        res = invoke(
            "up", "--name", run, *_set_args(), "--env", "NSA_FAULT=kill:step=10:rank=1:once", "--wait"
        )
        assert res.exit_code == 0, res.output
        st = status(run)
        assert st["state"] == "finished" and st["step"] == STEPS
        r = st["restarts"]
        assert r["count"] == 1 and r["max"] == 3 and r["stopped"] is None
        assert r["causes"][0]["step"] == 9 and "SIGKILL" in r["causes"][0]["cause"]
        step, loss = _final_loss(st["run_dir"])
        assert step == STEPS and loss == reference_losses[STEPS]
        text = invoke("status", "--run", run).output
        assert "restarts 1/3" in text and "restart 1 after step 9" in text
    finally:
        invoke("kill", "--run", run)
        cleanup_local_run(run)


def test_crash_loop_stops_before_the_budget_is_spent(tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    run = f"loop-{os.getpid()}"
    sets = ["--set", "train.steps=6", "--set", "train.save_every=3", "--set", "train.eval_every=100"]
    try:
        # One worker (CPU1), its only rank killed: the wrapper's crash-loop stop is not about ranks (the
        # restart after rank 1 of two is SIGKILLed is the test above), and each of its two starts costs a
        # trainer rank less. The failed step is the newest heartbeat of any rank (launcher/host/restarts.py):
        # two ranks killed at step 4 read 3 (rank 0 beat step 3 as it began step 4 and waited for the
        # dead rank), the only rank killed as step 5 begins reads 3 too (its last beat, in step 4's
        # optimizer). Saved at step 3, the restart resumes there and dies at the same step again.
        res = invoke("up", *CPU1, "--name", run, *sets, "--env", "NSA_FAULT=kill:step=5:rank=0", "--wait")
        assert res.exit_code == 1, res.output
        st = status(run)
        assert st["state"] == "failed"
        r = st["restarts"]
        assert r["count"] == 1 and r["max"] == 3 and "crash loop" in r["stopped"]
        assert "failed at step 3 again" in r["stopped"]
    finally:
        invoke("kill", "--run", run)
        cleanup_local_run(run)


def test_lost_pod_is_replaced_and_resumes_from_the_mirror(
    fake_prime, tmux_server, tmp_path, monkeypatch, reference_losses
):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"prov-{os.getpid()}"
    res = invoke(
        "up", "--provision", "prime", "--gpu-type", "CPU_NODE", "--ssh-config", str(fake_prime.ssh_config),
        "--python", PYTHON, "--name", run, *_set_args(),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (pod1,) = fake_prime.pods
    port1 = fake_prime.pods[pod1].server.port
    watcher = _watch(run)
    try:
        # Lose the pod right after its first checkpoint: freeze its training once step 6 is saved there
        # (sshd keeps serving, so watch still pulls it), then kill the pod.
        on_pod = Path(json.loads(Path(home, "runs", f"{run}.json").read_text())["nodes"][0]["run_dir"])
        wait_for(lambda: (on_pod / "checkpoints" / "step-00000006" / "manifest.json").exists(), 120,
                 "step-00000006 on the pod", interval=0.05)  # fmt: skip
        assert fake_prime.freeze_run(pod1)
        latest = home / "mirror" / run / "checkpoints" / "latest"
        wait_for(lambda: latest.exists() and latest.read_text().strip() == "step-00000006", 60,
                 "the mirror's latest to be step-00000006")  # fmt: skip
        t_lost = time.time()
        fake_prime.lose(pod1)
        out, err = watcher.communicate(timeout=300)
        assert watcher.returncode == 0, _why(out, err)
        assert "replacing it" in err and "resumed on pod" in err and "from step-00000006" in err
        final = json.loads(out)
        assert final["state"] == "finished" and final["step"] == STEPS
        (pod2,) = fake_prime.pods
        assert pod2 != pod1 and final["pod_id"] == pod2 and not listening(port1)
        kinds = [e["kind"] for e in final["events"]]
        assert "finished" in kinds
        assert (home / "mirror" / run / "checkpoints" / "latest").read_text().strip() == f"step-{STEPS:08d}"
        step, loss = _final_loss(home / "mirror" / run)
        assert step == STEPS and loss == reference_losses[STEPS]
        ev = [json.loads(ln) for ln in (home / "mirror" / run / "events.jsonl").read_text().splitlines()]
        replaced = [e for e in ev if e["kind"] == "host_replaced"]
        assert len(replaced) == 1 and replaced[0]["detail"]["old_pod"] == pod1
        assert replaced[0]["time"] > t_lost
        # the old pod (unreachable, still ACTIVE per the API) was terminated only once the run had
        # resumed on the new one; the metrics hold no step twice
        resumed = [e for e in ev if e["kind"] == "resumed"]
        assert (
            resumed
            and json.loads((home / "pods" / f"{pod1}.json").read_text())["terminated"] > resumed[-1]["time"]
        )
        metrics = [
            json.loads(ln) for ln in (home / "mirror" / run / "metrics.jsonl").read_text().splitlines()
        ]
        steps = [r["step"] for r in metrics if "loss" in r]
        assert steps == sorted(set(steps)), steps
        port2 = fake_prime.pods[pod2].server.port
        res = invoke("pods", "down", run, "--yes")
        assert res.exit_code == 0, res.output
        assert "pulled" in res.output and f"terminated pod {pod2}" in res.output
        assert fake_prime.pods == {} and json.loads(invoke("pods", "ls", "--json").stdout) == []
        assert not listening(port2)
        st = invoke("status", "--run", run, "--json")
        assert st.exit_code == 1  # its host is gone: lost
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()


def test_lost_two_node_pod_is_replaced_with_every_nodes_part_of_the_checkpoint(
    fake_prime, tmux_server, tmp_path, monkeypatch, reference_losses
):
    """A multi-node checkpoint is split (node 0: weights and optimizer; node 1: its rank's data state
    and RNG): the mirror keeps both parts, and a replacement two-node pod gets each node its own, so
    the run resumes in the same world of 2 and ends with the uninterrupted run's loss."""
    home = isolate(monkeypatch, tmp_path, tmux_server)
    profile = pod_profile(tmp_path)
    run = f"prov2-{os.getpid()}"
    res = invoke(
        "up", "--profile", str(profile), "--provision", "prime", "--gpu-type", "CPU_NODE",
        "--ssh-config", str(fake_prime.ssh_config), "--python", PYTHON, "--name", run, *_set_args(),
        "--no-allreduce-check",  # the preflight's own 2-node torchrun: test_launch_multinode checks it
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (pod1,) = fake_prime.pods
    ports1 = [s.port for s in fake_prime.pods[pod1].servers]
    assert len(ports1) == 2
    watcher = _watch(run)
    try:
        nodes = json.loads(Path(home, "runs", f"{run}.json").read_text())["nodes"]
        on_pod = [Path(n["run_dir"]) for n in nodes]
        assert on_pod[0] != on_pod[1]
        wait_for(lambda: all((d / "checkpoints" / "step-00000006" / "manifest.json").exists() for d in on_pod),
                 120, "step-00000006 on both nodes", interval=0.05)  # fmt: skip
        assert fake_prime.freeze_run(pod1)
        mirror = home / "mirror" / run
        part1 = mirror / "nodes" / "1" / "checkpoints"
        wait_for(lambda: (mirror / "checkpoints" / "latest").exists()
                 and (mirror / "checkpoints" / "latest").read_text().strip() == "step-00000006", 60,
                 "the mirror's latest to be step-00000006")  # fmt: skip
        # node 1's part holds only its own rank's state, and it came before node 0's `latest` named it
        assert sorted(p.name for p in (part1 / "step-00000006").iterdir()) == [
            "manifest.json",
            "meta.json",
            "rank1.pt",
        ]
        assert not (mirror / "checkpoints" / "step-00000006" / "rank1.pt").exists()
        fake_prime.lose(pod1)
        out, err = watcher.communicate(timeout=300)
        assert watcher.returncode == 0, _why(out, err)
        assert "replacing it" in err and "from step-00000006" in err, err[-3000:]
        final = json.loads(out)
        assert final["state"] == "finished" and final["step"] == STEPS, final
        (pod2,) = fake_prime.pods
        assert pod2 != pod1 and final["pod_id"] == pod2 and not any(listening(p) for p in ports1)
        step, loss = _final_loss(mirror)
        assert step == STEPS and loss == reference_losses[STEPS]
        assert (part1 / "latest").read_text().strip() == f"step-{STEPS:08d}"
        ev = [json.loads(ln) for ln in (mirror / "events.jsonl").read_text().splitlines()]
        resumed = [e for e in ev if e["kind"] == "resumed"]
        assert resumed and resumed[-1]["detail"]["checkpoint"] == "step-00000006"
        assert [e["detail"]["nodes"] for e in ev if e["kind"] == "host_replaced"] == [2]
        # the new node 1 has its own manifest and log, not node 0's from the mirror
        node1 = json.loads(Path(home, "runs", f"{run}.json").read_text())["nodes"][1]
        man1 = json.loads(Path(node1["run_dir"], "manifest.json").read_text())
        assert man1["node_rank"] == 1 and man1["host"] == f"root@127.0.0.1:{node1['host']['port']}"
        cmd1 = man1["command"]
        assert cmd1[cmd1.index("--node-rank") + 1] == "1" and len(man1["restarts"]) == 1
        assert "[rank0]" not in Path(node1["run_dir"], "train.log").read_text()
        ports2 = [s.port for s in fake_prime.pods[pod2].servers]
        res = invoke("pods", "down", run, "--yes")
        assert res.exit_code == 0, res.output
        assert fake_prime.pods == {} and not any(listening(p) for p in ports2)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
