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
    --budget)
      if [ $# -lt 2 ]; then echo "gpu-probes: --budget needs seconds (usage: scripts/gpu-probes.sh OUT_DIR [--budget S] [--list])" >&2; exit 2; fi
      BUDGET="$2"; shift 2 ;;
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
  # Every step of the previous queue was measured on the H100 of 2026-11-27 (bench/gpu/2026-11-27-h100-
  # probe-queue.jsonl): every shipped setting kept, select_shm flipped on at the paper shape (bench/RESULTS.md
  # "selshm2"); its second call measured select_tma at M7C 64k x 1 and select_split at paper 64k x 1 faster
  # (bench/gpu/2026-11-27b-h100-probe-select.jsonl): both shipped since ("flips2"). What is left, most wanted
  # first: the two flips against the old setting at the lengths not measured yet (M7C's 64k target 17.65 ms
  # for 15.66, the selection its largest kernel; paper 64k 152.2 ms for 151.0), and select_shm at the
  # length its probe did not cover. Limits: that H100 took 10-22 s a step.
  # First: it ships on every G <= 8 x head_dim <= 64 layer (M7C's training config) on a price alone.
  # The key-major forward's forced pairs as one dense pass merging the rest, the keys kernel unmasked
  # (fwd_forced_merge, shipped 2026-11-27 at G <= 8 on the cost model's price: NSA fwd+bwd 3.5 / 3.2 % faster
  # at M7C 8k / 64k on an H100, unmeasured), against the masked walk and separate merge every run measured
  "fwd_forced_merge|45|--only selected --shapes m7c:8192:1 m7c:65536:1 --match fwd_forced_merge"
  # The M7C selection's key tile as one bulk copy through a tensor descriptor (select_tma, shipped at M7C's
  # 1 warp on sm_90: 3.852 ms against 4.146 at 64k x 1), against the pointer loads (the variant), at
  # 8k x 8 (unmeasured) and 64k x 1 again
  "select_tma|45|--only cmp_fwd --shapes m7c:65536:1 m7c:8192:8 --match select_tma"
  # select_shm at the paper shape (on since 2026-11-27's probe at 8k x 2 / 64k x 1: 0.751 / 14.01 ms
  # against 0.796 / 14.47 off) at 32k x 1, where the 2026-11-26c H100 measured it slower before the insertion
  "select_shm|45|--only cmp_fwd --shapes paper:32768:1 --match select_shm"
  # The paper shape's selection with its interior key tiles unmasked (select_split, shipped there on sm_90:
  # 12.73 ms against 14.02 at 64k x 1), against the unsplit loop (the variant), at 8k x 2 (unmeasured) and 64k x 1
  "select_split|45|--only cmp_fwd --shapes paper:65536:1 paper:8192:2 --match select_split"
  # A training step's host issue time against its GPU time (bench/step_host.py; "@SCRIPT ARGS" runs
  # bench/SCRIPT instead of kernel_probe.py): the 125M M7C model, compiled, 8 x 2048 tokens; the H100 of
  # 2026-11-27 measured NSA's step at 73.6 ms, the GPU busy 50.9 of it (host-bound), dense 35.6;
  # the dense step beside it. Both with compile_mode default: the config's `auto` takes CUDA graphs on one GPU
  "step_host_nsa|75|@step_host.py --config configs/m7c_125m.yaml --steps 10 --warmup 3 --set parallel.compile_mode=default"
  "step_host_dense|45|@step_host.py --config configs/m7c_125m.yaml --steps 10 --warmup 3 --set model.attention=dense --set parallel.compile_mode=default"
  # The NSA step as m7c_125m.yaml ships it (compile_mode auto: CUDA graphs per block on one GPU; 51.8 ms on
  # the H100 of 2026-11-27, the GPU busy 50.45; bench/step_host.py's step is one micro-batch)
  "step_host_cudagraphs|75|@step_host.py --config configs/m7c_125m.yaml --steps 10 --warmup 3"
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
  script=kernel_probe.py
  if [ "${args:0:1}" = "@" ]; then script="${args%% *}"; script="${script#@}"; args="${args#* }"; fi
  # shellcheck disable=SC2086  # the arguments are words
  (cd "$REPO" && timeout "$limit" "$PY" "$REPO/bench/$script" $args) >"$OUT/$name.jsonl" 2>"$OUT/$name.err" || rc=$?
  rows=$(grep -c '^{' "$OUT/$name.jsonl" || true)
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0)), \"rows\": $rows}"
done
