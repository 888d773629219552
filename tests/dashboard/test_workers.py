"""Worker plumbing: daemon-thread awaits never block the loop, the log inbox is bounded and wakes
once per drain, and backoff doubles up to its cap and resets when the host answers."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from launcher.dashboard.workers import Backoff, LogInbox, in_daemon_thread, pump_log


async def test_in_daemon_thread_returns_value_and_raises_error():
    assert await in_daemon_thread(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(ZeroDivisionError):
        await in_daemon_thread(lambda: 1 / 0)


async def test_a_stuck_call_does_not_block_the_loop_and_can_be_abandoned():
    release = threading.Event()
    task = asyncio.ensure_future(in_daemon_thread(release.wait, name="stuck"))
    t0 = time.monotonic()
    await asyncio.sleep(0.05)  # the loop keeps running while the call is stuck
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - t0 < 1.0
    stuck = [t for t in threading.enumerate() if t.name == "stuck"]
    assert stuck and all(t.daemon for t in stuck)  # cannot hold the interpreter's exit
    release.set()


def test_inbox_is_bounded_and_asks_for_one_wakeup_per_drain():
    inbox = LogInbox(capacity=5)
    wakes = [inbox.put(f"l{i}") for i in range(12)]
    assert wakes == [True] + [False] * 11
    assert inbox.overflowed == 7
    assert inbox.drain() == [f"l{i}" for i in range(7, 12)]
    assert inbox.put("next") is True  # after a drain the next line wakes the UI again


def test_pump_moves_lines_until_stop():
    inbox, stop, woken = LogInbox(100), threading.Event(), []

    def lines():
        for i in range(10):
            if i == 4:
                stop.set()
            yield f"line {i}"

    pump_log(lines(), inbox, stop, lambda: woken.append(1))
    assert inbox.drain() == ["line 0", "line 1", "line 2", "line 3"]
    assert woken == [1]


def test_backoff_doubles_to_the_cap_and_resets():
    b = Backoff(1.0, 8.0)
    assert [b.next_delay(False) for _ in range(5)] == [2.0, 4.0, 8.0, 8.0, 8.0]
    assert b.next_delay(True) == 1.0 and b.failures == 0
