"""The MCP server driven through the real MCP client over stdio.

Each test starts ``python -m mcp_server`` as a subprocess and talks to it
with the SDK's Client; nothing is mocked.  A few start-ups in all, so the
module stays fast.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from conftest import REPO_ROOT, minimal_plan_request, mismatch_result, passed_result, server_env
from tools.schemas import SLUG_PATTERN, PlanRequest

TOOLS = {"plan_cases", "record_result", "analyze_failures", "run_case_remote", "check_host",
         "shrink_case", "export_repro", "export_regression", "render_pictures", "verify_fix", "narrow_failure"}


def with_server(root: Path, scenario: Callable[[Client], Awaitable[Any]], env: dict[str, str] | None = None) -> Any:
    """Start the server on ``root``, run ``scenario(client)``, stop it."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcp_server", "--evidence-root", str(root)],
            cwd=str(REPO_ROOT),
            env=server_env(**(env or {})),
        )
        async with Client(params, cache=None, read_timeout_seconds=120) as client:
            return await scenario(client)

    return asyncio.run(main())


def deref(schema: dict, node: dict) -> dict:
    """A subschema with a local $ref followed (the published schemas share repeated parts)."""
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def error_text(result: Any) -> str:
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def test_tools_have_strict_schemas_output_schemas_and_truthful_annotations(evidence_root: Path) -> None:
    async def scenario(client: Client) -> Any:
        tools = (await client.list_tools()).tools
        templates = (await client.list_resource_templates()).resource_templates
        resources = (await client.list_resources()).resources
        example = (await client.read_resource("opdebug://examples/plan-request")).contents
        outputs = {t.name: json.loads((await client.read_resource(f"opdebug://schemas/{t.name}")).contents[0].text)
                   for t in tools}
        return tools, templates, resources, example, outputs

    tools, templates, resources, example, outputs = with_server(evidence_root, scenario)
    by_name = {t.name: t for t in tools}
    assert set(by_name) == TOOLS

    for tool in tools:
        assert tool.input_schema.get("type") == "object"
        assert tool.input_schema.get("additionalProperties") is False, tool.name
        # output schemas are resources (tools/list stays small); every one is a closed object
        assert outputs[tool.name].get("type") == "object", tool.name
        assert outputs[tool.name].get("additionalProperties") is False, tool.name
        assert tool.description and tool.annotations is not None

    # the example request named in plan_cases' description is a resource, and a valid request
    assert "opdebug://examples/plan-request" in by_name["plan_cases"].description
    PlanRequest.model_validate(json.loads(example[0].text))

    plan_props = by_name["plan_cases"].input_schema["properties"]
    assert {"config", "cases", "stars", "append", "run_id", "module_sources"} <= set(plan_props)
    assert set(by_name["record_result"].input_schema["required"]) == {"run_id", "result"}
    assert set(outputs["plan_cases"]["properties"]) >= {"run_id", "run_dir", "cases", "warnings"}
    assert "verdict" in outputs["analyze_failures"]["properties"]
    assert "outcomes" in outputs["run_case_remote"]["properties"]
    # nested contracts are strict too: an unknown field inside a case is refused by the schema
    plan_schema = by_name["plan_cases"].input_schema
    case_def = plan_schema["$defs"]["Case"]
    assert case_def["additionalProperties"] is False
    # ids are safe slugs, and the published schemas say so (an agent fills them in from the schema)
    assert deref(plan_schema, case_def["properties"]["id"]).get("pattern") == SLUG_PATTERN
    config_def = deref(plan_schema, plan_schema["properties"]["config"])
    assert config_def["additionalProperties"] is False
    assert deref(plan_schema, config_def["properties"]["run_id"]).get("pattern") == SLUG_PATTERN
    record_schema = by_name["record_result"].input_schema
    result_def = deref(record_schema, record_schema["properties"]["result"])
    assert result_def["additionalProperties"] is False
    assert deref(record_schema, result_def["properties"]["case_id"]).get("pattern") == SLUG_PATTERN

    hints = {name: by_name[name].annotations for name in TOOLS}
    expected = {
        # name: (readOnly, destructive, idempotent, openWorld)
        "plan_cases": (False, False, False, False),
        "record_result": (False, False, False, False),
        "analyze_failures": (False, False, True, False),
        "run_case_remote": (False, False, False, True),
        "check_host": (False, False, True, True),  # it may create the work directory: not read-only
        "narrow_failure": (False, False, False, True),
        "shrink_case": (False, False, False, True),
        "export_repro": (False, False, False, False),
        "export_regression": (False, False, False, False),
        "render_pictures": (False, False, True, False),
        "verify_fix": (False, False, False, True),
    }
    for name, (ro, destructive, idem, open_world) in expected.items():
        a = hints[name]
        # a hint left out takes the spec's default (readOnly false, destructive true, idempotent false,
        # openWorld true)
        got = (a.read_only_hint if a.read_only_hint is not None else False,
               a.destructive_hint if a.destructive_hint is not None else True,
               a.idempotent_hint if a.idempotent_hint is not None else False,
               a.open_world_hint if a.open_world_hint is not None else True)
        assert got == (ro, destructive, idem, open_world), name

    assert {t.uri_template for t in templates} >= {
        f"opdebug://runs/{{run_id}}/{kind}" for kind in ("report", "analysis", "case-matrix", "manifest", "results")
    }
    report = next(t for t in templates if t.uri_template.endswith("/report"))
    assert report.mime_type == "text/markdown"
    assert "opdebug://runs" in {str(r.uri) for r in resources}


