"""Interop with other kernel ecosystems: FlashInfer-Bench export (fib_export) and import (fib_import).

flashinfer-bench itself is an optional extra (`pip install 'aka[fib]'`): it pulls torch, flashinfer and
CUDA packages, so aka never imports it at start-up. fib_models mirrors its data schema so that the same
JSON is written, and read, without it; where it is installed, its own models validate both directions.
"""
