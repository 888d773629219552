"""Pilot tests: every key and modal of the dashboard, on the recorded backend.

kill / restart / tunnel must reach the backend (asserted on `RecordedBackend.calls`), a cancelled
modal must not, and what the screen shows must follow what the recording says.
"""

from __future__ import annotations

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from launcher.dashboard.screens.confirm import ConfirmScreen
from launcher.dashboard.screens.help import HelpScreen
from launcher.dashboard.screens.main import MainScreen
from launcher.dashboard.widgets.gpu_panel import GpuPanel
from launcher.dashboard.widgets.log_view import LogView
from launcher.dashboard.widgets.metric_chart import MetricChart
from launcher.dashboard.widgets.runs_table import RunsTable
from launcher.dashboard.widgets.summary_bar import SummaryBar
from tests.dashboard.helpers import notifications, plain, wait_for


async def _ready(pilot, app, run: str = "tiny-cpu-120") -> None:
    """Wait for the first poll, then move the cursor to `run` and wait for its log."""
    await wait_for(pilot, lambda: app.main.polls >= 1, what="first status poll")
    table = app.main.query_one(RunsTable)
    table.move_cursor(row=table.get_row_index(run))
    await wait_for(pilot, lambda: app.main.selected == run, what=f"selection of {run}")


def _cell(app, run: str, col: str) -> str:
    return str(app.main.query_one(RunsTable).get_cell(run, col))


async def test_first_screen_shows_the_recorded_runs(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        table = app.main.query_one(RunsTable)
        assert [k.value for k in table.rows] == ["tiny-cpu-120", "m7c-2xa100", "tiny-failed"]
        assert _cell(app, "tiny-cpu-120", "state") == "finished"
        assert _cell(app, "tiny-failed", "state") == "failed (exit 1)"
        assert _cell(app, "m7c-2xa100", "progress").startswith("1200/20000")
        assert _cell(app, "m7c-2xa100", "tps") == "181k"
        log = app.main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) == 76, what="the 76 lines of the recorded train.log")
        assert log.view[-2].text.startswith("[rank0]:[nsa] finished: 120 steps")
        loss = app.main.query_one("#loss", MetricChart)
        await wait_for(pilot, lambda: len(loss.points[0]) == 60, what="60 loss points")
        assert loss.points[0][-1] == 120.0
        assert "no GPU" in plain(app.main.query_one(GpuPanel))
        await pilot.press("down")  # the arrow keys move the selection; panels follow it
        await wait_for(pilot, lambda: app.main.selected == "m7c-2xa100", what="down selects the next run")
        await wait_for(pilot, lambda: "A100" in plain(app.main.query_one(GpuPanel)), what="its GPUs")
        await pilot.press("up")
        await wait_for(pilot, lambda: app.main.selected == "tiny-cpu-120", what="up selects back")


async def test_kill_confirmed_calls_backend_kill(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "m7c-2xa100")
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="kill confirmation")
        assert backend.calls == []  # nothing happens before the answer
        await pilot.press("y")
        await wait_for(pilot, lambda: ("kill", "m7c-2xa100") in backend.calls, what="backend.kill")
        await wait_for(pilot, lambda: _cell(app, "m7c-2xa100", "state") == "killed", what="state killed")
        assert any("recorded kill" in m for m in notifications(app))


async def test_kill_cancelled_by_n_escape_or_enter_calls_nothing(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "m7c-2xa100")
        for answer in ("n", "escape", "enter"):  # Enter lands on the focused Cancel button
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="modal")
            await pilot.press(answer)
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="modal closed")
        await pilot.pause(0.3)
        assert backend.calls == []
        assert _cell(app, "m7c-2xa100", "state") == "running"


async def test_restart_confirmed_calls_backend_restart(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "tiny-failed")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="restart confirmation")
        await pilot.click("#yes")
        await wait_for(pilot, lambda: ("restart", "tiny-failed") in backend.calls, what="backend.restart")
        await wait_for(pilot, lambda: any("restarted as tiny-failed" in m for m in notifications(app)))


