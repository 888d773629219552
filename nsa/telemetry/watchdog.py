"""Nothing hangs silently: the per-rank stall watchdog, stack dumps, SIGUSR1 and SIGTERM handling.

Owns (1) a daemon thread per rank that, when the Recorder's progress clock has not moved for
`stall_seconds`, writes an all-thread stack dump into stacks/, appends a `stalled` event and, if
asked, exits the rank so torchrun tears the job down; (2) SIGUSR1 -> all-thread dump at any time
(faulthandler, so it works even while the main thread sits inside a C call such as a collective);
(3) SIGTERM -> a `sigterm` event, then either an immediate exit (boot, or no save armed) or, once
the trainer has armed it, a request to save at the next step boundary (`stop_requested`) bounded by
deadlines. It must never make the process unkillable: SIGTERM is acted on from a helper thread fed
by the C-level signal wakeup fd, and a deadline thread exits 143 without a checkpoint when the step
boundary is not reached within `boundary_wait_s` (a hung collective) or the save exceeds its total.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from nsa.runfiles import EXIT_SIGTERM, EXIT_STALLED, sigusr1_name, stack_dump_name
from nsa.telemetry.recorder import Recorder


def format_all_stacks() -> str:
    """Python stacks of every thread, named, innermost frame last."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"--- thread {names.get(ident, '?')} (ident {ident}) ---\n")
        parts.append("".join(traceback.format_stack(frame)))
    return "".join(parts)


def dump_stacks(stacks_dir: Path, rank: int, reason: str, recorder: Recorder | None = None) -> Path:
    """Write this rank's stacks to stacks/rank<N>-<reason>-<unix time>.txt and return the path."""
    stacks_dir.mkdir(parents=True, exist_ok=True)
    path = stacks_dir / stack_dump_name(rank, reason, time.time())
    header = f"rank {rank} pid {os.getpid()} host {socket.gethostname()} reason {reason}\n"
    if recorder is not None:
        header += (
            f"step {recorder.step} phase {recorder.phase} "
            f"seconds since progress {recorder.seconds_since_progress():.1f}\n"
        )
    with open(path, "w") as f:
        f.write(header + "\n" + format_all_stacks())
        f.write("\n--- faulthandler (C-level view, all threads) ---\n")
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
    return path


class Watchdog(threading.Thread):
    """Dumps stacks once per stall episode; a stall ends when the progress clock moves again."""

    def __init__(self, recorder: Recorder, stall_seconds: float, abort: bool):
        super().__init__(name=f"nsa-watchdog-rank{recorder.rank}", daemon=True)
        self.recorder = recorder
        self.stall_seconds = stall_seconds
        self.abort = abort
        self._stop_evt = threading.Event()
        self.poll_s = max(0.05, min(5.0, stall_seconds / 10))
        self.abort_grace_s = min(30.0, max(2.0, stall_seconds / 2))

    def run(self) -> None:
        dumped_for = None
        while not self._stop_evt.wait(self.poll_s):
            r = self.recorder
            idle = r.seconds_since_progress()
            if idle < self.stall_seconds or dumped_for == r.progress_time:
                continue
            dumped_for = r.progress_time
            path = dump_stacks(r.run_dir.stacks_dir, r.rank, "stalled", r)
            r.event(
                "stalled",
                all_ranks=True,
                phase=r.phase,
                idle_s=round(idle, 1),
                threshold_s=self.stall_seconds,
                stacks=str(path.relative_to(r.run_dir.root)),
                abort=self.abort,
                abort_in_s=self.abort_grace_s if self.abort else None,
            )
            print(
                f"[nsa] rank {r.rank}: no progress for {idle:.0f}s in phase {r.phase!r} at step {r.step}; "
                f"stacks in {path}"
                + (f"; aborting in {self.abort_grace_s:.0f}s unless it recovers" if self.abort else ""),
                file=sys.stderr,
                flush=True,
            )
            if self.abort and not self._progress_within(self.abort_grace_s, dumped_for):
                os._exit(EXIT_STALLED)

    def _progress_within(self, seconds: float, since: float) -> bool:
        # Peers blocked in a collective on the stalled rank stall a moment later; waiting a little
        # before exiting lets their watchdogs dump too (else the first to abort gets them killed
        # by torchrun before the rank that actually hung has written its stacks).
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self._stop_evt.wait(self.poll_s) or self.recorder.progress_time != since:
                return True
        return False

    def stop(self) -> None:
        self._stop_evt.set()


