#!/usr/bin/env bash
# One command: set everything up and run the whole test suite.
# The SSH tests start real OpenSSH sshd instances on 127.0.0.1 and the Slurm
# tests a real munged + slurmctld + slurmd, so openssh-server, slurm-wlm and
# munge are installed when missing (Debian/Ubuntu).  The Slurm daemons are
# never started as services: each test module starts its own with a
# throw-away configuration (tests/slurm_fixture.py).  The page tests
# (tests/test_page.py) drive Debian's headless Chromium with Playwright, so
# chromium is installed when /usr/bin/chromium is missing.
# Extra arguments go to pytest; its exit code is this script's.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the suite starts for real: OpenSSH's sshd (the SSH tests) and a
# single-node Slurm with munge (the Slurm tests).
need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v srun >/dev/null 2>&1; } || need+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need+=(munge)
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ "${#need[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "+ apt-get install ${need[*]}"
    # The packages must not start munge/slurmctld/slurmd as services: where no
    # policy-rc.d says otherwise, one that refuses every start (exit 101) is in
    # place for the install only.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
        trap '$SUDO rm -f "$policy"' EXIT
    fi
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
    if [ -n "$policy" ]; then $SUDO rm -f "$policy"; trap - EXIT; fi
fi
bash scripts/setup.sh
# The SSH, Slurm and browser tests fail (not skip) when their binaries are
# missing: they were installed above.
export OPDEBUG_REQUIRE_SSHD=1 OPDEBUG_REQUIRE_SLURM=1 OPDEBUG_REQUIRE_CHROMIUM=1
# Two pytest-xdist workers, each test file on one of them (tests/conftest.py: the
# Slurm files count as one, so two real clusters never run at once); the 30 slowest
# tests are listed at the end (where the suite's time goes).
echo "+ OPDEBUG_REQUIRE_SSHD=1 OPDEBUG_REQUIRE_SLURM=1 OPDEBUG_REQUIRE_CHROMIUM=1 .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=30 $*"
exec .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=30 "$@"
