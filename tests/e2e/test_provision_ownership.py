"""nsa-launch owns only the pods it made: `pods ls` shows those (the account's with --all), `pods down`
refuses a foreign pod without --force and counts a pod's cost once, `pods down RUN` ends every live
pod of the run, and SIGTERM / SIGHUP while a pod is being waited for terminate it as Ctrl-C does.
Against the FAKE Prime API (tests/fixtures/fake_prime.py); pods stay UNKNOWN there, no sshd needed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.providers.pods import PodRecord, save_pod
from launcher.providers.prime import PrimeClient
from tests.e2e.launch_support import invoke, wait_for
from tests.e2e.prime_support import ledger
from tests.fixtures.fake_prime import Fate

pytestmark = [pytest.mark.e2e]
NSA_LAUNCH = str(Path(sys.executable).with_name("nsa-launch"))


def _rent_for_run(api, run: str, hours_ago: float) -> str:
    """A pod nsa-launch rented for `run` (ledger and all) that stays UNKNOWN at the fake."""
    client = PrimeClient()
    offer = client.availability("CPU_NODE", 2)[0]
    api.next_fate = Fate(None, unknown_s=600)
    pod = client.create_pod(offer, f"nsa-{run}")
    save_pod(
        PodRecord(pod.id, run, "CPU_NODE", 2, pod.price_hr, time.time() - hours_ago * 3600, [], name=pod.name)
    )
    return pod.id


def test_ls_and_down_touch_only_what_nsa_launch_made_and_count_cost_once(fake_prime, tmp_path):
    home = tmp_path / "nsa-launch-home"
    foreign = fake_prime.add_foreign_pod("my-notebook")
    ours = {_rent_for_run(fake_prime, "r1", 2.0), _rent_for_run(fake_prime, "r1", 1.0)}
    assert {r["id"] for r in json.loads(invoke("pods", "ls", "--json").stdout)} == ours
    assert {r["id"] for r in json.loads(invoke("pods", "ls", "--all", "--json").stdout)} == ours | {foreign}
    res = invoke("pods", "down", foreign, "--yes")
    assert res.exit_code == 2 and "was not created by nsa-launch" in res.output and "--force" in res.output
    assert foreign in fake_prime.pods and foreign not in ledger(home)

    res = invoke("pods", "down", "r1", "--yes")  # every live pod of the run, though no run record exists
    assert res.exit_code == 0, res.output
    assert not fake_prime.pods.keys() & ours and res.output.count("terminated pod") == 2
    first = ledger(home)
    assert all(first[p]["terminated"] for p in ours)
    costs = sorted(round(PodRecord(**first[p]).cost(), 2) for p in ours)
    assert costs == [0.2, 0.4]  # $0.20/h for 1 h and 2 h
    for again in ("r1", next(iter(ours))):  # a second `down` changes nothing and adds no cost
        res = invoke("pods", "down", again, "--yes")
        assert res.exit_code == 0 and "already terminated" in res.output and ledger(home) == first

    res = invoke("pods", "down", foreign, "--yes", "--force")
    assert res.exit_code == 0 and "no cost recorded" in res.output
    assert foreign not in fake_prime.pods and foreign not in ledger(home)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_the_wait_terminates_the_pod(fake_prime, tmp_path, sig):
    home = tmp_path / "nsa-launch-home"
    fake_prime.next_fate = Fate(None, unknown_s=600)  # the wait goes on until the signal
    env = {**os.environ, "NSA_LAUNCH_HOME": str(home), "HOME": str(tmp_path / "user")}  # no ~/.prime of yours
    proc = subprocess.Popen(
        [NSA_LAUNCH, "pods", "create", "--gpu-type", "CPU_NODE", "--ssh-config", str(fake_prime.ssh_config)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: ledger(home) or proc.poll() is not None, 30, "the pod in the ledger (rent, then record)"
        )
        (pod_id,) = ledger(home)
        assert pod_id in fake_prime.pods
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert f"stopped by {sig.name}; terminating pod {pod_id}" in err and f"terminated pod {pod_id}" in err
    assert not fake_prime.pods and ledger(home)[pod_id]["terminated"] is not None
