"""Issue 9: contracts the agent can read and the code can trust.

- every tool argument whose name does not say it carries a short phrase in
  tools/list, and every input field whose name and type do not carry its
  meaning is described in the documented input schema (opdebug://schemas/{tool}/input;
  tools/list keeps the top-level phrases only, to stay small), every output field is
  described, and a ToolError's details reach the agent and the CLI as a JSON line;
- the supervisor's ``case_done`` is validated where it is read: a malformed
  one is reported as such, a comparison failure reads as one;
- one family of transport errors, the same on the local and the SSH transport;
- the client's wait for the candidate's ``phase`` event follows the supervisor's announced
  deadlines, and consecutive worker start failures are bounded.

Nothing is mocked: real MCP server over stdio, real supervisors and workers,
real sshd.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp.client import Client

from conftest import minimal_plan_request, mismatch_result
from sshd_fixture import ssh_env  # noqa: F401
from test_mcp_stdio import error_text, with_server
from tools.analysis.reasons import mismatch_reason
from tools.check_host import HostCheck
from tools.render.describe import describe_comparison
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.remote.envelopes import CaseDone, read_case_done
from tools.remote import pool
from tools.remote.errors import SlotCannotStart, SlotGone, SlotLost, WorkerCannotStart
from tools.remote.local import LocalSlot
from tools.remote.slot import RunFiles
from tools.remote.supervisor_client import ConnectionLost
from tools.run_case_remote import _outcome, _record_event, run_case_remote
from tools.schemas import Analysis, CaseResult, PlanResponse, RecordResponse, RunResponse

OPERATORS = Path(__file__).resolve().parent / "operators"
REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------
# Described fields, details that reach the agent
# --------------------------------------------------------------------------


def undescribed(schema: dict) -> list[str]:
    """Properties (at the top and in $defs) without a description; a property that
    is only a $ref takes its target's."""
    defs = schema.get("$defs") or {}

    def described(prop: dict) -> bool:
        if prop.get("description"):
            return True
        ref = prop.get("$ref", "")
        return bool(ref.startswith("#/$defs/") and (defs.get(ref.rsplit("/", 1)[1]) or {}).get("description"))

    models = {"(top)": schema, **defs}
    return [f"{name}.{field}" for name, model in models.items() if isinstance(model, dict)
            for field, prop in (model.get("properties") or {}).items() if not described(prop)]


def _descriptions(schema: Any, path: tuple = (), in_map: bool = False) -> list[tuple]:
    """The path of every description in a schema (a property named 'description' is not one)."""
    found: list[tuple] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and not in_map and isinstance(value, str):
                found.append(path)
            else:
                found += _descriptions(value, path + (key,), key in ("properties", "$defs", "patternProperties")
                                       and not in_map)
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += _descriptions(value, path + (i,))
    return found


