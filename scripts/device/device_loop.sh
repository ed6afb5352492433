#!/usr/bin/env bash
# Issue 36 on the H200, one device call: `aka optimize OP --budget N` as a new user runs it, stdout
# into a file (each line stamped by the wall clock from outside, so the first line's delay counts the
# interpreter's start too), from an empty Triton cache on the first run of the call; then
# `aka bench OP --impl promoted` on the same machine, whose graph column the loop's incumbent times
# must agree with. Runs in a scratch git repository made from this working tree (promotions commit
# there, never here). Everything lands in $OUT/loop.tgz (logs, run.json, attempts.jsonl, bench JSON,
# knowledge.json).
# Usage (device, repo root): bash scripts/device/device_loop.sh STEP...   with STEP one of
#   opt:OP     an optimize run (env BUDGET=20, MAX_TIME=420, CAP=560, each also per op as BUDGET_<op>
#              etc.; FLAGS="--no-profile": the profile never runs before the first candidate, and after
#              the candidates it would spend device minutes this script does not need)
#   bench:OP   aka bench OP --impl promoted (graph beside eager; env TIME_CAP=1)
#   cold       empty the Triton cache before the next step
set -o pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c 'import pydantic' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}:/tmp/site" FLA_FLASH_QLA=0
unset TRITON_INTERPRET PYTHONUNBUFFERED  # a user's default: block-buffered stdout into a file
OUT=${OUT:-/tmp/loop_out}; mkdir -p "$OUT/loop"
L=$OUT/loop
SCRATCH=/tmp/aka_loop_repo
if [ ! -d "$SCRATCH/.git" ]; then
  mkdir -p "$SCRATCH" && cp -r workloads kernels "$SCRATCH/"
  (cd "$SCRATCH" && printf '/runs/\n__pycache__/\n' > .gitignore && git init -q && git add -A \
    && git -c user.email=aka@device -c user.name=aka commit -qm "scratch copy") || exit 1
fi
export AKA_ROOT=$SCRATCH GIT_AUTHOR_NAME=aka GIT_AUTHOR_EMAIL=aka@device GIT_COMMITTER_NAME=aka \
  GIT_COMMITTER_EMAIL=aka@device
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/aka_triton_cache}
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,temperature.gpu --format=csv,noheader
  python3 -c 'import sys, torch, triton, pydantic; print("python", sys.version.split()[0], "torch", torch.__version__,
"triton", triton.__version__, "pydantic", pydantic.__version__)'; nproc; date -u; } | tee "$L/env.txt"

stamp() {  # each line with the seconds since $1 (epoch), as it arrives
  python3 -c 'import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin:
    print(f"{time.time() - t0:7.1f} {line}", end="", flush=True)' "$1"
}
i=0
for step in "$@"; do
  i=$((i + 1))
  case $step in
    cold) rm -rf "$TRITON_CACHE_DIR"; echo "== Triton cache emptied ($TRITON_CACHE_DIR)" ;;
    opt:*)
      op=${step#opt:}; t0=$(date +%s.%N)
      v=BUDGET_$op; budget=${!v:-${BUDGET:-20}}; v=MAX_TIME_$op; max_time=${!v:-${MAX_TIME:-420}}
      v=CAP_$op; cap=${!v:-${CAP:-560}}
      echo "== $i optimize $op --budget $budget --max-time $max_time ${FLAGS---no-profile}"
      : > "$L/opt$i-$op.out"
      # stdout is a plain file, as a user's redirect; a follower stamps each line as it appears there
      ( tail -n +1 -F "$L/opt$i-$op.out" 2>/dev/null | stamp "$t0" > "$L/opt$i-$op.stamped" ) &
      follower=$!
      timeout -s INT -k 20 "$cap" python3 -m aka optimize "$op" --budget "$budget" \
        --max-time "$max_time" ${FLAGS---no-profile} > "$L/opt$i-$op.out" 2>"$L/opt$i-$op.err"
      echo "== rc $? after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
      sleep 1; pkill -P "$follower" 2>/dev/null; kill "$follower" 2>/dev/null
      head -3 "$L/opt$i-$op.stamped"
      grep -Ev '^ *[0-9.]+ (│ *[0-9]* *│|┏|┃|┡|└|├|┗)' "$L/opt$i-$op.stamped" | cut -c1-200 | tail -45
      tail -5 "$L/opt$i-$op.err"
      run=$(ls -td "$SCRATCH/runs/$op"/*/ 2>/dev/null | head -1)
      [ -n "$run" ] && cp "$run/run.json" "$L/run$i-$op.json" && cp "$run/attempts.jsonl" "$L/attempts$i-$op.jsonl"
      cp "$SCRATCH/kernels/$op/knowledge.json" "$L/knowledge$i-$op.json" 2>/dev/null
      for f in "$SCRATCH/kernels/$op"/promoted.*; do [ -f "$f" ] && cp "$f" "$L/$i-$op-$(basename "$f")"; done
      (cd "$SCRATCH" && git log --oneline -3) ;;
    bench:*)
      op=${step#bench:}
      echo "== $i bench $op --impl promoted"
      timeout -k 20 "${BCAP:-300}" python3 -m aka bench "$op" --impl promoted --speedup graph \
        --time-cap "${TIME_CAP:-1}" --json "$L/bench$i-$op.json" > "$L/bench$i-$op.out" 2>&1
      echo "rc $?"; grep -v "^│ *│" "$L/bench$i-$op.out" | tail -30 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
tar czf "$OUT/loop.tgz" -C "$OUT" loop && ls -la "$OUT/loop"
