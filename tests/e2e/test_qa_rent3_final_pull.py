"""The last renting leaks, on one rented run (QA, a user renting by the hour): SIGTERM (as Ctrl-C, or
SIGHUP) during `up --provision --down-when-done`'s FINAL pull, after the run finished and before the
pod is terminated, says which pod bills on and the command that ends it, and what the mirror kept (it
exited with the pull's words only, the pod billing on unnamed); then the pod is terminated outside
nsa-launch (the web app): `status` stops counting its cost, the ledger ends it at the time it was seen
gone. `up --provision prime` against the FAKE Prime API (tests/fixtures/fake_prime.py), a real sshd
for the pod, real tmux and torchrun (one CPU worker, 2 steps)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.e2e.launch_support import CPU1, PYTHON, invoke, isolate
from tests.e2e.prime_support import ledger

pytestmark = [pytest.mark.e2e]


def _status(run: str) -> dict:
    res = invoke("status", "--run", run, "--json")  # lost: exit 1, the status as JSON all the same
    return json.loads(res.stdout)[0]


def test_an_interrupted_final_pull_names_the_billing_pod_and_a_pod_ended_elsewhere_stops_costing(
    fake_prime, tmux_server, tmp_path, monkeypatch
):
    import launcher.recover.transfer as transfer

    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"qa3pull-{os.getpid()}"
    mirror = home / "mirror" / run
    real = transfer._run_watched
    signalled: list[str] = []

    def sigterm_into_the_final_pull(argv, dest, stall_s):
        # the pull into the mirror (up's sync to the pod does not come here): SIGTERM this process,
        # as `kill PID` or a closed terminal would, once the run has finished and the pull begun
        if dest is not None and mirror in (dest, *dest.parents) and not signalled:
            signalled.append(str(dest))
            os.kill(os.getpid(), signal.SIGTERM)
        return real(argv, dest, stall_s)

    monkeypatch.setattr(transfer, "_run_watched", sigterm_into_the_final_pull)
    res = invoke(
        "up", "--provision", "prime", "--gpu-type", "CPU_NODE", "--ssh-config", str(fake_prime.ssh_config),
        "--python", PYTHON, *CPU1, "--name", run, "--set", "train.steps=2", "--set", "train.save_every=2",
        "--down-when-done",
    )  # fmt: skip
    out = res.output
    assert signalled and res.exit_code == 130, out
    assert f"run {run} finished" in out, out
    (pod_id,) = fake_prime.pods
    # It said "got SIGTERM" and nothing else: the pod of a finished run billed on, unnamed.
    assert f"pull of {run} stopped by SIGTERM; the mirror keeps no checkpoint" in out, out
    assert f"Run {run} finished; pod {pod_id} bills on at $0.10/h (--down-when-done stopped before" in out
    assert f"`nsa-launch pods down {run}` pulls the newest checkpoint and terminates it" in out, out
    assert "terminated pod" not in out and ledger(home)[pod_id]["terminated"] is None

    # The pod is terminated in Prime's web app, not by nsa-launch: the API no longer knows it (404).
    assert fake_prime.delete(pod_id)
    # a `status` is a process of its own, which asks the API once; `up`'s polls asked in this one
    monkeypatch.setattr("launcher.providers.pods._checked", {})
    seen = time.time()
    first = invoke("status", "--run", run)  # lost (exit 1): its host is gone with the pod
    assert f"pod {pod_id} terminated, cost $" in first.output, first.output  # no longer "cost so far"
    rec = ledger(home)[pod_id]
    assert rec["terminated"] is not None and seen <= rec["terminated"] <= time.time(), rec
    st = _status(run)
    cost = st["cost_usd"]
    assert st["pod_terminated"] is True, st
    monkeypatch.setattr("launcher.providers.pods._checked", {})
    time.sleep(1.0)
    assert _status(run)["cost_usd"] == cost, "the cost of a pod ended elsewhere grows on"
    assert ledger(home)[pod_id]["terminated"] == rec["terminated"]  # marked once, at the first sight
    # `pods down RUN` has nothing to pull from or terminate: it says the pod was already terminated
    res = invoke("pods", "down", run, "--yes")
    assert res.exit_code == 0 and f"pod {pod_id} was already terminated" in res.output, res.output
