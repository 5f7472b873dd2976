"""Valid calls everywhere (tools/cases/constraints.py): what the reference refuses is learned from the run's
refused and accepted calls, and no shrink step, next case or narrowing round breaks it again; attributes keep
their types in every proposal; plan-time warnings are not false (a size moved in several inputs is one axis)
and not repeated.  Planted operators (tests/operators/) run on the real local transport with real torch
references: group_norm_tied.py (torch's group_norm refuses channels the groups do not divide) and
out_dtype_attr.py (an output-dtype attribute)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.analysis import build_analysis
from tools.analyze_failures import analyze_failures
from tools.artifacts.shrink import shrink_case
from tools.cases.constraints import learn, properties, valid_call
from tools.cases.neighbours import multi_axis_warnings
from tools.cases.stars import expand_star
from tools.evidence import RunStore
from tools.narrow import narrow_failure
from tools.plan_cases import plan_cases
from tools.render.summary import summarize
from tools.run_case_remote import run_case_remote
from tools.schemas import Case, CaseResult, DtypeArg, StarSpec

REPO = Path(__file__).resolve().parent.parent
OPERATORS = REPO / "tests" / "operators"
GN = "group_norm_tied.py"
REFUSES = "Expected number of channels in input to be divisible by num_groups"


def _gn(case_id: str, shape: list[int], groups: int = 4) -> dict:
    return {"id": case_id, "inputs": [{"name": "x", "shape": shape}], "attributes": {"groups": groups}}


def _plan(root: Path, run_id: str, module: str, cases: list[dict]) -> None:
    stem = module[:-3]
    plan_cases(
        {
            "config": {
                "run_id": run_id,
                "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref", "modules": [module]},
                "tolerance": {"atol": 1e-4, "rtol": 1e-4},
            },
            "cases": cases,
            "module_sources": {module: (OPERATORS / module).read_text()},
        },
        root=root,
    )


def _refused(store: RunStore, case_ids) -> list[str]:
    """The cases among ``case_ids`` whose call the reference refused (noted, or in a recorded error)."""
    notes = store.read_refusals()
    results = store.read_results()
    return [
        c
        for c in case_ids
        if c in notes or (c in results and results[c].error is not None and results[c].error.reference_error)
    ]


# --------------------------------------------------------------------------
# The learner alone
# --------------------------------------------------------------------------


def test_the_learner_reads_divisibility_and_shared_sizes_and_nothing_from_a_broken_reference() -> None:
    def case(cid: str, c: int, w: int, groups: int = 8) -> dict:
        return {"id": cid, "inputs": [{"name": "x", "shape": [2, c, 8, 8]}, {"name": "weight", "shape": [w]}],
                "attributes": {"groups": groups}}

    accepted = [case("a", 64, 64), case("b", 32, 32), case("c", 16, 16, groups=4)]
    refused = [case("r", 12, 12), case("s", 16, 8)]
    learned = learn(accepted + refused, {"r": "refused", "s": "refused"}, ["a", "b", "c"])
    texts = [c.text for c in learned.learned]
    assert len(texts) == 2 and "weight.shape[0] == x.shape[1]" in texts, texts
    divides = next(t for t in texts if "%" in t)  # the channels as x's size or as weight's (equal)
    assert divides in ("x.shape[1] % attr.groups == 0", "weight.shape[0] % attr.groups == 0"), texts
    assert learned.unexplained == []
    assert "% attr.groups == 0 (" in (valid_call(case("n", 20, 20), learned) or "")
    assert valid_call(case("n", 24, 24), learned) is None
    assert "weight.shape[0] == x.shape[1]" in (valid_call(case("n", 24, 8), learned) or "")
    # a relation the accepted calls break is never learned; a reference that refuses every call teaches nothing
    assert learn(accepted + refused, {"r": "x", "s": "x"}, []).learned == []
    # an index attribute below the input's rank (a refused dim 3 of a rank-3 input)
    dims = [{"id": f"d{d}", "inputs": [{"name": "x", "shape": [4, 8, 16]}], "attributes": {"dim": d}} for d in (0, 1, 2, 3)]
    rank = learn(dims, {"d3": "IndexError"}, ["d0", "d1", "d2"])
    assert [c.text for c in rank.learned] == ["attr.dim < x.rank"], rank.learned
    assert properties(Case.model_validate(dims[0]))["x.shape[-1]"] == 16


def _result(cid: str, status: str) -> CaseResult:
    return CaseResult.model_validate({"case_id": cid, "status": status, "environment": {}, "comparisons": [
        {"output": "out", "passed": status == "passed", "max_abs": 0.0 if status == "passed" else 1.0,
         "expected_dtype": "float32", "actual_dtype": "float32"}]})


def test_the_analysis_proposes_no_call_the_refusals_rule_out() -> None:
    # fails above 8 channels; 10 channels in 4 groups was refused: the boundary's bisection (9, 11) is no call
    cases = [Case.model_validate(_gn(f"c{c}", [2, c, 4, 4])) for c in (4, 8, 12, 16, 32, 10)]
    results = {c.id: _result(c.id, "numerical_mismatch" if c.inputs[0].shape[1] > 8 else "passed")
               for c in cases if c.id != "c10"}
    blind = build_analysis("r", None, cases, results)
    assert blind.valid_calls == [] and {9, 11} <= _proposed_channels(blind)  # what it proposes without knowing
    told = build_analysis("r", None, cases, results, refusals={"c10": REFUSES})
    assert told.valid_calls == ["the reference refuses calls where not x.shape[1] % attr.groups == 0 (refused: c10)"]
    assert told.next_cases and all(c % 4 == 0 for c in _proposed_channels(told)), _proposed_channels(told)
    assert "Valid calls: the reference refuses calls where not x.shape[1] % attr.groups == 0" in summarize(
        "analyze_failures", told)  # the answer's text says it too


def _proposed_channels(analysis) -> set[int]:
    return {c.inputs[0].shape[1] for n in analysis.next_cases if n.star
            for c in expand_star(StarSpec.model_validate(n.star))}


# --------------------------------------------------------------------------
# shrink_case and narrow_failure on a group norm whose reference refuses C % groups != 0
# --------------------------------------------------------------------------


def test_shrink_reaches_the_smallest_failing_case_through_valid_calls_only(loop, tmp_path) -> None:
    # the run already knows a refusal (an agent's case of 30 channels in 4 groups): 0 refused steps
    _plan(tmp_path, "gn", GN, [_gn("t", [4, 48, 6, 6]), _gn("r", [4, 30, 6, 6]), _gn("p", [4, 16, 6, 6])])
    first = loop.run_until_complete(run_case_remote("gn", root=tmp_path))
    assert {o.case_id: o.state for o in first.outcomes} == {"t": "numerical_mismatch", "r": "pending", "p": "passed"}
    store = RunStore(tmp_path, "gn")
    assert REFUSES in store.read_refusals()["r"]
    response = loop.run_until_complete(shrink_case("gn", "t", root=tmp_path, max_cases=30))
    assert response.smallest_shapes == {"x": [1, 36, 1, 1]}, [(s.change, s.state) for s in response.steps]
    assert _refused(store, [s.case_id for s in response.steps]) == []
    assert all(s.state != "pending" for s in response.steps), [(s.change, s.state) for s in response.steps]
    assert response.skipped_invalid >= 1  # the rank reduction makes x.shape[1] = 6: not run
    assert any("x.shape[1] % attr.groups == 0" in c for c in response.constraints)
    assert "step(s) not run: not valid calls (the reference refuses calls where not x.shape[1] %" in summarize(
        "shrink_case", response)

    # without a refusal before it, the first refused step teaches the rule and none follows
    _plan(tmp_path, "gn2", GN, [_gn("t", [4, 48, 6, 6])])
    loop.run_until_complete(run_case_remote("gn2", root=tmp_path))
    again = loop.run_until_complete(shrink_case("gn2", "t", root=tmp_path, max_cases=30))
    store2 = RunStore(tmp_path, "gn2")
    steps = [s.case_id for s in again.steps]
    refused = _refused(store2, steps)
    assert len(refused) <= 1 and again.smallest_shapes == {"x": [1, 36, 1, 1]}, [
        (s.change, s.state) for s in again.steps]


def test_narrow_failure_proposes_no_refused_call_after_the_first_refusal(loop, tmp_path) -> None:
    _plan(tmp_path, "gn", GN, [_gn("c16", [2, 16, 4, 4]), _gn("c24", [2, 24, 4, 4]), _gn("c48", [2, 48, 4, 4]),
                               _gn("c64", [2, 64, 4, 4])])
    response = loop.run_until_complete(narrow_failure({"run_id": "gn", "max_cases": 30}, root=tmp_path))
    store = RunStore(tmp_path, "gn")
    rounds = [list(step.cases) for step in response.steps]
    refused = [i for i, ids in enumerate(rounds) if _refused(store, ids)]
    # a round is planned at once: the first refusal's round-mates were planned before it was seen
    later = [c for ids in rounds[refused[0] + 1:] for c in ids] if refused else []
    assert refused and later, rounds  # a refusal came, and rounds followed it
    assert _refused(store, later) == [], (rounds, store.read_refusals())
    cases = {c.id: c for c in store.read_cases()}
    assert all(cases[c].inputs[0].shape[1] % 4 == 0 for c in later), later
    # the next call does not run the refused calls again (they stay pending: the reference would refuse them)
    again = loop.run_until_complete(narrow_failure({"run_id": "gn", "max_cases": 2}, root=tmp_path))
    assert not set(store.read_refusals()) & {c for step in again.steps for c in step.cases}, again.steps
    # the analysis' own next cases (the probes among them) are valid calls, and it says what it learned
    analysis = analyze_failures("gn", root=tmp_path)
    assert any("x.shape[1] % attr.groups == 0" in v for v in analysis.valid_calls), analysis.valid_calls
    proposed = [c for n in analysis.next_cases if n.star for c in expand_star(StarSpec.model_validate(n.star))]
    assert all(c.inputs[0].shape[1] % c.attributes["groups"] == 0 for c in proposed), [
        (c.id, c.inputs[0].shape) for c in proposed]


# --------------------------------------------------------------------------
# Attributes keep their types
# --------------------------------------------------------------------------


def test_an_output_dtype_attribute_survives_every_proposal_as_a_dtype(loop, tmp_path) -> None:
    def case(cid: str, n: int, dtype: str) -> dict:
        return {"id": cid, "inputs": [{"name": "x", "shape": [4, n], "dtype": "float32"}],
                "attributes": {"dtype": {"kind": "dtype", "value": dtype}}}

    _plan(tmp_path, "dt", "out_dtype_attr.py", [case("a", 16, "float64"), case("b", 16, "float32"),
                                               case("c", 4, "float64")])
    response = loop.run_until_complete(narrow_failure({"run_id": "dt", "max_cases": 30}, root=tmp_path))
    store = RunStore(tmp_path, "dt")
    cases = store.read_cases()
    assert len(cases) > 3 and any(c.attributes["dtype"].value == "float32" for c in cases[3:])
    assert all(isinstance(c.attributes["dtype"], DtypeArg) for c in cases), [
        (c.id, c.attributes["dtype"]) for c in cases if not isinstance(c.attributes["dtype"], DtypeArg)]
    crashed = {c: r.error.message for c, r in store.read_results().items() if r.status == "crash"}
    assert crashed == {}, crashed
    assert response.stopped == "exact", (response.stopped, [f.predicate for f in response.findings])


# --------------------------------------------------------------------------
# No false warnings, none repeated
# --------------------------------------------------------------------------


def _norm(cid: str, hidden: int, rows: int = 4, dtype: str = "float32") -> dict:
    return {"id": cid, "inputs": [{"name": "x", "shape": [rows, hidden], "dtype": dtype},
                                  {"name": "weight", "shape": [hidden], "dtype": dtype}]}


def test_a_size_moved_in_several_inputs_is_one_axis_and_a_warning_is_said_once(tmp_path) -> None:
    cases = [Case.model_validate(_norm("h64", 64)), Case.model_validate(_norm("h128", 128))]
    assert multi_axis_warnings(cases) == []  # x [4, 64] w [64] -> x [4, 128] w [128]: a dim, one axis
    two = [Case.model_validate(_norm("h64", 64)), Case.model_validate(_norm("h128", 128, rows=8))]
    assert len(multi_axis_warnings(two)) == 2  # the rows moved too: two axes, both cases warned about

    config = {"run_id": "w", "operator": {"name": "add", "candidate": "torch.add", "reference": "torch.add"},
              "tolerance": {"atol": 1e-5, "rtol": 1e-5}}
    made = plan_cases({"config": config, "cases": [_norm("a", 64), _norm("b", 128, rows=8, dtype="float16")]},
                      root=tmp_path)
    lonely = [w for w in made.warnings if "more than one axis" in w]
    assert len(lonely) == 2
    appended = plan_cases({"run_id": "w", "append": True, "cases": [_norm("c", 64, rows=2)]}, root=tmp_path)
    assert [w for w in appended.warnings if "more than one axis" in w] == []  # a and b were warned about once
    far = plan_cases({"run_id": "w", "append": True, "cases": [_norm("d", 32, rows=16, dtype="bfloat16")]},
                     root=tmp_path)
    assert [w.split("'")[1] for w in far.warnings if "more than one axis" in w] == ["d"]


def test_skill_md_stays_short() -> None:
    lines = (REPO / "SKILL.md").read_text().splitlines()
    assert len(lines) <= 470, len(lines)
    # what moved out is linked from it, loaded when needed
    for ref in ("references/skill-consistency.md", "references/skill-economy.md", "references/captures.md"):
        assert ref in "\n".join(lines) and (REPO / ref).is_file(), ref


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
