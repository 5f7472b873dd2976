"""Diagnosis that converges: structured axes, findings with minimal pairs,
next cases that narrow, the autopilot, and the compile budget.

The first tests are pure (results recorded by hand).  The planted-operator
tests run for real on host ``local`` (one warm worker shared by the module):
for each planted kind, an agent loop (a first star with distractors, run,
analyze, apply the first next case as it is, at most 4 times) and the
autopilot both end with the exact finding and its minimal pair, and no step
points at an axis unrelated to the bug.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tools.analyze_failures import analyze_failures
from tools.errors import ToolError
from tools.evidence import RunStore
from tools.narrow import NARROWING, narrow_failure
from tools.plan_cases import plan_cases
from tools.record_result import record_result
from tools.remote.pool import REGISTRY
from tools.run_case_remote import run_case_remote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from narrow_kinds import KINDS, OPERATORS, plan_request  # noqa: E402

MANUAL_STEPS = 14  # exact needs the competitors ruled out, a crossing, and the cases built to break it


def _failing(case_id: str) -> dict:
    return {"case_id": case_id, "status": "numerical_mismatch",
            "comparisons": [{"output": "out", "passed": False, "max_abs": 1.0}]}


def _record(root, run_id, verdicts: dict[str, bool], env: dict | None = None) -> None:
    for cid, fails in verdicts.items():
        body = _failing(cid) if fails else {"case_id": cid, "status": "passed"}
        if env:
            body["environment"] = env
        record_result(run_id, body, root=root)


def _config(run_id: str) -> dict:
    return {"run_id": run_id, "operator": {"name": "op", "candidate": "m.cand", "reference": "m.ref",
                                           "modules": ["m.py"]}}


def _plan(root, run_id, *, cases=(), stars=()) -> list[str]:
    resp = plan_cases({"config": _config(run_id), "cases": list(cases), "stars": list(stars),
                       "module_sources": {"m.py": "def cand(x):\n    return x\n\ndef ref(x):\n    return x\n"}},
                      root=root)
    return [c.id for c in resp.cases]


def _x(shape=(4, 32), **kw) -> dict:
    return {"name": "x", "shape": list(shape), **kw}


# --------------------------------------------------------------------------
# Pure: findings, minimal pairs, next cases, variations
# --------------------------------------------------------------------------


def test_findings_do_not_depend_on_the_order_cases_were_appended(tmp_path):
    cases = [{"id": f"c{n}", "inputs": [_x((4, n))]} for n in (16, 64, 256, 1024)]
    cases.append({"id": "half", "inputs": [_x((4, 16), dtype="float16")]})
    fails = {"c16": False, "c64": False, "c256": True, "c1024": True, "half": False}
    outs = []
    for run_id, order in (("fwd", cases), ("rev", cases[::-1])):
        _plan(tmp_path, run_id, cases=order)
        _record(tmp_path, run_id, dict(reversed(fails.items())) if run_id == "rev" else fails)
        a = analyze_failures(run_id, root=tmp_path)
        outs.append(([f.model_dump() for f in a.findings],
                     [(n.kind, n.axis, n.base_case, n.star) for n in a.next_cases]))
    assert outs[0] == outs[1]
    lead = json.loads(json.dumps(outs[0][0][0]))
    assert (lead["axis"], lead["predicate"], lead["largest_passing"], lead["smallest_failing"]) == \
        ("x.shape[-1]", "x.shape[-1] > 64", 64, 256)
    assert (lead["minimal_pair"]["passing"], lead["minimal_pair"]["failing"]) == ("c64", "c256")


def test_two_failing_strides_give_a_set_finding_and_the_next_case_tries_the_other_patterns(tmp_path):
    star = {"base": {"id": "b", "inputs": [_x((4, 8))]},
            "vary": [{"axis": "strides", "input": "x", "values": [[1, 4], [16, 2]]},
                     {"axis": "dtype", "values": ["float16"]}]}
    ids = _plan(tmp_path, "r", stars=[star])
    _record(tmp_path, "r", {i: "strides" in i for i in ids})
    a = analyze_failures("r", root=tmp_path)
    f = a.findings[0]
    assert (f.axis, f.kind, f.failing_values, f.passing_values) == \
        ("x.contiguity", "set", ["sliced", "transposed"], ["contiguous"])
    assert f.minimal_pair.passing == "b" and f.minimal_pair.failing in ("b.x.strides-1-4", "b.x.strides-16-2")
    nxt = a.next_cases[0]
    assert (nxt.kind, nxt.axis, nxt.change["axis"]) == ("probe", "x.contiguity", "strides")
    assert nxt.change["values"] == [[0, 1], [1, 1]]  # broadcast, overlapping: the untried patterns
    assert nxt.star["base"]["id"] == "b" and nxt.star["include_base"] is False
    assert "the failure covers" in nxt.if_fails and nxt.if_passes
    assert not any(n.change.get("axis") == "dtype" for n in a.next_cases if n.kind != "crossing")


def test_two_failing_shapes_give_a_threshold_and_bisect_the_named_dimension(tmp_path):
    star = {"base": {"id": "b", "inputs": [_x((4, 256))]},
            "vary": [{"axis": "shape", "input": "x", "values": [[4, 4096], [4, 8192]]},
                     {"axis": "dtype", "values": ["bfloat16"]}]}
    ids = _plan(tmp_path, "r", stars=[star])
    _record(tmp_path, "r", {i: "shape" in i for i in ids})
    a = analyze_failures("r", root=tmp_path)
    f = next(f for f in a.findings if f.axis == "x.shape[-1]")
    assert (f.kind, f.direction, f.largest_passing, f.smallest_failing, f.exact) == \
        ("threshold", "above", 256, 4096, False)
    assert (f.minimal_pair.passing, f.minimal_pair.failing) == ("b", "b.x.shape-4x4096")
    # every proposal before the crossings moves the shape of x: the dimension, or the element count
    # through another dimension to tell the two apart
    narrowing = [n for n in a.next_cases if n.kind in ("discriminate", "bisect", "probe")]
    assert narrowing and all(v["axis"] == "dim" and all(d.startswith("x.shape[") for d in v["dims"])
                             for n in narrowing for v in n.star["vary"])
    bisect = next(n for n in narrowing if n.axis == "x.shape[-1]")
    assert bisect.star["vary"] == [{"axis": "dim", "dims": ["x.shape[-1]"], "values": [512, 1024, 2048]}]
    assert "x.numel" in {g.axis for g in a.competing}  # the competing hypothesis, not a dtype sweep


def test_a_dim_variation_moves_a_shared_dimension_and_keeps_the_layout(tmp_path):
    base = {"id": "rms", "inputs": [_x((4, 8), strides=[1, 4]), {"name": "weight", "shape": [8]}]}
    star = {"base": base, "vary": [{"axis": "dim", "dims": ["x.shape[-1]", "weight.shape[0]"], "values": [16]},
                                   {"axis": "dim", "dims": ["x.shape[0]"], "values": [32]}]}
    ids = _plan(tmp_path, "r", stars=[star])
    assert ids == ["rms", "rms.x.shape-1_weight.shape0-16", "rms.x.shape0-32"]
    cases = {c.id: c for c in RunStore(tmp_path, "r").read_cases()}
    hidden = cases["rms.x.shape-1_weight.shape0-16"]
    assert [(i.shape, i.strides) for i in hidden.inputs] == [([4, 16], [1, 4]), ([16], None)]  # still transposed
    rows = cases["rms.x.shape0-32"]
    assert [(i.shape, i.strides) for i in rows.inputs] == [([32, 8], [1, 32]), ([8], None)]
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "r", "append": True, "stars": [
            {"base": "rms", "vary": [{"axis": "dim", "dims": ["x.shape[2]"], "values": [3]}]}]}, root=tmp_path)
    assert "x.shape[2]" in info.value.message and "rank 2" in info.value.message


def test_a_star_base_is_what_it_says(tmp_path):
    _plan(tmp_path, "r", cases=[{"id": "rows8", "inputs": [_x((8, 16))]}])
    # a different body under a planned id is refused, by name
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "r", "append": True, "stars": [
            {"base": {"id": "rows8", "inputs": [_x((3, 16))]}, "include_base": False,
             "vary": [{"axis": "dtype", "values": ["float16"]}]}]}, root=tmp_path)
    assert info.value.code == "base_mismatch" and "'rows8'" in info.value.message
    assert "base.inputs" in info.value.message
    # the id alone stands for the planned case (never added again)
    resp = plan_cases({"run_id": "r", "append": True, "stars": [
        {"base": "rows8", "vary": [{"axis": "dtype", "values": ["float16"]}]}]}, root=tmp_path)
    assert resp.added == ["rows8.dtype-float16"]
    added = next(c for c in RunStore(tmp_path, "r").read_cases() if c.id == "rows8.dtype-float16")
    assert added.inputs[0].shape == [8, 16]
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "r", "append": True, "stars": [
            {"base": "nope", "vary": [{"axis": "dtype", "values": ["float16"]}]}]}, root=tmp_path)
    assert info.value.code == "unknown_case"


def test_graph_mode_is_never_proposed_on_a_cpu_run(tmp_path):
    star = {"base": {"id": "b", "mode": "compile", "inputs": [_x()]},
            "vary": [{"axis": "mode", "values": ["eager"]}, {"axis": "dtype", "values": ["float16"]}]}
    ids = _plan(tmp_path, "r", stars=[star])
    _record(tmp_path, "r", {i: i != "b.mode-eager" for i in ids}, env={"device_kind": "cpu"})
    a = analyze_failures("r", root=tmp_path)
    assert a.findings[0].predicate == "mode == compile"  # pinned; exact once its probes ran
    assert a.findings[0].why_not_exact[0].startswith("not falsified yet")
    modes = [v for n in a.next_cases if n.star for var in n.star["vary"] if var["axis"] == "mode"
             for v in var["values"]]
    assert "graph" not in modes


def test_two_axes_changed_at_once_get_the_cases_between_them(tmp_path):
    _plan(tmp_path, "r", cases=[{"id": "b", "inputs": [_x((4, 8))]},
                                {"id": "both", "inputs": [_x((4, 8), strides=[1, 4], dtype="float16")]}])
    _record(tmp_path, "r", {"b": False, "both": True})
    a = analyze_failures("r", root=tmp_path)
    every = a.findings + a.competing  # the hypotheses: one leads, the others compete
    assert {f.axis for f in every} >= {"dtype", "x.contiguity"}
    assert all(f.minimal_pair is None and not f.exact for f in every)
    first = a.next_cases[0]
    assert first.kind == "discriminate" and first.base_case in ("b", "both")
    assert all(not v.get("also") for v in first.star["vary"])  # one axis at a time from a recorded case
    assert "dtype == float16" in first.refutes_if_fails + first.refutes_if_passes  # each says what it refutes

    # issue 20: once the cells between them are run and pass, the interaction is the finding, with a pair per
    # term and next cases that split it from its competitors (it used to be "no finding, nothing to try")
    plan_cases({"run_id": "r", "append": True, "stars": [{"base": "b", "include_base": False, "vary": [
        {"axis": "dtype", "values": ["float16"]}, {"axis": "strides", "input": "x", "values": [[1, 4]]}]}]},
        root=tmp_path)
    _record(tmp_path, "r", {c: False for c in RunStore(tmp_path, "r").pending_case_ids()})
    again = analyze_failures("r", root=tmp_path)
    lead = again.findings[0]
    assert (lead.kind, lead.predicate, lead.exact) == \
        ("conjunction", "dtype == float16 and x.contiguity == transposed", False)
    assert [(t.minimal_pair.passing, t.minimal_pair.failing) for t in lead.terms] == \
        [("b.x.strides-1-4", "both"), ("b.dtype-float16", "both")]
    assert again.competing and again.hypotheses.conjunctions
    assert [n for n in again.next_cases if n.kind == "discriminate"]


def test_a_magnitude_threshold_is_bisected_in_powers_of_two_to_a_factor_two(tmp_path):
    from tools.cases.derived import magnitude

    star = {"base": {"id": "b", "inputs": [_x((4, 8))]},
            "vary": [{"axis": "values", "input": "x", "values": [{"kind": "normal", "std": 10000.0}]},
                     {"axis": "dtype", "values": ["float16"]}]}
    _plan(tmp_path, "r", stars=[star])
    steps = 0
    while True:
        pending = {c.id: magnitude(c.inputs[0]) > 300 for c in RunStore(tmp_path, "r").read_cases()
                   if c.id in RunStore(tmp_path, "r").pending_case_ids()}
        _record(tmp_path, "r", pending)
        a = analyze_failures("r", root=tmp_path)
        f = next(f for f in a.findings if f.axis == "x.magnitude")
        if f.exact or steps == 14:
            break
        nxt = a.next_cases[0]
        assert (nxt.kind, nxt.axis) in (("bisect", "x.magnitude"), ("crossing", "x.magnitude"),
                                        ("falsify", "x.magnitude"))
        if nxt.kind == "bisect":
            assert all(v.get("std", 0) in (2.0, 128.0, 8192.0, 256.0, 1024.0, 4096.0, 512.0)
                       for var in nxt.star["vary"] for v in var["values"])
        elif nxt.kind == "crossing":  # the boundary is pinned; the crossing with the float16 distractor
            assert nxt.star["vary"] == [{"axis": "dtype", "values": ["float16"]}]
        else:  # pinned and crossed: the cases built to break it
            assert nxt.star["base"]["description"].startswith("falsify [")
        plan_cases({"run_id": "r", "append": True, "stars": [nxt.star]}, root=tmp_path)
        steps += 1
    assert (f.predicate, f.exact, f.largest_passing, f.smallest_failing, steps) == \
        ("x.magnitude > 256", True, 256, 512, 9)  # 4 to pin and cross it, 5 to try to break it (its sizes too)
    assert (f.passes_at, f.fails_at, f.direction) == (256, 512, "above")


def _converge(root, star: dict, fails, steps: int = 14) -> list:
    """Plan the star, then apply the first next case until nothing narrows;
    results come from ``fails(case)``.  Returns the analyses."""
    _plan(root, "r", stars=[star])
    out = []
    for _ in range(steps + 1):
        store = RunStore(root, "r")
        pending = set(store.pending_case_ids())
        _record(root, "r", {c.id: fails(c) for c in store.read_cases() if c.id in pending})
        a = analyze_failures("r", root=root)
        out.append(a)
        if not [n for n in a.next_cases if n.kind in ("discriminate", "bisect", "probe", "crossing", "explore",
                                                      "falsify")]:
            break
        plan_cases({"run_id": "r", "append": True, "stars": [a.next_cases[0].star]}, root=root)
    return out


def test_a_storage_offset_that_must_be_aligned_is_found_as_an_alignment(tmp_path):
    star = {"base": {"id": "b", "inputs": [_x((4, 32))]},
            "vary": [{"axis": "storage_offset", "input": "x", "values": [5, 64]}, {"axis": "dtype", "values": ["float16"]}]}
    runs = _converge(tmp_path, star, lambda c: c.inputs[0].storage_offset % 16 != 0)
    lead = runs[-1].findings[0]
    # its sizes moved too, its far sides at values no planned case has
    assert (lead.predicate, lead.exact, len(runs) - 1) == ("x.offset_align < 16", True, 12)
    # pinned in 3 rounds, then the cases built to break it (its sizes moved far too), crossed again with float16
    # where a far side's new offset ran in float32 first
    kinds = [a.next_cases[0].kind for a in runs[:-1]][3:]
    assert set(kinds) == {"falsify", "crossing"} and kinds.count("falsify") == 8, kinds
    assert all(n.axis.startswith("x.offset") for a in runs[:-1] for n in a.next_cases[:1])
    # stated in elements and in bytes, for the dtypes that failed
    assert "multiple of 16 elements (32 bytes in float16, 64 bytes in float32)" in lead.statement


def test_with_no_passing_case_one_round_moves_every_axis_toward_a_plain_case(tmp_path):
    star = {"base": {"id": "b", "inputs": [_x((4, 32))]},
            "vary": [{"axis": "dtype", "values": ["float16"]}, {"axis": "strides", "input": "x", "values": [[1, 4]]}]}
    runs = _converge(tmp_path, star, lambda c: c.inputs[0].shape[-1] > 16)
    first = runs[0].next_cases[0]
    assert first.kind == "explore" and {v["axis"] for v in first.star["vary"]} >= {"mode", "dim"}
    lead = runs[-1].findings[0]
    # three rounds: the alignment of the last dimension (16 passes, 32 fails) competes until a case splits them
    # (its failing side probed between its recorded failing values and past them, at values no planned case has)
    assert (lead.predicate, lead.exact, len(runs) - 1) == ("x.shape[-1] > 16", True, 10)
    assert lead.validation.probes_run > 0 and not lead.validation.open
    assert runs[1].next_cases[0].kind == "discriminate" and "x.last_align > 16" in runs[1].next_cases[0].reason


# --------------------------------------------------------------------------
# Planted operators, run for real on host "local"
# --------------------------------------------------------------------------


def related(kind: str, axis: str | None) -> bool:
    """The axis moves with the planted one (a size in bytes moves with the shape and the dtype)."""
    from tools.analysis.hypotheses import axis_sources

    return axis is not None and bool(set(axis_sources(axis)) & set(axis_sources(KINDS[kind]["axis"])))


def manual_loop(loop, root: Path, kind: str) -> tuple[int, object, list]:
    """An agent's loop: star, run, analyze, then the first next case as it is."""
    plan_cases(plan_request("manual", kind), root=root)
    loop.run_until_complete(run_case_remote("manual", root=root))
    analysis = analyze_failures("manual", root=root)
    applied = []
    for step in range(MANUAL_STEPS + 1):
        f = next((f for f in analysis.findings if f.axis == KINDS[kind]["axis"]), None)
        if f is not None and f.exact and f.predicate == KINDS[kind]["predicate"]:
            return step, f, applied
        if step == MANUAL_STEPS or not analysis.next_cases or analysis.next_cases[0].star is None:
            break
        nxt = analysis.next_cases[0]
        applied.append(nxt)
        plan_cases({"run_id": "manual", "append": True, "stars": [nxt.star]}, root=root)
        loop.run_until_complete(run_case_remote("manual", root=root))
        analysis = analyze_failures("manual", root=root)
    if kind == "rows" and any(c.refutes == KINDS[kind]["predicate"] and c.observed == "pass"
                              for c in analysis.counterexamples):
        # rows past the 8th reuse the 8th row's scale: at 9 rows with x in bfloat16 the error is within
        # bfloat16's tolerance, so a probe re-pinning the boundary under x.dtype = bfloat16 passes - a true
        # counterexample of "x.shape[0] > 8" as a clean threshold at these tolerances (the autopilot's path
        # never makes x alone bfloat16)
        return step, None, applied
    raise AssertionError(f"{kind}: no exact {KINDS[kind]['predicate']!r} after {MANUAL_STEPS} steps; findings "
                         f"{[(g.predicate, g.exact) for g in analysis.findings]}, applied "
                         f"{[(n.kind, n.axis) for n in applied]}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_planted_bug_is_narrowed_to_its_exact_finding(loop, tmp_path, kind):
    steps, f, applied = manual_loop(loop, tmp_path / "manual", kind)
    assert f is None or (f.minimal_pair is not None and f.minimal_pair.failing and f.minimal_pair.passing)
    # (once a counterexample refuted the lead, the next cases follow the new survivors)
    assert f is None or all(related(kind, n.axis) for n in applied), [(n.kind, n.axis) for n in applied]

    root = tmp_path / "auto"
    plan_cases(plan_request("auto", kind), root=root)
    resp = loop.run_until_complete(narrow_failure({"run_id": "auto", "max_cases": 40}, root=root))
    got = next((g for g in resp.findings if g.axis == KINDS[kind]["axis"]), None)
    if kind == "rows" and got is None and any(
            c.refutes == KINDS[kind]["predicate"] and c.observed == "pass" and ".x.dtype-bfloat16" in c.case_id
            for c in analyze_failures("auto", root=root).counterexamples):
        return  # as in the manual loop: the far moves start from a probe with x alone in bfloat16, which passes
    assert got is not None and (got.predicate, got.exact) == (KINDS[kind]["predicate"], True), resp.findings
    assert got.minimal_pair is not None
    assert resp.stopped == "exact" and resp.exact
    assert all(related(kind, a) for s in resp.steps for a in s.axes), [s.axes for s in resp.steps]
    # every round is ordinary planned, recorded evidence
    recorded = RunStore(root, "auto").read_results()
    assert all(cid in recorded for s in resp.steps for cid in s.cases)
    if kind == "rows":
        assert got.largest_passing == 8 and got.smallest_failing == 9
        shapes = {tuple(tuple(i.shape) for i in c.inputs) for c in RunStore(root, "auto").read_cases()}
        assert ((4, 64), (64,)) in shapes  # the hidden size moved on both inputs by one variation


def test_a_compile_slower_than_the_case_timeout_passes_within_its_compile_budget(loop, tmp_path):
    module = "slow_compile.py"
    config = {"run_id": "comp", "operator": {"name": "slow", "candidate": "slow_compile.cand",
                                             "reference": "slow_compile.ref", "modules": [module],
                                             "compile_backend": "slow_compile.backend"},
              "compile_timeout_s": 120}
    x = {"name": "x", "shape": [4, 8]}
    cases = [{"id": "slow-compile", "mode": "compile", "inputs": [x], "timeout_s": 2.0},
             {"id": "short-budget", "mode": "compile", "inputs": [x], "timeout_s": 30.0, "compile_timeout_s": 1.0}]
    plan_cases({"config": config, "cases": cases, "module_sources": {module: (OPERATORS / module).read_text()}},
               root=tmp_path)
    resp = loop.run_until_complete(run_case_remote("comp", root=tmp_path))
    states = {o.case_id: o for o in resp.outcomes}
    assert states["slow-compile"].state == "passed", states["slow-compile"]
    assert states["short-budget"].state == "crash" and states["short-budget"].signature == "timeout during compile"
    assert states["short-budget"].rerun_case is None  # the supervisor's own kill, not one from outside
    results = RunStore(tmp_path, "comp").read_results()
    timing = results["slow-compile"].timing_us
    assert timing.compile_us >= 3e6 and timing.candidate_us < 2e6  # the backend sleeps 3 s while compiling
    err = results["short-budget"].error
    assert err.type == "CompileTimeout" and "compile budget of 1 s" in err.message


def test_narrow_failure_over_stdio_and_the_next_case_appends_as_it_is(loop, tmp_path):
    """The MCP surface: analyze_failures gives a next case whose star plan_cases
    takes as it is; narrow_failure runs the loop on host local."""
    from test_mcp_stdio import error_text, with_server

    # the MCP server below is another process: it needs the cpu:0 lease this process's warm slot holds
    loop.run_until_complete(REGISTRY.close_all())

    async def scenario(client):
        out = {"plan": await client.call_tool("plan_cases", plan_request("mcp-dtype", "dtype"))}
        out["run"] = await client.call_tool("run_case_remote", {"run_id": "mcp-dtype"})
        out["analysis"] = await client.call_tool("analyze_failures", {"run_id": "mcp-dtype"})
        star = out["analysis"].structured_content["next_cases"][0]["star"]
        out["append"] = await client.call_tool("plan_cases", {"run_id": "mcp-dtype", "append": True,
                                                              "stars": [star]})
        out["narrow"] = await client.call_tool("narrow_failure", {"run_id": "mcp-dtype", "max_cases": 40})
        out["bad"] = await client.call_tool("narrow_failure", {"run_id": "mcp-dtype", "max_cases": 0})
        return out

    out = with_server(tmp_path, scenario)
    for key in ("plan", "run", "analysis", "append", "narrow"):
        assert not out[key].is_error, error_text(out[key])
    analysis = out["analysis"].structured_content
    assert analysis["findings"][0]["axis"] in ("dtype", "x.dtype_bits")
    # the first next case splits the hypotheses: float16 (dtype == bfloat16 says it passes; the width of the
    # dtype and the size in bytes say it fails) and a shorter row (only the size in bytes says it fails)
    assert out["append"].structured_content["added"][0] == "base.dtype-float16"
    narrow = out["narrow"].structured_content
    lead = next(f for f in narrow["findings"] if f["axis"] == "dtype")
    assert (lead["predicate"], lead["exact"], narrow["stopped"]) == ("dtype == bfloat16", True, "exact")
    assert lead["minimal_pair"] == {"passing": "base", "failing": "base.dtype-bfloat16", "passing_value": "float32",
                                    "failing_value": "bfloat16", "differs_in": ["dtype"],
                                    "passing_planned": {"dtype": "float32"}, "failing_planned": {"dtype": "bfloat16"}}
    assert narrow["competing"] == [] and narrow["cases_run"] == narrow["new_cases"] + narrow["pending_run"]
    assert "max_cases" in error_text(out["bad"])


def test_opdebug_narrow_stops_at_once_when_the_finding_is_exact(tmp_path, subprocess_env):
    import subprocess

    # the failing value crossed with the distractor (sum in float16 too, two axes at once): exact at once
    star = {"base": {"id": "b", "inputs": [_x()], "attributes": {"reduction": "mean"}},
            "vary": [{"axis": "attribute", "name": "reduction", "values": ["sum"]},
                     {"axis": "dtype", "values": ["float16"]},
                     {"axis": "attribute", "name": "reduction", "values": ["sum"],
                      "also": [{"axis": "dtype", "values": ["float16"]}]}]}
    root = Path(subprocess_env["OPDEBUG_EVIDENCE_ROOT"])
    ids = _plan(root, "r", stars=[star])
    _record(root, "r", {i: "sum" in i for i in ids})
    for _ in range(8):  # the cases built to break it, recorded by hand as the planted rule says
        probes = [n.star for n in analyze_failures("r", root=root).next_cases if n.kind in NARROWING]
        if not probes:
            break
        added = plan_cases({"run_id": "r", "append": True, "stars": probes}, root=root).added
        store = RunStore(root, "r")
        _record(root, "r", {c.id: c.attributes.get("reduction") == "sum" for c in store.read_cases()
                            if c.id in added})
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "narrow", "r", "--root", str(root), "--json"],
                          env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["stopped"], out["exact"], out["steps"], out["cases_run"]) == ("exact", True, [], 0)
    assert out["findings"][0]["predicate"] == "attr.reduction == 'sum'"  # the language's canonical form
    human = subprocess.run([sys.executable, "-m", "tools.cli", "narrow", "r", "--root", str(root)],
                           env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert "finding: attr.reduction == 'sum' (exact) - minimal pair: b passes, b.attr-reduction-sum fails" \
        in human.stdout
