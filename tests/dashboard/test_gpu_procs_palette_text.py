"""Pilot tests: the `g` GPU-process view and its kill, the palette's screenshot, run output shown as
text (never markup), human event values and integer step axes. Recorded backend throughout; the
GPU-process rows of the recording are marked synthetic (no GPU host was available) and the view
must say so on screen."""

from __future__ import annotations

import json
import re

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from launcher.dashboard.screens.confirm import ConfirmScreen
from launcher.dashboard.screens.gpu_procs import GpuProcsScreen
from launcher.dashboard.widgets.events_list import EventsList
from launcher.dashboard.widgets.metric_chart import MetricChart
from launcher.dashboard.widgets.runs_table import RunsTable
from tests.dashboard.helpers import RECORDED_NOW, RECORDING, notifications, plain, select_run, wait_for

GLOO_ERROR = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"


async def test_g_lists_gpu_processes_and_x_kills_the_stray_one(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await select_run(pilot, app, "m7c-2xa100")
        assert "SYNTHETIC" in str(app.main.query_one(RunsTable).get_cell("m7c-2xa100", "run"))
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuProcsScreen), what="the GPU process view")
        view = app.screen
        await wait_for(pilot, lambda: view.polls >= 1, what="the first process list")
        table = view.query_one("#procs")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[:5] for r in rows] == [
            ["0", "40230", "run", "ubuntu", "58.4G"],
            ["0", "38877", "other", "ubuntu", "1.0G"],
            ["1", "40231", "run", "ubuntu", "59.0G"],
        ]
        assert "eval_old_checkpoint.py" in rows[1][5]
        assert "SYNTHETIC DATA" in plain(view.query_one("#procs-note"))
        table.move_cursor(row=1)
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="kill confirmation")
        assert "38877" in plain(app.screen.query_one("#question")) and backend.calls == []
        await pilot.press("y")
        await wait_for(pilot, lambda: ("kill_gpu_process", "m7c-2xa100", 38877) in backend.calls, what="kill")
        await wait_for(pilot, lambda: table.row_count == 2, what="the killed process gone from the list")
        assert any("recorded kill" in m for m in notifications(app))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main, what="view closed")
        assert ("kill", "m7c-2xa100") not in backend.calls  # the run itself was not touched


async def test_g_on_a_cpu_host_says_there_is_no_nvml(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await select_run(pilot, app, "tiny-cpu-120")
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuProcsScreen), what="the view")
        await wait_for(pilot, lambda: app.screen.polls >= 1, what="the answer")
        assert "no NVIDIA driver" in plain(app.screen.query_one("#procs-note"))
        await pilot.press("x")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ConfirmScreen) and backend.calls == []


async def test_palette_screenshot_is_saved(backend, tmp_path):
    shots = tmp_path / "shots"  # does not exist yet: the app makes it
    app = make_app(backend, refresh_s=0.1, clock=lambda: RECORDED_NOW, screenshot_dir=shots)
    async with app.run_test(size=(120, 40)) as pilot:
        await select_run(pilot, app, "tiny-cpu-120")
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"screenshot")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: shots.exists() and any(shots.glob("*.svg")), timeout=10, what="an SVG file"
        )
        await wait_for(pilot, lambda: any("Saved screenshot" in m for m in notifications(app)), what="notice")
        assert not any("Failed" in m for m in notifications(app))
        svg = next(shots.glob("*.svg")).read_text()
        assert "<svg" in svg and "tiny-cpu-120" in svg


async def test_gloo_error_text_in_alerts_and_tables_is_shown_verbatim(tmp_path):
    rec = json.loads((RECORDING / "status.json").read_text())
    first = [s for s in rec["snapshots"][0] if s["run"] == "m7c-2xa100"]
    failed = [{**first[0], "state": "failed", "exit_code": 1, "error": GLOO_ERROR, "gpus": []}]
    (tmp_path / "status.json").write_text(json.dumps({"snapshots": [first, failed]}))
    (tmp_path / "nvidia-smi-2xa100.csv").write_text((RECORDING / "nvidia-smi-2xa100.csv").read_text())
    backend = RecordedBackend(tmp_path)
    app = make_app(backend, refresh_s=0.1, clock=lambda: RECORDED_NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await select_run(pilot, app, "m7c-2xa100")
        backend.advance()
        await wait_for(pilot, lambda: any(GLOO_ERROR in m for m in notifications(app)), what="the alert")
        await pilot.pause(0.2)
        assert app.is_running and "failed (exit 1)" in str(
            app.main.query_one(RunsTable).get_cell("m7c-2xa100", "state")
        )


async def test_events_are_human_and_chart_steps_are_integers(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await select_run(pilot, app, "tiny-cpu-120")
        events = plain(app.main.query_one(EventsList))
        assert "loss=3.08" in events and "3.0797014236450195" not in events  # eval, step 120
        assert "path=checkpoints/step-00000120 seconds=100ms" in events  # recorded: "seconds": 0.1
        assert "tokens=123k wall_s=24s" in events
        chart = app.main.query_one("#loss", MetricChart)
        await wait_for(pilot, lambda: len(chart.points[0]) == 60, what="60 loss points")
        await wait_for(pilot, lambda: bool(chart.drawn_ticks[0]), what="the chart drawn")
        drawn = re.sub(r"\x1b\[[0-9;]*m", "", chart.plt.build()).splitlines()
        assert drawn[-1].split() == ["25", "50", "75", "100"], drawn  # under the axis, whole steps
        assert chart.drawn_ticks[0] == ["25", "50", "75", "100"]
        assert "last 3.163 @ step 120" in str(chart.border_title)  # metrics.jsonl: 3.1629159...