def test_tool_arguments_and_their_fields_are_described_and_error_details_reach_the_client(evidence_root: Path) -> None:
    async def scenario(client: Client) -> Any:
        tools = (await client.list_tools()).tools
        unknown_host = await client.call_tool("check_host", {"host": "no-such-host"})
        documented = {name: json.loads((await client.read_resource(f"opdebug://schemas/{name}/input")).contents[0].text)
                      for name in ("plan_cases", "record_result", "narrow_failure")}
        return tools, unknown_host, documented

    tools, unknown_host, documented = with_server(evidence_root, scenario)
    by_name = {t.name: t for t in tools}
    # tools/list: every argument whose name does not say what it is carries a short phrase (run_id,
    # a case_id or host named by the tool's description, and bounded budgets need none)
    self_explanatory = {"run_id", "case_id", "host", "max_cases", "max_seconds", "cases_per_step",
                        "command_timeout_s"}
    for tool in tools:
        missing = undescribed({"properties": tool.input_schema["properties"]})
        assert {m.split(".", 1)[1] for m in missing} <= self_explanatory, (tool.name, missing)
    plan = by_name["plan_cases"].input_schema
    # the meaning that lived in a '#' comment: a path on the server's machine, not the agent's
    assert "server's machine" in plan["properties"]["captured_files"]["description"]
    # the nested fields' descriptions (and defaults) are in the documented input schema, a resource
    # (tools/list carries the same contract with the top-level phrases only)
    doc = documented["plan_cases"]
    defs = doc["$defs"]
    assert "contiguous" in defs["TensorSpec"]["properties"]["strides"]["description"]
    for model, field, words in [("OperatorSpec", "candidate", "device"), ("OperatorSpec", "reference", "CPU"),
                                ("OperatorSpec", "modules", "module_sources"), ("CallSpec", "order", "positional"),
                                ("Case", "seed", "null"), ("Case", "timeout_s", "default_timeout_s"),
                                ("ValueSpec", "captured", "artifacts/captured/"),
                                ("SpecialValues", "positions", "multi-indices")]:
        assert words in defs[model]["properties"][field]["description"], (model, field)
    assert defs["Case"]["properties"]["mode"]["default"] == "eager"
    assert defs["OperatorConfig"]["properties"]["compile_timeout_s"]["default"] == 600.0
    assert documented["narrow_failure"]["properties"]["max_cases"]["default"] == 40
    for name, schema in documented.items():  # as strict as tools/list
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["additionalProperties"] is False, name
    # a model whose fields are plain metrics is described once, formulas included
    record = documented["record_result"]
    assert "max_rel = |d|/max(|ref|, guard)" in record["$defs"]["Comparison"]["description"]
    for tool in tools:  # tools/list: the top-level phrases only
        nested = [d for d in _descriptions(tool.input_schema) if not (len(d) == 2 and d[0] == "properties")]
        assert nested == [], (tool.name, nested)

    text = error_text(unknown_host)
    assert text.splitlines()[0].endswith("known hosts: ['local']") and "[unknown_host]" in text
    assert json.loads(text.splitlines()[-1]) == {"details": {"known_hosts": ["local"]}}


@pytest.mark.parametrize("model", [PlanResponse, RecordResponse, Analysis, RunResponse, HostCheck, CaseDone])
def test_every_output_field_is_described(model) -> None:
    assert undescribed(model.model_json_schema()) == []


def test_the_cli_prints_tool_error_details(subprocess_env: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "hosts", "check", "no-such-host"], cwd=tmp_path,
                          env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == {"details": {"known_hosts": ["local"]}}


# --------------------------------------------------------------------------
# The case_done envelope, validated where it is read; one comparison renderer
# --------------------------------------------------------------------------


def _done(**over) -> dict:
    event = {"event": "case_done", "request_id": "r1", "case_id": "eager-f32", "outcome": "result",
             "result": mismatch_result("eager-f32"), "started_at": 1.0, "finished_at": 2.0,
             "worker_pid": 11, "worker_restarted": False, "worker_lost": False,
             "stdout": "", "stderr": "", "traceback": ""}
    event.update(over)
    return {k: v for k, v in event.items() if v is not None}


def test_a_malformed_case_done_is_reported_as_such_and_the_case_stays_pending(evidence_root: Path) -> None:
    plan_cases(minimal_plan_request("env"), root=evidence_root)
    store = RunStore(evidence_root, "env")

    def record(event: dict):  # parsed once where it comes back from a slot, as run_case_remote does
        return _record_event(store, "local", "cpu:0", "eager-f32", read_case_done(event))

    # an outcome without its body, a missing clock, an unknown field, a phase nobody knows
    for event, named in [(_done(result=None), "outcome 'result' needs 'result'"),
                         (_done(finished_at=None), "finished_at: Field required"),
                         (_done(surprise=1), "surprise: unknown field"),
                         (_done(outcome="harness_error", result=None,
                                harness_error={"where": "elsewhere", "type": "X", "message": "m"}),
                          "harness_error.where: Input should be")]:
        outcome = record(event)
        assert outcome.state == "pending" and not outcome.recorded
        assert outcome.error.startswith("malformed case_done envelope from the supervisor"), outcome.error
        assert named in outcome.error and outcome.error.endswith("nothing recorded, the case stays pending")
    # a comparison that failed is named as the comparison, not as "the harness"
    outcome = record(_done(outcome="harness_error", result=None, harness_error={
        "where": "judge", "type": "RuntimeError", "message": "reference returned an ndarray"}))
    assert outcome.error.startswith("the comparison failed (RuntimeError: reference returned an ndarray)")
    assert store.pending_case_ids() == ["eager-f32", "graph-f32"]
    # the same envelope, well-formed, is recorded
    outcome = record(_done())
    assert outcome.recorded and outcome.state == "numerical_mismatch"
    assert store.pending_case_ids() == ["graph-f32"]


