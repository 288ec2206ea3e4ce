#!/usr/bin/env bash
# GPU acceptance in one command (benchmarks/gpu_e2e.py says what it runs and checks):
#   benchmarks/gpu_e2e.sh              # one CUDA GPU, as root, ~6 min on an H100/H200;
#                                      # writes benchmarks/results/gpu.json
#   benchmarks/gpu_e2e.sh --dry-run    # the same steps at tiny sizes on a CPU (make test runs it)
# PYTHON=... picks the interpreter (default: the checkout's .venv, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
exec "$PYTHON" -m benchmarks.gpu_e2e "$@"
