"""`python -m nsa.attention.gpusuite.smoke`: every triton kernel once, forward and backward, at one small
shape (what compute-sanitizer watches in the GPU suite's section d). Prints SMOKE OK at the end; must
stay small (memcheck/racecheck slow each launch down by orders of magnitude)."""

from __future__ import annotations

import torch

from nsa.attention.gpusuite.checks import Plan
from nsa.attention.gpusuite.gpu import _nsa_core, _nsa_core_inputs


def main() -> None:
    geo = Plan.for_mode("quick").geometry
    inp = _nsa_core_inputs(1, 256, 2, 6, 64, geo, "cuda", torch.bfloat16)
    from nsa.attention.rope import rope_tables
    from nsa.attention.triton import fused, gated

    # the core as training runs it (the gate fold: its backward kernel, the branches' delta variants),
    # then with the fold off (the gate mix's backward, each branch forming its own delta)
    for fold in (True, False):
        gated.FOLD_GATE = fold
        y = _nsa_core(inp, geo, 64**-0.5)
        torch.autograd.backward(y, torch.randn_like(y))
    gated.FOLD_GATE = True

    cos, sin = rope_tables(256, 64, 10000.0, torch.float32, torch.device("cuda"))
    x = torch.randn(1, 256, 2, 6, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = fused.rope_to_layout(x, cos.contiguous(), sin.contiguous(), (0, 2, 1, 3, 4))
    out.float().sum().backward()
    torch.cuda.synchronize()
    print("SMOKE OK", flush=True)


if __name__ == "__main__":
    main()
