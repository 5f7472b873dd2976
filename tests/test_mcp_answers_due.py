"""An answer wherever one is due, and no client stalls another - through the real MCP SDK
client, over stdio and streamable HTTP.

- narrow_failure cut by its deadline while a case runs answers with its result (never a
  validation error): the case still running and those the deadline kept from starting are
  counted apart, and neither is counted as run;
- list arguments are bounded and checked in linear time: 100,000 host names are refused in
  well under a second while another client's ping answers;
- a resource larger than the transport's event is read whole, page by page;
- the small surface errors (a port in use, 100,000 dimensions, a NUL byte in a path, a huge
  unknown URI) are clear.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, private_stage
from mcp.client import Client
from test_mcp_stdio import error_text, with_server

SLOW = ("import time\n\n\ndef cand(x, delay=0.0):\n    time.sleep(delay)\n    return x * 2 + (x.shape[0] > 4)\n\n\n"
        "def ref(x, delay=0.0):\n    return x * 2\n")


def slow_plan(run_id: str, delay: float, n: int = 3) -> dict:
    return {"config": {"run_id": run_id, "operator": {"name": "slow", "candidate": "slow.cand", "reference": "slow.ref",
                                                      "modules": ["slow.py"]}},
            "module_sources": {"slow.py": SLOW},
            "cases": [{"id": "warm", "inputs": [{"name": "x", "shape": [4]}], "attributes": {"delay": 0.0}}]
            + [{"id": f"s{i}", "inputs": [{"name": "x", "shape": [4 + i]}], "attributes": {"delay": delay}}
               for i in range(n)]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def http_server(root: Path, log: Path, port: int | None = None) -> AsyncIterator[str]:
    """A streamable-HTTP server on ``root`` with a runner stage of its own: its URL."""
    port = port or free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mcp_server", "--transport", "streamable-http", "--host",
                                 "127.0.0.1", "--port", str(port), "--evidence-root", str(root)],
                                cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "OPDEBUG_RUNNER_STAGE": private_stage()})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def over(transport: str, root: Path, scenario, **options: Any) -> Any:
    """``scenario(client)`` through the real SDK client over ``transport`` (``options``: the HTTP
    client's, e.g. mode="legacy")."""
    if transport == "stdio":
        return with_server(root, scenario)

    async def main() -> Any:
        async with http_server(root, root.parent / "server.log") as url:
            async with Client(url, cache=None, read_timeout_seconds=120, **options) as client:
                return await scenario(client)

    return asyncio.run(main())


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_narrow_failure_cut_by_its_deadline_in_the_first_round_answers_with_its_result(tmp_path, transport) -> None:
    root = tmp_path / "evidence"
    root.mkdir()

    async def scenario(client: Client) -> Any:
        assert not (await client.call_tool("plan_cases", slow_plan("cut", delay=8.0))).is_error
        warm = await client.call_tool("run_case_remote", {"run_id": "cut", "case_ids": ["warm"]})  # a warm worker
        assert not warm.is_error, error_text(warm)
        t0 = time.monotonic()
        narrow = await client.call_tool("narrow_failure", {"run_id": "cut", "max_seconds": 3.0})
        return narrow, time.monotonic() - t0

    narrow, wall = over(transport, root, scenario)
    assert not narrow.is_error, error_text(narrow)
    doc = narrow.structured_content
    assert wall < 3.0 + 5, wall
    assert doc["stopped"] == "budget_seconds", doc
    assert doc["still_running"] == ["s0"] and doc["not_started"] == ["s1", "s2"], doc
    assert doc["cases_run"] == 1 and doc["pending_run"] == 1, doc  # the cases kept from starting never ran


def test_a_results_resource_past_one_sse_event_is_read_whole_over_http_page_by_page(tmp_path) -> None:
    # 1,333 recorded cases, about 1 KB each: the results resource is 1.38 MB, past the SDK client's
    # 1 MiB SSE event ("SSE event exceeded the 1048576 byte limit"); it is read page by page, the page
    # count in the first, and the pages joined are the resource.
    from conftest import minimal_plan_request, passed_result

    from tools.plan_cases import plan_cases
    from tools.record_result import record_result

    root = tmp_path / "evidence"
    ids = tuple(f"case-{i:04d}" for i in range(1333))
    plan_cases(minimal_plan_request("big", ids, modes=("eager",) * len(ids)), root=root)
    for cid in ids:
        doc = passed_result(cid)
        doc["source"] = {"kind": "record_result", "note": "n" * 880}
        record_result("big", doc, root=root, lazy_manifest=True, pending=False)

    async def scenario(client: Client) -> Any:
        uri = "opdebug://runs/big/results"
        first = json.loads((await client.read_resource(uri)).contents[0].text)
        parts, page = [first["text"]], first
        while page["next"]:
            page = json.loads((await client.read_resource(page["next"])).contents[0].text)
            parts.append(page["text"])
        beyond = await _error_of(client.read_resource(f"{uri}?page={first['pages'] + 1}"))
        small = json.loads((await client.read_resource("opdebug://runs/big/operator-config")).contents[0].text)
        return first, "".join(parts), beyond, small

    first, whole, beyond, small = over("http", root, scenario)
    assert len(whole.encode()) > 1_048_576 * 1.3, len(whole.encode())
    assert first["page"] == 1 and first["pages"] >= 9 and first["uri"] == "opdebug://runs/big/results"
    results = json.loads(whole)
    assert results["result_count"] == 1333 and list(results["results"]) == list(ids)
    assert f"has {first['pages']} page(s)" in beyond
    assert small["run_id"] == "big"  # a small resource is read as it is, without pages


async def _error_of(awaitable) -> str:
    from mcp.shared.exceptions import MCPError

    try:
        await awaitable
    except MCPError as exc:
        return str(exc)
    raise AssertionError("expected an error")


def test_render_pictures_sends_progress_while_it_draws(tmp_path) -> None:
    # render_pictures recomputes a case's outputs through its reproducer (20-33 s on a loaded
    # machine): it names each step as it begins and says it is still working between steps.
    from tools.examples import demo_request

    root = tmp_path / "evidence"
    root.mkdir()
    notes: list[tuple[float, str]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        notes.append((done, message or ""))

    async def scenario(client: Client) -> Any:
        assert not (await client.call_tool("plan_cases", demo_request("pics"))).is_error
        ran = await client.call_tool("run_case_remote", {"run_id": "pics", "case_ids": ["rms.dtype-bfloat16"]})
        assert not ran.is_error, error_text(ran)
        return await client.call_tool("render_pictures", {"run_id": "pics"}, progress_callback=on_progress)

    drawn = with_server(root, scenario)
    assert not drawn.is_error, error_text(drawn)
    assert drawn.structured_content["pictures"], drawn.structured_content
    texts = [m for _, m in notes]
    assert any(t.startswith("rms.dtype-bfloat16: its outputs") for t in texts), texts
    assert "the run's cases" in texts, texts
    values = [v for v, _ in notes]
    assert values == sorted(values) and len(set(values)) == len(values), values


def test_a_case_still_running_when_a_stdio_client_leaves_is_finished_and_recorded(tmp_path) -> None:
    # narrow_failure answers at its deadline with s0 still running; the client then closes (the SDK
    # kills the server's process group two seconds later): s0 is handed over to a detached run and
    # recorded, and nothing of it is left running afterwards.
    from tools.evidence import RunStore

    root = tmp_path / "evidence"
    root.mkdir()

    async def scenario(client: Client) -> Any:
        assert not (await client.call_tool("plan_cases", slow_plan("left", delay=4.0, n=1))).is_error
        warm = await client.call_tool("run_case_remote", {"run_id": "left", "case_ids": ["warm"]})
        assert not warm.is_error, error_text(warm)
        return await client.call_tool("narrow_failure", {"run_id": "left", "max_seconds": 2.0})

    narrow = with_server(root, scenario)
    assert not narrow.is_error, error_text(narrow)
    assert narrow.structured_content["still_running"] == ["s0"], narrow.structured_content
    store = RunStore(root, "left")
    deadline = time.monotonic() + 180
    while "s0" not in store.recorded_ids() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "s0" in store.recorded_ids(), sorted(store.recorded_ids())
    assert store.read_results()["s0"].status == "passed"


def test_a_hundred_thousand_host_names_are_refused_at_once_while_another_client_pings(tmp_path) -> None:
    # A list argument is bounded and checked in linear time (100,000 names took 124 s, quadratic,
    # and stalled every other client): refused in under a second, another client's ping answered.
    from conftest import minimal_plan_request

    from tools.plan_cases import plan_cases

    root = tmp_path / "evidence"
    plan_cases(minimal_plan_request("hosts", ("a",)), root=root)
    names = [f"nohost-{i}" for i in range(100_000)]

    async def main() -> Any:
        async with http_server(root, tmp_path / "server.log") as url:
            # ping is a legacy-mode method since protocol 2026-07-28 (the Inspector's client speaks it)
            async with Client(url, cache=None) as one, Client(url, cache=None, mode="legacy") as other:
                await other.send_ping()

                async def refused() -> tuple[Any, float]:
                    t0 = time.monotonic()
                    answer = await one.call_tool("run_case_remote", {"run_id": "hosts", "hosts": names})
                    return answer, time.monotonic() - t0

                async def pings() -> list[float]:
                    waits = []
                    for _ in range(5):
                        t0 = time.monotonic()
                        await other.send_ping()
                        waits.append(time.monotonic() - t0)
                        await asyncio.sleep(0.05)
                    return waits

                return await asyncio.gather(refused(), pings())

    (answer, took), waits = asyncio.run(main())
    assert answer.is_error and "hosts" in error_text(answer) and "at most 256" in error_text(answer)
    assert took < 1.0, took
    assert max(waits) < 1.0, waits


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_small_surface_errors_are_clear(tmp_path, transport) -> None:
    # 100,000 dimensions, a NUL byte in out_dir, a 10 MB unknown URI: each a clear error, none internal,
    # none echoing the whole argument.
    from mcp.shared.exceptions import MCPError

    root = tmp_path / "evidence"
    root.mkdir()
    # 10 MB over stdio; over HTTP the SDK refuses a body past 4 MiB itself (413), so 3 MB there, and
    # in legacy mode (as the Inspector speaks): at protocol 2026-07-28 the SDK client also sends the URI
    # in a request header, which the HTTP server refuses past h11's 16 KiB before any handler sees it
    huge_uri = "opdebug://runs/x/" + "a" * (10_000_000 if transport == "stdio" else 3_000_000)
    shape_plan = {"config": {"run_id": "dims", "operator": {"name": "add", "candidate": "torch.add",
                                                            "reference": "torch.add"}},
                  "cases": [{"id": "a", "inputs": [{"name": "input", "shape": [1] * 100_000}]}]}

    async def scenario(client: Client) -> Any:
        out = {"dims": await client.call_tool("plan_cases", shape_plan)}
        out["nul"] = await client.call_tool("export_repro", {"run_id": "x", "case_id": "a", "out_dir": "/tmp/a\x00b"})
        try:
            await client.read_resource(huge_uri)
            out["uri"] = "read"
        except MCPError as exc:
            out["uri"] = str(exc)
        return out

    out = over(transport, root, scenario, mode="legacy")
    dims = error_text(out["dims"])
    assert "[validation_error]" in dims and "shape" in dims and "at most 64" in dims and len(dims) < 4000, dims[:500]
    nul = error_text(out["nul"])
    assert "[validation_error]" in nul and "NUL byte" in nul and "internal_error" not in nul, nul
    assert "Unknown resource" in out["uri"] and f"{len(huge_uri):,} characters" in out["uri"], out["uri"][:500]
    assert len(out["uri"]) < 1000


def test_a_port_in_use_is_a_clear_error_before_serving(tmp_path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "mcp_server", "--transport", "streamable-http", "--port",
                               str(port), "--evidence-root", str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "already in use" in proc.stderr
    assert "serving" not in proc.stderr


def _unbounded(schema: dict, node: Any, path: str, seen: frozenset = frozenset()) -> list[str]:
    """The paths of arrays without maxItems and maps without maxProperties in ``node``."""
    if not isinstance(node, dict):
        return []
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return [] if name in seen else _unbounded(schema, schema["$defs"][name], path, seen | {name})
    found = []
    kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if "array" in kinds and "maxItems" not in node:
        found.append(path)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and "maxProperties" not in node and not node.get("propertyNames", {}).get("enum"):
        found.append(path + "{}")
    children = [(path + "[]", node.get("items")), (path + "{}", extra)]
    children += [(f"{path}.{k}", v) for k, v in (node.get("properties") or {}).items()]
    children += [(path, v) for key in ("anyOf", "oneOf", "allOf") for v in node.get(key) or []]
    for where, child in children:
        found += _unbounded(schema, child, where, seen)
    return found


def test_every_list_argument_is_bounded_in_the_published_schema(tmp_path) -> None:
    async def scenario(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = with_server(tmp_path, scenario)
    unbounded = [p for t in tools for p in _unbounded(t.input_schema, t.input_schema, t.name)]
    assert unbounded == [], unbounded
