#!/usr/bin/env bash
# Set up what is missing (scripts/setup.sh), then run the whole test suite. Extra arguments go to pytest
# (and then only pytest runs).
#
# Without arguments the main run (the newest triton, the venv's) is joined by the triton version leg,
# scripts/triton-leg.sh (docs/attention.md "Triton versions": gpucheck on the venv's triton for the
# modules the main run does not compile (it compiles the compressed one), then the kernel tests under the
# interpreter and gpucheck on triton 3.6, the oldest triton the package accepts, installed once into
# .venv/triton-legs).
# The leg starts beside the main run at a lower CPU priority (nice 10): its install (mostly waiting on
# the network and the disk), tests and compilations take the CPU the main run leaves idle while its
# end-to-end tests wait on subprocesses, instead of ~1 minute after it. Its output goes to
# .venv/triton-legs/leg.log and is shown when the main run ends.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
rc=0
legs=".venv/triton-legs"
mkdir -p "$legs"
echo "test: the triton leg (scripts/triton-leg.sh: the newest triton's gpucheck but the compressed module, then triton 3.6) runs beside the main run; log $legs/leg.log"
# Its own process group (setsid), so an interrupted run stops the leg's pip, pytest and compilers too;
# one torch thread, as the main run's workers (tests/conftest.py).
OMP_NUM_THREADS=1 setsid nice -n 10 scripts/triton-leg.sh >"$legs/leg.log" 2>&1 &
leg_pid=$!
trap '[ -z "$leg_pid" ] || kill -- -"$leg_pid" 2>/dev/null || true' EXIT
# Ctrl-C (pytest then exits by itself) or a TERM ends the whole run, the leg included, at once.
trap 'echo "test: interrupted; the triton leg stopped too" >&2; exit 130' INT TERM
# Two worker processes (pytest-xdist), each test file whole on one of them, in collection order
# (--dist loadfile: a file's module-scoped fixtures are built once, as in a serial run;
# --no-loadscope-reorder: the long end-to-end files first, the many short unit files fill in at the
# end). Most end-to-end time is spent waiting on subprocesses, so a second worker fits on two cores
# (bench/RESULTS.md "The test suite in two workers"). Each worker's torch runs one intra-op thread
# (tests/conftest.py).
# Each test's start and end per worker go to .venv/test-timeline (tests/conftest.py, NSA_TEST_TIMELINE):
# pytest prints where the workers' time went at its end, and a fresh clone's run leaves the data behind.
timeline=".venv/test-timeline"
rm -rf "$timeline" && mkdir -p "$timeline"
NSA_TEST_TIMELINE="$PWD/$timeline" .venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder || rc=$?
leg_rc=0
wait "$leg_pid" || leg_rc=$?
leg_pid=""
cat "$legs/leg.log"
if [ "$leg_rc" -ne 0 ]; then
    echo "test: the triton leg failed (above); rerun it alone: scripts/triton-leg.sh" >&2
    rc=1
fi
exit "$rc"
