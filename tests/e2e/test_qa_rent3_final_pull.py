"""The last renting leaks, on one rented run (QA, a user renting by the hour): SIGTERM (as Ctrl-C, or
SIGHUP) during `up --provision --down-when-done`'s FINAL pull, after the run finished and before the
pod is terminated, says which pod bills on and the command that ends it, and what the mirror kept (it
exited with the pull's words only, the pod billing on unnamed). `up --provision prime` against the FAKE Prime API (tests/fixtures/fake_prime.py), a real sshd
for the pod, real tmux and torchrun (one CPU worker, 2 steps)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.launch_support import CPU1, PYTHON, invoke, isolate
from tests.e2e.prime_support import ledger

pytestmark = [pytest.mark.e2e]


def test_an_interrupted_final_pull_names_the_billing_pod(fake_prime, tmux_server, tmp_path, monkeypatch):
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
