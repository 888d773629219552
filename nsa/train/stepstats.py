"""Per-step loss, grad norm and non-finite flags kept on the device, read once per log step.

Owns the only places the training loop waits for the device on ordinary steps: none. Each step
adds its loss and grad norm into a small device tensor; a non-finite grad norm becomes the
optimizer's `found_inf` (the fused AdamW kernel then skips the update and its step count, as
GradScaler does, without a host sync) and is counted with the first step it happened at. `read()`
all-reduces the window once and copies it to the host: one sync per log step. The grad norm is
already global (gradients are all-reduced before clipping), so every rank skips the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nsa.train.dist import DistInfo, all_reduce_mean

# Slots of the window tensor.
_LAST_LOSS, _LOSS_SUM, _LAST_GN, _GN_SUM, _STEPS, _BAD, _FIRST_BAD = range(7)


@dataclass(frozen=True)
class Window:
    """What the host learns at a log step about the steps since the previous one."""

    loss: float  # the last step's loss (mean over ranks and micro-batches), as logged before
    loss_mean: float  # mean over the window's finite steps
    grad_norm: float  # the last step's
    grad_norm_mean: float
    steps: int
    nonfinite: int  # steps whose update was skipped
    first_nonfinite: int  # the first such step (1-based), or -1


class StepStats:
    def __init__(self, device: torch.device):
        dtype = torch.float32 if device.type == "mps" else torch.float64
        self.buf = torch.zeros(7, dtype=dtype, device=device)
        self.buf[_FIRST_BAD] = -1
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)

    def add(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
        """Fold one step in (device ops only); returns found_inf for the optimizer (1.0 = skip)."""
        b = self.buf
        loss = loss.detach().to(b.dtype)
        gn = grad_norm.detach().to(b.dtype)
        bad = ~torch.isfinite(gn)
        torch.where(
            bad, torch.ones_like(self.found_inf), torch.zeros_like(self.found_inf), out=self.found_inf
        )
        b[_LAST_LOSS] = loss
        b[_LAST_GN] = gn
        b[_LOSS_SUM] += torch.where(bad, torch.zeros_like(loss), loss)
        b[_GN_SUM] += torch.where(bad, torch.zeros_like(gn), gn)
        b[_STEPS] += 1
        b[_BAD] += bad.to(b.dtype)
        b[_FIRST_BAD] = torch.where((b[_FIRST_BAD] < 0) & bad, torch.full_like(gn, step), b[_FIRST_BAD])
        return self.found_inf

    def read(self, info: DistInfo) -> Window:
        """Collective + one host sync: the window since the last read; resets it."""
        b = self.buf
        losses = all_reduce_mean(b[[_LAST_LOSS, _LOSS_SUM]], info)  # loss differs per rank; the norm not
        vals = torch.cat([losses, b[_LAST_GN:]]).tolist()
        last, loss_sum, gn, gn_sum, steps, bad, first = vals
        good = max(steps - bad, 1)
        b.zero_()
        b[_FIRST_BAD] = -1
        return Window(last, loss_sum / good, gn, gn_sum / good, int(steps), int(bad), int(first))
