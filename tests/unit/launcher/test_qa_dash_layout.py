"""QA of the dashboard's screen at 80x24 and 120x40 as a new user meets it (qadash, 2026-11-27),
over the committed recording (tests/dashboard/recorded): `z` gives every pane the whole screen, and
the footer keeps the keys a newcomer needs."""

from __future__ import annotations

import pytest

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from tests.dashboard.helpers import RECORDED_NOW, RECORDING, wait_for


def _app():
    # One poll is all these tests need: at refresh 0.1 s the redraws of each poll made this file cost
    # 17.6 CPU-s instead of 11.3 (measured here, 2026-11-27, load ~15).
    return make_app(
        RecordedBackend(RECORDING), refresh_s=30.0, max_backoff_s=30.0, clock=lambda: RECORDED_NOW
    )


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_z_gives_every_pane_the_whole_screen(size):
    """At 80x24 `z` on the loss chart left it 8 rows high between two hatched bands (the compact
    slot's max-height held), and the runs table kept the short layout's 7 rows."""
    app = _app()
    async with app.run_test(size=size) as pilot:
        main = app.main
        await wait_for(pilot, lambda: main.polls >= 1, what="first poll")
        for pane in ("runs", "log", "loss", "tps", "gpus", "events"):
            if main.has_class("-compact"):
                while main.side_pane != pane and pane in ("loss", "tps", "gpus", "events"):
                    await pilot.press("v")
            widget = main.query_one(f"#{pane}")
            widget.focus()
            await pilot.press("z")
            await pilot.pause()
            assert main.maximized is widget, pane
            # the whole screen but the footer's row
            assert (widget.outer_size.width, widget.outer_size.height) == (size[0], size[1] - 1), pane
            await pilot.press("z")
            await pilot.pause()
            assert main.maximized is None


def rows(app) -> list[str]:
    """The screen as the terminal shows it, one string per row."""
    return ["".join(s.text for s in strip) for strip in app.screen._compositor.render_strips()]


async def test_footer_keys_are_whole_and_help_and_quit_always_show():
    """At 80 columns the footer lost `l`, `g`, `? help` and `q quit` and ended `f follo▏^p palettem`;
    at 120 `q quit` read `q`. Now `?` and `q` come first, no key is cut, and 120 shows every key."""
    app = _app()
    shown_keys = [b for b in app.main.BINDINGS if b.show]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.main.polls >= 1, what="first poll")
        for size in ((120, 40), (80, 24), (120, 40)):  # and back: the footer follows a resize
            await pilot.resize_terminal(*size)
            await pilot.pause(0.3)
            footer = rows(app)[-1]
            assert footer.split()[:4] == ["?", "help", "q", "quit"], (size, footer)
            assert footer.rstrip().endswith("▏^p palette"), (size, footer)
            body = footer.split("▏")[0]
            shown = [b for b in shown_keys if f" {b.description} " in f" {body} "]
            # what shows is a whole prefix of the bindings: nothing cut mid-word, nothing skipped
            assert (
                body.split() == " ".join(f"{app.get_key_display(b)} {b.description}" for b in shown).split()
            ), (size, footer)
            assert shown == shown_keys[: len(shown)]
            if size[0] == 120:
                assert shown == shown_keys, footer
            else:
                assert [b.key for b in shown] == ["question_mark", "q", "k", "r", "t", "g", "slash"], footer


async def test_a_column_change_keeps_the_selected_runs_log():
    """When the runs table's columns change (a resize, or a run turning lost or killed widens a cell),
    the table is rebuilt and its cursor passes row 0 on the way back: the dashboard selected that run
    and then the old one again, so the log pane was emptied and re-read (its rank filter, scroll and
    search gone; a lost run's last lines gone, since they cannot be read again)."""
    from launcher.dashboard.widgets.log_view import LogView
    from launcher.dashboard.widgets.runs_table import RunsTable
    from tests.dashboard.helpers import select_run

    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        main = app.main
        await select_run(pilot, app, "tiny-failed")
        log = main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) > 10, what="the log of tiny-failed")
        await pilot.press("l")
        assert log.rank_filter == 0
        lines = list(log.view)
        table = main.query_one(RunsTable)
        before = table.shown
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.5)
        assert table.shown != before  # the columns were rebuilt
        assert main.selected == "tiny-failed" and table.selected_run() == "tiny-failed"
        assert log.run_id == "tiny-failed" and log.rank_filter == 0, log.border_title
        assert list(log.view) == lines


async def test_a_new_run_appears_where_its_status_puts_it():
    """Runs are listed newest first, but a run started while the dashboard was open was added at the
    bottom: at 80x24 (four rows before the table scrolls) `1 starting` showed in the top bar and the
    run itself was out of sight until a later rebuild put it first."""
    from launcher.dashboard.widgets.runs_table import RunsTable

    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.main.polls >= 1, what="first poll")
        table = app.main.query_one(RunsTable)
        statuses = list(table.statuses)
        newest = {**statuses[0], "run": "new-run", "state": "starting", "step": 0}
        table.move_cursor(row=table.get_row_index("tiny-failed"))
        await pilot.pause()
        table.show([newest, *statuses])
        await pilot.pause()
        assert [k.value for k in table.rows] == ["new-run", *(str(s["run"]) for s in statuses)]
        assert table.selected_run() == "tiny-failed"  # the cursor stays on the run it was on


async def test_gpu_processes_show_the_highlighted_command_whole_at_80x24():
    """`g` at 80x24 cut each command to 14 characters ("/home/ubuntu/nsa-launch/.venv/b"); at 120 it
    ended before the --config that names the run. The highlighted process's command shows whole."""
    import json

    from launcher.dashboard.screens.gpu_procs import GpuProcsScreen
    from tests.dashboard.helpers import select_run

    procs = json.loads((RECORDING / "gpu_processes" / "m7c-2xa100.json").read_text())
    procs = procs["rows"]
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await select_run(pilot, app, "m7c-2xa100")
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuProcsScreen) and app.screen.rows, what="rows")
        for row in procs[:2]:
            await pilot.pause(0.2)
            flat = "".join(r.strip("│█ ▀▄") for r in rows(app)).replace(" ", "")
            assert f"pid{row['pid']}:{row['command'].replace(' ', '')}" in flat, (row, flat)
            await pilot.press("down")


async def test_r_while_the_run_is_restarting_does_not_restart_it_again(monkeypatch):
    """A restart takes seconds to minutes (kill, resume, first heartbeat); a second `r` + `y` meanwhile
    started a second restart of the same run, which killed the first one's fresh start (or waited on its
    lock and failed). It now says the restart is under way and asks nothing."""
    import threading

    from launcher.dashboard.screens.confirm import ConfirmScreen
    from tests.dashboard.helpers import notifications, select_run

    app = _app()
    backend = app.backend
    release = threading.Event()
    restart = backend.restart

    def slow_restart(run):  # the real one waits for the first heartbeat of the resumed run
        release.wait(10)
        return restart(run)

    monkeypatch.setattr(backend, "restart", slow_restart)
    async with app.run_test(size=(120, 40)) as pilot:
        await select_run(pilot, app, "tiny-failed")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the restart question")
        await pilot.press("y")
        await wait_for(pilot, lambda: "tiny-failed" in app.main.restarting, what="restarting")
        await pilot.press("r")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("already being restarted" in m for m in notifications(app)), notifications(app)
        release.set()
        await wait_for(pilot, lambda: "tiny-failed" not in app.main.restarting, what="the restart done")
        assert backend.calls.count(("restart", "tiny-failed")) == 1, backend.calls
