"""The learning-rate schedule: linear warmup, then cosine down to a floor, per optimizer step.

Owns one pure function (no torch, no state) so the schedule can be checked against its formula and
recomputed on resume from the step number alone; the trainer sets the LR of every param group from
it before each optimizer step. It must not count micro-batches: under gradient accumulation the
schedule still spans exactly `train.steps` optimizer steps.
"""

from __future__ import annotations

import math


def lr_at(step: int, *, lr: float, min_lr_ratio: float, warmup_steps: int, total_steps: int) -> float:
    """LR for optimizer step `step` (0-based: the step about to be taken).

    Warmup: lr * (step + 1) / warmup_steps, so the first step already moves. Then cosine from lr at
    step == warmup_steps to lr * min_lr_ratio at the last step (total_steps - 1); beyond it, the floor.
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    floor = lr * min_lr_ratio
    decay_steps = total_steps - 1 - warmup_steps
    if decay_steps <= 0:
        return lr
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return floor + 0.5 * (lr - floor) * (1.0 + math.cos(math.pi * progress))
