"""narrow_failure keeps a client's time limit, through the real MCP client over stdio.

The README's demo (an RMSNorm whose bfloat16 path accumulates in bfloat16) is planned
and run as ``opdebug demo`` does, then narrow_failure runs on it with ``max_seconds``
under a client whose requests time out after 60 s (as the MCP Inspector's do): the
answer comes in time, with one progress notification per case it ran; no case starts
after max_seconds, and a case still running then goes on after the answer and is
recorded (none is left pending because of the deadline).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from conftest import REPO_ROOT
from test_mcp_stdio import error_text
from tools.examples import demo_request

RUN = "demo-narrow"
MAX_SECONDS = 30.0
CLIENT_TIMEOUT_S = 60


async def _session(root: Path, stage: Path) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", "--evidence-root", str(root)],
                                   cwd=str(REPO_ROOT),
                                   env={"PYTHONPATH": str(REPO_ROOT), "OPDEBUG_RUNNER_STAGE": str(stage)})
    notes: list[tuple[float, str]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        notes.append((done, message or ""))

    out: dict[str, Any] = {"notes": notes}
    async with Client(params, cache=None, read_timeout_seconds=CLIENT_TIMEOUT_S) as client:
        plan = await client.call_tool("plan_cases", demo_request(RUN))
        assert not plan.is_error, error_text(plan)
        demo = await client.call_tool("run_case_remote", {"run_id": RUN, "keep_outputs": True})
        assert not demo.is_error, error_text(demo)
        t0 = time.monotonic()
        out["narrow"] = await client.call_tool("narrow_failure", {"run_id": RUN, "max_seconds": MAX_SECONDS},
                                               progress_callback=on_progress)
        out["wall_s"] = time.monotonic() - t0
        deadline = time.monotonic() + 240  # a case still running at the answer is recorded when it ends
        while True:
            results = json.loads((await client.read_resource(f"opdebug://runs/{RUN}/results")).contents[0].text)
            matrix = json.loads((await client.read_resource(f"opdebug://runs/{RUN}/case-matrix")).contents[0].text)
            planned = [c["id"] for c in matrix["cases"]]
            if results["result_count"] >= len(planned) or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        out["planned"], out["recorded"] = planned, set(results["results"])
    return out


def test_narrow_failure_answers_within_a_60_s_client_timeout_with_progress_per_case(tmp_path: Path) -> None:
    root, stage = tmp_path / "evidence", tmp_path / "stage"
    root.mkdir()
    stage.mkdir(mode=0o700)
    out = asyncio.run(_session(root, stage))
    narrow = out["narrow"]
    assert not narrow.is_error, error_text(narrow)
    doc = narrow.structured_content
    assert out["wall_s"] < CLIENT_TIMEOUT_S and doc["seconds"] <= MAX_SECONDS + 5, (out["wall_s"], doc["seconds"])
    ran = [c for step in doc["steps"] for c in step["cases"]]
    assert ran and doc["cases_run"] == len(ran), doc["steps"]
    # one progress notification per case it answered, increasing
    per_case = [m.split(":")[0] for _, m in out["notes"] if m.split(":")[0] in ran]
    answered = [c for step in doc["steps"] for c, state in step["cases"].items() if state != "running"]
    assert sorted(per_case) == sorted(answered), (out["notes"], doc["steps"])
    values = [v for v, _ in out["notes"]]
    assert values == sorted(values) and len(set(values)) == len(values), values
    # nothing left pending because of the deadline: a case still running then was recorded after the answer
    assert set(doc["still_running"]) <= out["recorded"]
    assert set(out["planned"]) == out["recorded"], sorted(set(out["planned"]) - out["recorded"])
    assert all(state != "pending" for step in doc["steps"] for state in step["cases"].values()), doc["steps"]
