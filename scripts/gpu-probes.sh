#!/usr/bin/env bash
# The GPU probe queue: scripts/gpu-probes.sh OUT_DIR [--budget S] [--list]
#
# What the next GPU session measures after scripts/gpu-suite.sh (docs/gpu-suite.md "After the suite"):
# the launch settings shipped on a proxy's word or kept as probe switches, each beside the shipped
# config in the same process (bench/kernel_probe.py --match). Steps run in the order below, most
# wanted first; each gets at most its own limit and what is left of --budget (default 420 s; a step
# is skipped when less than 30 s is left). A step writes OUT_DIR/NAME.jsonl (kernel_probe's rows) and
# OUT_DIR/NAME.err; one summary line per step on stdout: {"step", "rc", "seconds", "rows"}
# (rc 124: stopped by its limit, what it printed kept; "skipped": no time left).
#   --list   print the queue (name, limit, kernel_probe arguments) and exit; needs no GPU
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:0:1}" = "-" ]; then
  echo "usage: scripts/gpu-probes.sh OUT_DIR [--budget S] [--list]" >&2
  exit 2
fi
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$1"; shift
BUDGET=420
LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="${2:?--budget needs seconds}"; shift 2 ;;
    --budget=*) BUDGET="${1#--budget=}"; shift ;;
    --list) LIST=1; shift ;;
    *) echo "gpu-probes: unknown argument $1 (usage: scripts/gpu-probes.sh OUT_DIR [--budget S] [--list])" >&2; exit 2 ;;
  esac
done
if ! [[ "$BUDGET" =~ ^[0-9]+$ ]] || [ "$BUDGET" -lt 30 ]; then
  echo "gpu-probes: --budget $BUDGET: give whole seconds, at least 30" >&2
  exit 2
fi
# name | limit (s) | bench/kernel_probe.py arguments. Why each is here: bench/RESULTS.md, 2026-11-26.
QUEUE=(
  # Ordered by how much of the model's prediction rests on each: NSA/FA2 on an H100 with the measured
  # path instead (the what-ifs of bench/attention.py --model, 8k / 64k): flash_tiles (with the window's
  # tiles) +11 / +28 % at the paper shape, +6 / +12 % at M7C; keys_div32 +13 / +8 % at M7C; tok_pipe
  # +5 / +4 % at the paper shape; select_cut +1 / +4 % at M7C; select_shm at most 2 %. One prepared
  # call's --budget 300 reaches the first two or three.
  # the compressed backward's and the window's sm_90 tiles shipped on bench/flash_proxy.py's word (the
  # largest proxy claims: dK/dV 0.53-0.55x at M7C, dK/dV 0.46-0.49x and dQ 0.41-0.47x at the paper
  # shape; window dQ 0.57x and dK/dV 0.79x past head_dim 64, dK/dV 0.64x at 64): the measured tiles beside them
  "flash_tiles|120|--only cmp_bwd --shapes m7c:65536:1 paper:32768:1 --match bn_dkv --match stages_dq"
  # the key-major kernels' rows in 32 bits shipped on bench/keys_proxy.py's word (priced 0.625x) and
  # the dQ partials in bf16 (pdq_bits 16, priced by bytes): the measured int64 / fp32 paths beside them
  "keys_div32|150|--only selected --shapes m7c:8192:8 m7c:65536:1 --match keys_div32 --match pdq_bits"
  # the paper shape's token tiles without their branch (tok_pipe 2 shipped on sm_90 on
  # bench/gather_proxy.py's word, 0.862x): the measured branchy loop beside it, and the other builds
  "tok_pipe|150|--only selected --shapes paper:8192:2 --match tok_pipe"
  # the selection loop's integer work in 32 bits (select_cut) shipped on bench/select_proxy.py's word
  # (0.879x at M7C, 0.934x at the paper shape): the measured loop beside it
  "select_cut|120|--only cmp_fwd --shapes m7c:65536:1 paper:32768:1 --match select_cut"
  # the window's sm_90 tiles of the same ship (flash_tiles above), timed on the window op alone
  "window_tiles|60|--only window --shapes m7c:8192:8 paper:8192:2"
  # the selection's Eq. 9 key without its gathers (select_shm, shipped on sm_90 at the paper's shape
  # on bench/select_proxy.py's word: 0.83x; at M7C a variant, 0.91x)
  "select_shm|60|--only cmp_fwd --shapes paper:32768:1 m7c:65536:1 --match select_shm"
  # the M7C selection at 1 warp under a register cap (bench/select_proxy.py: -28 %), 4 tokens in halves
  "select_warps|120|--only cmp_fwd --shapes m7c:65536:1 --match maxnreg_sel --match warps_sel"
  # the paper shape's full tiles at head_dim 128 (bench/tiles_d128.py; its compressed backward
  # candidates: flash_tiles above); the query-major dK/dV at 128 rows / 8 warps at 8k and 64k, the
  # lengths its ship would be judged at (no proxy calibrates on that kernel: bench/RESULTS.md "dkdvfit")
  "d128_sel|130|--only selected --shapes paper:8192:2 paper:65536:1 --match BR"
  "d128_fwd|90|--only cmp_fwd --shapes paper:32768:1 --match bn_fwd"
)
if [ "$LIST" = 1 ]; then
  for q in "${QUEUE[@]}"; do IFS='|' read -r name limit args <<<"$q"; echo "$name $limit $args"; done
  exit 0
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"; else PY="$(command -v python3 || command -v python)"; fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu-probes: $PY sees no CUDA GPU; the probes time kernels on one (--list needs none)" >&2
  exit 2
fi
start=$SECONDS
for q in "${QUEUE[@]}"; do
  IFS='|' read -r name limit args <<<"$q"
  left=$((BUDGET - (SECONDS - start)))
  if [ "$left" -lt 30 ]; then
    echo "{\"step\": \"$name\", \"rc\": \"skipped\", \"seconds\": 0, \"rows\": 0}"
    continue
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$SECONDS
  rc=0
  # shellcheck disable=SC2086  # the arguments are words
  timeout "$limit" "$PY" "$REPO/bench/kernel_probe.py" $args >"$OUT/$name.jsonl" 2>"$OUT/$name.err" || rc=$?
  rows=$(grep -c '^{' "$OUT/$name.jsonl" || true)
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0)), \"rows\": $rows}"
done
