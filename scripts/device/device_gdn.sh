#!/usr/bin/env bash
# Issue 17 on the device, in sections with their own time caps (each writes a log into $OUT):
#   bash scripts/device/device_gdn.sh [section ...]
#   check    aka check gdn_prefill on smoke+edge and on the full set (2 rounds), fa4_decode edge
#   bench    aka bench gdn_prefill: baseline, promoted, fla, FlashQLA side by side, eager + graph
#   profile  scripts/device/gdn_breakdown.py: per-kernel GPU time, baseline / fla / FlashQLA
# Needs .whl/ carried (pydantic, fla-core), and for FlashQLA .qla/ (carry [".whl", ".qla"]): one xz archive of
# FlashQLA 0.1.3, TileLang 0.1.15 and their dependencies' installed files, 38 MB, built here by
# scripts/device/flashqla_archive.sh (the wheels alone, 80 MB, exceed one call's 64 MiB; the older way, .qla1
# and .qla2 installed over two calls back to back, still works). CAP_<section>=seconds overrides a cap.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/aka-gdn}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FLA_FLASH_QLA=0 COLUMNS=160
if [ -f .qla/qla.tar.xz ]; then mkdir -p /tmp/site && tar -xJf .qla/qla.tar.xz -C /tmp/site; fi
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
