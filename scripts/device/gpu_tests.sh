#!/usr/bin/env bash
# The gate's GPU tests on the device machine (issue 3), one call from the repository root:
#   bash scripts/device/gpu_tests.sh         red-team candidates that need a device (illegal address, device-side
#                                     assert, 200 GB, side stream past the policy), the CPU red team on the
#                                     GPU, and the three baselines on smoke+edge (3 rounds)
#   bash scripts/device/gpu_tests.sh full    the three baselines on the full sets (3 rounds; slow: float64 references)
# Extra arguments go to pytest. Needs the .whl/ wheels carried when the image lacks pydantic.
set -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
export AKA_TEST_ON_GPU=1  # tests/conftest.py: no interpreter in this process
unset TRITON_INTERPRET
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # pip install -e . may fail offline

if ! python3 -c 'import pydantic' 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
python3 -c 'import torch, triton, pydantic; assert torch.cuda.is_available(), "no CUDA device";
print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))' || exit 1

marks="gpu and not slow"
if [ "${1:-}" = "full" ]; then marks="gpu and slow"; shift; fi
# -v and no tail: each result is printed as it happens, so a call cut off at its time limit still
# shows what finished (2026-11-29: a `| tail` here hid 130 s of results when the cap was hit).
python3 -m pytest -v -m "$marks" -p no:cacheprovider -rfE --durations=10 tests/evaluate tests/test_graphed.py tests/test_kept_launch.py tests/knowledge/test_profile_gpu.py "$@" 2>&1 | grep -v "^$"
exit "${PIPESTATUS[0]}"
