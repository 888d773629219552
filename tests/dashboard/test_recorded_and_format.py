"""nvidia-smi CSV parsing, the recorded backend's replay rules, and sparklines (the rest of
launcher/core/format.py: tests/unit/launcher/test_format.py)."""

from __future__ import annotations

import json

import pytest

from launcher.core import format as fmt
from launcher.dashboard.recorded import RecordedBackend
from launcher.host.gpu import parse_csv
from tests.dashboard.helpers import RECORDING


def test_parse_the_recorded_nvidia_smi_csv():
    gpus = parse_csv((RECORDING / "nvidia-smi-2xa100.csv").read_text())
    assert gpus[0] == {
        "index": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "util_pct": 97.0,
        "mem_used_mb": 61234.0,
        "mem_total_mb": 81920.0,
        "temp_c": 64.0,
        "power_w": 312.45,
    }
    assert gpus[1]["power_w"] is None  # "[N/A]"


def test_parse_tolerates_reordered_unknown_and_ragged_columns():
    text = (
        "name, pstate, index, memory.used [MiB]\n"
        "NVIDIA H100 80GB HBM3, P0, 3, 1024 MiB\n"
        "broken row\n"
        "NVIDIA H100 80GB HBM3, P0, 4, [Not Supported]\n"
    )
    assert parse_csv(text) == [
        {"name": "NVIDIA H100 80GB HBM3", "index": 3, "mem_used_mb": 1024.0},
        {"name": "NVIDIA H100 80GB HBM3", "index": 4, "mem_used_mb": None},
    ]
    assert parse_csv("") == []


def test_recorded_backend_replays_polls_and_remembers_actions():
    b = RecordedBackend(RECORDING)
    first = {s["run"]: s for s in b.snapshot()}
    assert first["m7c-2xa100"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert b.advance() == 1 and {s["run"]: s["state"] for s in b.snapshot()}["m7c-2xa100"] == "lost"
    b.advance()
    assert b.advance() == 2  # the last poll repeats
    assert b.kill("tiny-cpu-120")["killed"] is True
    assert {s["run"]: s["state"] for s in b.snapshot()}["tiny-cpu-120"] == "killed"
    assert b.calls == [("kill", "tiny-cpu-120")]
    assert len(b.metrics("tiny-cpu-120")) == 63


def test_recorded_tunnels_follow_the_run_like_real_ones():
    """A kill stops the run's TensorBoard; a tunnel opened after it (the dashboard's reopen racing the
    kill) reaches nothing, as a real forward to a dead port does, so the dashboard closes it; a
    restart brings TensorBoard back."""
    b = RecordedBackend(RECORDING)
    before = b.open_tunnel("tiny-cpu-120")
    assert before.alive()
    b.kill("tiny-cpu-120")
    assert not before.alive() and not b.open_tunnel("tiny-cpu-120").alive()
    b.restart("tiny-cpu-120")
    assert b.open_tunnel("tiny-cpu-120").alive()


def test_recorded_backend_names_a_bad_recording(tmp_path):
    with pytest.raises(ValueError, match=r"status\.json"):
        RecordedBackend(tmp_path)
    (tmp_path / "status.json").write_text(json.dumps({"snapshots": []}))
    with pytest.raises(ValueError, match="'snapshots' is empty"):
        RecordedBackend(tmp_path)


def test_sparkline_scales_to_fixed_bounds():
    assert fmt.sparkline([0, 50, 100], 0, 100) == "▁▅█"
    assert fmt.sparkline([]) == ""
    assert fmt.sparkline([3, 3]) == "▁▁"
