#!/usr/bin/env bash
# Both fa4 ops through `aka bench` in one device call: prefill then decode, each under its own time cap;
# by default the baseline beside torch SDPA (the contract's competitor, kernels/fa4_*/competitors.py).
# Per op a log with the table, a CSV and the full JSON land in $OUT.
# Usage (device): bash scripts/device/run.sh fa4[:--time-cap,0.5]   (ARGs go to both aka bench calls)
#   FA4_IMPLS       --impl of both (baseline,sdpa); CONFIG variants as baseline,baseline+BLOCK_N=32,sdpa
#   PREFILL_IMPLS / DECODE_IMPLS   per op, over FA4_IMPLS
#   PREFILL_ARGS / DECODE_ARGS     more aka bench options per op (--shapes P1,P7 ...)
#   PREFILL_CAP / DECODE_CAP       seconds (300 / 240)
set -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 COLUMNS=200
OUT=${OUT:-/tmp/fa4_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/env.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)' >> "$OUT/env.txt" 2>&1
rc=0
for op in prefill decode; do
  case $op in
    prefill) impls=${PREFILL_IMPLS:-${FA4_IMPLS:-baseline,sdpa}}; cap=${PREFILL_CAP:-300}; more=${PREFILL_ARGS:-} ;;
    decode) impls=${DECODE_IMPLS:-${FA4_IMPLS:-baseline,sdpa}}; cap=${DECODE_CAP:-240}; more=${DECODE_ARGS:-} ;;
  esac
  echo "== aka bench fa4_$op --impl $impls $* $more (cap ${cap} s)"
  # shellcheck disable=SC2086  # $more: word-split on purpose
  timeout "$cap" python3 -m aka bench "fa4_$op" --impl "$impls" --csv "$OUT/fa4_$op.csv" --json "$OUT/fa4_$op.json" \
    "$@" $more > "$OUT/$op.log" 2>&1
  r=$?; echo "$op rc $r" >> "$OUT/env.txt"; [ $r -ne 0 ] && rc=$r
  tail -50 "$OUT/$op.log"
done
cat "$OUT/env.txt"
exit $rc
