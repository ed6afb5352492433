#!/usr/bin/env bash
# Issue 4 (benchmark harness) checks on the device machine, one call from the repository root:
#   bash scripts/device/gpu_bench_checks.sh
# 1. the bench's gpu-marked tests (tests/evaluate/test_gpu_timing.py): side-stream work is timed, one kernel twice agrees
# 2. scripts/device/bench_stability.py: gdn_prefill baseline timed twice in one run, per-shape spread, ABBA vs itself
# 3. `aka bench gdn_prefill --impl baseline,fla --shapes full`: the side-by-side table, one worker process
# fla must be importable (PYTHONPATH) for the fla column; FLA_FLASH_QLA=0 keeps it on fla's Triton path.
# Logs, CSV and JSON go to $OUT (or /tmp/aka-bench-out). The calibration cache goes there too, so it comes back.
set -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
export AKA_TEST_ON_GPU=1  # tests/conftest.py: no interpreter in this process
unset TRITON_INTERPRET
export FLA_FLASH_QLA=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # pip install -e . may fail offline
OUT="${OUT:-/tmp/aka-bench-out}"
mkdir -p "$OUT"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-$OUT/cache}"

python3 -c 'import torch, triton; assert torch.cuda.is_available(), "no CUDA device";
print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))' || exit 1
python3 -c 'import fla; print("fla", getattr(fla, "__version__", "?"))' || echo "fla not importable: its column will be skipped"
status=0

echo "== 1. gpu-marked bench tests"
if python3 -c 'import pytest' 2>/dev/null; then
  python3 -m pytest -q -m gpu -p no:cacheprovider -rA tests/evaluate/test_gpu_timing.py 2>&1 | tee "$OUT/gpu_tests.log" | grep -v "^$" | tail -15
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
else
  echo "pytest not importable here: gpu tests NOT run"; status=1
fi

echo "== 2. twice-timed stability (gdn_prefill baseline, full set)"
python3 scripts/device/bench_stability.py --op gdn_prefill --shapes full --abba --json "$OUT/stability.json" \
  2>&1 | tee "$OUT/stability.txt" | tail -30
[ "${PIPESTATUS[0]}" = 0 ] || status=1

if [ "${SKIP_TABLE:-0}" = 1 ]; then  # scripts/device/device_session.sh runs it as its own section (akabench)
  echo "== 3. skipped (SKIP_TABLE=1)"
else
  echo "== 3. aka bench gdn_prefill --impl baseline,fla --shapes full"
  COLUMNS=160 python3 -m aka bench gdn_prefill --impl baseline,fla --shapes full \
    --csv "$OUT/gdn_prefill_baseline_fla.csv" --json "$OUT/gdn_prefill_baseline_fla.json" 2>&1 | tee "$OUT/bench_table.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
cp -f "$XDG_CACHE_HOME/aka/calibration.json" "$OUT/" 2>/dev/null
echo "exit status $status"
exit $status
