"""The key-major backward's two PDQ kernels alone, as gpucheck compiles them, at every (G, D) of FSA's
range.

Owns a `gpucheck_specs(shape, arch)` for nsa.attention.gpucheck: selected.py's own `gpucheck_specs`
kept to `_sel_bwd_keys_kernel` and `_sel_bwd_dq_merge_kernel`, at the shipped pdq_bits (32: fp32
PDQ) and at 16 (the `*_pdq16` rows: PDQ in the activations' 16-bit dtype). The whole selected
module at 15 (G, D) points is ~500 compiles; these are 120, for the registers/spills table of
bench/RESULTS.md ("dQ partials in 16 bits"). Prints gpucheck's JSON records; exit 1 on a spill or
a failed compile (gpucheck's codes). Run without TRITON_INTERPRET.

    .venv/bin/python bench/pdq_gpucheck.py                        # G 1/2/5/6/8 x D 64/96/128, sm_80 + sm_90
    PYTHONPATH=/tmp/leg36 .venv/bin/python bench/pdq_gpucheck.py  # another triton
"""

from __future__ import annotations

import sys
from pathlib import Path

from nsa.attention.triton import selected
from nsa.attention.triton.spec import GpuShape, KernelSpec

POINTS = [(G, D) for G in (1, 2, 5, 6, 8) for D in (64, 96, 128)]


def gpucheck_specs(shape: GpuShape, arch: int) -> list[KernelSpec]:
    """The keys kernel and the dQ merge, both settings; nothing at G > 8 (no key-major backward)."""
    keep = ("selected_bwd_keys", "selected_bwd_dq_merge")
    return [s for s in selected.gpucheck_specs(shape, arch) if s.name.startswith(keep)]


def main() -> int:
    from nsa.attention import gpucheck

    sys.modules.setdefault("pdq_gpucheck", sys.modules[__name__])  # gpucheck imports its modules by name
    config = str(Path(__file__).resolve().parents[1] / "configs" / "m7c_125m.yaml")
    return gpucheck.run([config], [80, 90], ["pdq_gpucheck"], jobs_n=2, points=POINTS)


if __name__ == "__main__":
    sys.exit(main())
