"""Tests of the triton backend run its kernels on CPU tensors, in triton's interpreter.

`@triton.jit` decides when a kernel module is imported whether it builds an interpreted function, by
reading TRITON_INTERPRET then; so the variable is set here, at collection, before any test module of
this directory imports a kernel module. Nothing in `nsa` imports the kernel modules eagerly (the
dispatch does on first use), so setting it this late is early enough. Tests that need a process
without it (gpucheck, the ValueError of the triton backend on CPU) start a subprocess.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"
