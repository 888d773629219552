#!/usr/bin/env bash
# The GPU suite: scripts/gpu-suite.sh OUT_DIR [--quick|--interpret] [--only SECTION ...] [--budget S] [--wheels DIR] [--plan]
#
# Run it first on any GPU that becomes available (docs/gpu-suite.md). It uses the python, torch and
# triton already installed there and installs nothing from the network: what `nsa` needs beyond
# torch/triton/numpy (pydantic, pyyaml) comes from a wheel folder, --wheels DIR (default .whl/ in the
# checkout, prepared with `pip download`, see the docs), installed with --no-index into
# OUT_DIR/pydeps only when the import is missing. Writes OUT_DIR/suite.json section by section, and a
# short summary on stdout.
#   --quick      fewer shapes, at most 3 minutes on one H100 (the full run: at most 8)
#   --interpret  CPU rehearsal of sections a-c under TRITON_INTERPRET=1 (CI runs it)
#   --budget S   another wall-clock budget in seconds, split among the chosen sections (docs/gpu-suite.md)
#   --plan       print what would run in the budget by the estimates (JSON; no GPU, writes no file)
set -euo pipefail
usage="usage: scripts/gpu-suite.sh OUT_DIR [--quick|--interpret] [--only SECTION ...] [--budget S] [--wheels DIR] [--plan]"
if [ $# -lt 1 ] || [ "${1:0:1}" = "-" ]; then
  echo "$usage" >&2
  exit 2
fi
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$1"; shift
WHEELS="$REPO/.whl"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels)
      if [ $# -lt 2 ]; then echo "gpu-suite: --wheels needs a folder" >&2; echo "$usage" >&2; exit 2; fi
      WHEELS="$2"; shift 2 ;;
    --wheels=*) WHEELS="${1#--wheels=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- ${args[@]+"${args[@]}"}
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
# The checkout's own venv when there is one (CI, a dev box), else the machine's python (a pod image).
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"; else PY="$(command -v python3 || command -v python)"; fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if ! "$PY" -c "import pydantic, yaml" 2>/dev/null; then
  shopt -s nullglob
  whls=("$WHEELS"/*.whl)
  shopt -u nullglob
  if [ ${#whls[@]} -eq 0 ]; then
    echo "gpu-suite: $PY cannot import pydantic/yaml and there are no wheels (*.whl) in $WHEELS." >&2
    echo "Fix: prepare it with pip download (docs/gpu-suite.md), or pass --wheels DIR." >&2
    exit 2
  fi
  # --no-deps, every wheel in the folder: with --target pip ignores what the image has installed, so
  # resolving pydantic's dependencies asks the folder for typing-extensions and pyyaml too, and the
  # folder the 2026-11-26c H100 run used (pydantic, pydantic_core, annotated_types, typing_inspection:
  # the image has the rest) fails with "No matching distribution found for typing-extensions"
  # (reproduced on CPU, 2026-11-26, with pip's --python-version 3.12 --platform manylinux2014_x86_64).
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$OUT/pydeps" "${whls[@]}"; then
    echo "gpu-suite: pip could not install the wheels of $WHEELS into $OUT/pydeps (above: why)." >&2
    echo "Fix: wheels for this python and platform (docs/gpu-suite.md), or pass --wheels DIR." >&2
    exit 2
  fi
  export PYTHONPATH="$PYTHONPATH:$OUT/pydeps"
  if ! "$PY" -c "import pydantic, yaml"; then
    echo "gpu-suite: pydantic/yaml still do not import with the wheels of $WHEELS installed (above: why)." >&2
    echo "Fix: add the missing wheels to it (docs/gpu-suite.md)." >&2
    exit 2
  fi
fi
for a in "$@"; do
  if [ "$a" = "--interpret" ]; then export TRITON_INTERPRET=1; fi
done
exec "$PY" -m nsa.attention.gpusuite "$OUT" "$@"
