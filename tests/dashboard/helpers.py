"""Shared pieces of the dashboard tests: where the recording is, its fixed clock, a bounded wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

RECORDING = Path(__file__).parent / "recorded"
RECORDED_NOW = 1795317763.1  # the snapshots' "time": ages on screen stay what the recording says


async def wait_for(pilot, cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Let the app run until `cond()` holds; fail naming `what` after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or cond}")
        await pilot.pause(0.02)


async def select_run(pilot, app, run: str) -> None:
    """After the first status poll, move the runs table's cursor to `run` and wait until it is selected."""
    from launcher.dashboard.widgets.runs_table import RunsTable

    await wait_for(pilot, lambda: app.main.polls >= 1, what="first status poll")
    table = app.main.query_one(RunsTable)
    table.move_cursor(row=table.get_row_index(run))
    await wait_for(pilot, lambda: app.main.selected == run, what=f"selection of {run}")


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications]


def plain(widget) -> str:
    """What a Static widget shows, as plain text (tables included)."""
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(widget.content)
    return console.export_text()
