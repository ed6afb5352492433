#!/usr/bin/env bash
# Issue 17 on the device, in sections with their own time caps (each writes a log into $OUT):
#   bash scripts/device/device_gdn.sh [section ...]
#   check    aka check gdn_prefill on smoke+edge and on the full set (2 rounds), fa4_decode edge
#   bench    aka bench gdn_prefill: baseline, promoted, fla, FlashQLA side by side, eager + graph
#   profile  scripts/device/gdn_breakdown.py: per-kernel GPU time, baseline / fla / FlashQLA
# Needs .whl/ carried (pydantic, fla-core); FlashQLA's wheels (tilelang, z3-solver, apache-tvm-ffi,
# torch-c-dlpack-ext) exceed one call's carry limit: install them into /tmp/site over two calls made
# back to back while the machine is warm (.qla1: tilelang 0.1.15; .qla2: the rest, with
# apache-tvm-ffi 0.1.12 and z3-solver 4.15.4: TileLang 0.1.15 fails to import with 0.1.15 / 4.15.8,
# H200 2026-12-05). CAP_<section>=seconds overrides a cap.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/aka-gdn}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLA_FLASH_QLA=0 COLUMNS=160
for d in .whl .qla1 .qla2; do
  if ls $d/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $d/*.whl
  fi
done
export PYTHONPATH="/tmp/site:$PWD" TRITON_CACHE_DIR=/tmp/aka_triton_cache
sections=${*:-check bench}
TAIL=${TAIL:-16}
. scripts/device/device_sections.sh
python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__,
"triton", triton.__version__, torch.cuda.get_device_name(0))'
checks() {
  python3 -m aka check gdn_prefill --kernel kernels/gdn_prefill/baseline.py --shapes smoke,edge --rounds 2 | tail -4
  python3 -m aka check gdn_prefill --kernel kernels/gdn_prefill/baseline.py --shapes full --rounds 2 \
    --json "$OUT/full_gdn.json" | tail -16
  python3 -m aka check fa4_decode --kernel kernels/fa4_decode/baseline.py --shapes edge --rounds 2 | tail -4
}
export OUT; export -f checks
run check 330 bash -c checks
run bench 540 python3 -m aka bench gdn_prefill --impl ${IMPLS:-baseline,promoted,fla,flashqla} --shapes full \
  --time-cap ${TIME_CAP:-1.0} --speedup graph --json "$OUT/bench_gdn.json"
run profile 300 python3 scripts/device/gdn_breakdown.py --impl baseline,fla,flashqla --shapes ${PROFILE_SHAPES:-G1,G4,G5,G7}
