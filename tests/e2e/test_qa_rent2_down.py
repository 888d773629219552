"""`up --provision prime --down-when-done` when the run does not end well (QA, a user who rents by the
hour and leaves): a FINISHED run whose final pull fails keeps its pod (its checkpoint is only there)
and says loudly that the pod bills on, why, and the two commands that end it (they do); a FAILED run
is pulled (log, events) and its pod terminated, with the mirror's log named. The dashboard's `k` of a
run on a rented pod says that the pod bills on. Against the FAKE Prime
API (tests/fixtures/fake_prime.py), a real sshd per pod, real tmux and torchrun (one CPU worker, 4 steps)."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.e2e.launch_support import CPU1, PYTHON, invoke, isolate
from tests.e2e.prime_support import ledger

pytestmark = [pytest.mark.e2e]


def _up(api, run: str, *args: str):
    return invoke(
        "up", "--provision", "prime", "--gpu-type", "CPU_NODE", "--ssh-config", str(api.ssh_config),
        "--python", PYTHON, *CPU1, "--name", run, "--set", "train.steps=4", "--set", "train.save_every=4",
        "--down-when-done", *args,
    )  # fmt: skip


async def _dashboard_kill(run: str) -> list[str]:
    """`k`, `y` on the run in the dashboard over the real launcher (its watch off: no pull of its own);
    the notifications it shows."""
    from launcher.dashboard import make_app
    from launcher.dashboard.backend import LauncherBackend, Scope, WatchSettings
    from launcher.dashboard.screens.confirm import ConfirmScreen
    from tests.dashboard.helpers import notifications, wait_for

    app = make_app(LauncherBackend(Scope(run=run), WatchSettings(enabled=False)), refresh_s=0.5)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.main.selected == run, 30, what=f"{run} selected")
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the kill confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: any("still billing" in m for m in notifications(app)), 60, "billing")
        return notifications(app)


def test_a_finished_run_whose_pull_fails_keeps_its_pod_and_says_the_commands(
    fake_prime, tmux_server, tmp_path, monkeypatch
):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"qa2pull-{os.getpid()}"
    # The mirror cannot take the run's log (a non-empty directory where it goes): rsync fails, as it
    # does on a full or read-only disk.
    in_the_way = home / "mirror" / run / "train.log"
    in_the_way.mkdir(parents=True)
    (in_the_way / "x").write_text("in the way\n")
    res = _up(fake_prime, run)
    assert res.exit_code == 1, res.output
    (pod_id,) = fake_prime.pods
    # It used to print the pull's error only, the pod billing on unsaid.
    out = res.output
    assert f"!!! POD {pod_id} IS STILL BILLING at $0.10/h: run {run} finished, but pulling it failed (" in out
    assert "The pod is NOT terminated" in out, out
    assert f"`nsa-launch pull --run {run}`, then end the billing: `nsa-launch pods down {run}`" in out
    assert "terminated pod" not in out and ledger(home)[pod_id]["terminated"] is None
    # The dashboard's `k` of the run on that pod says the pod bills on, as `nsa-launch kill` does (it
    # said the kill's result only).
    said = asyncio.run(_dashboard_kill(run))
    assert any(f"pod {pod_id} at $0.10/h" in m and "still billing" in m and f"nsa-launch pods down {run}" in m
               for m in said), said  # fmt: skip
    assert pod_id in fake_prime.pods
    # The commands it names work once the cause is gone: the checkpoint is pulled, then the pod ends.
    (in_the_way / "x").unlink()
    in_the_way.rmdir()
    res = invoke("pull", "--run", run)
    assert res.exit_code == 0 and "checkpoint step-00000004 (new)" in res.output, res.output
    res = invoke("pods", "down", run, "--yes")
    assert res.exit_code == 0 and f"terminated pod {pod_id}" in res.output and not fake_prime.pods
    assert ledger(home)[pod_id]["terminated"] is not None


def test_a_failed_run_is_pulled_and_its_pod_terminated(fake_prime, tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"qa2fail-{os.getpid()}"
    # A NaN loss at step 3 fails the run (no restart), after its first heartbeat. The pod was kept "for
    # inspection" with no end: billed all night for a user who had asked for down-when-done.
    res = _up(fake_prime, run, "--env", "NSA_FAULT=nan:step=3", "--max-restarts", "0")
    assert res.exit_code == 1, res.output
    mirror = home / "mirror" / run
    assert f"run {run} failed: its log and events are in the mirror, {mirror}/train.log" in res.output
    assert f"`nsa-launch restart --run {run} --host NEW` continues it from the mirror" in res.output
    # the trainer's own account of the failure is there, off the terminated pod
    assert '"error": "diverged"' in (mirror / "events.jsonl").read_text()
    assert "torchrun exited with 1" in (mirror / "train.log").read_text()
    (rec,) = ledger(home).values()
    assert rec["terminated"] is not None and f"terminated pod {rec['id']}" in res.output
    assert not fake_prime.pods, res.output