def test_plan_record_analyze_and_read_evidence_over_stdio(evidence_root: Path) -> None:
    run_id = "mcp-loop"

    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["plan"] = await client.call_tool("plan_cases", minimal_plan_request(run_id, ("eager-f32", "graph-f32")))
        out["rec1"] = await client.call_tool("record_result", {"run_id": run_id, "result": passed_result("eager-f32")})
        out["rec2"] = await client.call_tool("record_result",
                                             {"run_id": run_id, "result": mismatch_result("graph-f32")})
        out["analysis"] = await client.call_tool("analyze_failures", {"run_id": run_id})
        out["report"] = await client.read_resource(f"opdebug://runs/{run_id}/report")
        out["analysis_res"] = await client.read_resource(f"opdebug://runs/{run_id}/analysis")
        out["matrix"] = await client.read_resource(f"opdebug://runs/{run_id}/case-matrix")
        out["results"] = await client.read_resource(f"opdebug://runs/{run_id}/results")
        out["runs"] = await client.read_resource("opdebug://runs")
        return out

    out = with_server(evidence_root, scenario)

    plan = out["plan"]
    assert not plan.is_error, error_text(plan)
    assert plan.structured_content["created"] is True
    assert [c["id"] for c in plan.structured_content["cases"]] == ["eager-f32", "graph-f32"]
    assert plan.structured_content["cases"][1]["axes"]["mode"] == "graph"
    assert (evidence_root / run_id / "manifest.json").is_file()

    assert out["rec1"].structured_content["pending"] == ["graph-f32"]
    assert out["rec2"].structured_content["status"] == "numerical_mismatch"
    assert out["rec2"].structured_content["pending"] == []

    analysis = out["analysis"].structured_content
    assert analysis["verdict"] == "diagnosed"
    assert {"axis": "mode", "value": "graph"}.items() <= next(
        a for a in analysis["failure_axes"] if a["axis"] == "mode").items()

    report = out["report"].contents[0]
    assert report.mime_type == "text/markdown"
    assert run_id in report.text and "graph-f32" in report.text
    assert report.text == (evidence_root / run_id / "report.md").read_text()
    assert json.loads(out["analysis_res"].contents[0].text)["verdict"] == "diagnosed"
    assert [c["id"] for c in json.loads(out["matrix"].contents[0].text)["cases"]] == ["eager-f32", "graph-f32"]
    assert set(json.loads(out["results"].contents[0].text)["results"]) == {"eager-f32", "graph-f32"}
    assert [r["run_id"] for r in json.loads(out["runs"].contents[0].text)["runs"]] == [run_id]


