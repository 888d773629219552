"""Money leaks when the API itself misbehaves around a rented pod (QA, a user renting by the hour):
a create call that times out after the API made the pod, a malformed answer while waiting, a DELETE
that fails while the pod is being terminated, a pod still PROVISIONING at --ready-timeout, and a
known_hosts that cannot take the new pod's key. Each must end with the pod terminated, or with
its id and the exact command that terminates it said loudly and a live record `pods ls` shows.
Against the FAKE Prime API (tests/fixtures/fake_prime.py); only the known_hosts test brings a pod up (sshd)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.launch_support import invoke
from tests.e2e.prime_support import ledger
from tests.fixtures.fake_prime import Fate

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def home(fake_prime, tmp_path, monkeypatch):
    monkeypatch.setattr("launcher.providers.pods.POLL_S", 0.1)
    monkeypatch.setattr("launcher.providers.pods.TRANSIENT_S", 1.0)
    fake_prime.start_delay_s = 0.1
    return tmp_path / "nsa-launch-home"


def create(api, *args: str):
    return invoke("pods", "create", "--gpu-type", "CPU_NODE", "--ssh-config", str(api.ssh_config), *args)


def test_create_timeout_malformed_answer_and_failing_delete_leave_nothing_billing_unseen(
    fake_prime, home, monkeypatch
):
    # 1. The API makes the pod but its answer comes after our timeout: the id never reached us. The
    #    pod is found by the name nsa-launch gave it and terminated (it used to bill, in no ledger).
    import launcher.providers.prime as prime

    timeout = prime.TIMEOUT_S
    monkeypatch.setattr(prime, "TIMEOUT_S", 0.5)
    fake_prime.create_reply_delay_s = 1.5
    res = create(fake_prime, "--name", "slow")
    assert res.exit_code == 1, res.output
    assert "timed out" in res.output and "found pod" in res.output and "nsa-slow" in res.output
    assert not fake_prime.pods, res.output
    (rec,) = ledger(home).values()
    assert rec["name"] == "nsa-slow" and rec["terminated"] is not None
    # ... and when the list of pods comes back unreadable too, it says loudly that one may be billing,
    # by its name, and how to find and end it (an answer without `data` read as "no pods" before).
    fake_prime.inject("GET", "/pods/", 200, "<html>bad gateway</html>")
    res = create(fake_prime, "--name", "slow2")
    assert res.exit_code == 1 and "A POD NAMED nsa-slow2 MAY BE BILLING" in res.output, res.output
    assert "nsa-launch pods ls --all" in res.output and "pods down POD_ID --force --yes" in res.output
    (stray,) = fake_prime.pods
    rows = json.loads(invoke("pods", "ls", "--json").stdout)
    assert [(r["id"], r["name"], r["in_ledger"]) for r in rows] == [(stray, "nsa-slow2", False)]
    assert invoke("pods", "down", stray, "--force", "--yes").exit_code == 0 and not fake_prime.pods
    fake_prime.create_reply_delay_s = 0.0
    monkeypatch.setattr(prime, "TIMEOUT_S", timeout)

    # 2. A 200 whose body is not a pod (a proxy's page) while waiting is retried as a 5xx is, not a
    #    traceback; the pod then fails, and the DELETE answers 503 twice: retried until it is gone.
    fake_prime.next_fate = Fate("ERROR", failure="host lost")
    fake_prime.inject("GET", "/pods/*", 200, "<html>bad gateway</html>")
    for _ in range(2):
        fake_prime.inject("DELETE", "/pods/*", 503, "Service Unavailable")
    res = create(fake_prime, "--name", "flaky")
    assert res.exit_code == 1 and "is ERROR: host lost" in res.output, res.output
    assert not fake_prime.pods and not fake_prime.injected, res.output
    assert all(r["terminated"] for r in ledger(home).values())

    # 3. The DELETE keeps failing: `up` cannot end the billing itself, so it says so, loudly, with the
    #    pod's id and the command that does, keeps the pod live in the ledger, and exits with the
    #    original failure (not the DELETE's).
    fake_prime.next_fate = Fate("ERROR", failure="host lost")
    for _ in range(50):
        fake_prime.inject("DELETE", "/pods/*", 500, "Internal Server Error")
    res = create(fake_prime, "--name", "stuck")
    assert res.exit_code == 1 and "is ERROR: host lost" in res.output, res.output
    (pod_id,) = fake_prime.pods
    assert f"POD {pod_id} IS STILL BILLING" in res.output, res.output
    assert f"nsa-launch pods down {pod_id} --yes" in res.output
    assert ledger(home)[pod_id]["terminated"] is None
    rows = json.loads(invoke("pods", "ls", "--json").stdout)
    assert [r["id"] for r in rows] == [pod_id] and rows[0]["in_ledger"]
    fake_prime.injected.clear()
    res = invoke("pods", "down", pod_id, "--yes")
    assert res.exit_code == 0 and f"terminated pod {pod_id}" in res.output and not fake_prime.pods

    # 4. A pod still PROVISIONING at --ready-timeout: the message names what it waited for, the pod goes.
    fake_prime.start_delay_s = 30.0
    res = create(fake_prime, "--name", "slowpod", "--ready-timeout", "0.5")
    assert (
        res.exit_code == 1 and "waiting for pod" in res.output and "(last status PROVISIONING)" in res.output
    )
    assert "--ready-timeout" in res.output and not fake_prime.pods, res.output
    assert all(r["terminated"] for r in ledger(home).values())


def test_a_pod_whose_host_key_cannot_be_recorded_is_terminated(fake_prime, home, tmp_path):
    # A user's ssh config whose UserKnownHostsFile names a directory: found only once the pod answers.
    # The pod was left billing, outside the code that terminates it, with a traceback for an error.
    cfg = tmp_path / "ssh_config"
    cfg.write_text(fake_prime.ssh_config.read_text().replace(str(fake_prime.known_hosts), str(tmp_path)))
    res = invoke("pods", "create", "--gpu-type", "CPU_NODE", "--ssh-config", str(cfg))
    assert res.exit_code == 2, res.output
    assert (
        f"known_hosts {tmp_path} is unusable" in res.output and f"UserKnownHostsFile in {cfg}" in res.output
    )
    (rec,) = ledger(home).values()
    assert rec["terminated"] is not None and f"terminated pod {rec['id']}" in res.output
    assert not fake_prime.pods
