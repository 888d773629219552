"""Which checkpoint a --resume continues from: the newest intact one, agreed by every host.

Owns the collective choice (each host's local rank 0 verifies its own run dir; all ranks compare)
and its two bad-input outcomes. It must not load anything: nsa.train.ckpt does.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from nsa.runfiles import RunDir
from nsa.telemetry import Recorder
from nsa.train import ckpt
from nsa.train.dist import DistInfo, all_reduce_max


class ResumeMismatch(ValueError):
    """The checkpoint cannot continue this run as configured (bad input: exit 2)."""


def agreed_resume_point(rd: RunDir, info: DistInfo, rec: Recorder) -> Path | None:
    """The newest intact checkpoint, agreed by every host (each local rank 0 verifies its run dir).

    Collective. Never trusts `latest`: a missing or damaged newer dir is skipped with a
    `checkpoint_fallback` event; checkpoints that exist but all fail verification stop every rank
    with exit 2 instead of a silent fresh start that would then overwrite and prune them.
    """
    leader = info.local_rank == 0
    problem: Exception | None = None
    step = -1.0
    if leader:
        rec.beat("checkpoint", 0)
        try:
            chosen, skipped = ckpt.choose_resume(rd)
        except ckpt.NoIntactCheckpoint as e:
            problem, step = e, -2.0
        else:
            step = float(ckpt.read_meta(chosen)["step"]) if chosen is not None else -1.0
            for bad, reason in skipped:
                rec.event(
                    "checkpoint_fallback", step=0, all_ranks=True, checkpoint=bad.name, reason=reason,
                    using=chosen.name if chosen is not None else None,
                )  # fmt: skip
                print(
                    f"[nsa] rank {info.rank}: skipping {bad.name}: {reason}; "
                    f"resuming from {chosen.name if chosen else 'step 0'}",
                    file=sys.stderr, flush=True,
                )  # fmt: skip
    # Non-leaders do not vote: +-inf leaves the leaders' min and max unchanged.
    hi = all_reduce_max(step if leader else -math.inf, info)
    lo = -all_reduce_max(-step if leader else -math.inf, info)
    if lo == -2.0:
        raise problem or ckpt.NoIntactCheckpoint(
            "--resume: a run dir holds checkpoints but none is intact (the local rank 0 of its host says "
            "which and why); fix it there, or start a new run dir without --resume"
        )
    if lo != hi:
        raise ResumeMismatch(
            f"hosts disagree on the newest intact checkpoint (steps {int(lo)} .. {int(hi)}; -1 = none): "
            "each host's run dir must hold the same intact step-* dir; copy the missing one, or remove "
            "the newer step-* dirs on the hosts that have them"
        )
    return rd.checkpoints_dir / ckpt.checkpoint_name(int(hi)) if hi >= 0 else None