class SignalHandlers:
    """SIGUSR1 -> stacks/rank<N>-sigusr1.txt (appended); SIGTERM -> `sigterm` event + exit 143.

    Must be installed from the main thread.
    """

    def __init__(self, recorder: Recorder):
        self.recorder = recorder
        self.stop_requested = threading.Event()  # SIGTERM arrived while a save was armed
        self.saving = threading.Event()  # the trainer reached the step boundary and is saving
        self.save_deadline_s: float | None = None  # None: SIGTERM exits at once
        self.boundary_wait_s = 10.0  # the trainer raises it to a few step times as it learns them
        self._usr1_file: Any = None
        self._once = threading.Lock()
        self._wake_r: socket.socket | None = None

    def install(self) -> None:
        r = self.recorder
        r.run_dir.stacks_dir.mkdir(parents=True, exist_ok=True)
        self._usr1_file = open(r.run_dir.stacks_dir / sigusr1_name(r.rank), "a")  # noqa: SIM115
        faulthandler.register(signal.SIGUSR1, file=self._usr1_file, all_threads=True, chain=False)
        # The C handler writes the signal number to this socket at once, whatever the main thread is
        # doing; the helper thread below acts on it. The Python-level handler is the fallback path.
        self._wake_r, wake_w = socket.socketpair()
        wake_w.setblocking(False)
        self._wake_w = wake_w
        signal.signal(signal.SIGTERM, self._on_python_sigterm)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._wakeup_loop, name="nsa-sigterm", daemon=True).start()

    def _wakeup_loop(self) -> None:
        assert self._wake_r is not None
        while True:
            try:
                data = self._wake_r.recv(64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                self._terminate()

    def _on_python_sigterm(self, signum: int, frame: Any) -> None:
        self._terminate()

    def arm_save(self, deadline_s: float) -> None:
        """From now on SIGTERM asks for a checkpoint at the next step boundary, within `deadline_s`."""
        self.save_deadline_s = deadline_s

    def disarm(self) -> None:
        self.save_deadline_s = None

    def _terminate(self) -> None:
        # torchrun, the launcher's process-group kill and its per-PID kill may each deliver one.
        if not self._once.acquire(blocking=False):
            return
        deadline = self.save_deadline_s
        r = self.recorder
        # The step in progress, read and the stop requested before the event's file write, so the
        # event names the step the stop vote starts from (a slow disk must not shift it).
        at, phase = r.step, r.phase
        if deadline is not None:
            self.stop_requested.set()
        with contextlib.suppress(Exception):
            r.event(
                "sigterm",
                step=at,
                all_ranks=True,
                phase=phase,
                save=deadline is not None,
                deadline_s=deadline,
            )
            # A deliberate stop, told calmly (no traceback): what happens next and within how long.
            then = (
                f"saving at the next step boundary (within {deadline:.0f}s)"
                if deadline
                else "nothing to save yet; exiting"
            )
            print(
                f"[nsa] rank {r.rank}: stopping on SIGTERM at step {at}, {then}",
                file=sys.stderr,
                flush=True,
            )
        if deadline is None:
            os._exit(EXIT_SIGTERM)
        threading.Thread(
            target=self._deadline, args=(deadline,), name="nsa-sigterm-deadline", daemon=True
        ).start()

    def _deadline(self, total_s: float) -> None:
        t0 = time.monotonic()
        while True:
            time.sleep(0.1)
            waited = time.monotonic() - t0
            stuck = (
                not self.saving.is_set() and self.recorder.phase != "eval" and waited > self.boundary_wait_s
            )
            if stuck or waited > total_s:
                why = (
                    f"no step boundary within {self.boundary_wait_s:.0f}s (phase {self.recorder.phase!r})"
                    if stuck
                    else f"the save did not finish within NSA_TERM_SAVE_S={total_s:.0f}s"
                )
                with contextlib.suppress(Exception):
                    print(f"[nsa] rank {self.recorder.rank}: {why}; exiting without a checkpoint",
                          file=sys.stderr, flush=True)  # fmt: skip
                os._exit(EXIT_SIGTERM)

    def uninstall(self) -> None:
        with contextlib.suppress(Exception):
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            faulthandler.unregister(signal.SIGUSR1)
        if self._usr1_file is not None:
            self._usr1_file.close()
