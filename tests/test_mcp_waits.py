"""Waiting for a busy device, through the real MCP client over stdio: run_case_remote takes
the most it may wait (``device_wait_s``, bounded and described), says so when it gives up,
and runs the case once the holder lets go within that wait.

The device lease is held by this test process itself (the same flock the supervisor holds,
tools/remote/lease.py), on the server's own runner stage.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from mcp.client import Client

from test_mcp_stdio import error_text, torch_add_request, with_server
from tools.remote.lease import acquire


def hold_lease(stage: Path) -> int:
    """Take the local cpu:0 lease as another agent's supervisor would; the descriptor holds it."""
    (stage / "leases").mkdir(parents=True, mode=0o700, exist_ok=True)
    fd, _holder = acquire(str(stage / "leases" / "cpu-0.lock"), 0.0,
                          {"pid": os.getpid(), "owner": "another-agent:1", "host": "here", "device": "cpu:0",
                           "since": time.time()})
    assert fd is not None, "the test could not take the lease"
    return fd


def test_run_case_remote_waits_as_long_as_it_is_told_for_a_busy_device(evidence_root: Path, tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    stage.mkdir(mode=0o700)
    notes: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    async def scenario(client: Client) -> Any:
        out: dict[str, Any] = {}
        listed = {t.name: t for t in (await client.list_tools()).tools}
        out["schema"] = listed["run_case_remote"].input_schema["properties"]["device_wait_s"]
        documented = json.loads((await client.read_resource("opdebug://schemas/run_case_remote/input")).contents[0].text)
        out["documented"] = documented["properties"]["device_wait_s"]
        assert not (await client.call_tool("plan_cases", torch_add_request("busy"))).is_error
        out["too_long"] = await client.call_tool("run_case_remote", {"run_id": "busy", "device_wait_s": 601})
        fd = hold_lease(stage)
        t0 = time.monotonic()
        out["short"] = await client.call_tool("run_case_remote", {"run_id": "busy", "device_wait_s": 1})
        out["short_s"] = time.monotonic() - t0
        threading.Timer(3.0, os.close, (fd,)).start()  # the holder lets go after 3 s
        out["long"] = await client.call_tool("run_case_remote", {"run_id": "busy", "device_wait_s": 120},
                                             progress_callback=on_progress)
        return out

    out = with_server(evidence_root, scenario, env={"OPDEBUG_RUNNER_STAGE": str(stage)})
    assert out["schema"].get("maximum") == 600 and out["schema"].get("minimum") == 0, out["schema"]
    assert "host's lease_wait_s" in out["documented"]["description"] == out["schema"]["description"], out["schema"]
    assert "device_wait_s" in error_text(out["too_long"])
    short = error_text(out["short"])
    # the wait it was told, not the host's 30 s
    assert "[device_busy]" in short and "another-agent:1" in short and "budget for the wait: 1 s" in short, short
    assert out["short_s"] < 20, out["short_s"]
    long = out["long"]
    assert not long.is_error, error_text(long)
    assert sorted(long.structured_content["recorded"]) == ["add-a", "add-b"]
    waits = [n for n in notes if n.startswith("waiting for local cpu:0")]
    assert waits and "of at most 2 min 0 s" in waits[0], notes
