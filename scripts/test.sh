#!/usr/bin/env bash
# Set up what is missing (scripts/setup.sh), then run the whole test suite. Extra arguments go to pytest
# (and then only pytest runs).
#
# Without arguments the main run is followed by the triton version leg (docs/attention.md "Triton
# versions"): the kernel tests under the interpreter and gpucheck (sm_80/sm_90: compile, no spills,
# shared memory) on triton 3.6, the oldest triton the package accepts and what current CUDA images
# ship. It is installed once into .venv/triton-legs/3.6.0 with numpy<2.4 (triton 3.6's interpreter
# calls int() on one-element arrays, an error since numpy 2.4) and put first on PYTHONPATH for that
# leg only. The main run covers the newest triton (the venv's). On a fresh machine that install (a
# download and unpack, mostly waiting on the network and the disk) runs in the background while the
# main run goes, which leaves a core idle most of its time; its output goes to $leg.log.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
rc=0
LEG_TRITON=3.6.0
leg=".venv/triton-legs/$LEG_TRITON"
leg_pid=""
if [ ! -e "$leg/.complete" ]; then
    echo "test: installing triton==$LEG_TRITON and numpy<2.4 into $leg (once, beside the main run; log $leg.log)"
    rm -rf "$leg"
    mkdir -p "$(dirname "$leg")"
    .venv/bin/python -m pip install -q --target "$leg" "triton==$LEG_TRITON" "numpy<2.4" >"$leg.log" 2>&1 &
    leg_pid=$!
    trap '[ -z "$leg_pid" ] || kill "$leg_pid" 2>/dev/null || true' EXIT  # an interrupted run leaves no pip
fi
.venv/bin/python -m pytest || rc=$?

if [ -n "$leg_pid" ]; then
    if ! wait "$leg_pid"; then
        leg_pid=""
        cat "$leg.log" >&2
        echo "test: installing triton==$LEG_TRITON into $leg failed (above); the triton $LEG_TRITON leg did not run" >&2
        exit 1
    fi
    leg_pid=""
    touch "$leg/.complete"
fi
echo "test: triton $LEG_TRITON leg: interpreter tests (representative subset) and gpucheck"
# The subset (docs/attention.md "Triton versions"): bf16 through the honest-bf16 fixture, the whole
# module with its parameters' gradients and head_dim 96 training, and the fp16 / head_dim 96 / G 16
# cases of the window and compressed kernels. gpucheck: the configs' shapes and the paper's 16x128.
t="tests/unit/attention/triton"
PYTHONPATH="$leg" .venv/bin/python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
    "$t/test_bf16_interpreter.py" "$t/test_module_triton.py" \
    "$t/test_window.py" "$t/test_triton_compressed.py" -k "bf16 or module or trains or fp16 or 96 or G16" || rc=$?
if ! PYTHONPATH="$leg" .venv/bin/python -m nsa.attention.gpucheck --shape 16x128 >/dev/null; then
    rc=1
    echo "test: gpucheck failed on triton $LEG_TRITON; rerun: PYTHONPATH=$leg .venv/bin/python -m nsa.attention.gpucheck --shape 16x128" >&2
fi
exit "$rc"
