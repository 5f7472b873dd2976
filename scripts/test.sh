#!/usr/bin/env bash
# One command: set everything up and run the whole test suite.
# The SSH tests start real OpenSSH sshd instances on 127.0.0.1, so
# openssh-server is installed when it is missing (Debian/Ubuntu).
# Extra arguments go to pytest; its exit code is this script's.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/sbin/sshd ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "+ apt-get install openssh-server"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server
fi
bash scripts/setup.sh
# The SSH tests fail (not skip) when sshd is missing: it was installed above.
export OPDEBUG_REQUIRE_SSHD=1
echo "+ OPDEBUG_REQUIRE_SSHD=1 .venv/bin/python -m pytest -q $*"
exec .venv/bin/python -m pytest -q "$@"
