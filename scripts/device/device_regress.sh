#!/usr/bin/env bash
# Issue 11 on the H200 (~3-4 min): `aka regress` exit codes on a real GPU, in a scratch copy of the project.
#   1. a promoted kernel (a copy of the baseline) with no numbers for this device -> first measurement, exit 0,
#      promoted.json gains devices.<this GPU>;
#   2. the same kernel again, now judged against those numbers            -> exit 0;
#   3. a deliberately slowed copy put in place (same answer, computed twice) -> exit 2, naming the shapes;
#   4. the repository as it is (its promoted kernels, else baselines), all ops, capped by REPO_CAP seconds.
# The scratch copy keeps the op's first FULL_N full-set shapes so steps 1-3 fit in the time budget.
# Usage (device, repo root): bash scripts/device/device_regress.sh      env: OP (gdn_prefill), FULL_N (4), REPO_CAP (100)
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
export PYTHONPATH="${PYTHONPATH:-$PWD}" PYTHONUNBUFFERED=1 FLA_FLASH_QLA=0
set -o pipefail
REPO=$PWD; OUT=${OUT:-/tmp/regress_out}; mkdir -p "$OUT"
OP=${OP:-gdn_prefill}; FULL_N=${FULL_N:-4}; SCRATCH=/tmp/aka_regress_proj
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"

rm -rf "$SCRATCH"; mkdir -p "$SCRATCH"; cp -r workloads kernels "$SCRATCH/"
python3 - "$SCRATCH" "$OP" "$FULL_N" <<'PY'
import json, pathlib, sys, yaml
root, op, n = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
wl = root / "workloads" / f"{op}.yaml"
spec = yaml.safe_load(wl.read_text())
spec["shapes"]["full"] = spec["shapes"]["full"][:n]
wl.write_text(yaml.safe_dump(spec, sort_keys=False))
kdir = root / "kernels" / op
for p in ("promoted.py", "promoted.json"):
    (kdir / p).unlink(missing_ok=True)
src = (kdir / "baseline.py").read_text()
(kdir / "promoted.py").write_text(src)
# a promotion recorded on another device model: this GPU has no numbers yet
(kdir / "promoted.json").write_text(json.dumps({"op": op, "device": "some other GPU", "times_us": {"X": 1.0}}))
entry = spec["entry"]
slow = src + f"""

_aka_fast_entry = {entry}


def {entry}(**kwargs):  # deliberately slowed (scripts/device/device_regress.sh): the same answer, computed twice
    _aka_fast_entry(**kwargs)
    return _aka_fast_entry(**kwargs)
"""
(root / "slowed.py").write_text(slow)
print("scratch project", root, "full shapes", [c["id"] for c in spec["shapes"]["full"]])
PY
(cd "$SCRATCH" && git init -q && git add -A && git -c user.email=ci@x -c user.name=ci commit -qm scratch) || true

# The CLI needs typer and rich; without them the same functions run through a few lines of Python.
if python3 -c "import typer, rich" 2>/dev/null; then AKA=(python3 -m aka regress); else
  echo "typer/rich missing: calling aka.report.regress directly (same functions as the CLI)"
  AKA=(python3 -c '
import argparse, json, pathlib, sys
from aka.report.junit import write_junit
from aka.contract.ops import all_ops, get_op
from aka.report.regress import WorkerMeasurer, parse_threshold, run_regress
a = argparse.ArgumentParser(); a.add_argument("--ops", default="all"); a.add_argument("--threshold", default="5%")
a.add_argument("--junit"); a.add_argument("--json"); a.add_argument("--no-record", action="store_true")
x = a.parse_args()
ops = all_ops() if x.ops == "all" else [get_op(n) for n in x.ops.split(",")]
m = WorkerMeasurer(); dev = m.device()
out, changed = run_regress(ops, m, parse_threshold(x.threshold), record=not x.no_record)
x.junit and write_junit(pathlib.Path(x.junit), out, dev["name"])
x.json and pathlib.Path(x.json).write_text(json.dumps({**out.model_dump(), "device": dev}, indent=2, default=str))
print(out.summary()); sys.exit(out.exit_code)')
fi

status=0
step() {  # step NAME EXPECTED_RC ARGS...
  local name=$1 want=$2; shift 2
  echo "== $name (expect exit $want)"
  (cd "$SCRATCH" && AKA_ROOT="$SCRATCH" timeout 200 "${AKA[@]}" "$@" --junit "$OUT/$name.xml" \
     --json "$OUT/$name.json") 2>&1 | tee "$OUT/$name.log" | tail -25
  local rc=${PIPESTATUS[0]}
  if [ "$rc" = "$want" ]; then echo "STEP $name: PASS (exit $rc)"; else echo "STEP $name: FAIL (exit $rc, wanted $want)"; status=1; fi
}
step first_measurement 0 --ops "$OP"
python3 -c "import json,sys; d=json.load(open('$SCRATCH/kernels/$OP/promoted.json')); print('recorded devices:', list(d.get('devices', {})))"
step holds 0 --ops "$OP"
cp "$SCRATCH/slowed.py" "$SCRATCH/kernels/$OP/promoted.py"
step slowed 2 --ops "$OP"
cp "$SCRATCH/kernels/$OP/promoted.json" "$OUT/promoted_after.json"

echo "== repository as it is (all ops; no record), capped at ${REPO_CAP:-100} s"
timeout "${REPO_CAP:-100}" "${AKA[@]}" --no-record --junit "$OUT/repo.xml" --json "$OUT/repo.json" 2>&1 \
  | tee "$OUT/repo.log" | tail -25
echo "repo regress rc ${PIPESTATUS[0]} (0 holds, 1 correctness, 2 performance, 124 capped)"
python3 - "$OUT" <<'PY' 2>&1 || true
import pathlib, sys
try:
    import xmlschema
except ImportError:
    sys.exit("xmlschema not installed here: JUnit files not validated on the device (the CPU tests validate them)")
s = xmlschema.XMLSchema("tests/report/junit.xsd")
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    print(f.name, "valid" if s.is_valid(str(f)) else "INVALID")
PY
echo "device_regress: $([ $status = 0 ] && echo ALL STEPS PASS || echo SOME STEPS FAILED)"
exit $status
