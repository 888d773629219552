"""The cost model of NSA attention on A100/H100/H200 (bench/attention_model.py prints its rows).

Modules: prices.py (datasheets, pricing by the fitted tables, the `Kernel` record), fitted.py (the
fitted prices of our kernel kinds, one table per GPU run, with the measurements behind them),
counts.py (the layer's `Shape` and the kernels' work counted from their launches), kernels.py (our
triton backend's kernels and FlashAttention-2's, priced per launch), calibration.py (the published
kernels' structure and figures), sass80.py (the A100 counts of the kernels priced from their sm_80
SASS, bench/a100_proxy_sass.json), balance.py (the key-major grids' programs scheduled on the SMs). Only counts.py `kernel_configs` (the kernels' `_config`: torch and
triton, when the shipped launch settings are first asked for) and sass80.py (bench/keys_proxy.py's
modelled reverse index, through nsa's loader, on the first A100 keys-backward count) import nsa.
"""
