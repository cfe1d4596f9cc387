#!/usr/bin/env bash
# Prove trinity's CUDA paths on a machine with one (or more) NVIDIA GPU(s), offline, and print a short report.
#
#   bash scripts/gpu_check.sh [gpu_check.py options, e.g. --only hf-engine]
#
# Steps: find Python (PYTHON, default python3) -> does it have a CUDA torch that sees a GPU? (exit 2 if not,
# before installing anything) -> pip install --no-index --no-deps --no-build-isolation -e . -e trinity_backend_cuda
# (no network; needs hatchling; on failure gpu_check.py falls back to PYTHONPATH plus generated entry points)
# -> scripts/gpu_check.py runs the tests of trinity_backend_cuda/gpu_tests, one module per check, and writes
# their figures to $OUT/gpu_check_report.txt (else ./).
# Exit: 0 all PASS/SKIP, 1 some FAIL, 2 no CUDA device or no torch.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
py="${PYTHON:-python3}"

if ! command -v "$py" >/dev/null 2>&1; then
    echo "gpu_check: no CUDA device: $py not found (set PYTHON=/path/to/python with a CUDA build of torch)" >&2
    exit 2
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 \
        | sed 's/^/gpu_check: nvidia-smi: /'
else
    echo "gpu_check: nvidia-smi not found (torch decides whether a GPU is usable)"
fi

preflight=(--preflight)
for arg in "$@"; do [ "$arg" = "--allow-cpu" ] && preflight+=(--allow-cpu); done  # development aid only
"$py" scripts/gpu_check.py "${preflight[@]}" || exit $?

log="$(mktemp "${TMPDIR:-/tmp}/trinity-gpu-check-pip.XXXXXX")"
if PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip install --no-index --no-deps \
        --no-build-isolation -e . -e trinity_backend_cuda >"$log" 2>&1; then
    export GPU_CHECK_INSTALL=editable
    echo "gpu_check: installed trinity-rft and trinity-backend-cuda (editable, offline)"
else
    export GPU_CHECK_INSTALL=failed
    echo "gpu_check: pip install -e failed (see $log); gpu_check.py says why and falls back to PYTHONPATH"
fi
export GPU_CHECK_INSTALL_LOG="$log"

"$py" scripts/gpu_check.py "$@"
