"""The agent-facing surface through the real MCP client over stdio: what a
tools/list costs, short text beside strict structured answers, strict
argument types, the prompt, completions, run resources, raw evidence, logging,
and a 10,000-case run recorded and analyzed correctly."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jsonschema
from mcp.client import Client
from mcp_types import PromptReference, ResourceTemplateReference

from conftest import REPO_ROOT, minimal_plan_request, mismatch_result, passed_result, server_env
from test_mcp_stdio import error_text, with_server

TOOLS_LIST_BUDGET = 18_600  # the whole tools/list answer, every tool (issue 12 item 4: 15,000; +500 for issue 23's
# gradients: grad_inputs, grad_output, compile_dynamic, tolerance.per_output - 15,373 when it was added; +1,500
# for issues 21 and 22's fields, all published - a field left out of the schema is refused by a client that
# validates the arguments against it: standard, output_judges, repeats, repeats_passing, batch_invariance, after,
# import_timeout_s; issues 33-35: analyze_failures' conditions, the MCP App link (_meta.ui.resourceUri on two
# tools), maxItems on every array, verify_fix's candidate and candidate_sources: 18,430 with them)
TOOL_COUNT = 11


def _walk(node: Any, in_map: bool = False):
    if isinstance(node, dict):
        if not in_map:
            yield node
        for k, v in node.items():
            yield from _walk(v, k in ("properties", "$defs", "patternProperties") and not in_map)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_tools_list_is_small_and_still_strict(evidence_root: Path) -> None:
    async def scenario(client: Client) -> Any:
        listed = await client.list_tools()
        return listed, client.server_info

    listed, info = with_server(evidence_root, scenario)
    # All the tools together, as the client receives them (issue 12 measured 30.7k for five; 22.1k for
    # eleven before this budget covered them all)
    size = len(listed.model_dump_json(by_alias=True, exclude_none=True))
    assert len(listed.tools) == TOOL_COUNT and size <= TOOLS_LIST_BUDGET, size
    assert info is not None and info.version == version("ascend-operator-debug") and info.version
    for tool in listed.tools:
        for node in _walk(tool.input_schema):
            if "properties" in node or "patternProperties" in node:
                assert node.get("additionalProperties") is False, (tool.name, sorted(node))
            assert "title" not in node
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
    plan = next(t for t in listed.tools if t.name == "plan_cases").input_schema
    validator = jsonschema.Draft202012Validator(plan)
    good = minimal_plan_request("schema-ok", ("a",))
    assert list(validator.iter_errors(good)) == []
    for bad_value in ("4", 4.5, True):
        bad = minimal_plan_request("schema-bad", ("a",))
        bad["cases"][0]["inputs"][0]["shape"] = [bad_value, 8]
        assert list(validator.iter_errors(bad)), bad_value
    bad = minimal_plan_request("schema-bad", ("a",))
    bad["captured_files"] = {"../x": "/etc/passwd"}  # a key the server refuses: so does the schema
    assert list(validator.iter_errors(bad))


def _star_request(run_id: str, var: dict[str, Any]) -> dict[str, Any]:
    request = minimal_plan_request(run_id, ("base",))
    request["stars"] = [{"base": request.pop("cases")[0], "vary": [var]}]
    return request


# (variation, what the server does with it): star values of each kind it takes, and of kinds no axis takes
STAR_VALUES = [
    ({"axis": "shape", "input": "x", "values": [[2, 8]]}, True),
    ({"axis": "dtype", "values": ["bfloat16"]}, True),
    ({"axis": "attribute", "name": "alpha", "values": [0.25, None]}, True),
    ({"axis": "values", "input": "x", "values": [{"kind": "uniform", "low": -2, "high": 2}]}, True),
    ({"axis": "shape", "input": "x", "values": [[[2, 8]]]}, False),  # a list of lists is no shape
    ({"axis": "values", "input": "x", "values": [{"kind": "normal", "sigma": 2}]}, False),  # no such field
    ({"axis": "attribute", "name": "alpha", "values": [{"kind": "dtype", "value": "bf16"}]}, False),  # no dtype
]


def test_star_values_are_published_as_what_the_server_takes(evidence_root: Path) -> None:
    async def scenario(client: Client) -> Any:
        plan = next(t for t in (await client.list_tools()).tools if t.name == "plan_cases").input_schema
        answers = [await client.call_tool("plan_cases", _star_request(f"star-{i}", var))
                   for i, (var, _) in enumerate(STAR_VALUES)]
        return plan, answers

    plan, answers = with_server(evidence_root, scenario)
    validator = jsonschema.Draft202012Validator(plan)
    for i, ((var, server_takes), answer) in enumerate(zip(STAR_VALUES, answers)):
        assert answer.is_error is (not server_takes), (var, answer.content[0].text)
        errors = list(validator.iter_errors(_star_request(f"star-{i}", var)))
        assert (errors == []) is server_takes, (var, [e.message for e in errors])
        if not server_takes:  # the server names the variation and the value
            assert "star vary[0]" in error_text(answer), error_text(answer)


def test_answers_are_short_text_beside_valid_structured_content_and_types_are_strict(evidence_root: Path) -> None:
    run_id = "econ"

    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["plan"] = await client.call_tool("plan_cases", minimal_plan_request(run_id, ("a", "b")))
        out["rec"] = await client.call_tool("record_result", {"run_id": run_id, "result": passed_result("a")})
        out["rec2"] = await client.call_tool("record_result", {"run_id": run_id, "result": mismatch_result("b")})
        out["analysis"] = await client.call_tool("analyze_failures", {"run_id": run_id})
        for tool in ("plan_cases", "record_result", "analyze_failures"):
            out[f"schema-{tool}"] = json.loads((await client.read_resource(f"opdebug://schemas/{tool}")).contents[0].text)
        lax = minimal_plan_request("lax", ("a",))
        lax["config"]["tolerance"]["atol"] = "1e-5"
        lax["config"]["default_timeout_s"] = "30"
        lax["cases"][0]["inputs"][0]["shape"] = ["4", 8]
        lax["append"] = "yes"
        out["lax"] = await client.call_tool("plan_cases", lax)
        bool_for_number = minimal_plan_request("lax2", ("a",))
        bool_for_number["cases"][0]["seed"] = True
        out["lax2"] = await client.call_tool("plan_cases", bool_for_number)
        return out

    out = with_server(evidence_root, scenario)
    for key, tool in (("plan", "plan_cases"), ("rec", "record_result"), ("rec2", "record_result"),
                      ("analysis", "analyze_failures")):
        result = out[key]
        assert not result.is_error, error_text(result)
        text = result.content[0].text
        assert len(text) <= 800 and not text.lstrip().startswith("{"), text
        jsonschema.validate(result.structured_content, out[f"schema-{tool}"])
    assert out["plan"].content[0].text.startswith("created run econ: 2 case(s) added")
    assert out["rec"].content[0].text.startswith("recorded a: passed")
    assert "verdict diagnosed" in out["analysis"].content[0].text
    text = error_text(out["lax"])
    for field in ("config.tolerance.atol", "config.default_timeout_s", "cases.0.inputs.0.shape.0", "append"):
        assert field in text, field
    assert "cases.0.seed" in error_text(out["lax2"])
    assert not (evidence_root / "lax").exists() and not (evidence_root / "lax2").exists()


def test_prompt_completions_run_resources_and_raw_evidence(evidence_root: Path) -> None:
    run_id = "proto-run"
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["prompts"] = (await client.list_prompts()).prompts
        out["prompt"] = await client.get_prompt("debug-operator", {"operator": "torch_npu.npu_rms_norm",
                                                                   "symptom": "NaN in bf16", "host": "local"})
        out["before"] = {str(r.uri) for r in (await client.list_resources()).resources}
        await client.call_tool("plan_cases", minimal_plan_request(run_id, ("eager-f32", "graph-f32")))
        out["after"] = {str(r.uri) for r in (await client.list_resources()).resources}
        await client.call_tool("record_result", {"run_id": run_id, "result": passed_result("eager-f32")})
        template = ResourceTemplateReference(type="ref/resource", uri="opdebug://runs/{run_id}/raw/{case_id}/{name}")
        out["c_run"] = await client.complete(template, {"name": "run_id", "value": "proto"})
        out["c_case"] = await client.complete(template, {"name": "case_id", "value": "gr"}, {"run_id": run_id})
        out["c_name"] = await client.complete(template, {"name": "name", "value": "sub"},
                                              {"run_id": run_id, "case_id": "eager-f32"})
        out["c_host"] = await client.complete(PromptReference(type="ref/prompt", name="debug-operator"),
                                              {"name": "host", "value": "lo"})
        out["raw_index"] = json.loads((await client.read_resource(
            f"opdebug://runs/{run_id}/raw/eager-f32")).contents[0].text)
        out["raw_file"] = (await client.read_resource(
            f"opdebug://runs/{run_id}/raw/eager-f32/submitted.json")).contents[0].text
        out["results"] = json.loads((await client.read_resource(f"opdebug://runs/{run_id}/results")).contents[0].text)
        out["runs"] = json.loads((await client.read_resource("opdebug://runs")).contents[0].text)
        return out

    async def run(client_kwargs: dict) -> Any:
        from mcp.client.stdio import StdioServerParameters
        import sys

        params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", "--evidence-root",
                                                                    str(evidence_root)],
                                       cwd=str(REPO_ROOT), env=server_env())
        async with Client(params, cache=None, read_timeout_seconds=120, **client_kwargs) as client:
            return await scenario(client)

    import asyncio

    out = asyncio.run(run({"message_handler": on_message}))
    assert [p.name for p in out["prompts"]] == ["debug-operator"]
    assert {a.name for a in out["prompts"][0].arguments} == {"operator", "symptom", "host"}
    text = out["prompt"].messages[0].content.text
    assert "torch_npu.npu_rms_norm" in text and "NaN in bf16" in text and "plan_cases" in text
    assert f"opdebug://runs/{run_id}/manifest" not in out["before"]
    assert f"opdebug://runs/{run_id}/manifest" in out["after"]
    assert out["c_run"].completion.values == [run_id]
    assert out["c_case"].completion.values == ["graph-f32"]
    assert out["c_name"].completion.values == ["submitted.json"]
    assert out["c_host"].completion.values == ["local"]
    assert "submitted.json" in out["raw_index"]["files"] and "result.json" in out["raw_index"]["files"]
    assert json.loads(out["raw_file"])["case_id"] == "eager-f32"
    assert set(out["results"]["results"]) == {"eager-f32"}  # current, before any analysis
    assert out["runs"]["run_count"] == 1
    assert set(out["runs"]["runs"][0]) == {"run_id", "operator", "status", "case_count", "recorded_count",
                                           "updated_at"}


def _bulk_records(root: Path, run_id: str, n: int) -> None:
    """Write n results in the layout a record leaves (a raw directory with its
    result.json, an index line, the count): a cheap stand-in for n record_result calls."""
    run = root / run_id
    lines = []
    for i in range(n):
        doc = passed_result(f"c{i}") if i % 50 else mismatch_result(f"c{i}")
        doc = {"schema_version": 1, **doc, "source": {"kind": "record_result", "raw_path": f"raw-results/c{i}"},
               "environment": {}, "recorded_at": "2026-11-30T00:00:00Z"}
        raw = run / "raw-results" / f"c{i}"
        raw.mkdir()
        (raw / "result.json").write_text(json.dumps(doc))
        lines.append(json.dumps(doc, separators=(",", ":")))
    with open(run / "results.jsonl", "a") as fh:
        fh.write("\n".join(lines) + "\n")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["recorded_count"] = n
    (run / "manifest.json").write_text(json.dumps(manifest))


def test_a_10000_case_run_records_and_analyzes_correctly(evidence_root: Path) -> None:
    run_id = "big"
    n = 10_000
    request = minimal_plan_request(run_id, ("c0",))
    case = request["cases"][0]
    request["cases"] = [dict(case, id=f"c{i}", seed=i) for i in range(n)]

    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["plan"] = await client.call_tool("plan_cases", request)
        _bulk_records(evidence_root, run_id, n - 2)
        out["rec"] = await client.call_tool("record_result", {"run_id": run_id, "result": passed_result(f"c{n - 2}")})
        out["unknown"] = await client.call_tool("record_result", {"run_id": run_id, "result": passed_result("nope")})
        out["again"] = await client.call_tool("record_result", {"run_id": run_id, "result": passed_result("c7")})
        out["last"] = await client.call_tool("record_result",
                                             {"run_id": run_id, "result": mismatch_result(f"c{n - 1}")})
        out["analysis"] = await client.call_tool("analyze_failures", {"run_id": run_id})
        out["runs"] = json.loads((await client.read_resource("opdebug://runs")).contents[0].text)
        return out

    out = with_server(evidence_root, scenario)
    plan = out["plan"].structured_content
    assert plan["case_count"] == n and len(plan["added"]) == n
    assert len(plan["cases"]) == 50 and plan["cases_omitted"] == n - 50
    assert len(json.dumps(plan)) < 200_000
    rec = out["rec"].structured_content
    assert rec["pending"] == [f"c{n - 1}"] and rec["pending_count"] == 1
    unknown = error_text(out["unknown"])
    assert "[unknown_case]" in unknown and len(unknown) < 400
    assert "[already_recorded]" in error_text(out["again"])
    assert out["last"].structured_content["pending"] == [] and out["last"].structured_content["pending_count"] == 0
    analysis = out["analysis"].structured_content
    assert analysis["recorded"] == n and analysis["planned"] == n and analysis["missing"] == []
    assert analysis["status_counts"]["numerical_mismatch"] == n // 50 + 1
    assert analysis["status_counts"]["passed"] == n - n // 50 - 1
    manifest = json.loads((evidence_root / run_id / "manifest.json").read_text())
    assert manifest["recorded_count"] == n and manifest["status"] == "diagnosed"
    view = json.loads((evidence_root / run_id / "results.json").read_text())
    assert len(view["results"]) == n
    assert out["runs"]["runs"][0]["recorded_count"] == n


def test_a_new_run_is_announced_and_each_case_is_logged(evidence_root: Path) -> None:
    import asyncio
    import sys

    import anyio
    from mcp.client.stdio import StdioServerParameters

    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async def main() -> Any:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "mcp_server", "--evidence-root", str(evidence_root)],
                                       cwd=str(REPO_ROOT), env=server_env())
        async with Client(params, cache=None, read_timeout_seconds=120, logging_callback=on_log,
                          log_level="info") as client:
            request = {"config": {"run_id": "announced", "operator": {"name": "add", "candidate": "torch.add",
                                                                       "reference": "torch.add"}},
                       "cases": [{"id": "a", "inputs": [{"name": "input", "shape": [4]},
                                                        {"name": "other", "shape": [4]}]}]}
            async with client.listen(resources_list_changed=True) as sub:
                plan = await client.call_tool("plan_cases", request)
                with anyio.fail_after(30):
                    event = await sub.__anext__()
            run = await client.call_tool("run_case_remote", {"run_id": "announced"})
            return plan, event, run

    plan, event, run = asyncio.run(main())
    assert not plan.is_error, error_text(plan)
    assert type(event).__name__ == "ResourcesListChanged", event
    assert not run.is_error, error_text(run)
    # (a float32 add against its float64 truth: the rounding of the float32 sum, 2**-26, issue 22)
    assert [(p.level, p.logger, p.data) for p in logs] == [("info", "opdebug", "[1/1] a: passed - passed "
                                                            "(1 output(s); max_abs=1.49e-08)")]


# computed by the runner: accepted from record_result, left out of the published schema
RUNNER_FIELDS = {"mean_abs": 0.1, "rmse": 0.12, "cosine": 0.99, "error_balance": -0.01, "max_ulp": 3.0,
                 "worst_index": [1, 2], "worst_candidate": "nan", "worst_reference": 1.5,
                 "first_mismatch_index": [0, 1], "first_candidate": 2.0, "first_reference": 1.0}


def test_record_result_accepts_the_runner_fields_it_does_not_publish(evidence_root: Path) -> None:
    async def scenario(client: Client) -> Any:
        record = next(t for t in (await client.list_tools()).tools if t.name == "record_result").input_schema
        await client.call_tool("plan_cases", minimal_plan_request("runner-fields", ("a",)))
        result = mismatch_result("a")
        result["comparisons"][0].update(RUNNER_FIELDS)
        answer = await client.call_tool("record_result", {"run_id": "runner-fields", "result": result})
        return record, answer

    record, answer = with_server(evidence_root, scenario)
    assert not answer.is_error, error_text(answer)
    stored = json.loads((evidence_root / "runner-fields" / "raw-results" / "a" / "result.json").read_text())
    assert {k: stored["comparisons"][0][k] for k in RUNNER_FIELDS} == RUNNER_FIELDS
    published = json.dumps(record)
    assert [k for k in RUNNER_FIELDS if f'"{k}"' in published] == []
    assert all(f'"{k}"' in published for k in ("max_abs", "max_rel", "mismatch_count", "contract_mismatch"))
