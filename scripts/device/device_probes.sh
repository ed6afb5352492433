#!/usr/bin/env bash
# Issue 18 on the H200, one device call: the fa4 profile and host-cost probes (shapes and inputs from the
# contract, scripts/device/fa4_contract.py).
#   ncu        Nsight Compute on NCU_SHAPE (P7), ours (the baseline: on sm_90 its Gluon kernel, else its Triton
#              kernel) beside SDPA.
#   dncu       Nsight Compute on fa4_decode's split and merge kernels, DNCU_SHAPES (D2-q1 D2-q4),
#              DNCU_IMPL (baseline): why q_len 4 tiles sit further from the bandwidth floor.
#   hoststeps  scripts/device/fa4_host_steps.py: each step of a warm eager call's host path.
#   hostcost   scripts/device/fa4_host_cost.py: the whole call against Triton's launch paths.
# (The 2026-12-03 timing and eager-vs-graph gap probes answered their questions, recorded in
# docs/perf/fa4_decode.md and docs/perf/fa4_prefill.md, and were deleted.)
# Carried wheels (.whl/: pydantic, fla-core; .rayw/: ray and its dependencies) are installed into
# /tmp/site first, so later calls on the warm machine find them. Logs land in $OUT (<= 8 files).
# Usage (device, repo root): bash scripts/device/device_probes.sh        (STEPS="ncu" by default)
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/probes_out}; mkdir -p "$OUT"
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
if [ -d .rayw ]; then  # ray: a wheel stripped of Java, the dashboard's web client, rllib and llm (xz)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .rayw/*.whl
  python3 -c "import tarfile; tarfile.open('.rayw/ray-min.tar.xz').extractall('/tmp/site')"
fi
export PYTHONPATH="/tmp/site:$PWD"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  python3 -c 'import ray; print("ray", ray.__version__)' 2>&1 | tail -1
  echo "ncu: ${NCU:-missing}"; [ -n "$NCU" ] && "$NCU" --version | tail -1
} 2>&1 | tee "$OUT/env.txt"
STEPS=${STEPS:-ncu}
for s in $STEPS; do
  case $s in
    ncu)
      for impl in ${NCU_IMPLS:-baseline sdpa}; do
        echo "== ncu ${NCU_SHAPE:-P7} $impl"
        SEC=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy
             --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats)
        MET=(--metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum)
        timeout 120 "$NCU" --profile-from-start off --clock-control none "${SEC[@]}" "${MET[@]}" \
          python3 scripts/device/fa4_prefill_ncu.py --impl "$impl" --shape "${NCU_SHAPE:-P7}" > "$OUT/ncu_$impl.txt" 2>&1 \
          || timeout 120 "$NCU" --profile-from-start off --clock-control none "${SEC[@]}" \
          python3 scripts/device/fa4_prefill_ncu.py --impl "$impl" --shape "${NCU_SHAPE:-P7}" > "$OUT/ncu_$impl.txt" 2>&1
        grep -E "^  [a-zA-Z_]|Duration|Registers Per|Achieved Occupancy|Theoretical Occ|Compute \(SM\) Thr|Memory Thr|Issue Slots Busy|No Eligible|gmma|Executed Ipc A|Shared Memory Config|Dynamic Shared|Block Size|Grid Size|Warp Cycles Per Issued" "$OUT/ncu_$impl.txt" | head -60
      done ;;
    dncu)
      for shape in ${DNCU_SHAPES:-D2-q1 D2-q4}; do
        echo "== ncu fa4_decode ${DNCU_IMPL:-baseline} $shape"
        SEC=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy
             --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis)
        timeout 150 "$NCU" --profile-from-start off --clock-control none "${SEC[@]}" \
          python3 scripts/device/fa4_decode_ncu.py --impl "${DNCU_IMPL:-baseline}" --shape "$shape" > "$OUT/dncu_$shape.txt" 2>&1
        grep -E "^  [a-zA-Z_]|profiled|Duration|Registers Per|Achieved Occupancy|Theoretical Occ|Compute \(SM\) Thr|Memory Thr|DRAM Thr|L2 Hit|Issue Slots Busy|No Eligible|Executed Ipc A|Dynamic Shared|Block Size|Grid Size|Warp Cycles Per Issued|Mem Busy|Max Bandwidth|Waves Per SM" "$OUT/dncu_$shape.txt" | head -70
      done ;;
    hoststeps) echo "== host steps"; timeout 150 python3 scripts/device/fa4_host_steps.py 2>&1 | tee "$OUT/host_steps.txt" ;;
    hostcost) echo "== host cost"; timeout 150 python3 scripts/device/fa4_host_cost.py 2>&1 | tee "$OUT/host_cost.txt" ;;
    *) echo "device_probes.sh: unknown step '$s' (ncu dncu hoststeps hostcost)" ;;
  esac
done
ls "$OUT"
