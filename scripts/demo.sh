#!/usr/bin/env bash
# One command: set everything up, then plan, run (locally), record and analyze
# the built-in example with a planted bug.  Extra arguments go to `opdebug demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "+ .venv/bin/opdebug demo $*"
exec .venv/bin/opdebug demo "$@"
