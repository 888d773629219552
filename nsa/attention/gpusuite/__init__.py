"""The GPU suite (`scripts/gpu-suite.sh OUT_DIR [--quick|--interpret]`, docs/gpu-suite.md).

Owns what the first available GPU runs before anything else: environment, numerics in bf16/fp16
against float64 with bounds derived from the kernels' roundings (`bounds`), determinism,
compute-sanitizer, speed against PyTorch's SDPA, and training throughput (`training`), within a
time budget split by shares and per-item estimates (`budget`); plus `interp_bf16`, which
makes triton's interpreter honest about bf16 so the same numerics run on CPU (`--interpret`, and the
tests' `bf16_interpreter` fixture). Entry point: `python -m nsa.attention.gpusuite`. It installs
nothing and writes only under OUT_DIR.
"""
