#!/usr/bin/env bash
# All device checks of one session in one call (the H200 lease is short): each section has its own
# time cap and writes one log straight into $OUT, so a call cut off at its limit still returns what
# finished. Details of every section are packed into $OUT/details.tgz at the end.
#   bash scripts/device/device_session.sh [section ...]     sections: hw gate check bench akabench gdnprep gdn profile regress
# A section's cap can be raised or lowered with CAP_<section>=seconds (e.g. CAP_gate=200).
# Needs .whl/ carried (pydantic and fla-core wheels: the device image lacks them).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/aka-session}; mkdir -p "$OUT"; DET=/tmp/aka-details; rm -rf "$DET"; mkdir -p "$DET"
export PYTHONUNBUFFERED=1 FLA_FLASH_QLA=0 COLUMNS=200
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export TRITON_CACHE_DIR=/tmp/aka_triton_cache  # shared by every section: compile once

sections=${*:-hw gate bench akabench check gdnprep gdn profile regress}
. scripts/device/device_sections.sh  # run NAME CAP COMMAND... (cwd is the repository root)

{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, torch, triton, pydantic; print("python", sys.version.split()[0], "torch", torch.__version__,
"triton", triton.__version__, "pydantic", pydantic.__version__)'
  python3 -c 'import fla; print("fla", fla.__version__)' 2>&1 | tail -1
} > "$DET/env.txt" 2>&1
cat "$DET/env.txt"  # not in $OUT: at most 8 files come back

# Caps sum to ~560 s: the order is the order of importance if the call is cut short.
run hw 25 python3 scripts/device/device_hw_check.py
run gate 130 env OUT="$DET/gate" bash scripts/device/gpu_tests.sh
# check before akabench: a broken kernel would spoil the table (the float64 references run on the GPU)
run check 130 python3 -m aka check gdn_prefill --shapes full --rounds 2 --json "$DET/check_gdn_full.json"
run bench 200 env OUT="$DET/bench" SKIP_TABLE=1 bash scripts/device/gpu_bench_checks.sh  # the table: akabench
# akabench: on a fresh H200 (2026-11-29) 8 of 10 shapes took 250 s: fla autotunes every new head layout
# (15-48 s each) and the table prints only at the end, so give it the time (the lines show progress).
run akabench 420 env XDG_CACHE_HOME="$DET/cache" python3 -m aka bench gdn_prefill --impl baseline,fla --shapes full \
  --csv "$OUT/aka_bench_gdn_prefill.csv" --json "$DET/aka_bench_gdn_prefill.json"
# gdnprep: where the GPU time goes per kernel (the prep among them), G1 and G3, aka beside FlashQLA
run gdnprep 45 python3 scripts/device/gdn_breakdown.py --impl baseline,flashqla --shapes ${GDNPREP_SHAPES:-G1,G3} --iters 10
# gdn: CONFIG variants beside the baseline in one aka bench (IMPL+KEY=VALUE, graph replay)
run gdn 60 python3 -m aka bench gdn_prefill --impl ${GDN_IMPLS:-baseline,baseline+cp=false,baseline+fwd=auto} \
  --shapes G1,G5,G7 --time-cap 1.0 --speedup graph
run profile 80 env OUT="$DET/profile" PROFILE_CAP=60 TESTS_CAP=12 bash scripts/device/device_profile.sh
run regress 70 env OUT="$DET/regress" FULL_N=2 REPO_CAP=15 bash scripts/device/device_regress.sh

tar czf "$OUT/details.tgz" -C "$DET" . 2>/dev/null
ls -la "$OUT"
