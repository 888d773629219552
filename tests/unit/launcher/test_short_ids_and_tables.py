"""Default run ids are short (<= 24 characters) and every table shows them whole at 80 columns:
`status` keeps run, state, step and loss; `runs` keeps run and state."""

from __future__ import annotations

import re

from rich.console import Console

from launcher.cli.runs import fit
from launcher.cli.status import print_status
from launcher.launch.plan import RUN_ID_MAX, default_run_id


def test_default_run_id_is_config_day_and_four_hex_within_24_chars():
    rid = default_run_id("m7c_125m_2xa100_production", now=1795317763.1, suffix="a3f2")
    assert len(rid) <= RUN_ID_MAX == 24
    assert re.fullmatch(r"m7c_125m_2xa10-\d{4}-a3f2", rid), rid
    assert default_run_id("tiny", suffix="0b1c").startswith("tiny-")
    assert re.fullmatch(r"tiny-\d{4}-[0-9a-f]{4}", default_run_id("tiny"))
    assert default_run_id("...").startswith("run-")  # nothing usable in the name
    assert len({default_run_id("tiny") for _ in range(20)}) > 1  # random suffix


def _status(run: str) -> dict:
    return {
        "run": run,
        "host": "ubuntu@203.0.113.7",
        "profile": "2xa100",
        "state": "failed",
        "exit_code": 1,
        "step": 1200,
        "total_steps": 20000,
        "loss": 4.1873,
        "tokens_per_s": 181342.0,
        "eta_s": 5421.0,
        "elapsed_s": 346.0,
        "heartbeat_age_s": {"0": 0.4},
        "gpus": [],
        "error": None,
    }


def test_status_table_at_80_columns_keeps_whole_ids_state_step_loss():
    rid = default_run_id("m7c_125m_2xa100_production", suffix="ffff")
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_status(console, [_status(rid), _status("tiny-1125-0001")])
    text = console.export_text()
    lines = text.splitlines()
    assert any(
        rid in ln and "failed (exit 1)" in ln and "1200/20000" in ln and "4.187" in ln for ln in lines
    ), text
    assert all(len(ln) <= 80 for ln in lines)


def test_runs_table_drops_columns_not_ids():
    from rich.text import Text

    rid = default_run_id("m7c_125m_2xa100_production", suffix="ffff")
    row = {
        "run": Text(rid),
        "state": Text("running"),
        "profile": Text("2xa100"),
        "host": Text("ubuntu@203.0.113.7"),
        "pod": Text(""),
        "nodes": Text("1"),
        "created": Text("2026-11-25 19:00 (3m ago)"),
        "run dir": Text("/home/ubuntu/nsa-launch/runs/" + rid),
    }
    cols = ["run", "state", "profile", "host", "nodes", "created", "run dir"]
    assert fit(cols, [row], 200) == cols
    narrow = fit(cols, [row], 80)
    assert narrow[:2] == ["run", "state"] and "run dir" not in narrow


def test_up_wait_summary_names_step_loss_rate_wall_time_checkpoint_and_next_commands():
    import json
    from pathlib import Path

    from launcher.cli.up import run_summary

    recorded = Path(__file__).resolve().parents[2] / "dashboard" / "recorded" / "status.json"
    st = next(s for s in json.loads(recorded.read_text())["snapshots"][0] if s["run"] == "tiny-cpu-120")
    text = run_summary(st, "tiny-cpu-120", "local")
    first = text.splitlines()[0]
    # the finished event: 122880 tokens over 24.04 s
    assert first == (
        "run tiny-cpu-120 finished: step 120/120, loss 3.163, 5.1k tok/s (average over 123k tokens), "
        "wall time 24s"
    )
    assert f"checkpoint: {st['run_dir']}/checkpoints/step-00000120" in text
    assert "nsa-launch tunnel --run tiny-cpu-120" in text and "next:" in text
    failed = run_summary({**st, "state": "failed", "exit_code": 1, "events": []}, "x", "u@h")
    assert "run x failed (exit code 1)" in failed and "checkpoint: none saved" in failed
    assert "nsa-launch restart --run x" in failed
