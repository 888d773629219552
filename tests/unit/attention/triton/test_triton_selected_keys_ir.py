"""The key-major selected kernels' row loop does its per-row integer work in 32 bits (issue 20): no
division or remainder of a 64-bit tensor in `_sel_bwd_keys_kernel` or `_sel_fwd_keys_kernel` as
selected.py's `gpucheck_specs` launches them (M7C, sm_90, `_config` as shipped), and the row's token
by a 32-bit multiply-high, not a division. A 64-bit tensor division compiles to a branch, a 32-bit
fast path and a slow-path call per row a thread holds, a 32-bit one to ~8 instructions (bench/
RESULTS.md "keysdiv": 1406 -> 654 SASS a step on triton 3.6 sm_90). Triton's front end only (its
TTIR, no ptxas), in a subprocess without TRITON_INTERPRET (this directory's conftest sets it for
the interpreter tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

REPO = Path(__file__).resolve().parents[4]

# Prints {kernel name: {"div": [each tensor division/remainder op's result type], "mulhi": [each
# tensor multiply-high's]}} for the M7C specs.
_SCRIPT = """
import json, re
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton._C.libtriton import ir
from nsa.attention.triton import selected as sel
from nsa.attention.triton.spec import GpuShape

shape = GpuShape("m7c", head_dim=64, group=6, block_len=32, block_stride=16, sel_block=64, n_sel=16,
                 window=512, dtype="bf16")
target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)
out = {}
for spec in sel.gpucheck_specs(shape, 90):
    if spec.name not in ("selected_bwd_keys", "selected_fwd_keys"):
        continue
    src = ASTSource(fn=spec.fn, signature=dict(spec.signature), constexprs=dict(spec.constexprs))
    opts = backend.parse_options({"num_warps": spec.num_warps})
    ctx = ir.context()
    ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    mod = src.make_ir(target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), ctx)
    txt = str(mod)
    out[spec.name] = {"div": re.findall(r"arith\\.(?:div|rem)[su]i [^:\\n]*: (tensor<[^>]*>)", txt),
                      "mulhi": re.findall(r"tt\\.mulhiui [^:\\n]*: (tensor<[^>]*>)", txt)}
print(json.dumps(out))
"""


def test_the_key_major_kernels_divide_no_64_bit_tensor():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    ops = json.loads(out.stdout.splitlines()[-1])
    assert set(ops) == {"selected_bwd_keys", "selected_fwd_keys"}
    for name, found in ops.items():
        # The rows' pair and head (r // G, r % G): 32-bit tensors of BR rows; the token (pos // NK) by
        # a 32-bit multiply-high (`_magic32`), no division at all.
        types = found["div"]
        assert len(types) == 2 and all(t.endswith("xi32>") for t in types), f"{name}: {types}"
        assert [t.endswith("xi32>") for t in found["mulhi"]] == [True], f"{name}: {found['mulhi']}"
