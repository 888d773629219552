"""nsa.train.trainer.CtrlC: Ctrl-C becomes the SIGTERM request, and an inherited ignored SIGINT stays
ignored (nohup, a background job of a script: nobody at that terminal meant to stop the run)."""

from __future__ import annotations

import os
import signal

from nsa.train.trainer import CtrlC


def test_ctrl_c_sends_this_process_sigterm_and_uninstall_restores_the_handler(monkeypatch) -> None:
    # Python's own handler, as a run started from a terminal has it: a suite run as a background job
    # (`.ci/run &`, nohup) inherits SIGINT ignored, which is the next test's case, and failed this one
    prior = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sent = []
        monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
        c = CtrlC(0).install()
        try:
            handler = signal.getsignal(signal.SIGINT)
            assert handler not in (signal.default_int_handler, signal.SIG_IGN, signal.SIG_DFL)
            handler(signal.SIGINT, None)
            handler(signal.SIGINT, None)  # torchrun's agent forwards a second one: the same request again
        finally:
            c.uninstall()
        assert sent == [(os.getpid(), signal.SIGTERM)] * 2
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, prior)


def test_an_ignored_sigint_stays_ignored() -> None:
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        c = CtrlC(0).install()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        c.uninstall()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
