"""The cost model of NSA attention on A100/H100/H200 (bench/attention_model.py prints its rows).

Modules: prices.py (datasheets, the fitted prices of our kernel kinds, the `Kernel` record),
counts.py (the layer's `Shape` and the kernels' work counted from their launches), kernels.py (our
triton backend's kernels and FlashAttention-2's, priced per launch), calibration.py (the published
kernels' structure and figures). Only counts.py `kernel_configs` imports nsa (the kernels'
`_config`: torch and triton), when the shipped launch settings are first asked for.
"""
