"""The GPU suite's clock: the budget of each mode, the sections' shares of it, and the time each item
is expected to take.

Owns `Suite` (the suite.json being written, and the clock), `BUDGET` / `SHARE`, `Item` and `Items`
(a section's items run in order while each one's estimate fits in what is left of the section; the
rest are listed in `skipped_for_time`, each one run is timed beside its estimate), and the estimates,
taken from the seconds the GPU runs measured (H100 and H200, triton 3.6, 2026-11-26; bench/gpu/,
docs/gpu-suite.md "Time budget"). It runs nothing on a GPU and imports no torch, so the budget of
every mode is checked on CPU (tests/unit/attention/test_gpusuite_budget.py).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = 2
SECTIONS = ("env", "numerics", "determinism", "sanitizer", "speed", "train")
LETTER = dict(zip(SECTIONS, "abcdef"))
# Wall-clock budgets (seconds) of the whole run, per mode (the 8 min / 3 min on one H100).
BUDGET = {"full": 480.0, "quick": 180.0, "interpret": 600.0}
# Weights, not fixed slices: a section starting gets what is left of the budget x its share / the
# shares of the chosen sections still to run (itself included). So what one section leaves unused
# goes to those after it, and `--only` runs split the whole budget among themselves. Set from the
# first GPU run (H100, --quick: env 0.3 s, numerics 27.1 s for 2 of 4 shapes, determinism 0.1 s,
# train 52.3 s for the compiled pair; the full speed grid 72.6 s) and the estimates below: --quick
# expects numerics ~46 s, speed ~26 s (2 of its 3 records: the paper's 32k is cut, its first record's
# compiles), train ~105 s (its three runs' measured seconds; the train
# section is last, so it gets all that the others leave; docs/gpu-suite.md "Time budget").
# --quick leaves the sanitizer out (memcheck 19.3 s on the 2026-11-26c H100, racecheck not measured;
# estimated at a minute) for the training runs. The full run's speed share, 0.23, fits the whole grid
# at the estimates below (107 s; 0.17 cut the paper shape's 32k and 64k, the targets' lengths).
SHARE = {
    "full": {"env": 0.01, "numerics": 0.38, "determinism": 0.01, "sanitizer": 0.13, "speed": 0.23, "train": 0.24},
    "quick": {"env": 0.01, "numerics": 0.33, "determinism": 0.01, "sanitizer": 0.0, "speed": 0.2, "train": 0.45},
}  # fmt: skip

# ----------------------------------------------------------------------------------- estimates
# Numerics, per (G, D, T, dtype) item: its first (G, D, dtype) compiles the ~17 triton kernels cold
# (the first run's two such items at T 1k and the NSAAttention check took 27.1 s together), then the
# kernels and their float64 reference cost ~1 s at 1k, growing with T^2 (the exact scores).
NUMERICS_COMPILE_S = 12.0
NUMERICS_MODULE_S = 2.0
# Speed, per (shape, T) record: making the inputs (B*T = 64k tokens, on the CPU's generator), then
# `iters + 4` rounds of NSA fwd, fwd+bwd and both SDPA backends' fwd, fwd+bwd (warm-up, timed, the
# profiled pass, SDPA's probe), and for the first record of a shape in the process the compiles (NSA's
# Triton kernels at that shape's G and D, SDPA's first calls, the profiler's start). Fitted to the
# per-item seconds of every suite run that recorded them (2026-11-26 H200 x 4, 2026-11-26b H200 x 2
# with a --quick one, 2026-11-26c H100; bench/gpu/*speed*.json "items"), as the upper envelope, like
# the training estimates: the later records, all timed at 9 rounds, lie under setup + 9 b T/64k (m7c
# at most 1.5 / 1.6 / 1.8 / 2.5 s at 8k / 16k / 32k / 64k, paper 8.8 / 8.7 / 12.9 / 18.4 s), so the
# runs cannot tell a fixed cost from a per-round one and the intercept is all setup (the --quick
# run's m7c 32k, 7 rounds, took 1.7 s: estimated 1.8); the first record of a shape took 5.4-23.7 s
# (m7c, 2k; the 2026-11-26c H100 10.3) and 5.4-25.5 s (paper, at 2k or the --quick 32k; the H100 24.0)
# where the old estimates said 2.3-12.4, so `SPEED_FIRST_S` is the largest excess over the later
# records' line, rounded up: m7c 22.3 s (2026-11-26b H200, 23.7 s at 2k), paper 16.3 s (2026-11-26c
# H100, 24.0 s).
# The full grid is estimated at 107 s (the runs took 62.0-90.6 s).
SPEED_SETUP_S = {"m7c": 1.4, "paper_G16_D128": 7.4}
SPEED_ROUND_S = {"m7c": (0.0, 0.128), "paper_G16_D128": (0.0, 1.30)}
SPEED_FIRST_S = {"m7c": 22.4, "paper_G16_D128": 16.4}
# Training, per run: the process start and its first step (where torch.compile's inductor and, for
# NSA, the Triton kernels compile), then the steps, the largest seconds any GPU run measured for that
# kind of run (bench/gpu/). Keys are (attention, seq_len, compiled); each run makes 16,384 tokens a
# step but the 64k one (65,536).
#   dense 2048 compiled: 35.8 s for 12 steps (H100, 2026-11-26c: 12.1 s process start, first step
#     14.6 s, then 40-44 ms); the H200 run of 2026-11-26b took 23.0 s.
#   nsa 2048 compiled: the 2026-11-26c H100 run logged step 9 of 12 at ~54 s (first step 35.9 s,
#     steps 2-9 0.97 s, median 118 ms) and was killed there by the budget (its estimate was 28 s);
#     42.3 s for 12 steps on the 2026-11-26b H200.
#   dense / nsa 2048 eager (activation checkpointing full): 10.2 s / 13.4 s for 12 steps, 72 / 187 ms
#     a step (H200, 2026-11-26b; no H100 run has measured them yet).
#   nsa 65536 eager (full): 17.5 s for 6 steps, median 0.81 s a step (H200, 2026-11-26b).
# So start = seconds - (steps - 1) x step. Not measured yet: checkpointing none eager and full compiled
# (taken as the measured setting of the same attention and compile: start as measured, the step the
# slower of the two), and seq 8192 (the 2048 figures with the step doubled: a step is ~1 % of a run).
TRAIN_START_S = {("dense", 2048, True): 35.3, ("nsa", 2048, True): 53.0, ("dense", 2048, False): 9.4,
                 ("nsa", 2048, False): 11.3, ("nsa", 65536, False): 13.5}  # fmt: skip
TRAIN_STEP_S = {("dense", 2048, True): 0.042, ("nsa", 2048, True): 0.118, ("dense", 2048, False): 0.072,
                ("nsa", 2048, False): 0.187, ("nsa", 65536, False): 0.81}  # fmt: skip
SANITIZER_TOOL_S = 30.0  # each of memcheck / racecheck over smoke.py: memcheck 19.3 s (H100, 2026-11-26c)
ONE_ITEM_S = {"env": 0.3, "determinism": 0.1}  # the sections that are one item: the first run's seconds


def numerics_estimate(first_of_its_kernels: bool, T: int) -> float:
    return (NUMERICS_COMPILE_S if first_of_its_kernels else 0.0) + 1.0 + 2.0 * (T / 8192) ** 2


def speed_estimate(shape: str, T: int, iters: int, first: bool = False) -> float:
    """Seconds of one speed record; `first`: the first record of its shape in the process (compiles)."""
    a, b = SPEED_ROUND_S[shape]
    return (SPEED_FIRST_S[shape] if first else 0.0) + SPEED_SETUP_S[shape] + (iters + 4) * (a + b * T / 65536)


def train_start_s(attention: str, seq: int, compiled: bool) -> float:
    """Seconds from the process start to the end of the run's first step (`TRAIN_START_S`; a length
    not measured takes the 2048 run's)."""
    return TRAIN_START_S.get((attention, seq, compiled), TRAIN_START_S[(attention, 2048, compiled)])


