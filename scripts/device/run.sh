#!/usr/bin/env bash
# The device machine's one entry: bash scripts/device/run.sh STEP[:ARG,ARG...] ...
# Each STEP runs one of the scripts beside this one from the repository root, in order; ARGs (comma-
# separated after a colon, or space-separated when quoted with a space: 'prep-probe:--shapes G1,G5'
# keeps the comma inside an argument) are that script's arguments; settings travel as environment variables, as
# each script's header says (OUT, BUDGET, OP, ...). Wheels in .whl/ are installed into /tmp/site first
# where the device lacks pydantic (carry [".whl"] on the device call).
#   bash scripts/device/run.sh loop:cold,opt:gdn_prefill     the loop from an empty Triton cache (device_loop.sh)
#   bash scripts/device/run.sh gpu-tests bench-checks        the gate's and the timing core's GPU tests
#   bash scripts/device/run.sh list                          every step and the script it runs
set -o pipefail
cd "$(dirname "$0")/../.."
declare -A STEPS=(
  [loop]=device_loop.sh [session]=device_session.sh [gate]=device_gate.sh [gdn]=device_gdn.sh
  [fa4]=device_fa4.sh [optimize]=device_optimize.sh [probes]=device_probes.sh [profile]=device_profile.sh
  [regress]=device_regress.sh [ray-compare]=device_ray_compare.sh [gpu-tests]=gpu_tests.sh
  [bench-checks]=gpu_bench_checks.sh [hw]=device_hw_check.py [timing-modes]=timing_modes.py
  [gdn-breakdown]=gdn_breakdown.py [prep-probe]=gdn_prep_probe.py [gluon-compile]=fa4_gluon_compile.py
  [gdn-ws-compile]=gdn_ws_compile.py [gdn-sweep]=gdn_config_sweep.py
)
if [ $# -eq 0 ] || [ "$1" = list ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "usage: bash scripts/device/run.sh STEP[:ARG,ARG...] ...   steps:"
  for s in $(printf '%s\n' "${!STEPS[@]}" | sort); do printf '  %-18s scripts/device/%s\n' "$s" "${STEPS[$s]}"; done
  [ $# -eq 0 ] && exit 2 || exit 0
fi
for step in "$@"; do  # refuse a misspelt step before anything runs
  name=${step%%:*}
  [ -n "${STEPS[$name]:-}" ] || { echo "run.sh: unknown step '$name' (bash scripts/device/run.sh list)" >&2; exit 2; }
done
if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c 'import pydantic' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site"
rc=0
for step in "$@"; do
  name=${step%%:*}; script=scripts/device/${STEPS[$name]}; args=()
  if [ "$step" != "$name" ]; then
    sep=,; [[ ${step#*:} == *" "* ]] && sep=" "
    IFS=$sep read -r -a args <<< "${step#*:}"
  fi
  echo "== run.sh $name: $script ${args[*]}"
  case $script in
    *.py) python3 "$script" "${args[@]}" ;;
    *) bash "$script" "${args[@]}" ;;
  esac
  r=$?; [ $r -ne 0 ] && { echo "== run.sh $name: exit $r"; rc=$r; }
done
exit $rc
