#!/usr/bin/env bash
# One device call for both fa4 benchmarks: prefill then decode, each under its own time cap,
# logs + markdown tables under $OUT (at most 8 files come back), the compact tables printed last.
# Usage (device): bash scripts/device/device_fa4.sh [--sweep]   (PREFILL_CAP / DECODE_CAP seconds; PREFILL_ARGS / DECODE_ARGS)
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/fa4_out}; mkdir -p "$OUT"
export FA4_SCRATCH=/tmp/fa4_scratch; rm -rf "$FA4_SCRATCH"; mkdir -p "$FA4_SCRATCH"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/env.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)' >> "$OUT/env.txt" 2>&1
if [ "${1:-}" = "--sweep" ]; then  # warp-specialisation probe in its own process (a compiler crash stays there)
  timeout "${WS_CAP:-45}" python3 scripts/device/bench_fa4_prefill.py --ws-probe > "$OUT/prefill.log" 2>&1; echo "ws probe rc $?" >> "$OUT/env.txt"
fi
timeout "${PREFILL_CAP:-125}" python3 scripts/device/bench_fa4_prefill.py "$@" ${PREFILL_ARGS:-} >> "$OUT/prefill.log" 2>&1; echo "prefill rc $?" >> "$OUT/env.txt"
timeout "${DECODE_CAP:-95}" python3 scripts/device/bench_fa4_decode.py "$@" ${DECODE_ARGS:-} > "$OUT/decode.log" 2>&1; echo "decode rc $?" >> "$OUT/env.txt"
cat "$OUT/env.txt"
grep -h "^sweep\|FAILED\|Error" "$OUT/prefill.log" "$OUT/decode.log" | cut -c1-260 | tail -30
for f in fa4_prefill.md fa4_decode.md; do [ -f "$OUT/$f" ] && grep -v "^\* \`" "$OUT/$f"; done
for f in prefill decode; do [ -f "$OUT/fa4_$f.md" ] || { echo "== partial $f"; grep '^{"id"' "$OUT/$f.log" | cut -c1-220; }; done