def test_one_comparison_description_in_every_renderer() -> None:
    comparison = {"output": "y", "passed": False, "numel": 16, "atol": 1e-5, "rtol": 1e-5, "max_abs": 0.25,
                  "max_rel": 0.5, "mismatch_count": 2, "mismatch_ratio": 0.125, "nan_mismatch": 1,
                  "worst_index": [0, 1], "worst_candidate": 1.25, "worst_reference": 1.0}
    full = describe_comparison(comparison)
    assert full == ("output 'y': max_abs=0.25 max_rel=0.5 (atol 1e-05, rtol 1e-05), 12.50% outside tolerance "
                    "(2/16), worst at [0, 1]: candidate 1.25 vs reference 1.0, NaN pattern mismatches=1")
    brief = describe_comparison(comparison, brief=True)
    assert brief == "output 'y': max_abs=0.25, 12.50% outside tolerance (2/16), NaN pattern mismatches=1"
    result = {"case_id": "c", "status": "numerical_mismatch", "comparisons": [comparison]}
    assert mismatch_reason(CaseResult.model_validate(result)) == full
    assert _outcome("c", CaseResult.model_validate(result), "local", "cpu:0", "raw").summary == \
        "numerical mismatch - " + brief
    from tools.cli.commands import result_detail as _result_detail
    assert _result_detail(CaseResult.model_validate(result)) == brief
    contract = {"output": "y", "passed": False, "contract_mismatch": "shape [2] vs [3]"}
    assert describe_comparison(contract) == describe_comparison(contract, brief=True) == \
        "output 'y': contract mismatch: shape [2] vs [3]"


# --------------------------------------------------------------------------
# Transport errors: one family
# --------------------------------------------------------------------------


def test_transport_errors_are_one_family() -> None:
    assert issubclass(SlotLost, SlotGone) and issubclass(ConnectionLost, SlotGone)
    assert issubclass(WorkerCannotStart, SlotCannotStart)
    assert not issubclass(SlotGone, SlotCannotStart) and not issubclass(SlotCannotStart, SlotGone)
    assert not hasattr(pool, "_lost_errors")


def test_a_worker_that_cannot_start_raises_the_same_error_on_local_and_ssh(ssh_env, tmp_path: Path) -> None:
    # torch_npu is not installed here: an npu worker fails to open its device on either transport
    host = ssh_env.inventory(hosta={"device": "npu", "devices": [0]}).get("hosta")
    run = RunFiles(run_id="r", config={})

    async def scenario() -> list[BaseException]:
        errors = []
        try:
            try:
                await LocalSlot(device_kind="npu").start()
            except Exception as exc:  # noqa: BLE001 - the type is what is checked
                errors.append(exc)
            try:
                await pool.REGISTRY.checkout(host, 0, run)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
        finally:
            await pool.REGISTRY.close_all()
        return errors

    errors = asyncio.run(scenario())
    assert [type(e) for e in errors] == [WorkerCannotStart, WorkerCannotStart], errors
    for exc in errors:
        assert exc.code == "slot_start_failed" and "the worker cannot start" in exc.message
        assert "torch_npu" in exc.message


# --------------------------------------------------------------------------
# Deadlines: the client follows the supervisor's clocks; restarts are bounded
# --------------------------------------------------------------------------


