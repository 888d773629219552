"""The messages workers post to the app. Workers never touch widgets; they post one of these.

Each message is a small dataclass. The high-rate ones (`StatusUpdated`, `MetricsUpdated`,
`LogArrived`) declare `can_replace`, so when the UI falls behind only the newest one is handled: a
newer status snapshot supersedes an older one, and `LogArrived` is only a wake-up whose handler drains
the bounded log inbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message


@dataclass
class StatusUpdated(Message):
    """A fresh snapshot of every run shown (one dict per run, as `fetch_status` returns them)."""

    statuses: list[dict[str, Any]]
    error: str | None = None
    next_poll_s: float = 1.0
    # run -> (its open tunnel when the poll asked, whether that one answered)
    tunnels_alive: dict[str, tuple[Any, bool]] = field(default_factory=dict)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StatusUpdated)


@dataclass
class PollFailed(Message):
    """The snapshot itself could not be taken (not one host: the whole call raised)."""

    error: str
    next_poll_s: float


@dataclass
class MetricsUpdated(Message):
    """The metric history (metrics.jsonl records) of one run."""

    run: str
    records: list[dict[str, Any]] = field(default_factory=list)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MetricsUpdated) and message.run == self.run


@dataclass
class LogArrived(Message):
    """New lines wait in the log inbox of `run` (a wake-up; the handler drains the inbox)."""

    run: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LogArrived) and message.run == self.run


@dataclass
class LogEnded(Message):
    """The log stream of `run` ended (run over, or the stream broke: `error` says which)."""

    run: str
    error: str | None = None


@dataclass
class ActionDone(Message):
    """A kill / restart / tunnel action finished; `ok` False carries the reason in `message`."""

    action: str
    run: str
    ok: bool
    message: str
    new_run: str | None = None
    url: str | None = None
    handle: Any = None  # the opened Tunnel, kept by the screen so `t` can close it
    billing: str | None = None  # a kill of a run on a rented pod: the pod bills on, and what ends it


@dataclass
class WatchNote(Message):
    """What the dashboard's watch did (a pull, a pull that failed, a lost host being replaced)."""

    text: str
    error: bool = False
