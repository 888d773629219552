"""The last answer kept from a run's host (launcher/run/control.py `_remember_contact`), which a `lost`
status quotes: a run that ends at the step it was last seen running at is recorded as ended, not
throttled away as "same step, under SEEN_EVERY_S": a finished run whose pod `--down-when-done` then
terminated read "last contact ... at step 2 (running); the run may go on on its host"."""

from __future__ import annotations

import time

from launcher.run import control


def test_a_run_that_ends_at_the_step_it_was_seen_at_is_remembered_ended(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    now = time.time()
    control._remember_contact({"run": "r1", "time": now, "step": 2, "loss": 3.1, "state": "running"})
    control._remember_contact({"run": "r1", "time": now + 1, "step": 2, "loss": 3.1, "state": "running"})
    assert control.last_contact("r1")["time"] == now  # throttled: nothing new
    control._remember_contact({"run": "r1", "time": now + 2, "step": 2, "loss": 3.1, "state": "finished"})
    seen = control.last_contact("r1")
    assert seen["state"] == "finished" and seen["time"] == now + 2
