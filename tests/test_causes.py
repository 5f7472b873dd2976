"""Several causes, every failing group accounted for, leads whose fate is
said, and next cases that are valid calls on a mode the hosts can run.

- pure: two separate causes (an OR) are two findings, each with its own cases
  and minimal pair, never "several axis values together"; a crash group
  beside a mismatch group each gets a finding or an explicit "no finding for
  these N cases"; cases identical on every axis that disagree are reported and
  the structural finding stays as a necessary condition (no trend for an
  integer output); a lead a later case refutes is reported with that case;
  crossings of a matmul keep its shared sizes equal and name every change;
  no next case in a mode no host can run;
- through the real MCP client over stdio: the buggy operators of
  tests/operators (two_causes, crash_or_wrong, argmax_window,
  matmul_transposed) planned, narrowed on host ``local`` and analyzed; the
  answers of narrow_failure, analyze_failures, report.md and ``opdebug show``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tools.analysis.build import build_analysis, diagnose_run
from tools.cases.neighbours import multi_axis_warnings
from tools.cases.stars import expand_star
from tools.schemas import Case, CaseResult, OperatorConfig, StarSpec

OPERATORS = Path(__file__).resolve().parent / "operators"
TOL = {"atol": 1e-3, "rtol": 1e-3, "per_dtype": {"float16": {"atol": 2e-3, "rtol": 2e-3},
                                                 "bfloat16": {"atol": 2e-2, "rtol": 2e-2}}}


def _result(cid: str, status: str, environment: dict | None = None) -> CaseResult:
    doc = {"case_id": cid, "status": status, "environment": environment or {},
           "comparisons": [{"output": "out", "passed": status == "passed", "max_abs": 0.0 if status == "passed"
                            else 1.0, "expected_dtype": "float32", "actual_dtype": "float32"}]}
    if status == "crash":
        doc["comparisons"] = []
        doc["error"] = {"type": "RuntimeError", "message": "EZ9999", "signature": "RuntimeError: EZ9999"}
    return CaseResult.model_validate(doc)


def _run(star: dict, fails) -> tuple[list[Case], dict[str, CaseResult]]:
    cases = expand_star(StarSpec.model_validate(star))
    return cases, {c.id: _result(c.id, fails(c) or "passed") for c in cases}


ROWS_STAR = {"base": {"id": "b", "inputs": [{"name": "x", "shape": [16, 256], "dtype": "float32"}]},
             "vary": [{"axis": "dtype", "values": ["float16", "bfloat16"]},
                      {"axis": "shape", "input": "x", "values": [[16, 64], [16, 1024], [16, 2048], [4, 256]]},
                      {"axis": "storage_offset", "input": "x", "values": [8]}]}


def _or(c: Case) -> str | None:
    x = c.inputs[0]
    return "numerical_mismatch" if x.dtype == "bfloat16" or x.shape[-1] > 512 else None


def test_two_separate_causes_are_two_findings_never_an_interaction():
    cases, results = _run(ROWS_STAR, _or)
    a = build_analysis("r", None, cases, results)
    by_pred = {f.predicate: f for f in a.findings}
    assert set(by_pred) == {"dtype == bfloat16", "x.shape[-1] > 256"}, a.summary
    assert a.causes == 2 and not a.unexplained
    assert sorted(by_pred["x.shape[-1] > 256"].cases) == ["b.x.shape-16x1024", "b.x.shape-16x2048"]
    assert by_pred["dtype == bfloat16"].cases == ["b.dtype-bfloat16"]
    assert {f.cause for f in a.findings} == {1, 2}
    assert by_pred["dtype == bfloat16"].minimal_pair.failing == "b.dtype-bfloat16"
    assert "2 separate causes" in a.summary and "several axis values together" not in a.summary
    # the next cases narrow each cause: the long rows' boundary and the bfloat16 cause both get cases
    axes = {n.axis for n in a.next_cases}
    assert "x.shape[-1]" in axes and any(n.reason.startswith("dtype == bfloat16") for n in a.next_cases)


def test_a_crash_group_beside_a_mismatch_group_each_accounted_for():
    def two(c: Case) -> str | None:
        x = c.inputs[0]
        if x.strides is not None:
            return "crash"
        return "numerical_mismatch" if x.dtype == "float16" else None

    star = {"base": {"id": "b", "inputs": [{"name": "x", "shape": [16, 32], "dtype": "float32"}]},
            "vary": [{"axis": "dtype", "values": ["float16", "bfloat16"]},
                     {"axis": "strides", "input": "x", "values": [[1, 16], [64, 2]]},
                     {"axis": "shape", "input": "x", "values": [[16, 64]]}]}
    cases, results = _run(star, two)
    a = build_analysis("r", None, cases, results)
    statuses = {f.status: f.predicate for f in a.findings}
    assert statuses == {"crash": "x.contiguity in {sliced, transposed}", "numerical_mismatch": "dtype == float16"}, \
        a.summary
    assert "crash (2 case(s)): finding" in a.summary and "numerical_mismatch (1 case(s)): finding" in a.summary
    assert not a.unexplained


def test_a_failing_group_nothing_explains_is_said_with_its_closest_survivors():
    def case(cid: str, dtype: str, shape: list, offset: int = 0, strides=None) -> Case:
        return Case.model_validate({"id": cid, "inputs": [{"name": "x", "shape": shape, "dtype": dtype,
                                                           "storage_offset": offset, "strides": strides}]})

    cases = [case("base", "float32", [16, 32]), case("p-half", "float16", [16, 32]),
             case("p-long", "float32", [16, 64]), case("p-bf16", "bfloat16", [16, 32]),
             case("p-off", "float32", [16, 32], 8),
             case("c-half-long", "float16", [16, 64]), case("c-bf16-off", "bfloat16", [16, 32], 8),
             case("m-t", "float32", [16, 32], strides=[1, 16])]
    status = {"c-half-long": "crash", "c-bf16-off": "crash", "m-t": "numerical_mismatch"}
    results = {c.id: _result(c.id, status.get(c.id, "passed")) for c in cases}
    a = build_analysis("r", None, cases, results)
    assert [(f.status, f.predicate) for f in a.findings] == [("numerical_mismatch", "x.contiguity == transposed")]
    assert [(g.status, g.count, g.cases) for g in a.unexplained] == [("crash", 2, ["c-bf16-off", "c-half-long"])]
    assert a.unexplained[0].survivors and "passing case(s) have it too" in a.unexplained[0].survivors[0]
    assert "no finding for these 2 crash case(s)" in a.summary, a.summary


def test_identical_cases_that_disagree_are_reported_and_keep_a_necessary_condition():
    x = {"name": "x", "shape": [4, 64], "dtype": "float32"}
    cases = [Case.model_validate({"id": f"v{i}", "inputs": [x], "seed": i}) for i in range(4)]
    cases.append(Case.model_validate({"id": "short", "inputs": [dict(x, shape=[4, 32])], "seed": 1}))
    cases.append(Case.model_validate({"id": "shorter", "inputs": [dict(x, shape=[4, 16])], "seed": 1}))
    status = {"v0": "numerical_mismatch", "v1": "passed", "v2": "numerical_mismatch", "v3": "passed",
              "short": "passed", "shorter": "passed"}
    results = {}
    for cid, s in status.items():
        r = _result(cid, s)
        r.comparisons[0].expected_dtype = r.comparisons[0].actual_dtype = "int64"  # an index output
        results[cid] = r
    a = build_analysis("r", None, cases, results)
    assert [(p.passing, p.failing) for p in a.identical_disagree] == [("v1", "v0"), ("v3", "v0")]
    assert "agree on every axis (seed aside) and disagree" in a.summary
    lead = a.findings[0]
    assert lead.kind != "trend" and lead.necessary_only and not lead.exact, a.summary
    assert lead.predicate == "x.shape[-1] > 32" and "values decide" in lead.why_not_exact[0]
    assert "baseline judge" not in a.summary


def test_a_lead_a_later_case_refutes_is_reported_naming_the_case():
    star = {"base": {"id": "b", "inputs": [{"name": "x", "shape": [16, 32], "dtype": "float32"}]},
            "vary": [{"axis": "strides", "input": "x", "values": [[1, 16]]},
                     {"axis": "dtype", "values": ["float16"]}]}
    cases, results = _run(star, lambda c: "crash" if c.inputs[0].strides is not None else None)
    first = build_analysis("r", None, cases, results)
    assert first.findings[0].predicate == "x.contiguity == transposed"
    later = Case.model_validate({"id": "t2", "inputs": [{"name": "x", "shape": [16, 32], "dtype": "float16",
                                                         "strides": [1, 16]}]})
    results["t2"] = _result("t2", "passed")  # a transposed case that passes: the lead is refuted
    second = build_analysis("r", None, [*cases, later], results, previous=first)
    assert [(r.predicate, r.refuted_by) for r in second.refuted] == [("x.contiguity == transposed", ["t2"])]
    assert "refuted lead: x.contiguity == transposed" in second.summary and "t2" in second.summary
    third = build_analysis("r", None, [*cases, later], results, previous=second)  # carried forward, not lost
    assert [r.predicate for r in third.refuted] == ["x.contiguity == transposed"]


MATMUL_STAR = {"base": {"id": "mm", "inputs": [{"name": "a", "shape": [8, 16, 32], "dtype": "float32"},
                                               {"name": "b", "shape": [8, 32, 16], "dtype": "float32"}]},
               "vary": [{"axis": "dim", "dims": ["a.shape[-1]", "b.shape[1]"], "values": [64]},
                        {"axis": "dim", "dims": ["a.shape[1]"], "values": [32]},
                        {"axis": "dtype", "values": ["float16"]},
                        {"axis": "strides", "input": "a", "values": [[512, 1, 16]]}]}


def _valid_matmul(doc: dict) -> bool:
    a, b = (next(i for i in doc["inputs"] if i["name"] == n)["shape"] for n in ("a", "b"))
    return a[-1] == b[-2] and a[0] == b[0]


def test_matmul_next_cases_keep_shared_sizes_and_name_every_change():
    cases, results = _run(MATMUL_STAR, lambda c: "crash" if c.inputs[0].strides is not None else None)
    assert multi_axis_warnings(cases, star_bases={c.id: cases[0] for c in cases[1:]}) == []  # asked: no warning
    a = build_analysis("mm", None, cases, results)
    crossings = [n for n in a.next_cases if n.kind == "crossing"]
    assert crossings, [n.kind for n in a.next_cases]
    for n in a.next_cases:
        for case in expand_star(StarSpec.model_validate(n.star)):
            assert _valid_matmul(case.model_dump(mode="json")), (n.kind, n.star)
    for n in crossings:  # each change the crossing makes is named in its reason
        for var in n.star["vary"]:
            for change in [var, *var.get("also", [])]:
                assert f"{change['axis']}=" in n.reason


def test_a_value_that_only_made_cases_unsupported_is_not_proposed_again():
    def case(cid: str, dtype: str, shape: list) -> Case:
        return Case.model_validate({"id": cid, "inputs": [{"name": "x", "shape": shape, "dtype": dtype}]})

    cases = [case("a", "float32", [16, 32]), case("b", "float16", [16, 32]), case("c", "float32", [16, 64]),
             case("d", "float16", [16, 64]), case("u", "bfloat16", [16, 64])]
    status = {"a": "passed", "b": "numerical_mismatch", "c": "passed", "d": "numerical_mismatch"}
    results = {c: _result(c, s) for c, s in status.items()}
    results["u"] = CaseResult.model_validate({"case_id": "u", "status": "unsupported", "error": {
        "type": "RuntimeError", "message": "bfloat16 is not supported", "signature": "RuntimeError: bf16"}})
    d = diagnose_run(cases, results, [])
    assert d.findings[0].predicate == "dtype == float16"
    proposed = [v for n in d.next_cases if n.star for v in n.star["vary"] if v["axis"] == "dtype"]
    assert all("bfloat16" not in v["values"] for v in proposed), proposed  # bfloat16 only ever was unsupported


def test_no_next_case_in_a_mode_no_host_can_run():
    x = {"name": "x", "shape": [16, 32], "dtype": "float32"}
    cases = [Case.model_validate({"id": f"c{i}", "inputs": [x], "seed": i}) for i in range(2)]
    results = {"c0": _result("c0", "numerical_mismatch"), "c1": _result("c1", "numerical_mismatch")}
    anywhere = diagnose_run(cases, results, [])  # no environment recorded: the results do not say
    def modes(d) -> set[str]:
        return {m for n in d.next_cases for v in n.star["vary"] if v["axis"] == "mode" for m in v["values"]}

    assert modes(anywhere) == {"compile", "graph"}
    assert modes(diagnose_run(cases, results, [], modes={"eager", "compile"})) == {"compile"}  # a CPU host


# --------------------------------------------------------------------------
# Through the real MCP client over stdio
# --------------------------------------------------------------------------


def _config(run_id: str, module: str) -> dict:
    stem = module[:-3]
    return {"run_id": run_id, "tolerance": TOL,
            "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref", "modules": [module]}}


def _plan(run_id: str, module: str, **kw) -> dict:
    return {"config": _config(run_id, module), "module_sources": {module: (OPERATORS / module).read_text()}, **kw}


ARGMAX_CASES = [{"id": f"v{i}", "seed": i, "inputs": [{"name": "x", "shape": [4, 64], "dtype": "float32"}]}
                for i in range(8)] + [{"id": "short", "seed": 1,
                                       "inputs": [{"name": "x", "shape": [4, 32], "dtype": "float32"}]}]


def test_causes_groups_and_valid_cases_through_every_door(tmp_path, subprocess_env):
    from test_mcp_stdio import error_text, with_server

    env = {k: os.environ[k] for k in ("OPDEBUG_RUNNER_STAGE",) if k in os.environ}

    async def call(client, name, args):
        r = await client.call_tool(name, args)
        assert not r.is_error, error_text(r)
        return r.structured_content

    async def scenario(client):
        out = {}
        out["plan_or"] = await call(client, "plan_cases", _plan("or", "two_causes.py", stars=[ROWS_STAR]))
        out["narrow_or"] = await call(client, "narrow_failure", {"run_id": "or", "max_cases": 40})
        star = {"base": {"id": "b", "inputs": [{"name": "x", "shape": [16, 32], "dtype": "float32"}]},
                "vary": [{"axis": "dtype", "values": ["float16", "bfloat16"]},
                         {"axis": "strides", "input": "x", "values": [[1, 16]]},
                         {"axis": "shape", "input": "x", "values": [[16, 64]]}]}
        await call(client, "plan_cases", _plan("cw", "crash_or_wrong.py", stars=[star]))
        await call(client, "run_case_remote", {"run_id": "cw"})
        out["cw"] = await call(client, "analyze_failures", {"run_id": "cw"})
        # a transposed case recorded passing (obtained elsewhere): the crash group's lead is refuted, and said
        later = {"id": "t-elsewhere", "inputs": [{"name": "x", "shape": [16, 48], "strides": [1, 16]}]}
        await call(client, "plan_cases", {"run_id": "cw", "append": True, "cases": [later]})
        await call(client, "record_result", {"run_id": "cw", "result": {"case_id": "t-elsewhere",
                                                                        "status": "passed"}})
        out["cw2"] = await call(client, "analyze_failures", {"run_id": "cw"})
        await call(client, "plan_cases", _plan("am", "argmax_window.py", cases=ARGMAX_CASES))
        await call(client, "run_case_remote", {"run_id": "am"})
        out["am"] = await call(client, "analyze_failures", {"run_id": "am"})
        out["plan_mm"] = await call(client, "plan_cases", _plan("mm", "matmul_transposed.py", stars=[MATMUL_STAR]))
        out["narrow_mm"] = await call(client, "narrow_failure", {"run_id": "mm", "max_cases": 20})
        return out

    root = tmp_path / "evidence"
    out = with_server(root, scenario, env=env)

    # two causes: each its own finding, narrowed; never "several axis values together"
    narrow = out["narrow_or"]
    preds = {f["predicate"] for f in narrow["findings"]}
    assert any(p.startswith("dtype == bfloat16") or p == "dtype != float16" for p in preds) and \
        any(p.startswith("x.shape[-1] >") for p in preds), narrow["summary"]
    assert "separate causes" in narrow["summary"] and "several axis values together" not in narrow["summary"]
    long = next(f for f in narrow["findings"] if f["axis"] == "x.shape[-1]")
    assert long["passes_at"] == 512 and long["fails_at"] == 513, long  # the autopilot pinned that cause
    report = (root / "or" / "report.md").read_text()
    assert "separate causes" in report and "cause 1" in report and "cause 2" in report

    # a crash group beside a mismatch group: both have a finding
    cw = out["cw"]
    assert {f["status"]: f["predicate"] for f in cw["findings"]} == {
        "crash": "x.contiguity == transposed", "numerical_mismatch": "dtype == float16"}, cw["summary"]

    refuted = {r["predicate"]: r["refuted_by"] for r in out["cw2"]["refuted"]}
    assert refuted == {"x.contiguity == transposed": ["t-elsewhere"]}, out["cw2"]["summary"]
    assert "refuted lead: x.contiguity == transposed" in out["cw2"]["summary"]
    assert "refuted lead: x.contiguity == transposed" in (root / "cw" / "report.md").read_text()

    # the values decide: identical cases disagree, said loudly; no trend, no baseline judge for an index output
    am = out["am"]
    assert am["identical_disagree"], am["summary"]
    assert "disagree" in am["summary"] and "baseline judge" not in am["summary"]
    assert all(f["kind"] != "trend" for f in am["findings"])
    assert am["findings"] and am["findings"][0]["necessary_only"] and am["findings"][0]["predicate"] == "x.shape[-1] > 32"

    # matmul: no multi-axis warning for the documented dim axis; every case narrow_failure planned is a valid call
    assert out["plan_mm"]["warnings"] == [], out["plan_mm"]["warnings"]
    matrix = json.loads((root / "mm" / "case-matrix.json").read_text())
    planned = matrix["cases"] if isinstance(matrix, dict) else matrix
    assert len(planned) > 6 and all(_valid_matmul(c) for c in planned), [c["id"] for c in planned]
    assert all(c.get("mode", "eager") != "graph" for c in planned)
    show = subprocess.run([sys.executable, "-m", "tools.cli", "show", "--root", str(root), "--run-id", "or"],
                          env=subprocess_env | {"COLUMNS": "240"}, capture_output=True, text=True, timeout=120)
    assert show.returncode == 0, show.stderr
    assert "separate causes" in show.stdout


def test_a_lead_with_a_surviving_competitor_says_so_and_is_not_exact():
    # one failing case that differs from the passing one in its last dimension: its element count, bytes and
    # alignment separate the cases just as well - the closed-world rule names them, whatever the probes say
    star = {"base": {"id": "b", "inputs": [{"name": "x", "shape": [4, 64], "dtype": "float32"}], "seed": 1},
            "vary": [{"axis": "shape", "input": "x", "values": [[4, 128]]}]}
    cases, results = _run(star, lambda c: "numerical_mismatch" if c.inputs[0].shape[-1] > 64 else None)
    lead = build_analysis("r", None, cases, results).findings[0]
    assert not lead.exact
    assert any("competing hypothesis(es) separate the recorded cases as well" in w for w in lead.why_not_exact), \
        lead.why_not_exact
