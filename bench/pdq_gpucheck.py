"""The key-major backward's two PDQ kernels alone, as gpucheck compiles them, at every (G, D) asked.

Owns a `gpucheck_specs(shape, arch)` for `python -m nsa.attention.gpucheck --module pdq_gpucheck`:
selected.py's own `gpucheck_specs` kept to `_sel_bwd_keys_kernel` and `_sel_bwd_dq_merge_kernel`,
at the shipped pdq_bits (32: fp32 PDQ) and at 16 (the `*_pdq16` rows: PDQ in the activations'
16-bit dtype). The whole selected module at 15 (G, D) points is ~500 compiles; these are 120, for
the registers/spills table of bench/RESULTS.md ("16-bit dQ partials").

    PYTHONPATH=bench .venv/bin/python -m nsa.attention.gpucheck --module pdq_gpucheck --jobs 2 \\
        --config configs/m7c_125m.yaml --shape 1x64 --shape 1x96 ... --shape 8x128   # sm_80, sm_90
"""

from __future__ import annotations

from nsa.attention.triton import selected
from nsa.attention.triton.spec import GpuShape, KernelSpec


def gpucheck_specs(shape: GpuShape, arch: int) -> list[KernelSpec]:
    """The keys kernel and the dQ merge, both settings; nothing at G > 8 (no key-major backward)."""
    keep = ("selected_bwd_keys", "selected_bwd_dq_merge")
    return [s for s in selected.gpucheck_specs(shape, arch) if s.name.startswith(keep)]
