#!/usr/bin/env bash
# The GPU benchmark in one command; installs nothing (see benchmarks/gpu.py).
set -o pipefail; export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 "$(dirname "$0")/gpu.py" "$@" 2>&1 | tee "${OUT:-/tmp}/gpu.log"
