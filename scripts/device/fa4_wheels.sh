#!/usr/bin/env bash
# FlashAttention-4 (flash-attn-4, CuTe DSL) for the H200, which has no network: download the wheels
# here and split them over two carry folders (the device takes 64 MiB per call; nvidia-cutlass-dsl's
# cu13 library wheel alone is 92 MB). Installed and timed this way on 2026-12-03 (docs/perf/fa4_prefill.md).
#   bash scripts/device/fa4_wheels.sh            -> .fa4w1/ (57 MiB) and .fa4w2/ (49 MiB), both git-ignored
# On the device, two calls while the machine stays warm (README of the device tool):
#   call A, carry [".whl", ".fa4w1"]:
#     mkdir -p /tmp/fa4parts && cp .fa4w1/cutlass_cu13.part00 /tmp/fa4parts/ &&
#     python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .fa4w1/*.whl
#   call B, carry [".fa4w2"]: join the cu13 wheel and unzip it and the rest INTO /tmp/site. `pip --target`
#     would skip them: it leaves a folder that already exists (nvidia_cutlass_dsl/, from libs-base)
#     as it is, and the DSL then reports "No CTK flavor installed".
#     W=/tmp/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl;
#     cat /tmp/fa4parts/cutlass_cu13.part00 .fa4w2/cutlass_cu13.part01 > $W && sha256sum -c .fa4w2/SHA256 &&
#     for w in $W .fa4w2/*.whl; do python3 -m zipfile -e $w /tmp/site; done &&
#     PYTHONPATH=/tmp/site:$PWD python3 -m aka bench fa4_prefill --impl promoted,sdpa,flash_attn4
#   (the DSL's .pth, which puts nvidia_cutlass_dsl/dsl_packages on sys.path, is not read from a --target
#   folder; kernels/_shared/fa4_cute.py adds that folder itself.)
set -euo pipefail
cd "$(dirname "$0")/../.."
PIP=${PIP:-.venv/bin/pip}
T=$(mktemp -d)
PLAT=(--python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 --no-deps -d "$T")
$PIP download -q "${PLAT[@]}" --pre "flash-attn-4==4.0.0b36" "nvidia-cutlass-dsl==4.8.1" \
  "nvidia-cutlass-dsl-libs-base==4.8.1" "nvidia-cutlass-dsl-libs-core==4.8.1" "nvidia-cutlass-dsl-libs-cu13==4.8.1" \
  "quack-kernels==0.6.5" "cuda-bindings==13.5.0" "cuda-pathfinder==1.9.1" "protobuf==7.36.2" "einops==0.8.2" \
  "apache-tvm-ffi==0.1.12" "torch-c-dlpack-ext==0.1.5"
rm -rf .fa4w1 .fa4w2 && mkdir -p .fa4w1 .fa4w2
BIG=$(ls "$T"/nvidia_cutlass_dsl_libs_cu13-*.whl)
(cd "$T" && sha256sum "$(basename "$BIG")" | sed "s|  |  /tmp/|" > SHA256)
split -b 50M -d "$BIG" "$T/cutlass_cu13.part" && rm "$BIG"
mv "$T"/cutlass_cu13.part00 .fa4w1/ && mv "$T"/cutlass_cu13.part01 "$T"/SHA256 .fa4w2/
mv "$T"/apache_tvm_ffi-*.whl "$T"/cuda_bindings-*.whl .fa4w2/
mv "$T"/*.whl .fa4w1/
rmdir "$T"
du -sm .fa4w1 .fa4w2
