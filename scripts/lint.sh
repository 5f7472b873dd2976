#!/usr/bin/env bash
# Lint, format check and type check of tools/ and mcp_server/ (configured in
# pyproject.toml: [tool.ruff], [tool.mypy]).  Runs all three, then fails if any
# of them found something.  The tools come from the dev extra (scripts/setup.sh
# installs it).
set -uo pipefail
cd "$(dirname "$0")/.."

bin=.venv/bin
if [ ! -x "$bin/ruff" ] || [ ! -x "$bin/mypy" ]; then
    echo "scripts/lint.sh: ruff or mypy missing in .venv; run scripts/setup.sh (it installs the dev extra)" >&2
    exit 1
fi
failed=()
run() {
    echo "+ $*"
    "$bin/$@" || failed+=("$*")
}
run ruff check tools mcp_server
run ruff format --check tools mcp_server
run mypy
if [ "${#failed[@]}" -ne 0 ]; then
    printf 'scripts/lint.sh: failed: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "scripts/lint.sh: clean"
