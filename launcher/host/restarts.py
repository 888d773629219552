"""Recovery on the host: after torchrun fails, decide whether the wrapper restarts it, and record why.

The run's wrapper (wrapper.py) calls `python -m launcher.host.restarts RUN_DIR MAX EXIT_CODE` after
every failed torchrun and acts on the one word printed: `resume` (restart with --resume from the
newest intact checkpoint), `fresh` (restart without: no checkpoint yet) or `stop`. Each decision is
an event in events.jsonl: `restart` (attempt, max, exit code, cause, failed step, checkpoint) or
`restarts_stopped` (why: bad input, SIGTERM, budget spent, or a crash loop: the run failed again at
the step where the previous attempt failed, so restarting would only burn the budget). It runs with
no one connected; it must not start processes (the wrapper does) and never imports torch.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from nsa.runfiles import (
    EVENTS,
    EXIT_BAD_INPUT,
    EXIT_SIGTERM,
    RunDir,
    append_jsonl,
    failure_cause,
    iter_jsonl,
    read_tail,
    torchrun_root_cause,
)

RESTART, STOPPED = "restart", "restarts_stopped"
# Not worth restarting: the input is wrong, or someone asked the run to stop.
FINAL_CODES = {EXIT_BAD_INPUT: "bad input (exit 2): a restart would fail the same way", EXIT_SIGTERM: "SIGTERM (exit 143): the run was asked to stop"}  # fmt: skip


def launches(rd: RunDir) -> list[list[dict[str, Any]]]:
    """The run's `restart`, `restarts_stopped` and `boot` events split into launches: every launch the
    wrapper gave up on ends with its `restarts_stopped`; the last list is what came after the last
    stop (empty until a new launch, `nsa-launch restart` or `up --resume`, fails or boots)."""
    out: list[list[dict[str, Any]]] = [[]]
    for e in iter_jsonl(rd.root / EVENTS):
        if e.get("kind") in (RESTART, STOPPED, "boot"):
            out[-1].append(e)
            if e["kind"] == STOPPED:
                out.append([])
    return out


def _restarts(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in evs if e["kind"] == RESTART]


def current_launch(rd: RunDir) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The `restart` events of the run's current launch, and the `restarts_stopped` event that ended it
    (None while it goes on). A `boot` after the last stop belongs to a new launch, which has the whole
    budget again and shows no stale reason; until then status shows the stopped launch."""
    *ended, now = launches(rd)
    if ended and not any(e["kind"] == "boot" for e in now):
        return _restarts(ended[-1]), ended[-1][-1]
    return _restarts(now), None


def summary(rd: RunDir, max_restarts: int | None) -> dict[str, Any]:
    """The `restarts` key of status: count/max, each restart's cause, and why restarting stopped (the
    current launch's: see current_launch)."""
    done, stop = current_launch(rd)
    return {
        "count": len(done),
        "max": max_restarts,
        "causes": [
            {
                "attempt": (e.get("detail") or {}).get("attempt"),
                "step": e.get("step"),
                "time": e.get("time"),
                "cause": (e.get("detail") or {}).get("cause"),
            }
            for e in done
        ],
        "stopped": (stop.get("detail") or {}).get("reason") if stop else None,
    }


def failed_step(rd: RunDir) -> int:
    """Optimizer steps completed when the attempt failed: the newest heartbeat of any rank."""
    hbs = rd.heartbeats()
    return max((hb.step for hb in hbs.values()), default=0)


def decide(rd: RunDir, max_restarts: int, exit_code: int, now: float | None = None) -> str:
    """`resume`, `fresh` or `stop`; appends the matching event to events.jsonl."""
    now = time.time() if now is None else now
    step = failed_step(rd)
    cause = failure_cause(rd, exit_code) or f"exit code {exit_code}"
    prev = _restarts(launches(rd)[-1])  # this launch's: a launch after a stop has the whole budget
    root = torchrun_root_cause(read_tail(rd.train_log))
    rank_code = root["exitcode"] if root else None
    reason = None
    if rd.killed_file.exists() or rd.stop_requested_file.exists():
        reason = "killed by nsa-launch"
    elif exit_code in FINAL_CODES:
        reason = FINAL_CODES[exit_code]
    elif rank_code in FINAL_CODES:  # torchrun exits 1 whatever its first failing rank exited with
        reason = FINAL_CODES[rank_code].replace("(exit", f"(rank {root['rank']} exit")  # type: ignore[index]
    elif prev and prev[-1].get("step") == step:
        reason = (
            f"crash loop: attempt {len(prev) + 1} failed at step {step} again, as attempt {len(prev)} did "
            f"(restarts {len(prev)}/{max_restarts} used); restarting would fail the same way"
        )
    elif len(prev) >= max_restarts:
        reason = f"restart budget spent ({len(prev)}/{max_restarts})"
    if reason is not None:
        detail = {
            "reason": reason,
            "cause": cause,
            "exit_code": exit_code,
            "restarts": len(prev),
            "max": max_restarts,
        }
        if reason == "killed by nsa-launch":
            # A kill makes torchrun exit 1 with no rank to blame: "no rank said why" would read as a
            # crash. The kill is the whole story.
            detail["cause"] = reason
        append_jsonl(rd.events, {"kind": STOPPED, "time": now, "step": step, "rank": None, "detail": detail})
        return "stop"
    ckpt = rd.newest_intact_checkpoint()
    append_jsonl(
        rd.events,
        {"kind": RESTART, "time": now, "step": step, "rank": None,
         "detail": {"attempt": len(prev) + 1, "max": max_restarts, "exit_code": exit_code, "cause": cause,
                    "checkpoint": ckpt.name if ckpt else None}},
    )  # fmt: skip
    return "resume" if ckpt is not None else "fresh"


def main(argv: list[str]) -> int:
    run_dir, max_restarts, exit_code = argv[0], int(argv[1]), int(argv[2])
    print(decide(RunDir(run_dir), max_restarts, exit_code))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
