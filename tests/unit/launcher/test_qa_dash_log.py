"""QA of the log pane with what real logs hold (qadash, 2026-11-27): ANSI colours (wandb, tqdm), tabs,
NUL and other control bytes, and wide characters (CJK, emoji). The recording (tests/dashboard/recorded)
is copied and its finished run's train.log gets these lines; the dashboard streams them as it does any
log, at 80x24."""

from __future__ import annotations

import shutil

from rich.cells import cell_len

from launcher.dashboard import make_app
from launcher.dashboard.recorded import RecordedBackend
from launcher.dashboard.widgets.log_view import LogView
from tests.dashboard.helpers import RECORDED_NOW, RECORDING, wait_for

CJK = "日本語のログ行" * 20  # 140 characters, 280 cells: 4 rows of 78, not 2
ANSI = "\x1b[34m\x1b[1mwandb\x1b[0m: syncing run \x1b]8;;https://wandb.ai/x\x1b\\link\x1b]8;;\x1b\\ done"
ODD = "tab\there nul\x00 bell\x07 del\x7f csi\x9b end"


def rows(app) -> list[str]:
    return ["".join(s.text for s in strip) for strip in app.screen._compositor.render_strips()]


async def test_control_bytes_never_reach_the_terminal_and_wide_lines_wrap_whole(tmp_path):
    """An ESC in a log line went to the terminal as it was (`\\x1b[34m` recoloured what followed; `\\x1b[2J`
    would clear it), a tab moved the cursor past the pane's border, and a CJK line wrapped by characters,
    not cells: half of each row ran past the border and was lost."""
    rec = tmp_path / "recorded"
    shutil.copytree(RECORDING, rec)
    with (rec / "rundirs" / "tiny-cpu-120" / "train.log").open("a") as f:
        f.write(f"[rank0]:{ANSI}\n[rank0]:{ODD}\n[rank0]:{CJK}\n[rank0]:last line\n")
    app = make_app(RecordedBackend(rec), refresh_s=30.0, max_backoff_s=30.0, clock=lambda: RECORDED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main
        log = main.query_one(LogView)
        await wait_for(pilot, lambda: len(log.view) and log.view[-1].text == "[rank0]:last line", what="log")
        await pilot.pause(0.2)
        screen = rows(app)
        for row in screen:
            assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in row), repr(row)
            assert cell_len(row) == 80, repr(row)  # nothing pushed past the border
        shown = [ln.text for ln in log.view][-4:]
        assert shown[0] == "[rank0]:wandb: syncing run link done"  # the words, without the colours
        assert shown[1].startswith("[rank0]:tab     here nul\ufffd bell\ufffd")  # tab: spaces to col 16
        # every character of the wide line is on screen, in order, across its rows
        inside = "".join(r[1:-1].rstrip(" ▁▂▃▄▅▆▇█") for r in screen if "日" in r or "ロ" in r)
        assert CJK in inside.replace(" ", ""), inside
        # no wrap: the sideways scroll reaches the end of the wide line
        await pilot.press("w")
        assert log.virtual_size.width >= cell_len("[rank0]:" + CJK)


async def test_run_text_outside_the_log_pane_carries_no_control_either(tmp_path):
    """An exception message with colours (torch.compile's, triton's) reached the terminal through the
    events pane (`message=\\x1b[1mboom`) and through notifications of host errors."""
    import json

    from launcher.dashboard.widgets.events_list import EventsList
    from tests.dashboard.helpers import select_run

    rec = tmp_path / "recorded"
    shutil.copytree(RECORDING, rec)
    status = json.loads((rec / "status.json").read_text())
    for snap in status["snapshots"]:
        for st in snap:
            for ev in st.get("events") or []:
                ev["detail"] = {"message": "\x1b[1mboom\x1b[0m\tat\x00 step"}
    (rec / "status.json").write_text(json.dumps(status))
    app = make_app(RecordedBackend(rec), refresh_s=30.0, max_backoff_s=30.0, clock=lambda: RECORDED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await select_run(pilot, app, "tiny-failed")
        while not app.main.query_one(EventsList).has_class("-shown"):
            await pilot.press("v")
        await pilot.pause(0.2)
        screen = rows(app)
        assert any("message=boom    at\ufffd step" in r for r in screen), screen
        assert not [r for r in screen if any(ord(c) < 32 for c in r)]
        app.notify("kill failed: \x1b[31mcannot reach\x1b[0m h\n  fix: check the host", markup=False)
        await pilot.pause()
        assert list(app._notifications)[-1].message == "kill failed: cannot reach h\n  fix: check the host"


async def test_the_kill_question_of_a_rented_run_says_the_pod_bills_on(tmp_path):
    """`k` on a run on a pod `up --provision` rented asked only "Kill run R on HOST?": the pod billing
    on was said after the kill (a 60 s toast). The question says it first, with what ends it."""
    import json

    from rich.text import Text

    from launcher.dashboard.screens.confirm import ConfirmScreen
    from tests.dashboard.helpers import select_run

    rec = tmp_path / "recorded"
    shutil.copytree(RECORDING, rec)
    status = json.loads((rec / "status.json").read_text())
    for snap in status["snapshots"]:
        for st in snap:
            if st["run"] == "m7c-2xa100":
                st["pod_id"] = "pod-1234"
    (rec / "status.json").write_text(json.dumps(status))
    app = make_app(RecordedBackend(rec), refresh_s=30.0, max_backoff_s=30.0, clock=lambda: RECORDED_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        for run, billed in (("m7c-2xa100", True), ("tiny-cpu-120", False)):
            await select_run(pilot, app, run)
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the kill question")
            text = Text.from_markup(app.screen.question).plain  # what the modal shows, unwrapped
            said = "pod pod-1234 keeps billing" in text and f"nsa-launch pods down {run}" in text
            assert said == billed, text
            await pilot.press("n")
            await wait_for(pilot, lambda: app.screen is app.main, what="the question closed")