def test_bad_inputs_are_tool_errors_and_the_server_keeps_serving(evidence_root: Path) -> None:
    run_id = "mcp-errors"

    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        bad = minimal_plan_request("bad-config")
        bad["config"]["operator"]["candidate"] = "not a callable"
        bad["config"]["tolerance"]["atol"] = -1
        out["bad_config"] = await client.call_tool("plan_cases", bad)
        pathlike = minimal_plan_request("pathlike", ("../x",))
        out["pathlike"] = await client.call_tool("plan_cases", pathlike)
        unknown_arg = minimal_plan_request(run_id)
        unknown_arg["bogus_option"] = True
        out["unknown_arg"] = await client.call_tool("plan_cases", unknown_arg)
        out["plan"] = await client.call_tool("plan_cases", minimal_plan_request(run_id, ("eager-f32", "graph-f32")))
        out["replan"] = await client.call_tool("plan_cases", minimal_plan_request(run_id, ("eager-f32",)))
        out["unknown_case"] = await client.call_tool("record_result",
                                                     {"run_id": run_id, "result": passed_result("no-such-case")})
        out["first"] = await client.call_tool("record_result", {"run_id": run_id, "result": passed_result("eager-f32")})
        out["duplicate"] = await client.call_tool("record_result",
                                                  {"run_id": run_id, "result": mismatch_result("eager-f32")})
        out["bad_result"] = await client.call_tool(
            "record_result", {"run_id": run_id, "result": {"case_id": "graph-f32", "status": "crash"}})
        out["unknown_run"] = await client.call_tool("analyze_failures", {"run_id": "never-planned"})
        out["pathlike_run"] = await client.call_tool("analyze_failures", {"run_id": "../../etc"})
        # an empty list is not "every pending case" (that is an omitted case_ids): refused, nothing run
        out["no_case_ids"] = await client.call_tool("run_case_remote", {"run_id": run_id, "case_ids": []})
        for uri in (f"opdebug://runs/{run_id}/report", "opdebug://runs/never-planned/manifest",
                    "opdebug://runs/..%2F..%2Fetc/manifest", "opdebug://runs/.../manifest"):
            try:
                await client.read_resource(uri)
                out[uri] = None
            except MCPError as exc:
                out[uri] = str(exc)
        # still alive and answering after every refusal
        out["after"] = await client.call_tool("analyze_failures", {"run_id": run_id})
        return out

    out = with_server(evidence_root, scenario)

    text = error_text(out["bad_config"])
    assert "config.operator.candidate" in text and "config.tolerance.atol" in text
    text = error_text(out["pathlike"])
    assert "cases.0.id" in text and "safe slug" in text
    assert not (evidence_root.parent / "x").exists() and not (evidence_root / "pathlike").exists()
    text = error_text(out["unknown_arg"])
    assert "bogus_option" in text and "unknown field" in text
    assert not out["plan"].is_error
    assert "[run_exists]" in error_text(out["replan"])
    assert "[unknown_case]" in error_text(out["unknown_case"]) and "no-such-case" in error_text(out["unknown_case"])
    assert not out["first"].is_error
    text = error_text(out["duplicate"])
    assert "[already_recorded]" in text and "eager-f32" in text
    text = error_text(out["bad_result"])
    assert "result" in text and "needs 'error'" in text and "crash" in text
    assert "[unknown_run]" in error_text(out["unknown_run"])
    assert "safe slug" in error_text(out["pathlike_run"])
    assert "case_ids" in error_text(out["no_case_ids"])

    assert "analyze_failures" in out[f"opdebug://runs/{run_id}/report"]  # no report before analysis
    assert "does not exist" in out["opdebug://runs/never-planned/manifest"]
    # a separator never matches the run_id template; an id that does is still checked as a slug
    assert out["opdebug://runs/..%2F..%2Fetc/manifest"] == "Unknown resource: opdebug://runs/..%2F..%2Fetc/manifest"
    assert "run_id '...' must be a safe slug" in out["opdebug://runs/.../manifest"]

    after = out["after"]
    assert not after.is_error, error_text(after)
    # the refused duplicate did not overwrite the first result
    results = json.loads((evidence_root / run_id / "results.json").read_text())["results"]
    assert results["eager-f32"]["status"] == "passed" and "graph-f32" not in results
    assert after.structured_content["verdict"] == "inconclusive"
    assert after.structured_content["missing"] == ["graph-f32"]


