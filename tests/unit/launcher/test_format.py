"""The one formatter (launcher/core/format.py) and the `status` table it fills, rendered by real rich
consoles at 80 and 160 columns from the committed recording's snapshots."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from launcher.cli.status import print_status
from launcher.core import format as fmt
from launcher.dashboard.recorded import RecordedBackend
from tests.dashboard.helpers import RECORDING

GLOO_ERROR = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"


@pytest.mark.parametrize(
    ("v", "text"),
    [(None, "–"), (float("nan"), "–"), (0, "0"), (952.4, "952"), (12.34, "12.3"), (6779.1, "6.8k"),
     (9960, "10k"), (181342.0, "181k"), (999_700, "1.0M"), (3_400_000, "3.4M"), (152152, "152k"),
     (-2500, "-2.5k"), (True, "–")],
)  # fmt: skip
def test_number(v, text):
    assert fmt.number(v) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "–"), (-1, "–"), (-0.04, "–"), (0.0, "0.0s"), (0.02, "20ms"), (2.54, "2.5s"), (42, "42s"), (400, "6m40s"),
     (5421, "1h30m"), (3 * 86400, "3d00h")],
)  # fmt: skip
def test_duration(seconds, text):
    assert fmt.duration(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "–"), (-0.004, "0s ago"), (-3600, "–"), (0.8, "0s ago"), (42.9, "42s ago"), (482.2, "8m ago"),
     (5421, "1h30m ago"), (3 * 86400 + 5, "3d ago")],
)  # fmt: skip
def test_ago_is_never_negative(seconds, text):
    assert fmt.ago(seconds) == text


def test_loss_steps_state_and_heartbeat():
    assert fmt.loss(2.835869312286377) == "2.836" and fmt.loss(float("inf")) == "–"
    assert fmt.step_total(1200, 20000) == "1200/20000" and fmt.step_total(5, None) == "5"
    assert fmt.state_label({"state": "failed", "exit_code": 1}) == "failed (exit 1)"
    assert fmt.state_label({"state": "finished", "exit_code": 0}) == "finished"
    running = {"state": "running", "heartbeat_age_s": {"1": 0.9, "0": 482.2}}
    assert fmt.newest_heartbeat(running) == "0s ago"
    assert fmt.heartbeat(running, per_rank=True).plain == "r0:8m r1:0s"
    # A finished run's last beat is minutes old and means nothing: no age, per rank or not.
    finished = {"state": "finished", "heartbeat_age_s": {"0": 482.2, "1": -0.04}}
    assert fmt.newest_heartbeat(finished) == "–"
    assert fmt.heartbeat(finished, per_rank=True).plain == "–"
    assert fmt.progress(60, 120).plain == "60/120 █████░░░░░  50%"


def test_event_values_are_human():
    ev = {"kind": "first_step", "detail": {"loss": 2.835869312286377, "seconds_since_start": 3.6812,
          "params": 152152, "world_size": 2, "tokens_per_s": 181342.7, "path": "checkpoints/step-4"}}  # fmt: skip
    assert fmt.event_detail(ev) == (
        "loss=2.836 params=152k path=checkpoints/step-4 seconds_since_start=3.7s tokens_per_s=181k world_size=2"
    )
    assert fmt.event_detail({"kind": "x", "lr": 0.000123456}) == "lr=0.0001235"


def _snapshots() -> list[dict]:
    b = RecordedBackend(RECORDING)
    snaps = b.snapshot()
    b.advance()
    lost = next(s for s in b.snapshot() if s["state"] == "lost")
    lost["run"] = "m7c-2xa100-cut-off"
    lost["error"] = GLOO_ERROR  # run output is text, never markup
    snaps[1]["run"] = "nsa-m7c-2xa100-20261123-204041-ab12"  # a launcher-made id: long
    return [*snaps, lost]


def _render(width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    print_status(console, _snapshots())
    return console.export_text().splitlines()


def test_status_table_fits_80_columns_without_cutting_cells():
    lines = _render(80)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text  # no cell is cut; columns are dropped instead
    header = lines[0].split()
    assert header[:4] == ["run", "state", "step", "loss"] and "host" not in header
    assert "finished" in text and "failed (exit 1)" in text and "1200/20000" in text
    assert "1.813e+05" not in text and "r0:" not in text
    # the host column is gone, so the remote run says where it runs below the table
    assert "  on ubuntu@203.0.113.7" in text
    assert "  gpu0 A100-SXM4-80GB  97%  59.8/80G  64°C  312W" in text


def test_status_table_wide_shows_every_column_and_human_numbers():
    lines = _render(160)
    assert lines[0].split() == [
        "run",
        "state",
        "step",
        "loss",
        "tok/s",
        "ETA",
        "heartbeat",
        "elapsed",
        "host",
    ]
    rows = {line.split()[0]: line for line in lines[2:] if line and not line.startswith(" ")}
    running = rows["nsa-m7c-2xa100-20261123-204041-ab12"].split()
    assert running[1:] == ["running", "1200/20000", "4.187", "181k", "1h30m", "0s", "ago", "5m46s",
                           "ubuntu@203.0.113.7"]  # fmt: skip
    # ended runs: no ETA, no heartbeat age (the recording's real ones were seconds old)
    assert rows["tiny-cpu-120"].split()[1:] == [
        "finished",
        "120/120",
        "3.163",
        "3.8k",
        "–",
        "–",
        "36s",
        "local",
    ]
    assert rows["tiny-failed"].split()[1:6] == ["failed", "(exit", "1)", "11/2000", "3.672"]
    # the recorded run's real gloo error, printed below the table as it is (it starts with "[/")
    assert (
        "  error at step 11: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]"
        in "\n".join(lines)
    )
    assert "-0.0" not in "\n".join(lines)


def test_status_prints_a_gloo_error_as_text():
    snap = {**_snapshots()[0], "state": "failed", "exit_code": 1, "error": GLOO_ERROR}
    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    print_status(console, [snap])
    assert GLOO_ERROR in console.export_text()


def test_restarts_and_pod_cost_for_status_runs_and_dashboard():
    """Issue 14: restarts the host made and a rented pod's price show wherever a run's state does."""
    restarted = {"state": "running", "restarts": {"count": 1, "max": 3, "causes": [], "stopped": None}}
    assert fmt.state_label(restarted) == "running (restarts 1/3)"
    assert (
        fmt.state_label({**restarted, "state": "failed", "exit_code": 1}) == "failed (exit 1, restarts 1/3)"
    )
    assert fmt.state_label({"state": "running", "restarts": {"count": 0, "max": 3}}) == "running"
    assert fmt.pod_cost({"pod_id": "p-1", "price_hr": 1.2, "cost_usd": 3.404}) == "pod p-1 $1.20/h $3.40"
    assert fmt.pod_cost({"pod_id": "p-1", "price_hr": None, "cost_usd": None}) == "pod p-1 $?/h $?"
    assert fmt.pod_cost({"state": "running"}) == ""


def test_sizes_rates_and_durations_read_the_same_everywhere():
    """The forms the CLI and the dashboard share (issue 25): 1.8k tok/s, 2m05s, 1.2 GB."""
    assert fmt.tok_rate(1834.2) == "1.8k tok/s"
    assert fmt.duration(125) == "2m05s"
    assert fmt.size(1.2e9) == "1.2 GB" and fmt.size(512) == "512 B" and fmt.size(999_999) == "1.0 MB"
    assert fmt.size(None) == fmt.MISSING and fmt.size(-1) == fmt.MISSING
    assert fmt.lost_detail({"last_contact": 100.0, "last_step": 1200, "last_state": "running"}, 220.0) == (
        "last contact 2m ago at step 1200 (running)"
    )
    assert fmt.lost_detail({}) == "no contact with its host from here yet"


def test_a_killed_run_reads_as_a_deliberate_stop_not_an_exit_code():
    events = [
        {"kind": "checkpoint", "step": 80},
        {"kind": "sigterm", "step": 83},
        {"kind": "checkpoint", "step": 83},
    ]
    assert fmt.state_label({"state": "killed", "exit_code": 1, "events": events}) == "killed (saved step 83)"
    assert fmt.state_label({"state": "killed", "exit_code": 143, "events": []}) == "killed"
    assert fmt.state_label({"state": "failed", "exit_code": 1}) == "failed (exit 1)"
    assert fmt.STATE_STYLE["killed"] not in (fmt.STATE_STYLE["failed"], fmt.STATE_STYLE["lost"])
    assert "red" not in fmt.STATE_STYLE["killed"] and "magenta" not in fmt.STATE_STYLE["killed"]
