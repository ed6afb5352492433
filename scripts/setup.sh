#!/usr/bin/env bash
# One-step set-up: a virtual environment in .venv with aka, its LLM SDKs and its dev tools.
# Idempotent: re-running only installs what is missing. Works on CPU-only and GPU machines.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

# torch first, explicitly: left to the resolver, a bare "torch" pulls a multi-gigabyte CUDA build
# even on CPU-only machines. A GPU user's existing torch (2.4 or newer) is kept as it is. Without an
# NVIDIA GPU the CPU build is named (+cpu) and PyTorch's CPU index added, so a machine with only the
# public index gets the ~200 MB CPU wheel; a machine with a local wheel of that build takes it (an
# unreachable index costs one quick retry). AKA_TORCH_INDEX picks another index (e.g. a CUDA one).
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  TORCH="torch==${AKA_TORCH_VERSION:-2.13.0}"
  if [ -n "${AKA_TORCH_INDEX:-}" ]; then
    "${PIP[@]}" "$TORCH" --index-url "$AKA_TORCH_INDEX"
  elif nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" "$TORCH"
  else
    "${PIP[@]}" "$TORCH+cpu" --extra-index-url https://download.pytorch.org/whl/cpu --retries 1 --timeout 15
  fi
fi
"${PIP[@]}" -e ".[dev,llm]"
# FlashInfer-Bench's data models, so the interop tests validate exports against its own schema. Its
# package requires flashinfer-python and CUDA wheels (the full `aka[fib]` extra); the models need
# only pydantic and safetensors, so the test set-up takes the package without its dependencies.
if ! .venv/bin/python -c "import flashinfer_bench.data" 2>/dev/null; then
  "${PIP[@]}" --no-deps "flashinfer-bench==0.1.2" "safetensors>=0.5" "docstring-parser>=0.16" \
    || echo "note: flashinfer-bench not installed; the tests that validate against its models will skip"
fi
.venv/bin/aka --help >/dev/null
.venv/bin/python - "$SECONDS" <<'PY'
import sys, torch, aka
print(f"aka {aka.__version__} is set up in .venv with torch {torch.__version__}"
      f" ({'CUDA ' + str(torch.version.cuda) if torch.version.cuda else 'CPU build'}) in {sys.argv[1]} s;"
      " try: .venv/bin/aka doctor")
PY
