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
  # Every step of the previous queue was measured on the 2026-11-26c H100 (bench/RESULTS.md, "The H100
  # run of 2026-11-26c", the probe table; bench/gpu/2026-11-26c-h100-probe-*.jsonl) and five settings
  # were flipped on those numbers, each measured at one or two shapes. What is left: the flips at the
  # shapes their probe did not cover, the shape the issue's targets are missed at first (M7C 32k
  # 0.36 for 0.35, paper 64k 0.22 for 0.2), most wanted first: a setting shipped on one shape's number
  # before one confirmed at another. Limits: that H100 took 10-22 s a step (nine steps in the 175 s
  # budget), so 45-60 s each (the training steps 45-75 s: their compiles); the steps run in
  # this order until --budget (default 420) is spent: at their limits the steps up to step_host_dense (the
  # checks of shipped settings first) add up to 420 s, the whole queue to 585; scripts/gpu-session.sh's
  # 280 reaches the first five at those limits, all of them at that H100's pace.
  # The reverse index's segments at most B*Hkv*T*n / 512 pairs (selected.py seg_target), shipped unmeasured
  # for B = 1: at M7C 8k x 1 the keys kernels' 286 programs of T/4 = 2048 pairs hold 34 that run 2.1x the
  # even spread (bench/attention_cost/balance.py); the model prices NSA/FA2 there 1.229 -> 1.071 on an
  # H100. No run has measured B = 1 below 64k: the shipped S (512 / 1024) against seg_target 0 (T/4),
  # and 8k x 8, where S is the same (the control)
  "seg_target|45|--only selected --shapes m7c:8192:1 m7c:16384:1 m7c:8192:8 --match seg_target"
  # The M7C selection's one- and two-key insertion (select_insert 2, shipped at 1 warp on sm_90 on the
  # model's price: 0.79 / 0.81 / 0.96x at 64k / 32k / 8k, unmeasured) off and at one key, and two token
  # groups a program on one key tile load (select_pair, a probe variant: it spills on triton 3.9; priced
  # 0.94x at 64k), beside the shipped build: `_cmp_select` is M7C's largest kernel at 64k (3.96 ms of
  # 17.77 modelled; 4.64 measured without the insertion); bench/RESULTS.md "selpair / selinsert". Second: it confirms a shipped setting
  # on the kernel the 64k target is missed by. Also the paper shape's insertion (shipped on sm_90 under a
  # 168-register cap, unmeasured: 0.76x the selection at 64k, 1.10x at 8k; RESULTS "paperins") off, at
  # 8k x 2 and 64k x 1, its priced loss and gain (no step of its own: the queue's limits fill its 420 s)
  "select_insert|45|--only cmp_fwd --shapes m7c:8192:8 m7c:32768:2 m7c:65536:1 paper:8192:2 paper:65536:1 --match select_insert --match select_pair"
  # The M7C selection at 1 warp under a 168-register cap, shipped on m7c 64k alone (4.64 ms vs 5.67;
  # 1 warp uncapped 4.75): `_cmp_select` is M7C's largest kernel at 32k (3.16 ms of 14.37) where NSA/FA2
  # misses its target by 3 %, and the model prices it 1.33-1.42x too fast at 8k-32k
  "select_warps|60|--only cmp_fwd --shapes m7c:8192:8 m7c:32768:2 --match warps_sel --match maxnreg_sel"
  # The compressed backward's dQ at 2 stages past head_dim 64, shipped on paper 32k alone (10.46 ms vs
  # 11.57, dQ + dK/dV): `_cmp_bwd_dq` is 18.2 ms of the paper shape's 160.7 at 64k, the length whose
  # target (0.2) it misses, and the model is off on the compressed backward there by 1.25-1.73x
  "stages_dq|60|--only cmp_bwd --shapes paper:8192:2 paper:65536:1 --match stages_dq"
  # The paper shape's selection with select_shm off, flipped on paper 32k alone (4.58 ms vs 4.71-4.85,
  # within the ~8 % noise of one process): `_cmp_select` is 18.2 ms at paper 64k
  "select_shm|45|--only cmp_fwd --shapes paper:8192:2 paper:65536:1 --match select_shm"
  # The query-major selected dK/dV at 128 rows / 8 warps past head_dim 64, shipped on paper 8k x 2 and
  # 64k (15.09 vs 16.66 ms, 62.30 vs 64.26 fwd+bwd): the length between, where the target is met
  # (0.33) by a margin of 6 %
  "d128_sel|45|--only selected --shapes paper:32768:1 --match BR"
  # A training step's host issue time against its GPU time (bench/step_host.py; "@SCRIPT ARGS" runs
  # bench/SCRIPT instead of kernel_probe.py): the 125M M7C model, compiled, 8 x 2048 tokens, took
  # 96-172 ms a step with NSA on the 2026-11-26c H100 against dense's 40-44, where the attention core
  # explains ~13 ms of the gap; the layer's ~25 launches and its torch.library dispatch cost ~3.2 ms
  # of host CPU on this project's CPU VM (bench/RESULTS.md "Host cost of the NSA layer"). Host-bound if
  # issue_ms ~ gpu_ms and the profiler's busy share is well below 1; the dense step beside it.
  "step_host_nsa|75|@step_host.py --config configs/m7c_125m.yaml --steps 10 --warmup 3"
  "step_host_dense|45|@step_host.py --config configs/m7c_125m.yaml --steps 10 --warmup 3 --set model.attention=dense"
  # The gate fold (fold_gate, fold_delta: what training runs, gated.gated_branches), measured only at
  # 8k (m7c 8k x 8: 10.11 ms vs 10.28 / 10.28, within noise; paper 8k x 2): at 64k, where the branch
  # backwards it feeds (their delta, their O reads) take 1.7-1.9x their 8k time for the same tokens
  "gate_fold|45|--only gate --shapes m7c:65536:1 paper:65536:1"
  # The key-major merges off (merge_tiles), flipped on m7c 8k x 8 and 64k (fwd+bwd 6.39 / 6.49 ms off
  # vs 6.93 / 6.59 on, inside the noise: the same process timed the shipped build at 6.40 and 6.93):
  # the same shapes again in the flipped build, the one step that repeats a measured shape, so last
  "merge_tiles|45|--only selected --shapes m7c:8192:8 m7c:65536:1 --match merge_tiles"
  # The same NSA step with CUDA graphs per block (parallel.compile_mode=reduce-overhead: no host issue
  # of the blocks' launches; never run on a GPU yet): against step_host_nsa's issue_ms / gpu_ms above,
  # whether replaying graphs closes the NSA-dense gap (bench/RESULTS.md "Host syncs and host cost of
  # the compiled training step"). Last: run when the kernel steps leave time (their real 10-22 s each)
  "step_host_cudagraphs|75|@step_host.py --config configs/m7c_125m.yaml --steps 10 --warmup 3 --set parallel.compile_mode=reduce-overhead --set train.grad_accum=1"
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
