#!/usr/bin/env bash
# A GPU session's whole device work in one call: scripts/gpu-session.sh OUT [--budget S] [--wheels DIR] [--work DIR] [--plan]
#
# What a lent GPU runs (docs/gpu-suite.md "A GPU session in one call"): one device call of at most
# 10 minutes, from the checkout's root, that returns at most 8 files from OUT (none in sub-folders
# here). In order of value, each step under `timeout` and within its share of --budget (default
# 540 s: a 600 s call with room for the wheels and the packing; what a step leaves unused goes to
# those after it):
#   quick   scripts/gpu-suite.sh --quick --only env --only numerics --only determinism
#   speed   scripts/gpu-suite.sh --only env --only speed   (the NSA/FA2 grid, the model check)
#   probes  scripts/gpu-probes.sh                          (the launch settings' probe queue)
#   train   scripts/gpu-suite.sh --only env --only train   (whatever is left)
# always with the checkout on PYTHONPATH (the 2026-11-26c call lost a step to kernel_probe.py run
# without it). pydantic, which the images lack, comes from the wheel folder (--wheels, default .whl/),
# installed --no-deps into WORK/site. After EACH step what exists is packed into OUT: session.log
# (this summary), quick.json / speed.json / train.json (the suites' suite.json), probes.jsonl (the
# probe rows, each with its "step"), logs.tar.gz (probe .jsonl/.err, train logs and metrics, each
# step's output): 6 files, so a call killed at its limit still returns what finished.
#   --budget S  whole seconds for the four steps (300-540: the call's 600 s less 60 for the rest)
#   --wheels D  the wheel folder (default .whl/ in the checkout)
#   --work D    where the steps write before packing (default /tmp/gpu-session; emptied first when
#               this script made it, refused when it holds other files)
#   --plan      print the steps and their shares (JSON lines) and exit 0; needs no GPU, no python
# Exit: 0 when every step ran and passed, 1 when one failed or was cut by its limit, 2 on bad input
# (arguments, OUT not empty, pydantic missing with no wheels).
set -uo pipefail
usage="usage: scripts/gpu-session.sh OUT [--budget S] [--wheels DIR] [--work DIR] [--plan]"
die() { echo "gpu-session: $*" >&2; echo "$usage" >&2; exit 2; }
[ $# -ge 1 ] || die "OUT is missing"
[ "${1:0:1}" != "-" ] || die "the first argument is OUT, the folder the files come back from (got $1)"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$1"; shift
BUDGET=540
WHEELS="$REPO/.whl"
WORK="/tmp/gpu-session"
PLAN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) [ $# -ge 2 ] || die "--budget needs seconds"; BUDGET="$2"; shift 2 ;;
    --budget=*) BUDGET="${1#--budget=}"; shift ;;
    --wheels) [ $# -ge 2 ] || die "--wheels needs a folder"; WHEELS="$2"; shift 2 ;;
    --wheels=*) WHEELS="${1#--wheels=}"; shift ;;
    --work) [ $# -ge 2 ] || die "--work needs a folder"; WORK="$2"; shift 2 ;;
    --work=*) WORK="${1#--work=}"; shift ;;
    --plan) PLAN=1; shift ;;
    *) die "unknown argument $1" ;;
  esac
done
if ! [[ "$BUDGET" =~ ^[0-9]+$ ]] || [ "$BUDGET" -lt 300 ]; then
  die "--budget $BUDGET: give whole seconds, at least 300 (below it the quick step's share runs nothing)"
fi
if [ "$BUDGET" -gt 540 ]; then  # the call's timeout is BUDGET + 60 (the wheels, the packing), at most 600
  die "--budget $BUDGET: at most 540, one device call runs at most 600 s (a longer budget's last steps would be killed)"
fi

# name | weight (its seconds at --budget 540) | margin | what it runs (OUTDIR and --budget B are added).
# The weights, from the 2026-11-26c H100 call (bench/RESULTS.md, "The H100 run of 2026-11-26c"):
#   quick 75: that call's --budget 45 took 34.4 s in the suite and cut the paper shape's numerics
#     (G16 D128; the first shape took 26.4 s for an estimate of 13, its compiles); 60 s runs it.
#   speed 135: the full grid is estimated at 107 s (budget.py, the upper envelope of the timed
#     records) and needs --budget 115 (`--plan`); that call's --budget 100 took 88 s.
#   probes 290: the queue's limits add up to 375 s (scripts/gpu-probes.sh --list; a step starts with
#     30 s left: its 280 reaches the first five at their limits), but that H100 took 10-22 s a step:
#     what it leaves goes to train.
#   train 40 and all that is left: NSA at the shipped setting 54.3 s, the 64k run 17.6 s (budget.py).
# The margin (s) is kept from the step's share for the process start (python, torch, triton imports)
# and a last item past the section's end: the suite rewrites suite.json after each section, so a
# step killed inside its speed section would lose the whole grid.
STEPS=(
  "quick|75|15|scripts/gpu-suite.sh|--quick --only env --only numerics --only determinism"
  "speed|135|15|scripts/gpu-suite.sh|--only env --only speed"
  "probes|290|10|scripts/gpu-probes.sh|"
  "train|40|15|scripts/gpu-suite.sh|--only env --only train"
)
CALL_TIMEOUT=$((BUDGET + 60))
declare -A DIR=([quick]=q [speed]=s [probes]=p [train]=t)