async def test_tunnel_key_opens_then_closes_and_shows_url(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        summary = app.main.query_one(SummaryBar)
        await pilot.press("t")
        await wait_for(pilot, lambda: "tiny-cpu-120" in app.main.tunnels, what="tunnel open")
        assert backend.calls == [("open_tunnel", "tiny-cpu-120")]
        await wait_for(pilot, lambda: "http://127.0.0.1:6006/" in plain(summary), what="URL shown")
        await pilot.press("t")
        await wait_for(pilot, lambda: "tiny-cpu-120" not in app.main.tunnels, what="tunnel closed")
        assert backend.tunnels[0].closed
        await wait_for(pilot, lambda: "6006" not in plain(summary), what="URL gone")


async def test_tunnels_left_open_are_closed_on_quit(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        await pilot.press("t")
        await wait_for(pilot, lambda: "tiny-cpu-120" in app.main.tunnels, what="tunnel open")
        await pilot.press("q")
    assert backend.tunnels[0].closed


async def test_search_highlights_and_n_N_move_between_matches(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        log = app.main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) == 76, what="log loaded")
        await pilot.press("slash")
        await pilot.press(*"EVAL loss", "enter")
        assert log.search == "EVAL loss"
        assert not log.follow  # a search pauses the tail so the match stays on screen
        last = log.match_index
        assert last is not None and "eval loss" in log.view[last].text
        await pilot.press("N")
        prev = log.match_index
        assert prev is not None and prev < last and "eval loss" in log.view[prev].text
        await pilot.press("n")
        assert log.match_index == last
        strip = log.render_line(log.row_of(last) - log.scroll_offset.y)
        highlighted = [s.text for s in strip if s.style and s.style.bgcolor is not None and s.text.strip()]
        assert "eval loss" in highlighted
        await pilot.press("escape")
        assert log.search == "" and log.match_index is None


async def test_search_for_absent_text_says_so(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        await pilot.press("slash", *"no-such-text", "enter")
        await wait_for(pilot, lambda: any("no-such-text" in m for m in notifications(app)), what="warning")


async def test_follow_key_pauses_and_resumes_the_tail(app, backend):
    async with app.run_test(size=(120, 30)) as pilot:
        await _ready(pilot, app)
        log = app.main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) == 76, what="log loaded")
        backend.feed_log("tiny-cpu-120", [f"live line {i}" for i in range(50)])
        await wait_for(pilot, lambda: len(log.view) == 126, what="fed lines")
        # following: the view ends on the newest line (scrolled after the next refresh)
        await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y > 0, what="tail in view")
        await pilot.press("f")
        assert not log.follow
        log.scroll_to(y=10, animate=False)
        await pilot.pause(0.05)
        backend.feed_log("tiny-cpu-120", [f"more {i}" for i in range(20)])
        await wait_for(pilot, lambda: len(log.view) == 146, what="more lines")
        assert log.scroll_y == 10  # paused: the view stays where the reader left it
        await pilot.press("f")
        assert log.follow
        await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y, what="back at the tail")


async def test_rank_filter_cycles_and_keeps_untagged_lines(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "tiny-failed")
        log = app.main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) == 75, what="failed run's log")
        assert log.ranks_seen == {0, 1}
        untagged = sum(1 for ln in log.ring if ln.rank is None)
        await pilot.press("l")
        assert log.rank_filter == 0
        texts = [ln.text for ln in log.view]
        assert not any(t.startswith("[rank1]:") for t in texts)
        assert any(t.startswith("[rank0]:") for t in texts)
        assert sum(1 for ln in log.view if ln.rank is None) == untagged
        await pilot.press("l")
        assert log.rank_filter == 1
        assert not any(ln.text.startswith("[rank0]:") for ln in log.view)
        await pilot.press("l")
        assert log.rank_filter is None and len(log.view) == len(log.ring)
        assert "all ranks" in str(log.border_title)


async def test_rank_filter_when_only_rank0_prints_and_on_untagged_logs(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)  # a real finished 2-rank run: only rank 0 prints, tagged [rank0]:
        log = app.main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) == 76, what="log loaded")
        assert log.ranks_seen == {0}
        await pilot.press("l")
        assert log.rank_filter == 0 and len(log.view) == 76  # every line is rank 0's or untagged
        await pilot.press("l")
        assert log.rank_filter is None
        # a log written without torchrun's prefixes (older runs): nothing to filter, `l` stays on all
        await _ready(pilot, app, "m7c-2xa100")
        backend.feed_log("m7c-2xa100", ["[nsa] step 1/10 loss 5.0", "[nsa] step 2/10 loss 4.9"])
        await wait_for(pilot, lambda: len(log.view) == 2, what="the two untagged lines")
        await pilot.press("l")
        assert log.rank_filter is None and len(log.view) == 2


