"""A run on a plain SSH host (no --provision) whose host dies mid-run, as a user who rents hosts by
hand meets it (the qa walk of 2026-11-27): `watch` only reports such a run, and before `restart
--host` nothing could put the mirror's checkpoint on a new host (`up --resume` on another host is
refused, `restart` needs the old host); the documented "a new `up`" started over from step 0. Now
`restart --host NEW` restores the mirror there and resumes: no step lost beyond the last save, no
step twice in the metrics. Real parts: two hosts that are real sshds (the FAKE Prime API's pods, used
as plain SSH hosts: `lose` stops one's sshd and processes), real tmux, torchrun with gloo, one worker."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launcher.config.profiles import load_profile
from tests.e2e.launch_support import CPU1, PYTHON, invoke, isolate, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 12
SETS = [f"train.steps={STEPS}", "train.save_every=4", "train.eval_every=100", "train.log_every=1"]


def test_a_run_whose_plain_ssh_host_is_lost_moves_to_a_new_host_from_the_mirror(
    fake_prime, tmux_server, tmp_path, monkeypatch
):
    from launcher.providers.pods import provision
    from launcher.providers.prime import PrimeClient

    home = isolate(monkeypatch, tmp_path, tmux_server)
    cfg = str(fake_prime.ssh_config)
    hosts = []
    for _ in range(2):  # two machines rented by hand: the run records no pod
        pod, (h,) = provision(
            PrimeClient(), load_profile(CPU1[1]), "CPU_NODE", "by-hand", None, lambda _: None, 30, cfg
        )
        hosts.append((pod.id, h.target))
    (pod1, host1), (_, host2) = hosts
    run = "moved"
    sets = [a for s in SETS for a in ("--set", s)]
    res = invoke("up", *CPU1, "--host", host1, "--ssh-config", cfg, "--python", PYTHON, "--name", run, *sets)
    assert res.exit_code == 0, res.output
    on_host1 = Path(json.loads((home / "runs" / f"{run}.json").read_text())["nodes"][0]["run_dir"])
    wait_for(lambda: (on_host1 / "checkpoints" / "step-00000004" / "manifest.json").exists(), 120,
             "step-00000004 on host 1", interval=0.05)  # fmt: skip
    assert fake_prime.freeze_run(pod1)
    assert invoke("pull", "--run", run).exit_code == 0
    mirrored = (home / "mirror" / run / "checkpoints" / "latest").read_text().strip()
    saved = int(mirrored.removeprefix("step-"))
    fake_prime.lose(pod1)  # the host dies with the run on it
    # `restart` reads where the run resumed from its `boot` event newer than 2 s before the restore (clock
    # skew): the old run's boot, pushed with the mirror's events, must be older than that, as it is
    # after any real run (this one booted a second ago)
    boot = max(e["time"] for e in map(json.loads, (home / "mirror" / run / "events.jsonl").read_text().splitlines())
               if e["kind"] == "boot")  # fmt: skip
    time.sleep(max(0.0, boot + 2.5 - time.time()))
    assert invoke("status", "--run", run, "--json").exit_code == 1  # lost
    res = invoke("restart", "--run", run, "--host", host2, "--ssh-config", cfg, "--python", PYTHON)
    assert res.exit_code == 0, res.output
    assert (
        f"restored {mirrored} to " in res.output and f"resumed at step {saved} from {mirrored}" in res.output
    )
    rec = json.loads((home / "runs" / f"{run}.json").read_text())
    assert rec["nodes"][0]["host"]["target"] == host2 and rec.get("provider") is None, rec
    st = wait_for(
        lambda: (s := status(run))["state"] in ("finished", "failed") and s,
        240,
        "the run to end",
        interval=1.0,
    )  # each look is an agent call over SSH
    assert f"{run}: moved to {st['host']} from {mirrored}" in res.output, res.output
    assert st["state"] == "finished" and st["step"] == STEPS, st
    assert invoke("pull", "--run", run).exit_code == 0
    m = home / "mirror" / run
    steps = [
        r["step"] for r in map(json.loads, (m / "metrics.jsonl").read_text().splitlines()) if "loss" in r
    ]
    assert steps == list(range(1, STEPS + 1)), steps  # none lost, none twice
    ev = [json.loads(ln) for ln in (m / "events.jsonl").read_text().splitlines()]
    moved = [e for e in ev if e["kind"] == "host_replaced"]
    assert (
        len(moved) == 1 and moved[0]["detail"]["old_pod"] is None and moved[0]["detail"]["host"] == st["host"]
    ), moved
    assert moved[0]["detail"]["old_host"] != st["host"]