weight_left() {  # the weights of step $1 and those after it
  local i=$1 sum=0
  for ((; i < ${#STEPS[@]}; i++)); do IFS='|' read -r _ w _ _ _ <<<"${STEPS[$i]}"; sum=$((sum + w)); done
  echo "$sum"
}

if [ "$PLAN" = 1 ]; then  # each step as if every one before it used all of its share
  left=$BUDGET
  for i in "${!STEPS[@]}"; do
    IFS='|' read -r name w margin script args <<<"${STEPS[$i]}"
    allot=$((left * w / $(weight_left "$i")))
    [ "$i" = $((${#STEPS[@]} - 1)) ] && allot=$left
    inner=$((allot - margin))
    skip=""
    [ "$inner" -lt 20 ] && skip=", \"skipped\": \"under 20 s unless the steps before leave time\""
    echo "{\"step\": \"$name\", \"weight\": $w, \"allot_s\": $allot, \"budget_s\": $inner, \"command\": \"$script WORK/${DIR[$name]} ${args:+$args }--budget $inner\"$skip}"
    left=$((left - allot))
  done
  echo "{\"budget_s\": $BUDGET, \"steps\": ${#STEPS[@]}, \"call_timeout_s\": $CALL_TIMEOUT, \"out_files\": [\"session.log\", \"quick.json\", \"speed.json\", \"train.json\", \"probes.jsonl\", \"logs.tar.gz\"]}"
  exit 0
fi

mkdir -p "$OUT" || die "cannot make $OUT"
OUT="$(cd "$OUT" && pwd -P)"  # physical, as realpath gives WORK below: the two checks compare them
if [ -n "$(ls -A "$OUT")" ]; then
  die "$OUT is not empty: the device returns at most 8 files from it, give an empty folder"
fi
WORK="$(realpath -m "$WORK")"
case "$WORK" in
  "$OUT" | "$OUT"/*) die "--work $WORK is inside OUT: the steps' files would come back one by one" ;;
esac
case "$OUT" in
  "$WORK"/*) die "OUT $OUT is inside --work $WORK, which is emptied first" ;;
esac
if [ -e "$WORK" ] && [ ! -d "$WORK" ]; then  # rm -rf below would delete it
  die "--work $WORK is a file, not a folder: give an empty or new folder"
fi
if [ -d "$WORK" ] && [ -n "$(ls -A "$WORK")" ] && [ ! -f "$WORK/.gpu-session" ]; then
  die "--work $WORK has files this script did not write: give an empty or new folder"
fi
rm -rf "$WORK" && mkdir -p "$WORK" && touch "$WORK/.gpu-session" || die "cannot make $WORK"
LOG="$WORK/session.log"
say() { echo "$*" | tee -a "$LOG"; }

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"; else PY="$(command -v python3 || command -v python)"; fi
fi
export PYTHON="$PY" PYTHONUNBUFFERED=1
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

pack() {  # everything that exists, into at most 6 files directly in OUT (each renamed in place)
  local f
  for f in quick speed train; do
    if [ -f "$WORK/${DIR[$f]}/suite.json" ]; then
      cp "$WORK/${DIR[$f]}/suite.json" "$OUT/$f.json.tmp" && mv -f "$OUT/$f.json.tmp" "$OUT/$f.json"
    fi
  done
  if compgen -G "$WORK/p/*.jsonl" >/dev/null; then
    # each row with its step, the steps in the order they ran: bench/gpu/*-probe-queue.jsonl as it is
    ls -1tr "$WORK"/p/*.jsonl | while read -r f; do
      sed -n "s/^{/{\"step\": \"$(basename "$f" .jsonl)\", /p" "$f"
    done >"$OUT/probes.jsonl.tmp" && mv -f "$OUT/probes.jsonl.tmp" "$OUT/probes.jsonl"
  fi
  (cd "$WORK" && find . -path ./site -prune -o -type f \( -name '*.jsonl' -o -name '*.err' -o -name '*.log' \
     -o -name '*.out' \) -size -8M -print | sort) >"$WORK/tarlist"
  tar czf "$OUT/logs.tar.gz.tmp" -C "$WORK" -T "$WORK/tarlist" 2>/dev/null && mv -f "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
  cp "$LOG" "$OUT/session.log.tmp" && mv -f "$OUT/session.log.tmp" "$OUT/session.log"
}

say "gpu-session: $(date -u +%FT%TZ), budget ${BUDGET} s, checkout $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '(no git)'), python $PY"
command -v nvidia-smi >/dev/null && say "gpu: $(nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"

# pydantic (and yaml): the image's, else the wheel folder's, --no-deps (with --target pip ignores what
# is installed and would ask the folder for typing-extensions and pyyaml too; docs/gpu-suite.md).
if ! "$PY" -c "import pydantic, yaml" 2>/dev/null; then
  shopt -s nullglob; whls=("$WHEELS"/*.whl); shopt -u nullglob
  if [ ${#whls[@]} -eq 0 ]; then
    echo "gpu-session: $PY cannot import pydantic/yaml and there are no wheels (*.whl) in $WHEELS." >&2
    echo "Fix: pip download them into .whl/ and carry it (docs/gpu-suite.md \"A GPU session in one call\")." >&2
    pack
    exit 2
  fi
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" "${whls[@]}" >>"$LOG" 2>&1 \
     || ! PYTHONPATH="$PYTHONPATH:$WORK/site" "$PY" -c "import pydantic, yaml" >>"$LOG" 2>&1; then
    echo "gpu-session: the wheels of $WHEELS did not make pydantic/yaml importable ($LOG says why)." >&2
    pack
    exit 2
  fi
  export PYTHONPATH="$PYTHONPATH:$WORK/site"
  say "wheels: ${#whls[@]} from $WHEELS installed --no-deps into $WORK/site"
fi

table() {  # the NSA/FA2 lines of a speed suite.json, as bench/RESULTS.md's table has them
  "$PY" - "$1" <<'EOF' 2>/dev/null
import json, sys
recs = json.load(open(sys.argv[1]))["sections"].get("speed", {}).get("records", [])
shapes = {}
for r in recs:
    shapes.setdefault(r["shape"], []).append(r)
for shape, rs in shapes.items():
    rs.sort(key=lambda r: r["T"])
    ratio = [str(r.get("nsa_over_flash_fwd_bwd", r.get("error", "?")))[:40] for r in rs]
    ms = [f"{r.get('nsa_fwd_bwd_ms', '?')} / {r.get('sdpa_flash_fwd_bwd_ms', '?')}" for r in rs]
    print(f"| NSA/FA2 fwd+bwd {shape} | " + " | ".join(f"{r['T'] // 1024}k" for r in rs) + " |")
    print("| ratio | " + " | ".join(ratio) + " |")
    print("| NSA ms / FA2 ms | " + " | ".join(ms) + " |")
EOF
}

start=$SECONDS
status=0
for i in "${!STEPS[@]}"; do
  IFS='|' read -r name w margin script args <<<"${STEPS[$i]}"
  left=$((BUDGET - (SECONDS - start)))
  allot=$((left * w / $(weight_left "$i")))
  [ "$i" = $((${#STEPS[@]} - 1)) ] && allot=$left
  inner=$((allot - margin))
  if [ "$inner" -lt 20 ]; then
    say "{\"step\": \"$name\", \"rc\": \"skipped\", \"seconds\": 0, \"allot_s\": $allot}"
    status=1
    continue
  fi
  t0=$SECONDS
  # SIGINT, not TERM: the suite then stops its training subprocess (its own session) on the way out;
  # KILL 5 s later (a shell started in the background ignores INT, and its children inherit that).
  # shellcheck disable=SC2086  # the arguments are words
  timeout -s INT -k 5 "$allot" "$REPO/$script" "$WORK/${DIR[$name]}" $args --budget "$inner" 2>&1 | tee "$WORK/$name.out"
  rc=${PIPESTATUS[0]}
  say "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0)), \"allot_s\": $allot, \"budget_s\": $inner}"
  [ "$rc" = 0 ] || status=1
  if [ "$name" = speed ] && [ -f "$WORK/s/suite.json" ]; then
    table "$WORK/s/suite.json" | tee -a "$LOG"
  fi
  pack
done

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE '[a-z][0-9]{3}' | head -1 | tr 'A-Z' 'a-z')
tag="$(date -u +%F)-${gpu:-gpu}"
say "gpu-session: done in $((SECONDS - start)) s of $BUDGET, $([ $status = 0 ] && echo 'every step passed' || echo 'a step failed or was cut (rc above)')"
say "device run (docs/gpu-suite.md): command \"scripts/gpu-session.sh \\\"\$OUT\\\" --budget $BUDGET\", carry [\".whl\"], timeout_s $CALL_TIMEOUT"
say "record (add a letter to $tag when the day has runs already, as 2026-11-26c): from the reply's files_at,"
say "  quick.json -> bench/gpu/$tag-numerics-quick.json, speed.json -> bench/gpu/$tag-speed.json,"
say "  train.json -> bench/gpu/$tag-train.json, probes.jsonl -> bench/gpu/$tag-probe-queue.jsonl,"
say "  logs.tar.gz: t/train-NAME.log -> bench/gpu/$tag-train-NAME.log; session.log's lines into the bench/RESULTS.md section"
pack
exit $status