async def test_help_modal_opens_and_closes(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        text = plain(app.screen.query_one("#keys"))
        for binding in MainScreen.BINDINGS:  # every key the screen binds is explained
            key = {"slash": "/", "question_mark": "?", "escape": "Esc"}.get(binding.key, binding.key)
            if key != "Esc":
                assert any(
                    line.split("  ")[0].strip().startswith(key) or f" {key}" in line.split("  ")[0]
                    for line in text.splitlines()
                ), f"help does not list key {key!r}"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main, what="help closed")


async def test_h_shows_every_rank_heartbeat(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        assert _cell(app, "m7c-2xa100", "hb") == "0s ago"
        assert _cell(app, "tiny-cpu-120", "hb") == "–"  # finished: its last beat is not news
        await pilot.press("h")
        assert _cell(app, "m7c-2xa100", "hb") == "r0:0s r1:0s"


async def test_q_quits(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, timeout=5, what="exit")


async def test_lost_host_alerts_then_recovers(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "m7c-2xa100")
        gpus = app.main.query_one(GpuPanel)
        text = plain(gpus)
        assert "A100-SXM4-80GB" in text and "97%" in text and "59.8/80G" in text and "312W" in text
        assert "n/a" in text  # GPU 1's power.draw is [N/A] in the recording
        backend.advance()  # the recording's poll 1: connection refused
        await wait_for(pilot, lambda: _cell(app, "m7c-2xa100", "state") == "lost", what="lost")
        await wait_for(
            pilot, lambda: any("is LOST" in m and "Connection refused" in m for m in notifications(app))
        )
        # explained: where it was at the last contact, the mirror, what happens next; once
        [alert] = [m for m in notifications(app) if "is LOST" in m]
        assert "last contact 2m ago at step 1200 (running)" in alert and "mirror" in alert
        assert "asking again every" in alert
        assert "last contact 2m ago" in plain(app.main.query_one(SummaryBar))
        assert "unreachable" in plain(gpus)
        backend.advance()  # poll 2: the host answers again
        await wait_for(pilot, lambda: _cell(app, "m7c-2xa100", "state") == "running", what="recovery")
        await wait_for(pilot, lambda: any("reachable again" in m for m in notifications(app)))


async def test_log_stream_end_of_a_finished_run_is_final(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app)
        log = app.main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) == 76, what="log loaded")
        backend.feed_log("tiny-cpu-120", None)
        await wait_for(pilot, lambda: "stream ended" in str(log.border_title), what="end marked")
        assert not any("reconnected" in ln.text for ln in log.view)


async def test_an_outage_is_one_marker_not_one_per_retry(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "m7c-2xa100")
        log = app.main.query_one(LogView)
        backend.feed_log("m7c-2xa100", ["before the cut", None, None, None, None, "after the cuts"])
        await wait_for(pilot, lambda: log.view and log.view[-1].text == "after the cuts", what="back")
        assert sum("reconnected" in ln.text for ln in log.view) == 1


async def test_log_stream_cut_while_running_is_retried_with_a_marked_replay(app, backend):
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot, app, "m7c-2xa100")
        log = app.main.query_one(LogView)
        backend.feed_log("m7c-2xa100", ["before the cut", None, "after the cut"])
        await wait_for(pilot, lambda: any("reconnected" in ln.text for ln in log.view), what="marker")
        await wait_for(pilot, lambda: log.view[-1].text == "after the cut", what="the line after the cut")
        assert "stream ended" not in str(log.border_title)


async def test_no_runs_at_all_is_a_calm_empty_screen(tmp_path):
    (tmp_path / "status.json").write_text('{"snapshots": [[]]}')
    backend = RecordedBackend(tmp_path)
    app = make_app(backend, refresh_s=0.1, clock=lambda: 0.0)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: app.main.polls >= 1, what="first poll")
        assert "0 runs" in plain(app.main.query_one(SummaryBar))
        for key in ("k", "r", "t"):
            await pilot.press(key)
        await wait_for(pilot, lambda: notifications(app).count("no run selected") == 3, what="three warnings")
        assert backend.calls == [] and app.screen is app.main
