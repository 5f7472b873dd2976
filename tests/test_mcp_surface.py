"""What the agent and the person read (issue 25), through the real MCP client over stdio.

One server session (the handshake-era protocol an IDE or the MCP Inspector
speaks) drives all eleven tools over a planted operator on the local
transport: a kernel that drops the tail tile past 256 columns
(tests/operators/tail_past_tile.py).  The tests then read what came back:

- each tool's text answer names its key result (ids, findings with minimal
  pairs, paths, first mismatch positions) and what to do next, and no text
  says "the structured content has";
- the protocol details: capabilities that match the notifications sent, a
  raw binary file as a blob with its MIME type, an invalid prompt argument as
  -32602 in one line with no traceback in the server's log, one error line per
  mistake in a union's value;
- results.json is current right after run_case_remote, without an analysis;
- every property of every tool's documented input schema is described, and
  so is every output field;
- the prompt, fetched with its arguments, is the text SKILL.md shows.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from conftest import REPO_ROOT, passed_result
from test_mcp_stdio import TOOLS, error_text

OPERATORS = Path(__file__).resolve().parent / "operators"
RUN = "tiles"
FAILING = ("base.x.shape-2x300", "base.x.shape-2x512")
PROMPT_ARGS = {"operator": "torch_npu.npu_rms_norm", "symptom": "NaN in the bfloat16 output after layer 12",
               "host": "npu-a"}
GENERIC = "the structured content has"


def tiles_request() -> dict[str, Any]:
    return {"config": {"run_id": RUN, "operator": {"name": "tail_past_tile", "candidate": "tail_past_tile.cand",
                                                   "reference": "tail_past_tile.ref",
                                                   "modules": ["tail_past_tile.py"]},
                       "tolerance": {"atol": 1e-5, "rtol": 1e-5}},
            "module_sources": {"tail_past_tile.py": (OPERATORS / "tail_past_tile.py").read_text()},
            "stars": [{"base": {"id": "base", "seed": 1, "inputs": [{"name": "x", "shape": [2, 128]}]},
                       "vary": [{"axis": "shape", "input": "x", "values": [[2, 256], [2, 300], [2, 512]]}]}]}


def text_of(result: Any) -> str:
    assert not result.is_error, error_text(result)
    return "\n".join(b.text for b in result.content if getattr(b, "type", "") == "text")


async def _session(root: Path, errlog: Any) -> dict[str, Any]:
    stage = root.parent / "stage"  # the server's own runner stage and device leases: no other run shares them
    stage.mkdir(mode=0o700, exist_ok=True)
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", "--evidence-root", str(root)],
                                   cwd=str(REPO_ROOT),
                                   env={"PYTHONPATH": str(REPO_ROOT), "OPDEBUG_RUNNER_STAGE": str(stage)})
    notes: list[Any] = []

    async def on_message(message: Any) -> None:
        notes.append(message)

    out: dict[str, Any] = {"notes": notes}
    async with Client(stdio_client(params, errlog=errlog), cache=None, mode="legacy", read_timeout_seconds=300,
                      message_handler=on_message) as client:
        call = client.call_tool
        out["capabilities"] = client.server_capabilities
        out["prompt"] = await client.get_prompt("debug-operator", PROMPT_ARGS)
        for key, args in (("prompt_missing", {"operator": "x"}), ("prompt_unknown", {**PROMPT_ARGS, "tone": "x"})):
            try:
                await client.get_prompt("debug-operator", args)
                out[key] = None
            except MCPError as exc:
                out[key] = exc.error
        out["inputs"] = {t: json.loads((await client.read_resource(f"opdebug://schemas/{t}/input")).contents[0].text)
                         for t in TOOLS}
        out["outputs"] = {t: json.loads((await client.read_resource(f"opdebug://schemas/{t}")).contents[0].text)
                          for t in TOOLS}
        out["plan_cases"] = await call("plan_cases", tiles_request())
        out["check_host"] = await call("check_host", {"host": "local"})
        out["run_case_remote"] = await call("run_case_remote", {"run_id": RUN, "keep_outputs": True})
        out["results_json"] = json.loads((root / RUN / "results.json").read_text())  # no analysis yet
        out["analysis_json_exists"] = (root / RUN / "analysis.json").exists()
        base = f"opdebug://runs/{RUN}/raw/{FAILING[0]}"
        out["raw_index"] = json.loads((await client.read_resource(base)).contents[0].text)
        out["raw_pt"] = (await client.read_resource(f"{base}/outputs.pt")).contents[0]
        out["raw_json"] = (await client.read_resource(f"{base}/worker-result.json")).contents[0]
        out["analyze_failures"] = await call("analyze_failures", {"run_id": RUN})
        out["render_pictures"] = await call("render_pictures", {"run_id": RUN, "case_ids": list(FAILING)})
        out["export_repro"] = await call("export_repro", {"run_id": RUN, "case_id": FAILING[0]})
        out["export_regression"] = await call("export_regression", {"run_id": RUN, "case_ids": [FAILING[0]]})
        out["narrow_failure"] = await call("narrow_failure", {"run_id": RUN, "max_cases": 3, "max_steps": 1})
        out["shrink_case"] = await call("shrink_case", {"run_id": RUN, "case_id": FAILING[0], "max_cases": 3})
        out["verify_fix"] = await call("verify_fix", {"run_id": RUN, "run_command": False})
        out["plan_append"] = await call("plan_cases", {"run_id": RUN, "append": True, "cases": [
            {"id": "by-hand", "inputs": [{"name": "x", "shape": [2, 64]}]}]})
        out["record_result"] = await call("record_result", {"run_id": RUN, "result": passed_result("by-hand")})
        bad = tiles_request()
        bad["config"]["run_id"] = "bad-nested"
        bad["stars"][0]["base"]["inputs"][0]["bogus"] = 1
        out["bad_nested"] = await call("plan_cases", bad)
    return out


@pytest.fixture(scope="module")
def surface(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("surface") / "evidence"
    root.mkdir()
    log = root.parent / "server-stderr.txt"
    with open(log, "w") as errlog:
        out = asyncio.run(_session(root, errlog))
    out["stderr"] = log.read_text()
    out["root"] = root
    return out


# --------------------------------------------------------------------------
# Each tool's text names its key result and the next step
# --------------------------------------------------------------------------


def test_no_answer_says_the_structured_content_has(surface) -> None:
    for tool in TOOLS:
        result = surface[tool]
        assert GENERIC not in text_of(result), (tool, text_of(result))


def test_plan_cases_text_lists_the_ids_and_what_differs(surface) -> None:
    text = text_of(surface["plan_cases"])
    assert text.startswith(f"created run {RUN}: 4 case(s) added")
    for cid, shape in (("base.x.shape-2x256", "2x256"), (FAILING[0], "2x300"), (FAILING[1], "2x512")):
        assert f"- {cid}: x.shape={shape} (vs base)" in text, text
    assert "next: run_case_remote" in text
    cases = surface["plan_cases"].structured_content["cases"]
    assert cases[0]["differs_from"] is None and len(cases[0]["axes"]) > 5  # the base: every axis
    assert [c["axes"] for c in cases[1:]] == [{"x.shape": s} for s in ("2x256", "2x300", "2x512")]
    assert "1 case(s) added" in text_of(surface["plan_append"]) and "by-hand" in text_of(surface["plan_append"])


def test_run_case_remote_text_names_every_failure_and_its_first_mismatch(surface) -> None:
    text = text_of(surface["run_case_remote"])
    assert text.startswith(f"Ran 4 case(s) of run {RUN} on local: 2 passed, 2 numerical_mismatch.")
    for cid in FAILING:
        line = next(line for line in text.splitlines() if line.startswith(f"- {cid} "))
        # the tail tile (columns 256...) is zero: the first mismatch is at row 0, column 256
        assert "first mismatch in output 'out' at [0, 256]: candidate 0" in line, line
        assert not line.rstrip().endswith(("…", "...")), line  # whole sentences, not cut
    assert "next: analyze_failures" in text
    outcome = next(o for o in surface["run_case_remote"].structured_content["outcomes"] if o["case_id"] == FAILING[0])
    assert outcome["first_mismatch"]["index"] == [0, 256] and outcome["first_mismatch"]["output"] == "out"


def test_analyze_failures_text_names_the_finding_and_its_minimal_pair(surface) -> None:
    text = text_of(surface["analyze_failures"])
    analysis = surface["analyze_failures"].structured_content
    assert f"run {RUN}: verdict diagnosed" in text
    lead = analysis["findings"][0]
    pair = lead["minimal_pair"]
    assert lead["predicate"] in text and f"minimal pair {pair['passing']} passes" in text
    assert f"{pair['failing']} fails" in text and f"opdebug://runs/{RUN}/report" in text


def test_narrow_failure_text_says_why_it_stopped_and_what_next(surface) -> None:
    text = text_of(surface["narrow_failure"])
    narrow = surface["narrow_failure"].structured_content
    assert f"narrow_failure on run {RUN} stopped: {narrow['stopped']}" in text
    assert f"{narrow['cases_run']} case(s) run" in text
    for finding in narrow["findings"]:
        assert finding["predicate"] in text
    for step in narrow["steps"]:
        assert f"round {step['index']}" in text and all(cid in text for cid in list(step["cases"])[:4])
    assert "\nnext: " in text


def test_check_host_text_says_what_the_host_has(surface) -> None:
    text = text_of(surface["check_host"])
    host = surface["check_host"].structured_content
    assert text.startswith("host local (local): ready to run cases") and f"torch {host['torch']}" in text
    assert host["work_dir"] in text and "next: run_case_remote with hosts=['local']" in text


def test_artefact_texts_name_their_paths_and_ids(surface) -> None:
    shrink = surface["shrink_case"].structured_content
    text = text_of(surface["shrink_case"])
    assert f"shrink_case on run {RUN}" in text and shrink["smallest_case"] in text and shrink["signature"] in text
    assert f"next: export_repro run_id={RUN} case_id={shrink['smallest_case']}" in text

    repro = surface["export_repro"].structured_content
    text = text_of(surface["export_repro"])
    assert repro["script"] in text and repro["command"] in text and FAILING[0] in text

    regression = surface["export_regression"].structured_content
    text = text_of(surface["export_regression"])
    assert regression["test_file"] in text and FAILING[0] in text and regression["command"] in text

    pictures = surface["render_pictures"].structured_content
    text = text_of(surface["render_pictures"])
    assert pictures["available"] and pictures["pictures"]
    for path in pictures["pictures"]:
        assert path in text and f"opdebug://runs/{RUN}/pictures/{Path(path).name}" in text

    verify = surface["verify_fix"].structured_content
    text = text_of(surface["verify_fix"])
    assert verify["conclusion"] in text and verify["evidence"] in text
    for old, new in list(verify["rerun"].items())[:10]:
        assert f"{old} -> {new}: {verify['states'][new]}" in text
    assert "still failing" in text  # nothing was fixed

    text = text_of(surface["record_result"])
    assert text.startswith("recorded by-hand: passed") and "raw-results/by-hand" in text


# --------------------------------------------------------------------------
# Protocol details
# --------------------------------------------------------------------------


def test_capabilities_match_what_is_sent(surface) -> None:
    caps = surface["capabilities"]
    # a new run is announced with notifications/resources/list_changed, and so advertised
    assert caps.resources is not None and caps.resources.list_changed is True
    assert caps.tools.list_changed is False and caps.prompts.list_changed is False  # they never change
    announced = [n for n in surface["notes"] if "ResourceListChanged" in type(getattr(n, "root", n)).__name__]
    assert announced, [type(n).__name__ for n in surface["notes"]]


def test_a_raw_binary_file_is_a_blob_with_its_mime_type(surface) -> None:
    pt = surface["raw_pt"]
    assert pt.mime_type == "application/octet-stream" and not hasattr(pt, "text")
    data = base64.b64decode(pt.blob)
    stored = surface["root"] / RUN / "raw-results" / FAILING[0] / "outputs.pt"
    assert data == stored.read_bytes() and data[:4] == b"PK\x03\x04"  # byte for byte, no U+FFFD
    worker = surface["raw_json"]
    assert worker.mime_type == "application/json" and json.loads(worker.text)["case_id"] == FAILING[0]
    assert "outputs.pt" in surface["raw_index"]["files"]


def test_invalid_prompt_arguments_are_invalid_params_in_one_line_and_not_logged(surface) -> None:
    for key, word in (("prompt_missing", "symptom"), ("prompt_unknown", "tone")):
        error = surface[key]
        assert error is not None and error.code == -32602, error
        assert "\n" not in error.message and word in error.message and "debug-operator" in error.message
    assert "Traceback" not in surface["stderr"] and "Missing required" not in surface["stderr"], surface["stderr"]


def test_an_unknown_nested_field_is_one_error_line(surface) -> None:
    text = error_text(surface["bad_nested"])
    assert "1 validation error(s)" in text, text
    assert "stars.0.base.inputs.0.bogus: unknown field" in text
    assert "function-after" not in text and "Input should be a valid string" not in text


# --------------------------------------------------------------------------
# The evidence a person opens
# --------------------------------------------------------------------------


def test_results_json_is_current_right_after_run_case_remote(surface) -> None:
    view = surface["results_json"]
    assert not surface["analysis_json_exists"]  # no analysis had run
    assert view["result_count"] == view["result_count_at_end"] == 4 == len(view["results"])
    assert view["record_index"] == "results.jsonl"
    assert {cid: r["status"] for cid, r in view["results"].items() if r["status"] != "passed"} == \
        {cid: "numerical_mismatch" for cid in FAILING}
    # and after the later calls (narrow, shrink, verify, a record by hand): the whole index, every time
    final = json.loads((surface["root"] / RUN / "results.json").read_text())
    index = [json.loads(line) for line in (surface["root"] / RUN / "results.jsonl").read_text().splitlines()]
    assert list(final["results"]) == [d["case_id"] for d in index] and final["result_count"] == len(index)


# --------------------------------------------------------------------------
# Every field described; the prompt as SKILL.md shows it
# --------------------------------------------------------------------------


def properties(schema: dict) -> list[tuple[str, dict]]:
    """Every property of a schema, wherever it sits ($defs, items, anyOf branches, maps)."""
    found: list[tuple[str, dict]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, path)
        elif isinstance(node, dict):
            for name, prop in (node.get("properties") or {}).items():
                found.append((f"{path}.{name}", prop))
                walk(prop, f"{path}.{name}")
            for key, value in node.items():
                if key == "$defs":
                    for name, sub in value.items():
                        walk(sub, f"#{name}")
                elif key not in ("properties",) and isinstance(value, (dict, list)):
                    walk(value, path)

    walk(schema, "")
    return found


def test_every_documented_input_property_and_output_field_is_described(surface) -> None:
    for kind in ("inputs", "outputs"):
        for tool in TOOLS:
            props = properties(surface[kind][tool])
            assert props, (kind, tool)
            bare = [path for path, prop in props if not (isinstance(prop, dict) and prop.get("description"))]
            assert bare == [], (kind, tool, f"{len(props) - len(bare)}/{len(props)} described", bare)


def test_the_prompt_fetched_with_its_arguments_is_the_text_skill_md_shows(surface) -> None:
    messages = surface["prompt"].messages
    assert len(messages) == 1 and messages[0].role == "user"
    text = messages[0].content.text
    for value in PROMPT_ARGS.values():
        assert value in text
    skill = (REPO_ROOT / "SKILL.md").read_text()
    shown = re.search(r"<!-- prompt: debug-operator .*? -->\n```text\n(.*?)\n```", skill, re.S)
    assert shown is not None, "SKILL.md shows the prompt in a ```text block after its marker"
    assert json.loads(re.search(r"<!-- prompt: debug-operator (.*?) -->", skill).group(1)) == PROMPT_ARGS
    assert shown.group(1) == text
