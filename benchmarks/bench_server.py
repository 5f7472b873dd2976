"""MCP server start-up and tool latency, measured through the real MCP client
over stdio.  Run by hand (not part of the tests):

    .venv/bin/python benchmarks/bench_server.py [--repeats 5] [--calls 10]

Prints:
- start-up: from spawning ``python -m mcp_server`` to a completed
  ``initialize`` + ``tools/list`` (median of --repeats fresh processes), next
  to the time a bare ``python -c "import torch"`` takes (what the server
  avoids by never importing torch);
- latency of ``plan_cases`` (a new 8-case run per call), ``record_result``
  and ``analyze_failures`` over an open session (median of --calls calls).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from mcp.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from conftest import minimal_plan_request, mismatch_result, passed_result  # noqa: E402

CASES = tuple(f"case-{i}" for i in range(8))


def server_params(root: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", "--evidence-root", root],
                                 cwd=str(REPO), env={"PYTHONPATH": str(REPO)})


async def startup_once(root: str) -> float:
    started = time.perf_counter()
    async with Client(server_params(root), mode="legacy", cache=None) as client:
        tools = (await client.list_tools()).tools
        elapsed = time.perf_counter() - started
    names = {t.name for t in tools}
    assert {"plan_cases", "record_result", "analyze_failures", "run_case_remote", "check_host"} <= names, names
    return elapsed


async def latencies(root: str, calls: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"plan_cases": [], "record_result": [], "analyze_failures": []}
    async with Client(server_params(root), cache=None) as client:
        await client.list_tools()
        for i in range(calls):
            run_id = f"bench-{i}"
            request = minimal_plan_request(run_id, CASES)
            t = time.perf_counter()
            result = await client.call_tool("plan_cases", request)
            out["plan_cases"].append(time.perf_counter() - t)
            assert not result.is_error, result.content
            for j, case_id in enumerate(CASES):
                body = passed_result(case_id) if j % 2 == 0 else mismatch_result(case_id)
                t = time.perf_counter()
                result = await client.call_tool("record_result", {"run_id": run_id, "result": body})
                out["record_result"].append(time.perf_counter() - t)
                assert not result.is_error, result.content
            t = time.perf_counter()
            result = await client.call_tool("analyze_failures", {"run_id": run_id})
            out["analyze_failures"].append(time.perf_counter() - t)
            assert not result.is_error, result.content
    return out


def torch_import_s() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
    return time.perf_counter() - started


def python_bare_s() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as root:
        starts = [asyncio.run(startup_once(root)) for _ in range(args.repeats)]
        lat = asyncio.run(latencies(root, args.calls))
    bare = statistics.median(python_bare_s() for _ in range(3))
    torch_s = statistics.median(torch_import_s() for _ in range(3))

    def ms(xs: list[float]) -> str:
        return f"median {statistics.median(xs) * 1e3:7.1f} ms  (min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f}, n={len(xs)})"

    print("MCP server over stdio")
    print(f"  start-up to initialize + tools/list: {ms(starts)}")
    print(f"  for scale: bare python start {bare * 1e3:.1f} ms; 'import torch' alone {torch_s * 1e3:.1f} ms "
          f"(the server never imports it)")
    print(f"  plan_cases (new run, {len(CASES)} cases):  {ms(lat['plan_cases'])}")
    print(f"  record_result (one result):        {ms(lat['record_result'])}")
    print(f"  analyze_failures ({len(CASES)} recorded):    {ms(lat['analyze_failures'])}")


if __name__ == "__main__":
    main()
