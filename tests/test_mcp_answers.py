"""Answers and errors sized for an agent, through the real MCP client over stdio.

One server session over two runs: ``tiles`` (a planted kernel that drops the tail
past 256 columns, run on the local transport with keep_outputs) and ``wide``
(1,333 planned cases, 1,000 of them recorded failing, recorded in-process before
the server starts).  It shows:

- the kept outputs of a mismatching case read as JSON through a resource;
- the ``results`` resource has results.json's header (result_count, record_index);
- every "unknown id" error names at most five ids and says how many there are;
- an out_dir that cannot be a directory is the caller's [bad_path] naming it;
- analyze_failures at 1,000 failing cases is under 40,000 characters, says what it
  cut and where the whole answer is; export_regression's lists are cut the same way;
- an unknown tool's error lists the tools; the output-schema template promises
  nothing tools/list does not carry; a missing inventory file is refused at start.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from conftest import REPO_ROOT
from test_mcp_stdio import error_text
from test_mcp_surface import FAILING, RUN, tiles_request
from tools.plan_cases import plan_cases
from tools.record_result import record_result

WIDE = "wide"
WIDE_CASES, WIDE_PASSING = 1333, 333
ANSWER_BUDGET = 40_000


def wide_request() -> dict[str, Any]:
    cases = [{"id": f"c{i}", "inputs": [{"name": "x", "shape": [i % 97 + 1, 8]}], "attributes": {"alpha": i}}
             for i in range(WIDE_CASES)]
    return {"config": {"run_id": WIDE, "operator": {"name": "scaled", "candidate": "m.cand", "reference": "m.ref"}},
            "cases": cases}


def wide_result(i: int) -> dict[str, Any]:
    bad = i >= WIDE_PASSING
    return {"case_id": f"c{i}", "status": "numerical_mismatch" if bad else "passed",
            "comparisons": [{"output": "out", "passed": not bad, "numel": 64, "max_abs": 0.5 if bad else 0.0,
                             "mismatch_count": 3 if bad else 0, "mismatch_ratio": 3 / 64 if bad else 0.0}]}


async def _session(root: Path, stage: Path, not_a_dir: Path) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", "--evidence-root", str(root)],
                                   cwd=str(REPO_ROOT),
                                   env={"PYTHONPATH": str(REPO_ROOT), "OPDEBUG_RUNNER_STAGE": str(stage)})
    out: dict[str, Any] = {}
    async with Client(params, cache=None, read_timeout_seconds=300) as client:
        call = client.call_tool

        async def read(uri: str) -> Any:
            try:
                return (await client.read_resource(uri)).contents[0].text
            except MCPError as exc:
                return exc.error

        out["templates"] = {t.uri_template: t for t in (await client.list_resource_templates()).resource_templates}
        assert not (await call("plan_cases", tiles_request())).is_error
        out["run"] = await call("run_case_remote", {"run_id": RUN, "keep_outputs": True})
        out["kept"] = await read(f"opdebug://runs/{RUN}/outputs/{FAILING[0]}")
        out["not_kept"] = await read(f"opdebug://runs/{RUN}/outputs/base")
        out["results"] = await read(f"opdebug://runs/{RUN}/results")
        bad_ids = [f"nope-{i}" for i in range(40)]
        out["unknown"] = {
            "export_repro": await call("export_repro", {"run_id": WIDE, "case_id": "nope"}),
            "shrink_case": await call("shrink_case", {"run_id": WIDE, "case_id": "nope"}),
            "run_case_remote": await call("run_case_remote", {"run_id": WIDE, "case_ids": bad_ids}),
            "export_regression": await call("export_regression", {"run_id": WIDE, "case_ids": bad_ids}),
            "render_pictures": await call("render_pictures", {"run_id": WIDE, "case_ids": bad_ids}),
        }
        out["bad_repro_dir"] = await call("export_repro", {"run_id": RUN, "case_id": FAILING[0],
                                                           "out_dir": str(not_a_dir / "sub")})
        out["bad_regression_dir"] = await call("export_regression", {"run_id": RUN, "out_dir": str(not_a_dir)})
        out["analysis"] = await call("analyze_failures", {"run_id": WIDE})
        out["whole"] = await read(f"opdebug://runs/{WIDE}/answers/analyze_failures")
        out["regression"] = await call("export_regression", {"run_id": WIDE,
                                                             "case_ids": [f"c{i}" for i in range(400, 430)]})
        out["unknown_tool"] = await call("no_such_tool", {})
    return out


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("answers")
    root, stage = base / "evidence", base / "stage"
    root.mkdir()
    stage.mkdir(mode=0o700)
    plan_cases(wide_request(), root=root)
    for i in range(WIDE_CASES):
        record_result(WIDE, wide_result(i), root=root)
    not_a_dir = base / "a-file"
    not_a_dir.write_text("not a directory")
    out = asyncio.run(_session(root, stage, not_a_dir))
    out["root"], out["not_a_dir"] = root, not_a_dir
    return out


def test_kept_outputs_are_readable_as_json_through_a_resource(answers) -> None:
    assert not answers["run"].is_error, error_text(answers["run"])
    kept = json.loads(answers["kept"])
    out = kept["outputs"][0]
    assert kept["case_id"] == FAILING[0] and out["shape"] == [2, 300] and out["dtype"] == "float32"
    assert len(out["candidate"]) == len(out["reference"]) == kept["values_shown"] == 64
    assert out["candidate"][:5] == out["reference"][:5]  # the head of the row is right...
    assert out["worst"]["index"][1] >= 256 and out["worst"]["abs_diff"] > 0  # ...the tail past the tile is not
    assert kept["raw_uri"].endswith(f"/raw/{FAILING[0]}/outputs.pt")
    refused = answers["not_kept"]
    assert refused.code == -32602 and "keep_outputs" in refused.message, refused
    assert "{case_id}" in answers["templates"]["opdebug://runs/{run_id}/outputs/{case_id}"].uri_template


def test_the_results_resource_has_the_header_results_json_has(answers) -> None:
    served = json.loads(answers["results"])
    on_disk = json.loads((answers["root"] / RUN / "results.json").read_text())
    assert served["result_count"] == on_disk["result_count"] == 4
    assert served["record_index"] == on_disk["record_index"] == "results.jsonl"
    assert served["results"] == on_disk["results"]


def test_every_unknown_id_error_names_five_ids_at_most_and_the_counts(answers) -> None:
    for tool, result in answers["unknown"].items():
        text = error_text(result)
        assert "[unknown_case]" in text and f"plans {WIDE_CASES} case(s)" in text, (tool, text)
        assert len(text) < 700, (tool, len(text), text)
        assert text.count("'c") <= 5 and text.count("'nope") <= 5, (tool, text)
        if tool not in ("export_repro", "shrink_case"):
            assert "40 case ids are not planned" in text and "35 more" in text, (tool, text)


def test_an_out_dir_that_cannot_be_a_directory_is_the_callers_error_naming_it(answers) -> None:
    for key in ("bad_repro_dir", "bad_regression_dir"):
        text = error_text(answers[key])
        assert "[bad_path]" in text and "out_dir" in text and str(answers["not_a_dir"]) in text, text
        assert "internal_error" not in text


def test_analyze_failures_at_a_thousand_failing_cases_is_capped_with_counts_and_the_rest_readable(answers) -> None:
    result = answers["analysis"]
    assert not result.is_error, error_text(result)
    doc = result.structured_content
    size = len(json.dumps(doc))
    assert size < ANSWER_BUDGET, size
    assert doc["truncated"]["failures"] == 1000 and len(doc["failures"]) == 20
    assert doc["status_counts"]["numerical_mismatch"] == 1000
    assert doc["full_answer"] == f"opdebug://runs/{WIDE}/answers/analyze_failures"
    text = "\n".join(b.text for b in result.content)
    assert "1000 failing" in text or "failures (1000)" in text, text
    whole = json.loads(answers["whole"])
    assert len(whole["failures"]) == 1000 and not whole["truncated"] and not whole["full_answer"]
    assert len(json.loads((answers["root"] / WIDE / "analysis.json").read_text())["failures"]) == 1000


def test_export_regression_lists_are_capped_with_counts(answers) -> None:
    result = answers["regression"]
    assert not result.is_error, error_text(result)
    doc = result.structured_content
    assert len(doc["failing_cases"]) == 20 and doc["truncated"]["failing_cases"] == 30
    assert doc["truncated"]["files"] == len(json.loads((answers["root"] / WIDE / "artifacts" / "answers" /
                                                        "export_regression.json").read_text())["files"]) > 20
    assert "30 failing case(s)" in "\n".join(b.text for b in result.content)


def test_an_unknown_tool_error_lists_the_tools(answers) -> None:
    text = error_text(answers["unknown_tool"])
    assert "no_such_tool" in text and "analyze_failures" in text and "verify_fix" in text, text


def test_the_output_schema_template_promises_only_what_tools_list_carries(answers) -> None:
    description = answers["templates"]["opdebug://schemas/{tool}"].description
    assert "tools/list carries no output schema" in description, description


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_missing_inventory_file_is_refused_at_start_with_its_path(tmp_path: Path, how: str) -> None:
    missing = tmp_path / "no-such-inventory.toml"
    args = [sys.executable, "-m", "mcp_server", "--evidence-root", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if how == "flag":
        args += ["--inventory", str(missing)]
    else:
        env["OPDEBUG_INVENTORY"] = str(missing)
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert str(missing) in proc.stderr and "does not exist" in proc.stderr, proc.stderr
