#!/usr/bin/env bash
# The triton version leg (docs/attention.md "Triton versions"): gpucheck (compile, no spills, shared
# memory; both configs, sm_80/sm_90) on the newest triton, the venv's, for the three modules the main
# run does not compile, and the whole gpucheck (every kernel of the four modules) on triton 3.6, the
# oldest triton the package accepts and what current CUDA images ship, with the kernel tests under the
# interpreter on 3.6. The main run (scripts/test.sh) runs the interpreter tests on the newest triton and
# compiles the compressed module there (test_gpucheck.py: the same checks plus the selection's register
# caps), so each kernel is compiled once per triton; compiling the rest in the main run too took it
# 123 s (CI of 2026-11-27, loaded) that this leg now spends at a lower CPU priority, and compiling the
# compressed module here too cost 29.6 s of CPU (bench/RESULTS.md "citime2").
# Needs the venv of scripts/setup.sh; exit 0 when every part passes.
#
# Triton 3.6 is installed once into .venv/triton-legs/3.6.0 with numpy<2.4 (triton 3.6's interpreter
# calls int() on one-element arrays, an error since numpy 2.4) and put first on PYTHONPATH for this leg
# only. scripts/test.sh starts this script beside its main run, at a lower CPU priority (nice), so it
# uses what the main run leaves idle instead of running after it.
set -euo pipefail
cd "$(dirname "$0")/.."
LEG_TRITON=3.6.0
leg=".venv/triton-legs/$LEG_TRITON"
rc=0
# The newest triton first: it needs no install, and a failed 3.6 install below must not skip it.
newest=".venv/triton-legs/newest.gpucheck.jsonl"
mkdir -p "$(dirname "$newest")"
# Every module but the compressed one, which the main run's test_gpucheck.py compiles on this triton.
modules=(--module nsa.attention.triton.selected --module nsa.attention.triton.window --module nsa.attention.triton.fused)
echo "triton-leg: the venv's triton: gpucheck (the selected, window and fused modules; the main run compiles the compressed)"
if ! .venv/bin/python -m nsa.attention.gpucheck "${modules[@]}" >"$newest"; then
    rc=1
    echo "triton-leg: gpucheck failed on the venv's triton (records: $newest); rerun: .venv/bin/python -m nsa.attention.gpucheck ${modules[*]}" >&2
fi
if [ ! -e "$leg/.complete" ]; then
    echo "triton-leg: installing triton==$LEG_TRITON and numpy<2.4 into $leg (once)"
    rm -rf "$leg"
    mkdir -p "$(dirname "$leg")"
    if ! .venv/bin/python -m pip install -q --target "$leg" "triton==$LEG_TRITON" "numpy<2.4"; then
        echo "triton-leg: installing triton==$LEG_TRITON into $leg failed (above); the triton $LEG_TRITON leg did not run" >&2
        exit 1  # gpucheck's result on the newest triton is above
    fi
    touch "$leg/.complete"
fi
echo "triton-leg: triton $LEG_TRITON: interpreter tests (representative subset) and gpucheck"
# The subset (docs/attention.md "Triton versions"): bf16 through the honest-bf16 fixture, the whole
# module with its parameters' gradients and head_dim 96 training, the window kernel's fp16 / head_dim
# 96 / G 16 cases, the compressed kernels' G 16 (fp16) and head_dim 96 cases (their ids say
# "float16", so "fp16" selects none of the others), and q's fp16 / bf16 gradient sum inside RoPE's
# backward. gpucheck: the configs' shapes and the paper's 16x128.
t="tests/unit/attention/triton"
PYTHONPATH="$leg" .venv/bin/python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
    "$t/test_bf16_interpreter.py" "$t/test_module_triton.py" "$t/test_rope_q_grad.py" \
    "$t/test_window.py" "$t/test_triton_compressed.py" -k "bf16 or module or trains or fp16 or 96 or G16" || rc=$?
# gpucheck's records (stdout, one JSON object a line) go to a file; its summary (stderr) is shown.
if ! PYTHONPATH="$leg" .venv/bin/python -m nsa.attention.gpucheck --shape 16x128 >"$leg.gpucheck.jsonl"; then
    rc=1
    echo "triton-leg: gpucheck failed on triton $LEG_TRITON (records: $leg.gpucheck.jsonl); rerun: PYTHONPATH=$leg .venv/bin/python -m nsa.attention.gpucheck --shape 16x128" >&2
fi
exit "$rc"
