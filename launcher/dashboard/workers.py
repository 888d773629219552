"""Plumbing between blocking backend calls and the UI: daemon-thread awaits and the log inbox.

This module owns how a blocking call (an SSH exec, a `tail -F` over SSH) runs without holding the UI
or the exit hostage. Textual's thread workers run on asyncio's default executor, which
`asyncio.run` joins at exit: one call stuck on a dead TCP connection would freeze `q`. So the app's
workers are async (named, exclusive groups, cancelled at once) and await the blocking part in a
daemon thread from here; an abandoned call finishes or dies with the process. Nothing here touches a
widget: results come back as awaited values, and log lines go into a bounded `LogInbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def _settle(fut: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if fut.done():  # the awaiting worker was cancelled; nobody wants the result
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


async def in_daemon_thread(fn: Callable[..., T], *args: Any, name: str = "dashboard-call") -> T:
    """Run `fn(*args)` in a fresh daemon thread and await its result without blocking the loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def target() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = fn(*args)
        except BaseException as e:
            error = e
        with contextlib.suppress(RuntimeError):  # loop closed: the app has exited
            loop.call_soon_threadsafe(_settle, fut, value, error)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await fut


class LogInbox:
    """Lines read by the pump thread, waiting for the UI; bounded, so a flood cannot grow memory.

    `put` says whether a wake-up message must be posted: only the first line after a drain asks
    for one, so at most one wake-up is ever in flight however fast lines arrive.
    """

    def __init__(self, capacity: int):
        self._lines: deque[str] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._awake = False
        self.overflowed = 0

    def put(self, line: str) -> bool:
        with self._lock:
            if len(self._lines) == self._lines.maxlen:
                self.overflowed += 1
            self._lines.append(line)
            if self._awake:
                return False
            self._awake = True
            return True

    def drain(self) -> list[str]:
        with self._lock:
            out = list(self._lines)
            self._lines.clear()
            self._awake = False
            return out


def pump_log(
    lines: Iterator[str],
    inbox: LogInbox,
    stop: threading.Event,
    wake: Callable[[], None],
) -> None:
    """Move lines from a (blocking) log iterator into `inbox` until it ends or `stop` is set."""
    for line in lines:
        if stop.is_set():
            break
        if inbox.put(line):
            wake()
    close = getattr(lines, "close", None)
    if close is not None:
        close()


class Backoff:
    """Retry delays for an unreachable host: base, 2x, 4x ... capped; `reset` once it answers."""

    def __init__(self, base: float, cap: float):
        self.base, self.cap = base, cap
        self.failures = 0

    def next_delay(self, healthy: bool) -> float:
        if healthy:
            self.failures = 0
            return self.base
        self.failures += 1
        return min(self.base * 2**self.failures, self.cap)