def test_a_slow_in_bounds_start_is_not_a_lost_connection(tmp_path: Path, monkeypatch) -> None:
    """The user module takes 3 s to import (the harness phase, before the candidate's). The
    client's fixed wait is 1 s - it stands for the old fixed 600 s against a supervisor
    allowed more - but the wait comes from the deadlines the supervisor announced."""
    monkeypatch.setenv("OPDEBUG_WORKER_START_TIMEOUT_S", "20")
    monkeypatch.setenv("OPDEBUG_RUNNER_STAGE", str(tmp_path / "stage"))
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "slow_import.py").write_text((OPERATORS / "slow_import.py").read_text())
    config = {"run_id": "p", "operator": {"name": "slow", "candidate": "slow_import.cand",
                                          "reference": "slow_import.ref", "modules": ["slow_import.py"]},
              "tolerance": {"atol": 1e-5, "rtol": 1e-5}}
    run = RunFiles(run_id="p", config=config, modules_dir=modules)

    async def scenario():
        slot = LocalSlot()
        await slot.start()
        try:
            slot.client.start_timeout_s = 1.0
            wait = slot.client.started_wait_s()
            answer = await slot.run_case(run, {"id": "c", "inputs": [{"name": "x", "shape": [4]}]}, 30)
            return slot.hello, wait, answer
        finally:
            await slot.close()

    hello, wait, answer = asyncio.run(scenario())
    assert hello["deadlines"] == {"worker_start_timeout_s": 20.0, "health_check_timeout_s": 60.0,
                                  "harness_timeout_s": 20.0, "max_worker_start_failures": 3}
    assert wait == 60.0 + 20.0 + 20.0 + 60.0  # health check + worker start + harness + grace
    assert answer["outcome"] == "result" and answer["result"]["status"] == "passed"
    assert answer["finished_at"] - answer["started_at"] >= 3.0


def test_consecutive_worker_start_failures_are_bounded(tmp_path: Path, monkeypatch) -> None:
    """c0 kills its worker and leaves every later worker unable to start; with a bound of
    2, c1 and c2 each pay one failed start, the bound is named, and c3 is not tried."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OPDEBUG_MAX_WORKER_START_FAILURES", "2")
    monkeypatch.setenv("OPDEBUG_RUNNER_STAGE", str(tmp_path / "stage"))
    # the wedge is at interpreter start-up (sitecustomize): every worker a new interpreter, not a fork of
    # the template that started before the wedge (tools/runner/template.py); the bound is the same for both
    monkeypatch.setenv("OPDEBUG_WORKER_TEMPLATE", "0")
    cases = [{"id": f"c{i}", "inputs": [{"name": "x", "shape": [4]}], "attributes": {"site_dir": str(site)}}
             for i in range(4)]
    config = {"run_id": "bound", "operator": {"name": "b", "candidate": "breaks_worker_start.cand",
                                              "reference": "breaks_worker_start.ref",
                                              "modules": ["breaks_worker_start.py"]}}
    plan_cases({"config": config, "cases": cases, "module_sources": {
        "breaks_worker_start.py": (OPERATORS / "breaks_worker_start.py").read_text()}}, root=tmp_path)

    async def scenario():
        try:
            return await run_case_remote("bound", root=tmp_path)
        finally:
            await pool.REGISTRY.close_all()

    resp = asyncio.run(scenario())
    by_id = {o.case_id: o for o in resp.outcomes}
    assert by_id["c0"].state == "crash" and by_id["c0"].signature == "exit 9"
    assert [by_id[c].state for c in ("c1", "c2", "c3")] == ["pending"] * 3
    assert by_id["c1"].error.startswith("the worker could not start (WorkerStartError: worker exited during "
                                        "start-up (exit code 17)")
    bound = "2 worker start failures in a row, the supervisor's bound (max_worker_start_failures=2)"
    assert "WorkerRestartLimit" in by_id["c2"].error and bound in by_id["c2"].error
    assert by_id["c3"].error.startswith("no slot was left to run it: local cpu:0: [slot_start_failed]")
    assert bound in by_id["c3"].error
    assert resp.recorded == ["c0"] and resp.pending == ["c1", "c2", "c3"]
