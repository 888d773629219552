"""What 16-bit dQ partials cost the key-major selected backward in accuracy, measured on CPU.

Owns the error table behind selected.py's `_config` key `pdq_bits` (selected_keys_bwd.py
`pdq_dtype`): the key-major backward (forced blocks, G <= 8) run under triton's interpreter
(TRITON_INTERPRET=1, CPU tensors; bf16 through nsa.attention.gpusuite.interp_bf16, rounded as the
GPU rounds) with its dQ partials PDQ in fp32 (pdq_bits 32) and in 16 bits (pdq_bits 16: q's dtype),
dq compared with the eager op's autograd in float64 on the same (rounded) inputs. Rows:
- "table": G 1/2/6 x fp32/fp16/bf16 on a broken table (duplicates, invalid, negative and future
  entries, a token without any key): max abs error, that over max |dq| (rel), and the Frobenius
  norm of the error over dq's (rms_rel);
- "bounds": bf16 on tables of distinct blocks (what nsa.attention.gpusuite.bounds can take), the
  largest error / bound ratio of the GPU suite's dq bound (within_bound: every element inside);
- "range": bf16 q with a small upstream gradient (dO x 2^-20, gradients ~1e-7: bf16 training has
  no loss scaling), partials in bf16 against fp16 (patched): why 16 bits means q's dtype, not fp16.
It measures, it asserts nothing. About a minute on a 2-core VM.

    .venv/bin/python bench/pdq_numerics.py
"""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported

import torch

from nsa.attention import selected as eager
from nsa.attention.gpusuite import bounds
from nsa.attention.gpusuite.interp_bf16 import honest_bf16
from nsa.attention.selection import top_blocks
from nsa.attention.triton import selected as tsel
from nsa.attention.triton import selected_keys_bwd as tkeys

T, D, N = 96, 32, 4  # tokens, head_dim, table entries; l' 8 and 32 (two key chunks of the interpreter's 16)


def _odd_table(T: int, lp: int, n: int, seed: int):
    """top_blocks' table broken as the kernel tests break it (test_triton_selected_keys_bwd.py)."""
    g = torch.Generator().manual_seed(seed)
    idx, valid = top_blocks(torch.rand(1, 1, T, -(-T // lp), generator=g), torch.arange(T), lp, n)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.2, idx.roll(1, -1), idx)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.1, idx + 2, idx)
    idx = torch.where(torch.rand(idx.shape, generator=g) < 0.05, -1, idx)
    valid = valid & (torch.rand(valid.shape, generator=g) < 0.85)
    valid[..., 3, :] = False
    return idx, valid


def _dq(q, k, v, idx, valid, lp, dout, bits: int, force=None):
    """dq of the key-major backward with pdq_bits `bits` (force: PDQ's dtype, whatever the config)."""
    base, dtype_of = tsel._launch_config, tkeys.pdq_dtype
    tsel._launch_config = lambda *a: {**base(*a), "bwd_keys": True, "pdq_bits": bits}
    if force is not None:
        tkeys.pdq_dtype = lambda cfg, dt: force
    try:
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        out = tsel.selected_attention(*leaves, idx, valid, sel_block=lp, scale=D**-0.5, forced_blocks=True)
        return torch.autograd.grad(out, leaves[0], dout)[0]
    finally:
        tsel._launch_config, tkeys.pdq_dtype = base, dtype_of


def _exact(q, k, v, idx, valid, lp, dout):
    qd, kd, vd = (x.double().requires_grad_() for x in (q, k, v))
    out = eager.selected_attention(qd, kd, vd, idx, valid, sel_block=lp, scale=D**-0.5, chunk=7)
    return torch.autograd.grad(out, qd, dout.double())[0]


def _err(got, want) -> dict:
    """max_abs: the largest |error|; rel: that over max |dq|; rms_rel: ||error|| / ||dq|| (Frobenius)."""
    err = got.double() - want
    e = err.abs().max().item()
    rms = (err.norm() / want.norm()).item()
    return {
        k: float(f"{x:.3g}")
        for k, x in (("max_abs", e), ("rel", e / want.abs().max().item()), ("rms_rel", rms))
    }


def _inputs(G: int, dtype, seed: int, dscale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, T, G, D, generator=g).to(dtype)
    dout = (torch.randn(1, 1, T, G, D, generator=g) * dscale).to(dtype)
    k, v = (torch.randn(1, 1, T, D, generator=g).to(dtype) for _ in range(2))
    return q, k, v, dout


def table_rows():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for G, lp in ((1, 8), (2, 32), (6, 8), (6, 32)):
            q, k, v, dout = _inputs(G, dtype, seed=10 + G)
            idx, valid = _odd_table(T, lp, N, seed=G + lp)
            want = _exact(q, k, v, idx, valid, lp, dout)
            row = {"pdq_numerics": "table", "dtype": str(dtype)[6:], "G": G, "lp": lp}
            for bits in (32, 16):
                row[f"pdq{bits}"] = _err(_dq(q, k, v, idx, valid, lp, dout, bits), want)
            yield row


def bounds_rows():
    for G, lp in ((2, 32), (6, 32), (6, 8)):
        q, k, v, dout = _inputs(G, torch.bfloat16, seed=20 + G)
        g = torch.Generator().manual_seed(G + lp)
        idx, valid = top_blocks(torch.rand(1, 1, T, -(-T // lp), generator=g), torch.arange(T), lp, N)
        vis = bounds.selected_visible(idx, valid, T, lp)
        want = bounds.attention_bounds(q, k, v, dout, vis, D**-0.5, torch.bfloat16)["dq"]
        row = {"pdq_numerics": "bounds", "dtype": "bfloat16", "G": G, "lp": lp}
        for bits in (32, 16):
            res = bounds.check(_dq(q, k, v, idx, valid, lp, dout, bits), want)
            row[f"pdq{bits}"] = {
                "max_err_over_bound": round(res["max_err_over_bound"], 3),
                "within_bound": res["within_bound"],
            }
        yield row


def range_rows():
    G, lp = 6, 32
    q, k, v, dout = _inputs(G, torch.bfloat16, seed=30, dscale=2.0**-20)
    idx, valid = _odd_table(T, lp, N, seed=30)
    want = _exact(q, k, v, idx, valid, lp, dout)
    row = {"pdq_numerics": "range", "dtype": "bfloat16", "G": G, "lp": lp, "dout_scale": 2.0**-20}
    row["max_abs_dq"] = float(f"{want.abs().max().item():.3g}")
    for name, force in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        row[f"pdq_{name}"] = _err(_dq(q, k, v, idx, valid, lp, dout, 16, force), want)
    yield row


def main() -> int:
    with honest_bf16():
        for rows in (table_rows(), bounds_rows(), range_rows()):
            for row in rows:
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
