#!/usr/bin/env bash
# Issue 16 on the device, in sections with their own time caps (each writes a log into $OUT):
#   bash scripts/device/device_gate.sh [section ...]
#   smoke     aka check fa4_decode smoke+edge (the candidate's process on CUDA, the profiler)
#   full      the three baselines and the promoted gdn kernel on the full sets, 2 rounds
#   gputests  the gate's GPU tests (device faults, OOM, side stream, profiler, timer tampering)
#   bench     aka bench with the timed outputs checked (eager + graph), fa4_decode and gdn_prefill
#   redteam   scripts/red_team.py: every red-team kernel on smoke+edge+full
#   checks    issue 37: baseline and promoted of every op through `aka check` as a user runs it on a GPU
#             (smoke+edge+full, 3 rounds + the warm call, the coverage line), one JSON report each
#   ordering  issue 37: the red team's GPU-only kernels through the gate (an ordering race: repeats)
# CAP_<section>=seconds overrides a cap. Needs .whl/ carried (pydantic; fla-core for the fla competitor).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/aka-gate}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLA_FLASH_QLA=0 COLUMNS=160
if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c 'import pydantic' 2>/dev/null; then
  [ -d /tmp/site/pydantic ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export TRITON_CACHE_DIR=/tmp/aka_triton_cache  # kept while the machine stays warm: compile once
sections=${*:-smoke full gputests bench redteam}  # checks and ordering only when named
TAIL=${TAIL:-12}
. scripts/device/device_sections.sh  # run NAME CAP COMMAND... (cwd is the repository root)
python3 -c 'import sys, torch, triton, pydantic; print("python", sys.version.split()[0], "torch", torch.__version__,
"triton", triton.__version__, "pydantic", pydantic.__version__, torch.cuda.get_device_name(0))'
df -h /dev/shm | tail -1
fulls() {
  for op in gdn_prefill fa4_prefill fa4_decode; do
    python3 -m aka check $op --kernel kernels/$op/baseline.py --shapes full --rounds 2 --json "$OUT/full_$op.json" \
      | tail -3
  done
  # without --kernel: the promoted kernel (promoted.py, or baseline.py with promoted.json's CONFIG values)
  python3 -m aka check gdn_prefill --shapes smoke,edge,full --rounds 2 --json "$OUT/full_gdn_promoted.json" | tail -3
}
benches() {
  python3 -m aka bench fa4_decode --impl baseline --shapes full --json "$OUT/bench_fa4_decode.json" | tail -30
  python3 -m aka bench gdn_prefill --impl baseline,promoted --shapes full --json "$OUT/bench_gdn.json" | tail -16
}
checks() {  # CHECK_OPS: which ops (default all three); CHECK_IMPLS: which kernels (default both)
  for op in ${CHECK_OPS:-gdn_prefill fa4_decode fa4_prefill}; do
    for impl in ${CHECK_IMPLS:-baseline promoted}; do
      [ -f kernels/$op/$impl.py ] || { echo "-- $op $impl: no kernels/$op/$impl.py (nothing promoted), skipped"; continue; }
      echo "-- $op $impl"
      python3 -m aka check $op --kernel kernels/$op/$impl.py --json "$OUT/check_${op}_$impl.json" | tail -3
    done
  done
}
export OUT CHECK_OPS CHECK_IMPLS; export -f fulls benches checks
run smoke 120 python3 -m aka check fa4_decode --shapes smoke,edge --rounds 2 --json "$OUT/smoke.json"
run full 330 bash -c fulls
run gputests 240 env AKA_TEST_ON_GPU=1 python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider -rfE -x \
  tests/evaluate/test_redteam.py tests/evaluate/test_adversarial.py -k "gpu or side_stream or device_kernels or matmul"
run bench 300 bash -c benches
run redteam 560 python3 scripts/red_team.py --out "$OUT/redteam"
run checks 540 bash -c checks
run ordering 200 env AKA_TEST_ON_GPU=1 python3 -m pytest -v -m gpu -p no:cacheprovider -rfE \
  "tests/evaluate/test_redteam.py::test_gpu_only_kernels_fail_the_gate_on_a_gpu"
