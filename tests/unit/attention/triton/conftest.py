"""Tests of the triton backend run its kernels on CPU tensors, in triton's interpreter.

`@triton.jit` decides when a kernel module is imported whether it builds an interpreted function, by
reading TRITON_INTERPRET then; so the variable is set here, at collection, before any test module of
this directory imports a kernel module. Nothing in `nsa` imports the kernel modules eagerly (the
dispatch does on first use), so setting it this late is early enough. Tests that need a process
without it (gpucheck, the ValueError of the triton backend on CPU) start a subprocess.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest


@pytest.fixture
def bf16_interpreter():
    """Triton's interpreter with bf16 done as the GPU does it (nsa.attention.gpusuite.interp_bf16):
    tl.dot on bf16 operands in float32, casts to bf16 rounded to nearest even. Restored afterwards."""
    from nsa.attention.gpusuite.interp_bf16 import honest_bf16

    with honest_bf16():
        yield
