"""`kill` of a run on a rented pod, as a user renting by the hour meets it (QA): it stops the trainer,
not the billing, so it says which pod bills on, at what price, and the command that ends it; the run's
record, `status --json`, the ledger and every process's command line (the pod's environment too) hold
no API key. `up --provision prime` against the FAKE Prime API (tests/fixtures/fake_prime.py), a real
sshd per pod, real tmux and torchrun (one paced CPU worker)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.launch_support import CPU1, PACED, PYTHON, invoke, isolate, status
from tests.fixtures.fake_prime import API_KEY, _pod_pids

pytestmark = [pytest.mark.e2e]


def _holding(key: str, files: list[Path]) -> list[str]:
    out = []
    for f in files:
        try:
            if key.encode() in f.read_bytes():
                out.append(str(f))
        except OSError:  # a process that ended meanwhile
            pass
    return out


def test_kill_of_a_provisioned_run_says_the_pod_bills_on_and_no_record_holds_the_key(
    fake_prime, tmux_server, tmp_path, monkeypatch
):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"qakill-{os.getpid()}"
    res = invoke(
        "up", "--provision", "prime", "--gpu-type", "CPU_NODE", "--ssh-config", str(fake_prime.ssh_config),
        "--python", PYTHON, *CPU1, *PACED, "--name", run, "--set", "train.steps=200",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (pod_id,) = fake_prime.pods
    st = status(run)
    assert st["pod_id"] == pod_id and st["price_hr"] == pytest.approx(0.1) and st["cost_usd"] is not None

    procs = [p for p in Path("/proc").glob("[0-9]*/cmdline")]
    on_pod = [Path(f"/proc/{p}/environ") for p in _pod_pids(fake_prime.pods[pod_id].server.tmpdir)]
    assert on_pod  # the trainer, torchrun, tmux of the pod
    where = [*home.rglob("*.json"), *procs, *on_pod]
    assert API_KEY not in json.dumps(st) and _holding(API_KEY, [p for p in where if p.is_file()]) == []

    res = invoke("kill", "--run", run, "--yes")
    assert res.exit_code == 0, res.output
    # It stops the trainer only (the checkpoints stay on the pod for `pods down` to pull); it used to
    # say nothing of the pod, which billed on while nothing ran.
    assert f"pod {pod_id} at $0.10/h" in res.output and "still billing" in res.output, res.output
    assert f"nsa-launch pods down {run}" in res.output and pod_id in fake_prime.pods
    res = invoke("pods", "down", run, "--yes")
    assert res.exit_code == 0 and f"terminated pod {pod_id}" in res.output and not fake_prime.pods
