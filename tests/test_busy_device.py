"""A device another server holds (issue 25): the waiting call is told, about once a
second, who holds it (pid, run, case, host, since when, as a readable time) and
how long it has waited; past its budget it is refused with the same words.

Two real servers' worth of processes on the local transport: a subprocess runs a
slow case (its supervisor holds the device lease and notes its run and case in
it), and this process asks for the same device with a 3-second budget.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from tools.errors import ToolError
from tools.plan_cases import plan_cases
from tools.run_case_remote import run_case_remote

SLOW = "import time\n\n\ndef cand(x, delay=0.0):\n    time.sleep(delay)\n    return x * 2\n\n\n" \
       "def ref(x, delay=0.0):\n    return x * 2\n"


def request(run_id: str, case_id: str, delay: float) -> dict:
    return {"config": {"run_id": run_id, "operator": {"name": "slow", "candidate": "slow.cand", "reference": "slow.ref",
                                                      "modules": ["slow.py"]}},
            "module_sources": {"slow.py": SLOW},
            "cases": [{"id": case_id, "inputs": [{"name": "x", "shape": [4]}], "attributes": {"delay": delay}}]}


HOLDER = """
import asyncio, json, sys
sys.path.insert(0, {repo!r})
from tools.plan_cases import plan_cases
from tools.run_case_remote import run_case_remote
plan_cases(json.loads({request!r}), root={root!r})
asyncio.run(run_case_remote("holder-run", root={root!r}))
"""


def test_a_busy_device_names_its_holder_and_the_wait_within_the_calls_budget(tmp_path: Path, monkeypatch) -> None:
    stage = tmp_path / "stage"  # a lease directory of this test's own
    stage.mkdir(mode=0o700)
    monkeypatch.setenv("OPDEBUG_RUNNER_STAGE", str(stage))
    root = str(tmp_path / "evidence")
    script = HOLDER.format(repo=str(REPO_ROOT), request=json.dumps(request("holder-run", "slow-case", 60.0)),
                           root=root)
    holder = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "OPDEBUG_RUNNER_STAGE": str(stage)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lease = stage / "leases" / "cpu-0.lock"
        deadline = time.monotonic() + 120
        noted: dict = {}
        while time.monotonic() < deadline and noted.get("case_id") != "slow-case":
            time.sleep(0.2)
            try:
                noted = json.loads(lease.read_text() or "{}")
            except (OSError, ValueError):
                noted = {}
        assert noted.get("case_id") == "slow-case", (noted, holder.poll())
        assert noted["run_id"] == "holder-run" and noted["pid"] and noted["since_utc"].endswith("Z")

        plan_cases(request("waiter", "quick", 0.0), root=root)
        lines: list[str] = []

        async def on_news(line: str) -> None:
            lines.append(line)

        t0 = time.monotonic()
        with pytest.raises(ToolError) as info:
            asyncio.run(run_case_remote("waiter", root=root, lease_wait_s=3.0, on_news=on_news))
        waited = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait(timeout=30)
    message = info.value.message
    assert info.value.code == "no_slot" and waited < 30, (waited, message)  # the call's 3 s, not the host's 30 s
    who = f"pid {noted['pid']} on {noted['host']}"
    assert f"local cpu:0 is leased by {who}" in message, message
    assert "run holder-run, case slow-case since 20" in message and " UTC (" in message and " ago)" in message
    assert "this call waited 3 s (its budget for the wait: 3 s)" in message, message
    assert "1796149582" not in message and str(int(noted["since"])) not in message  # never a raw epoch
    assert 2 <= len(lines) <= 4, lines  # about one a second
    assert all(line.startswith(f"waiting for local cpu:0: leased by {who}") and "run holder-run" in line
               for line in lines), lines
    assert lines[-1].endswith("of at most 3 s"), lines
