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
# even on CPU-only machines. A GPU user's existing torch (2.4 or newer) is kept as it is.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  "${PIP[@]}" "torch==${AKA_TORCH_VERSION:-2.13.0}" ${AKA_TORCH_INDEX:+--index-url "$AKA_TORCH_INDEX"}
fi
"${PIP[@]}" -e ".[dev,llm]"
.venv/bin/aka --help >/dev/null
echo "aka is set up: .venv/bin/aka (try: .venv/bin/aka doctor)"
