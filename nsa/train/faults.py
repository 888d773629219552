"""Fault injection for tests of the failure paths: NSA_FAULT=<kind>[:step=N][:rank=R].

Kinds: `stall` (the rank stops making progress at step N, as a hung collective or data source
would), `nan` (the loss of step N becomes NaN), `kill` (the rank SIGKILLs itself before step N, an
honest interruption for resume tests), `ckpt` (the rank's write of the checkpoint of step N fails
with an OSError after its first file, as a full or failing disk would), `pace` (from step N on, each
step takes at least `ms` milliseconds, default 250, the rest slept: a run the tests keep going while
they act on it leaves the CPU to the rest of the suite instead of training two ranks flat out).
Without `rank`, every rank is hit; without `step`, step 1.
`:once` fires only the first time in a run dir (a marker file `.fault-<kind>-step<N>-rank<R>`), so a
run that resumes past the fault recovers instead of hitting it again (the launcher's restart tests).
`kill:...:rank=R:ordered`: the other ranks wait at step N's start (at most KILL_WAIT_S) for the
SIGTERM torchrun sends them once it sees rank R dead, and only then run into the dead peer in the
step's all-reduce, so the order is fixed: kill, SIGTERM (`sigterm` event; a run that saves goes on
to its step boundary), gloo error (`error` event, exit 1). Without it a SIGTERM may land while a
survivor records its gloo error, after the loop disarmed the save, and end it with only the `sigterm`
event (one fresh clone of 2026-11-27 did: bench/RESULTS.md "suitetime3").
Owns parsing (a bad value is a clear error at boot, not a silently ignored variable) and firing.
It must do nothing at all when NSA_FAULT is unset: the fast path is the default path.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

KINDS = ("stall", "nan", "kill", "ckpt", "pace")
PACE_MS = 250  # `pace` without `ms`
# `kill:...:ordered`: a survivor's longest wait for torchrun's SIGTERM. Torchrun polls its ranks every
# 0.1 s (--monitor-interval) and sends it at once; the bound only keeps a run without torchrun going.
KILL_WAIT_S = 30.0


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int = 1
    rank: int | None = None
    once: bool = False
    ms: int = PACE_MS  # `pace` only
    ordered: bool = False  # `kill` of one rank only

    def hits(self, step: int, rank: int) -> bool:
        return step == self.step and (self.rank is None or self.rank == rank)

    def outlives(self, step: int, rank: int) -> bool:
        """`kill:...:ordered`: this rank survives the kill at `step` and waits for its SIGTERM first."""
        return self.ordered and step == self.step and self.rank is not None and self.rank != rank

    def arm(self, run_dir: str | os.PathLike[str], rank: int) -> bool:
        """True when the fault may fire now; with `once`, only for the first caller per run dir."""
        if not self.once:
            return True
        marker = os.path.join(run_dir, f".fault-{self.kind}-step{self.step}-rank{rank}")
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        return True


def parse_fault(text: str | None) -> Fault | None:
    """Parse NSA_FAULT; raises ValueError naming the variable, the value and the expected form."""
    if not text:
        return None
    form = (
        "expected NSA_FAULT=<stall|nan|kill|ckpt>[:step=N][:rank=R][:once], kill:step=N:rank=R:ordered "
        "or pace[:step=N][:rank=R][:ms=M], e.g. stall:step=3:rank=1"
    )
    kind, *opts = text.split(":")
    if kind not in KINDS:
        raise ValueError(f"NSA_FAULT={text!r}: unknown kind {kind!r}; {form}")
    fields: dict[str, int] = {}
    once = ordered = False
    for opt in opts:
        if opt == "once":
            once = True
            continue
        if opt == "ordered" and kind == "kill":
            ordered = True
            continue
        key, sep, val = opt.partition("=")
        keys = ("step", "rank", "ms") if kind == "pace" else ("step", "rank")
        if not sep or key not in keys or not val.isdigit():
            raise ValueError(f"NSA_FAULT={text!r}: bad option {opt!r}; {form}")
        fields[key] = int(val)
    if kind == "pace" and (once or fields.get("ms", PACE_MS) < 1):
        raise ValueError(f"NSA_FAULT={text!r}: pace takes no `once` and ms >= 1; {form}")
    # A survivor cannot tell whether a `once` kill fires in this attempt; with every rank killed, none waits.
    if ordered and (once or "rank" not in fields):
        raise ValueError(f"NSA_FAULT={text!r}: `ordered` needs one rank and no `once`; {form}")
    return Fault(
        kind,
        step=fields.get("step", 1),
        rank=fields.get("rank"),
        once=once,
        ms=fields.get("ms", PACE_MS),
        ordered=ordered,
    )


def fault_from_env() -> Fault | None:
    return parse_fault(os.environ.get("NSA_FAULT"))


class Pacer:
    """`pace`: sleeps at each step's start until `ms` have passed since the previous step's start."""

    def __init__(self, fault: Fault):
        self.fault = fault
        self.last: float | None = None

    def wait(self, step: int, rank: int) -> None:
        f = self.fault
        if step < f.step or (f.rank is not None and f.rank != rank):
            return
        now = time.monotonic()
        if self.last is not None:
            time.sleep(max(0.0, self.last + f.ms / 1000 - now))
        self.last = time.monotonic()


def stall_forever() -> None:
    """Stop making progress without exiting, as a rank stuck in a dead collective would."""
    while True:
        time.sleep(3600)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