def torch_add_request(run_id: str) -> dict[str, Any]:
    case = {"inputs": [{"name": "input", "shape": [8, 8]}, {"name": "other", "shape": [8, 8]}], "seed": 1}
    return {
        "config": {"run_id": run_id, "operator": {"name": "add", "candidate": "torch.add", "reference": "torch.add"}},
        "cases": [dict(case, id="add-a"), dict(case, id="add-b", seed=2)],
    }


def processes_with_env(needle: str) -> list[int]:
    """Pids of live processes whose environment mentions ``needle``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle.encode() in (proc / "environ").read_bytes():
                status = (proc / "status").read_text()
                if "\nState:\tZ" not in status:
                    pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_run_case_remote_reports_progress_per_case(evidence_root: Path, tmp_path: Path) -> None:
    run_id = "mcp-run"
    progress: list[tuple[float, float | None, str | None]] = []
    stage = str(tmp_path / "runner-stage")  # the local runner's PYTHONPATH: marks its processes
    warm: list[int] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def scenario(client: Client) -> Any:
        plan = await client.call_tool("plan_cases", torch_add_request(run_id))
        assert not plan.is_error, error_text(plan)
        run = await client.call_tool("run_case_remote", {"run_id": run_id}, progress_callback=on_progress)
        warm.extend(processes_with_env(stage))
        again = await client.call_tool("run_case_remote", {"run_id": run_id, "case_ids": ["add-a"]})
        unknown_host = await client.call_tool("run_case_remote", {"run_id": run_id, "hosts": ["no-such-host"]})
        return run, again, unknown_host

    run, again, unknown_host = with_server(evidence_root, scenario, env={"OPDEBUG_RUNNER_STAGE": stage})
    assert not run.is_error, error_text(run)
    outcomes = {o["case_id"]: o for o in run.structured_content["outcomes"]}
    assert set(outcomes) == {"add-a", "add-b"}
    assert all(o["state"] == "passed" and o["recorded"] is True for o in outcomes.values())
    assert sorted(done for done, _, _ in progress) == [1, 2]
    assert {total for _, total, _ in progress} == {2}
    assert {m.split(":")[0] for _, _, m in progress} == {"add-a", "add-b"}
    # a recorded case is refused, not re-run
    assert not again.is_error, error_text(again)
    assert again.structured_content["refused"] == ["add-a"] and again.structured_content["outcomes"] == []
    assert unknown_host.is_error and "no-such-host" in error_text(unknown_host)
    # the worker stayed warm during the session and is gone once the client went away
    # at least the server (its environment names the stage), its warm supervisor and that supervisor's worker
    assert len(warm) >= 3, f"expected the server, the warm supervisor and its worker, saw {warm}"
    deadline = time.monotonic() + 15
    while processes_with_env(stage) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_env(stage) == []


def test_streamable_http_transport_serves_the_same_tools(evidence_root: Path, tmp_path: Path) -> None:
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--transport", "streamable-http", "--host", "127.0.0.1",
         "--port", str(port), "--evidence-root", str(evidence_root)],
        cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
    )

    async def scenario() -> Any:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                await asyncio.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp", cache=None) as client:
            tools = (await client.list_tools()).tools
            plan = await client.call_tool("plan_cases", minimal_plan_request("over-http", ("eager-f32",)))
            refused = await client.call_tool("plan_cases", minimal_plan_request("over-http", ("eager-f32",)))
            return tools, plan, refused

    try:
        tools, plan, refused = asyncio.run(scenario())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
    assert {t.name for t in tools} == TOOLS
    # it says where it listens when it starts
    assert f"serving MCP over streamable HTTP at http://127.0.0.1:{port}/mcp" in (tmp_path / "server.log").read_text()
    assert not plan.is_error and plan.structured_content["run_id"] == "over-http"
    assert (evidence_root / "over-http" / "manifest.json").is_file()
    assert "[run_exists]" in error_text(refused)
