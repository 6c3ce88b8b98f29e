#!/usr/bin/env bash
# The GPU benchmark, one command on the device machine (installs nothing; see benchmarks/gpu.py): bash benchmarks/gpu.sh [--budget-s 420]
set -o pipefail; export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 "$(dirname "$0")/gpu.py" "$@" 2>&1 | tee "${OUT:-/tmp}/gpu.log"
