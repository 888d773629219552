"""SIGTERM and SIGHUP taken as Ctrl-C while the launcher holds something a sudden death would leave
behind: a pod being rented (billing with no record), a replacement under way, an rsync copying into
the mirror.

Owns the one mechanism `up --provision`, `pods`, `watch` and `pull` use: the two signals raise
`Hangup` (a KeyboardInterrupt, "stopped by SIGTERM"), so the cleanup their Ctrl-C path runs (terminate
the pod, stop the rsync, remove its .tmp- copy) runs for a closed terminal, a `kill` or a container
stop too. Python takes signals on the main thread only: elsewhere (the dashboard's workers, a
watcher thread) it does nothing. This module must not import click or torch.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

HANGUPS = (signal.SIGTERM, signal.SIGHUP)


class Hangup(KeyboardInterrupt):
    """SIGTERM or SIGHUP handled as Ctrl-C; its text names the signal ("stopped by SIGTERM")."""


def hangups_as_interrupt() -> Callable[[], None]:
    """Install the handlers; returns the undo (a no-op off the main thread, where none was installed)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, _frame: object) -> None:
        raise Hangup(f"stopped by {signal.Signals(signum).name}")

    old = {s: signal.signal(s, interrupt) for s in HANGUPS}

    def undo() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return undo


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """`hangups_as_interrupt` for the duration of a `with` block."""
    undo = hangups_as_interrupt()
    try:
        yield
    finally:
        undo()
