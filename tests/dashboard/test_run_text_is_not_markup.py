"""Text that comes from runs is never read as Textual/rich markup (issue 13, item 3): a run that
fails with the real gloo error of a SIGKILLed peer ("[/__w/pytorch/.../pair.cc:553] Connection
closed by peer", recorded in tests/assets/faults/) raises an alert, shows in the events list and
the runs table, and the app keeps running."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from launcher.dashboard.widgets.events_list import EventsList
from launcher.dashboard.widgets.runs_table import RunsTable
from tests.dashboard.helpers import notifications, plain, wait_for

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "faults"


async def test_gloo_error_text_in_alerts_events_and_table(tmp_path) -> None:
    events = [json.loads(line) for line in (ASSETS / "kill9_events.jsonl").read_text().splitlines()]
    gloo = events[-1]["detail"]["message"]
    assert gloo.startswith("[/__w/pytorch")
    base = {
        "run": "gloo-run", "host": "local", "profile": "cpu", "state": "running", "step": 2, "total_steps": 40,
        "loss": 5.2, "tokens_per_s": 1000.0, "eta_s": 10.0, "elapsed_s": 3.0, "heartbeat_age_s": {"0": 0.5},
        "gpus": [], "exit_code": None, "pids": [1], "events": events[:2], "time": 1795467390.0, "error": None,
        "run_dir": str(tmp_path / "rd"), "phases": {"0": "forward_backward"}, "val_loss": None,
    }  # fmt: skip
    failed = {
        **base,
        "state": "failed",
        "exit_code": 1,
        "pids": [],
        "events": events,
        "error": f"rank 0: {gloo} [/b]",
    }
    (tmp_path / "status.json").write_text(json.dumps({"snapshots": [[base], [failed]]}))
    backend = RecordedBackend(tmp_path)
    app = make_app(backend, refresh_s=0.1, max_backoff_s=0.2, clock=lambda: 1795467390.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.main.polls >= 1, what="first poll")
        backend.advance()
        await wait_for(
            pilot,
            lambda: any("is FAILED" in m and "pair.cc:553]" in m for m in notifications(app)),
            what="alert",
        )
        await wait_for(
            pilot, lambda: "message=[/__w/pytorch" in plain(app.main.query_one(EventsList)), what="events"
        )
        assert str(app.main.query_one(RunsTable).get_cell("gloo-run", "state")).startswith("failed")
        assert app.is_running
