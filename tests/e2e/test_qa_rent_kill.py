"""What a run on a rented pod leaves billing, as a user renting by the hour meets it (QA): SIGTERM (as
Ctrl-C) on `up --provision --down-when-done` stops watching (the run goes on) and says the pod bills on
and that --down-when-done went with it; `kill` stops the trainer, not the billing, and says which pod bills on,
at what price, and the command that ends it; the run's record, `status --json`, the ledger and every
process's command line (the pod's environment too) hold no API key. `up --provision prime` against
the FAKE Prime API (tests/fixtures/fake_prime.py), a real sshd per pod, real tmux and torchrun (one
paced CPU worker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.launch_support import CPU1, PACED, PYTHON, invoke, isolate, status, wait_for
from tests.fixtures.fake_prime import API_KEY, _pod_pids

pytestmark = [pytest.mark.e2e]
NSA_LAUNCH = str(Path(sys.executable).with_name("nsa-launch"))


def _holding(key: str, files: list[Path]) -> list[str]:
    out = []
    for f in files:
        try:
            if key.encode() in f.read_bytes():
                out.append(str(f))
        except OSError:  # a process that ended meanwhile
            pass
    return out


def test_ctrl_c_and_kill_of_a_provisioned_run_say_the_pod_bills_on_and_no_record_holds_the_key(
    fake_prime, tmux_server, tmp_path, monkeypatch
):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"qakill-{os.getpid()}"
    err = tmp_path / "up.err"
    with err.open("w") as f:
        up = subprocess.Popen(
            [NSA_LAUNCH, "up", "--provision", "prime", "--gpu-type", "CPU_NODE", "--ssh-config",
             str(fake_prime.ssh_config), "--python", PYTHON, *CPU1, *PACED, "--name", run, "--set",
             "train.steps=200", "--down-when-done"],
            env={**os.environ, "HOME": str(tmp_path / "user")}, stdout=subprocess.DEVNULL, stderr=f,
        )  # fmt: skip
    try:
        wait_for(lambda: "nsa-launch dashboard" in err.read_text() or up.poll() is not None, 180,
                 "up's next steps (the run going)")  # fmt: skip
        # the next steps of a run on a rented pod name the command that ends the billing
        assert f"nsa-launch pods down {run}      # pulls the newest checkpoint" in err.read_text()
        up.send_signal(signal.SIGTERM)  # `kill PID` (SIGHUP, a closed terminal, is handled alike)
        assert up.wait(timeout=60) == 130, err.read_text()
    finally:
        if up.poll() is None:
            up.kill()
    (pod_id,) = fake_prime.pods
    # It died without a word (a Ctrl-C said only that the run keeps going): the pod billed on after the
    # run ended.
    said = err.read_text()
    assert f"Pod {pod_id} bills on (--down-when-done ended with this `up`" in said, said
    assert f"nsa-launch pods down {run}" in said
    st = status(run)
    assert st["pod_id"] == pod_id and st["price_hr"] == pytest.approx(0.1) and st["cost_usd"] is not None
    assert st["pod_terminated"] is False, st  # killed, not terminated: it bills on

    procs = list(Path("/proc").glob("[0-9]*/cmdline"))
    on_pod = [Path(f"/proc/{p}/environ") for p in _pod_pids(fake_prime.pods[pod_id].server.tmpdir)]
    assert on_pod  # the trainer, torchrun, tmux of the pod
    where = [*home.rglob("*.json"), *procs, *on_pod]
    assert API_KEY not in json.dumps(st) + said and _holding(API_KEY, [p for p in where if p.is_file()]) == []

    res = invoke("kill", "--run", run, "--yes")
    assert res.exit_code == 0, res.output
    # It stops the trainer only (the checkpoints stay on the pod for `pods down` to pull); it used to
    # say nothing of the pod, which billed on while nothing ran.
    assert f"pod {pod_id} at $0.10/h" in res.output and "still billing" in res.output, res.output
    assert f"nsa-launch pods down {run}" in res.output and pod_id in fake_prime.pods
    res = invoke("pods", "down", run, "--yes", "--no-pull")  # the pull is not what this test is about
    assert res.exit_code == 0 and f"terminated pod {pod_id}" in res.output and not fake_prime.pods
