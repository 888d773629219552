"""`watch` under faults: a watcher that takes over after another one's replacement acts on the run
record as it is now (no third pod, no replacement of a finished run); pods rented for the run but not
in use are swept; `watch` exits 1 when its final pull failed, saying how far behind the mirror is; a
transfer that moves nothing is stopped; a restore never pushes metrics past the restored step.
Real parts: the FAKE Prime API (tests/fixtures/fake_prime.py: its pods are real sshds), the run's
status over that sshd, real rsync, `nsa-launch watch` in its own process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.config.profiles import PROJECT_ROOT, load_profile
from launcher.core.errors import LaunchError
from launcher.run import registry
from launcher.run.control import fetch_status
from launcher.ssh.hosts import local_host, parse_target
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

RUN = "wf1"


def _finished_run_dir(rd: Path) -> Path:
    _ckpt(rd, 4, b"w4" * 1000)
    (rd / "train.log").write_text("[nsa] done\n")
    (rd / "exit_code").write_text("0\n")
    return rd


@pytest.fixture
def fake(tmp_path, monkeypatch):
    from tests.fixtures.fake_prime import fake_prime_env

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    with fake_prime_env(monkeypatch, tmp_path) as api:
        yield api


def _rent(fake, run: str | None):
    from launcher.providers.pods import provision
    from launcher.providers.prime import PrimeClient

    pod, hosts = provision(
        PrimeClient(),
        load_profile("cpu"),
        "CPU_NODE",
        "nsa-test",
        run,
        lambda _: None,
        30,
        str(fake.ssh_config),
    )
    return pod, hosts[0]


def test_a_watcher_taking_over_after_a_replacement_acts_on_the_new_pod(fake, tmp_path):
    """Watcher B loaded the run on pod 1; watcher A replaced pod 1 with pod 2, where the run finished.
    B's next status is still of pod 1's address (lost): B reads the record again, asks pod 2, pulls
    the finished run and rents nothing. Exactly one pod bills."""
    from launcher.providers.pods import PodRecord, save_pod
    from launcher.recover.watcher import Watcher
    from tests.fixtures.sshd import free_port

    dead = parse_target(f"root@127.0.0.1:{free_port()}", str(fake.ssh_config))  # pod 1: gone
    node1 = registry.NodeRecord(dead, str(PROJECT_ROOT), sys.executable, str(tmp_path / "run1"))
    rec1 = registry.RunRecord(
        run=RUN, profile="cpu", created=1.0, nodes=[node1], provider="prime", pod_id="p-1"
    )
    registry.save(rec1)
    save_pod(PodRecord("p-1", RUN, "CPU_NODE", 1, 0.1, time.time() - 60, [dead.target], time.time() - 5))
    said: list[str] = []
    b = Watcher(RUN, said.append, who="nsa-launch dashboard", lost_after_s=0.0)
    stale = fetch_status([rec1])[0]
    assert stale["state"] == "lost"
    # watcher A's replacement: pod 2 rented and recorded, the run resumed and finished there
    pod2, host2 = _rent(fake, RUN)
    rd2 = _finished_run_dir(tmp_path / "run2")
    node2 = registry.NodeRecord(host2, str(PROJECT_ROOT), sys.executable, str(rd2))
    registry.save(registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node2], provider="prime",
                                     pod_id=pod2.id))  # fmt: skip
    try:
        st = b.tick(stale)
    finally:
        b.close()
    assert st["state"] == "finished" and st["host"] == host2.label
    assert not any("replacing it" in s or "is lost" in s for s in said), said
    assert b.replacements == [] and b.final is not None and b.final["checkpoint"] == "step-00000004"
    assert list(fake.pods) == [pod2.id]


def test_the_startup_sweep_offers_pods_rented_for_the_run_but_not_in_use(fake, tmp_path):
    from launcher.recover.watcher import Watcher

    rd = _finished_run_dir(tmp_path / "run")
    registry.save(registry.RunRecord(run=RUN, profile="cpu", created=1.0, provider="prime", pod_id="p-in-use",
                  nodes=[registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd))]))  # fmt: skip
    stray, _ = _rent(fake, RUN)  # a replacement killed after renting, before the run moved there
    said: list[str] = []
    w = Watcher(RUN, said.append, who="nsa-launch watch")  # no confirm: named, kept
    assert w.sweep() == [] and stray.id in fake.pods
    assert f"pod {stray.id} was rented for run {RUN} but the run is not on it (status ACTIVE)" in said[-1]
    assert "may be billing" in said[-1]
    asked: list[str] = []
    w = Watcher(RUN, said.append, who="nsa-launch watch", confirm=lambda q: asked.append(q) or True)
    assert w.sweep() == [stray.id] and fake.pods == {}
    assert asked and asked[0].endswith("terminate it?")


def test_watch_exits_1_when_its_final_pull_failed_and_says_how_far_behind(tmp_path, monkeypatch):
    """The run finished with step-8 on the host, the mirror holds step-4, and step-8 cannot land here
    (a file size limit: writes fail as on a full disk): `watch` says the final pull failed and the
    mirror is 4 steps behind, and exits 1, with no .tmp- dir left."""
    from launcher.recover.mirror import mirror_dir, pull

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    rd = _finished_run_dir(tmp_path / "run")
    node = registry.NodeRecord(local_host(), str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node])
    registry.save(rec)
    assert pull(rec, lambda _: None)["checkpoint"] == "step-00000004"
    _ckpt(rd, 8, os.urandom(512 * 1024))
    code = (
        "import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))\n"
        "from launcher.cli import main; main()"
    )
    p = subprocess.run([sys.executable, "-c", code, "watch", "--run", RUN, "--poll", "0.2", "--json"],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ))  # fmt: skip
    assert p.returncode == 1, p.stderr[-3000:]
    assert f"final pull of {RUN} failed: pulling step-00000008" in p.stderr
    assert f"run {RUN} finished" in p.stderr
    assert (
        f"mirror of {RUN}: the final pull failed (" in p.stderr
        and "the mirror holds step-00000004, 4 steps behind the host's newest verified step-00000008"
        in p.stderr
    ), p.stderr[-3000:]
    final = json.loads(p.stdout)["mirror"]
    assert final["behind_steps"] == 4 and final["checkpoint"] == "step-00000004"
    assert not [x for x in (mirror_dir(RUN) / "checkpoints").iterdir() if x.name.startswith(".tmp-")]


def test_a_transfer_that_moves_no_byte_is_stopped(tmp_path):
    from launcher.recover.transfer import _run_watched

    t0 = time.monotonic()
    code, err = _run_watched(["sleep", "30"], tmp_path, stall_s=1.0)
    assert code == 30 and "no byte moved for 1 s" in err and time.monotonic() - t0 < 10


def test_a_restore_pushes_metrics_only_up_to_the_restored_step(tmp_path):
    from launcher.recover.replace import _metrics_upto

    src = tmp_path / "metrics.jsonl"
    src.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 10)) + "{torn\n")
    _metrics_upto(src, 6, tmp_path / "out.jsonl")
    steps = [json.loads(ln)["step"] for ln in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_status_says_which_pod_replaces_which_while_it_happens(tmp_path, monkeypatch):
    from launcher.run.recovery_status import Progress, recovery_status, recovery_text

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, pod_id="p-1",
                             nodes=[registry.NodeRecord(parse_target("root@10.0.0.1:22"), "/w", "python", "/r")])  # fmt: skip
    pr = Progress(rec, lost_at=1000.0)
    pr.set("provisioning", new_pod="p-2")
    d = recovery_status(RUN)
    assert (
        recovery_text(d, now=1012.0)
        == "replacing pod p-1 at root@10.0.0.1:22 (lost 12 s ago) -> pod p-2 provisioning"
    )
    pr.set("resuming", new_host="root@10.0.0.2:22")
    assert recovery_text(recovery_status(RUN), now=1030.0).endswith("-> pod p-2 at root@10.0.0.2:22 resuming")
    # `status` of the lost run (its old address does not answer) says what is being done
    from click.testing import CliRunner

    from launcher.cli import cli
    from tests.fixtures.sshd import free_port

    rec.nodes[0].host = parse_target(f"root@127.0.0.1:{free_port()}")
    registry.save(rec)
    pr = Progress(rec, lost_at=time.time() - 12)
    pr.set("provisioning", new_pod="p-2")
    res = CliRunner().invoke(cli, ["status", "--run", RUN])
    assert res.exit_code == 1
    m = re.search(
        rf"replacing pod p-1 at {re.escape(rec.host)} \(lost (\d+) s ago\) -> pod p-2 provisioning",
        res.output,
    )
    assert m and 12 <= int(m[1]) < 60, res.output
    pr.clear()
    assert recovery_status(RUN) is None
    assert fetch_status([rec])[0]["recovery"] is None


def test_a_replacement_verifies_the_mirror_before_it_terminates_or_rents(fake, tmp_path):
    """The mirror's copy rotted (same size, so a cheap check passes): the replacement hashes every
    node's mirrored checkpoint first, refuses, and the old pod, which may hold intact copies, is
    neither terminated nor replaced."""
    from launcher.recover.mirror import mirror_dir, pull
    from launcher.recover.replace import replace_host

    pod1, host1 = _rent(fake, RUN)
    rd = _finished_run_dir(tmp_path / "run")
    rec = registry.RunRecord(run=RUN, profile="cpu", created=1.0, provider="prime", pod_id=pod1.id,
                             nodes=[registry.NodeRecord(host1, str(PROJECT_ROOT), sys.executable, str(rd))])  # fmt: skip
    registry.save(rec)
    pull(rec, lambda _: None)
    f = mirror_dir(RUN) / "checkpoints" / "step-00000004" / "model.pt"
    f.write_bytes(bytes([f.read_bytes()[0] ^ 0xFF]) + f.read_bytes()[1:])
    said: list[str] = []
    with pytest.raises(
        LaunchError, match="cannot replace the host of wf1: the mirror's step-00000004 does not verify"
    ):
        replace_host(rec, said.append, ready_timeout=30)
    assert list(fake.pods) == [pod1.id] and not any("terminated pod" in s for s in said)


@pytest.mark.parametrize("reply_delay", [0.0, 1.0], ids=["pending", "while-rent-answers"])
def test_sigterm_during_a_replacement_leaves_no_pod_billing(fake, tmp_path, reply_delay):
    """`watch` is renting a replacement (the fake's pod stays PENDING) when it gets SIGTERM: it
    terminates the pod it rented before it exits, as on Ctrl-C. `while-rent-answers`: the signal
    lands while POST /pods is answered (the pod exists, its id not yet known): it is held until the
    ledger has the pod, then terminates it (until 2026-11-26 it was delivered past the cleanup and the
    pod kept billing; CI hit that window once)."""
    from launcher.providers.pods import PodRecord, save_pod
    from tests.fixtures.sshd import free_port

    fake.start_delay_s = 60.0
    fake.create_reply_delay_s = reply_delay
    dead = parse_target(f"root@127.0.0.1:{free_port()}", str(fake.ssh_config))
    node = registry.NodeRecord(dead, str(PROJECT_ROOT), sys.executable, str(tmp_path / "run"))
    registry.save(registry.RunRecord(run=RUN, profile="cpu", created=1.0, nodes=[node], provider="prime",
                                     pod_id="p-old"))  # fmt: skip
    save_pod(PodRecord("p-old", RUN, "CPU_NODE", 1, 0.1, time.time() - 60, [dead.target]))
    p = subprocess.Popen(
        [sys.executable, "-c", "from launcher.cli import main; main()", "watch", "--run", RUN,
         "--lost-after", "0", "--poll", "0.2"],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not fake.pods and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert fake.pods, "no pod was rented"
        (new,) = fake.pods
        p.send_signal(15)
        err = p.communicate(timeout=60)[1]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-3000:]
    assert f"terminating pod {new}" in err or f"terminated pod {new}" in err, err[-3000:]
    assert fake.pods == {}
    from launcher.run.recovery_status import recovery_status

    assert recovery_status(RUN) is None


def test_pods_down_waits_for_the_writer_that_holds_the_run(fake, tmp_path):
    """`pods down RUN` while a watcher holds the run's write lock (a pull or a replacement under way)
    waits for it instead of terminating the pod under it; then it terminates."""
    pod, host = _rent(fake, RUN)
    rd = _finished_run_dir(tmp_path / "run")
    registry.save(registry.RunRecord(run=RUN, profile="cpu", created=1.0, provider="prime", pod_id=pod.id,
                  nodes=[registry.NodeRecord(host, str(PROJECT_ROOT), sys.executable, str(rd))]))  # fmt: skip
    code = (
        "import sys, time; from launcher.run.locks import run_lock\n"
        f"with run_lock({RUN!r}, 'nsa-launch watch: replacing pod'):\n"
        "    print('held', flush=True); sys.stdin.readline()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    down = None
    try:
        assert holder.stdout.readline().strip() == "held"
        down = subprocess.Popen(
            [sys.executable, "-c", "from launcher.cli import main; main()", "pods", "down", RUN, "--yes", "--no-pull"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        )  # fmt: skip
        time.sleep(2.0)
        assert down.poll() is None and pod.id in fake.pods  # waiting, the pod untouched
        holder.stdin.write("\n")
        holder.stdin.flush()
        out, err = down.communicate(timeout=60)
        assert down.returncode == 0, err[-2000:]
        assert f"terminated pod {pod.id}" in err + out and fake.pods == {}
    finally:
        for p in (holder, down):
            if p is not None and p.poll() is None:
                p.kill()


@pytest.mark.parametrize("flag,value", [("--poll", "0"), ("--lost-after", "-5"), ("--ready-timeout", "0"),
                                        ("--max-replacements", "-1")])  # fmt: skip
def test_watch_refuses_non_positive_intervals_before_it_starts(tmp_path, flag, value):
    """A zero poll or timeout (a --poll 0 spins) or a negative one is bad input (--lost-after 0 is
    meaningful: replace at the first failed check): exit 2 naming the option, before any run is looked
    up (the qa walk of 2026-11-27)."""
    env = {**os.environ, "NSA_LAUNCH_HOME": str(tmp_path / "home")}
    p = subprocess.run([sys.executable, "-c", "from launcher.cli import main; main()", "watch", flag, value],
                       capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert p.returncode == 2 and flag in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.json"))
