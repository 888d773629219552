"""Tests of the triton backend run its kernels on CPU tensors, in triton's interpreter.

TRITON_INTERPRET=1 is set by tests/conftest.py, before any test module is collected (`@triton.jit`
reads it when a kernel module is imported, and modules outside this directory import kernel modules at
collection too). Tests that need a process without it (gpucheck, the ValueError of the triton backend
on CPU) start a subprocess.
"""

import pytest


@pytest.fixture
def bf16_interpreter():
    """Triton's interpreter with bf16 done as the GPU does it (nsa.attention.gpusuite.interp_bf16):
    tl.dot on bf16 operands in float32, casts to bf16 rounded to nearest even. Restored afterwards."""
    from nsa.attention.gpusuite.interp_bf16 import honest_bf16

    with honest_bf16():
        yield
