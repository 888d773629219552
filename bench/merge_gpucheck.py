"""The selected branch's two key-major merges alone, as gpucheck compiles them, at every (G, D) where
they run (FSA's range, G <= 8).

Owns a `gpucheck_specs(shape, arch)` for nsa.attention.gpucheck: selected.py's own `gpucheck_specs`
kept to `_sel_fwd_merge_kernel` and `_sel_bwd_dq_merge_kernel`, at the shipped merge_tiles (False
since the H100 of 2026-11-26c: the loops every GPU run measured) and the other (the `*_merge_tiles`
rows: the metadata as one tile, the partials' loads unrolled; the `*_merge_loop` rows while the tiles
shipped), the dQ merge also at pdq_bits 32 (`_pdq32`). 15 (G, D) points x 2 archs,
for the registers/spills table of bench/RESULTS.md ("mergeone"). Prints gpucheck's JSON records;
exit 1 on a spill or a failed compile (gpucheck's codes). Run without TRITON_INTERPRET.

    .venv/bin/python bench/merge_gpucheck.py                               # G 1/2/5/6/8 x D 64/96/128
    PYTHONPATH=/tmp/forced-leg36 .venv/bin/python bench/merge_gpucheck.py  # another triton
"""

from __future__ import annotations

import sys
from pathlib import Path

from nsa.attention.triton import selected
from nsa.attention.triton.spec import GpuShape, KernelSpec

POINTS = [(G, D) for G in (1, 2, 5, 6, 8) for D in (64, 96, 128)]


def gpucheck_specs(shape: GpuShape, arch: int) -> list[KernelSpec]:
    """The two merges, both merge_tiles settings; nothing at G > 8 (no key-major path)."""
    keep = ("selected_fwd_merge", "selected_bwd_dq_merge")
    return [s for s in selected.gpucheck_specs(shape, arch) if s.name.startswith(keep)]


def main() -> int:
    from nsa.attention import gpucheck

    sys.modules.setdefault("merge_gpucheck", sys.modules[__name__])  # gpucheck imports its modules by name
    config = str(Path(__file__).resolve().parents[1] / "configs" / "m7c_125m.yaml")
    return gpucheck.run([config], [80, 90], ["merge_gpucheck"], jobs_n=2, points=POINTS)


if __name__ == "__main__":
    sys.exit(main())
