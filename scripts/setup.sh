#!/usr/bin/env bash
# Create .venv (if missing) and install the project into it.
# torch is installed FIRST and pinned: an unpinned torch would pull a
# multi-GB CUDA build; the pinned CPU build is all the local runner needs.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${OPDEBUG_TORCH_SPEC:-torch==2.13.0}"

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is required")'
    echo "+ $PYTHON -m venv .venv"
    "$PYTHON" -m venv .venv
fi
echo "+ pip install $TORCH_SPEC"
.venv/bin/python -m pip install --quiet "$TORCH_SPEC"
echo "+ pip install -e '.[test,dev]'"
.venv/bin/python -m pip install --quiet -e '.[test,dev]'
