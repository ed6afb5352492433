#!/usr/bin/env bash
# Build .qla/qla.tar.xz on this machine (it only downloads and unzips): FlashQLA 0.1.3 on TileLang 0.1.15 with
# the versions TileLang 0.1.15 imports with (apache-tvm-ffi 0.1.12, z3-solver 4.15.4; 0.1.15 / 4.15.8 fail,
# H200 2026-12-05) and torch-c-dlpack-ext 0.1.5, as their installed files packed with xz: 38 MB against
# 80 MB of wheels, so one device call carries them beside .whl/ (its limit is 64 MiB in all). On the device:
#   mkdir -p /tmp/site && tar -xJf .qla/qla.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PYTHONPATH
# (device_gdn.sh does this when .qla/ is carried). Wheels are taken from .qla1/ and .qla2/ when both exist,
# else downloaded from the package index for CPython 3.12 on x86-64 Linux. Add /.qla/ to .git/info/exclude.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/whl" "$tmp/site" .qla
if ls .qla1/*.whl .qla2/*.whl >/dev/null 2>&1; then
  cp .qla1/*.whl .qla2/*.whl "$tmp/whl/"
else
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$tmp/whl" \
    flash-qla==0.1.3 tilelang==0.1.15 apache-tvm-ffi==0.1.12 z3-solver==4.15.4.0 torch-c-dlpack-ext==0.1.5
fi
# unzip keeps the files' modes (Python's zipfile drops them); the device-tested archive was made so
for w in "$tmp"/whl/*.whl; do (cd "$tmp/site" && unzip -qo "$w"); done
# z3-solver's .data holds its headers and a second copy of the solver: TileLang loads z3/lib/libz3.so only
rm -rf "$tmp"/site/z3_solver-*.data
chmod -R u+rwX,go+rX "$tmp/site"
tar -C "$tmp/site" -cf - . | xz -9 -T2 > .qla/qla.tar.xz
ls -l .qla/qla.tar.xz
