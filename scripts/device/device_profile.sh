#!/usr/bin/env bash
# Issue 9 on the H200, one device call (~3 min): does ncu read counters here, `aka profile gdn_prefill
# --shape G1`, the baseline's compile stats against `cuobjdump -res-usage` of Triton's cached cubins,
# then the gpu-marked profile tests. Logs and the summary JSON land in $OUT (7 files).
# Usage (device, repo root): bash scripts/device/device_profile.sh        (PROFILE_CAP / TESTS_CAP seconds)
set -o pipefail
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/aka_triton_cache}  # fresh: its cubins are this run's
OUT=${OUT:-/tmp/profile_out}; mkdir -p "$OUT"
KEEP=/tmp/aka_ncu_keep; rm -rf "$KEEP"; mkdir -p "$KEEP"

# aka needs pydantic, which the device image lacks: install carried wheels (.whl/) when present.
if ! python3 -c 'import pydantic' 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, pydantic; print("torch", torch.__version__, "triton", triton.__version__, "pydantic", pydantic.__version__)'
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
  echo "ncu: ${NCU:-missing}"; [ -n "$NCU" ] && "$NCU" --version | tail -1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== aka profile gdn_prefill --shape G1"
timeout "${PROFILE_CAP:-200}" python3 -m aka profile gdn_prefill --shape G1 --json "$OUT/profile_G1.json" \
  --keep "$KEEP" 2>&1 | tee "$OUT/profile_G1.log"
echo "profile rc ${PIPESTATUS[0]}"
cp "$KEEP/profile.csv" "$OUT/ncu_G1.csv" 2>/dev/null
cat "$KEEP"/ncu*.log > "$OUT/ncu.log" 2>/dev/null
echo "== ncu log (head)"; head -15 "$OUT/ncu.log" 2>/dev/null | cut -c1-200

echo "== compile stats (aka) vs cuobjdump -res-usage (Triton's cubins in $TRITON_CACHE_DIR)"
python3 - "$OUT/profile_G1.json" "$TRITON_CACHE_DIR" > "$OUT/res_usage.txt" 2>&1 <<'EOF'
import json, pathlib, sys
from aka.evaluate.static.compstats import cuobjdump_path, parse_res_usage
import subprocess
summary = json.loads(pathlib.Path(sys.argv[1]).read_text())
ours = {}
for k in (summary.get("compile") or {}).get("kernels", []):
    ours.setdefault(k["name"], []).append((k["n_regs"], k["n_spills"], k["regs_from"]))
tool = cuobjdump_path()
print("cuobjdump:", tool)
for cubin in sorted(pathlib.Path(sys.argv[2]).glob("*/*.cubin")):
    out = subprocess.run([tool, "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    for name, use in parse_res_usage(out).items():
        mine = ours.get(name, [])
        # the driver's local size (Triton's n_spills * 4) is the stack frame plus static local memory
        local = use.get("STACK", 0) + use.get("LOCAL", 0)
        match = any(r == use["REG"] and s == local // 4 for r, s, _ in mine)
        print(f"{name}: cuobjdump REG {use['REG']} STACK+LOCAL {local} B | aka (regs, spill words, from) {mine}"
              f" -> {'MATCH' if match else 'no match (other specialisation?)'}")
EOF
cat "$OUT/res_usage.txt"

echo "== gpu tests (ncu and compile statistics)"
AKA_TEST_ON_GPU=1 timeout "${TESTS_CAP:-150}" python3 -m pytest -q -m gpu tests/knowledge tests/evaluate/test_compstats.py tests/evaluate/test_offline_sm90.py -p no:cacheprovider 2>&1 \
  | tee "$OUT/gpu_tests.log" | tail -25
echo "tests rc ${PIPESTATUS[0]}"