def train_step_s(attention: str, seq: int, compiled: bool) -> float:
    if (attention, seq, compiled) in TRAIN_STEP_S:
        return TRAIN_STEP_S[(attention, seq, compiled)]
    eager = TRAIN_STEP_S[(attention, 2048, False)]  # the slower of the measured settings
    return max(eager, TRAIN_STEP_S[(attention, 2048, compiled)]) * (2.0 if seq > 2048 else 1.0)


def train_estimate(attention: str, seq: int, compiled: bool, steps: int) -> float:
    start, step = train_start_s(attention, seq, compiled), train_step_s(attention, seq, compiled)
    return round(start + (steps - 1) * step, 1)


# --------------------------------------------------------------------------------------- clock
class Suite:
    """The JSON document being written (to out_dir; None: nowhere), and the clock (a callable
    returning seconds: `simulate` and the tests pass their own)."""

    def __init__(self, out_dir: Path | None, mode: str, budget: float, sections: tuple[str, ...] = SECTIONS,
                 clock: Callable[[], float] = time.monotonic, command: str | None = None) -> None:  # fmt: skip
        self.out_dir, self.mode, self.clock = out_dir, mode, clock
        self.t0 = clock()
        self.budget = budget
        self.section_end = self.t0 + budget
        self.pending = [s for s in SECTIONS if s in sections]
        self.doc: dict = {
            "schema": SCHEMA,
            "mode": mode,
            "command": command or shlex.join(["python", "-m", "nsa.attention.gpusuite", *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": budget,
            "sections": {},
        }
        self.write()

    def share(self, name: str) -> float:
        return SHARE[self.mode][name] if self.mode in SHARE else 1.0

    def left(self) -> float:
        """Seconds left to the running section: its share of what is left, or less near the end."""
        now = self.clock()
        return min(self.budget - (now - self.t0), self.section_end - now)

    def fits(self, estimate_s: float) -> bool:
        return estimate_s <= self.left()

    def start_section(self, name: str) -> float:
        """Give `name` its share of what is left; return its seconds."""
        weights = [self.share(s) for s in self.pending if s != name] + [self.share(name)]
        self.pending = [s for s in self.pending if s != name]
        now = self.clock()
        total_left = self.budget - (now - self.t0)
        if self.mode not in SHARE:  # CI's rehearsal: every section may use all that is left
            allot = total_left
        else:
            allot = total_left * self.share(name) / sum(weights) if sum(weights) > 0 else 0.0
        self.section_end = now + allot
        return allot

    def write(self) -> None:
        if self.out_dir is None:  # a dry run (`simulate`) writes nothing
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.out_dir / "suite.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        os.replace(tmp, self.out_dir / "suite.json")

    def record(self, name: str, result: dict, seconds: float) -> None:
        result = {"section": f"{LETTER[name]}) {name}", **result, "seconds": round(seconds, 1)}
        self.doc["sections"][name] = result
        self.doc["elapsed_s"] = round(self.clock() - self.t0, 1)
        self.write()


@dataclass
class Item:
    """One unit of a section's work: a label for the record, its expected seconds, what to run."""

    label: str
    estimate_s: float
    spec: Any = None


@dataclass
class Items:
    """Iterating yields the items whose estimate fits in what is left, in order; the others go to
    `skipped`, and each item run is timed into `timing` (beside its estimate, for the next tuning)."""

    suite: Suite
    items: list[Item]
    skipped: list[str] = field(default_factory=list)
    timing: list[dict] = field(default_factory=list)

    def __iter__(self) -> Iterator[Item]:
        for it in self.items:
            if not self.suite.fits(it.estimate_s):
                self.skipped.append(it.label)
                continue
            t = self.suite.clock()
            yield it
            self.timing.append({"item": it.label, "estimate_s": round(it.estimate_s, 1),
                                "seconds": round(self.suite.clock() - t, 1)})  # fmt: skip

    def fields(self) -> dict:
        return {"skipped_for_time": self.skipped, "items": self.timing}


def all_skipped(res: dict) -> dict:
    """A section that ran none of its items for lack of time is skipped (ok null), never failed."""
    ran = res.get("items") or res.get("records")
    if res.get("ok") is not None and res.get("skipped_for_time") and not ran:
        n = len(res["skipped_for_time"])
        return {**res, "ok": None, "skipped": f"time budget: all {n} item(s) skipped for time"}
    return res


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def simulate(mode: str, budget: float, sections: tuple[str, ...], items_of: Callable[[str], list[Item]],
             scale: float = 1.0) -> dict:  # fmt: skip
    """A dry run: the real shares and `Items` on a clock that advances by each item's estimate x
    scale, as a GPU run would if the estimates held. Per section: its allotment, the items it would
    run and skip, its estimated seconds; and the run's. No GPU, nothing written."""
    clock = _Clock()
    suite = Suite(None, mode, budget, sections, clock=clock, command="simulate")
    out: dict[str, Any] = {"mode": mode, "budget_s": budget, "scale": scale, "sections": {}}
    for name in [s for s in SECTIONS if s in sections]:
        t, allot = clock.t, suite.start_section(name)
        if suite.share(name) == 0:
            out["sections"][name] = {"skipped": f"not run by --{mode}"}
            continue
        items = Items(suite, items_of(name))
        for it in items:
            clock.t += it.estimate_s * scale
        out["sections"][name] = {"allot_s": round(allot, 1), "estimate_s": round(clock.t - t, 1),
                                 "ran": [i["item"] for i in items.timing], "skipped_for_time": items.skipped}  # fmt: skip
    out["estimate_s"] = round(clock.t, 1)
    return out
