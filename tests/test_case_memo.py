"""What is derived from a case or a result is kept once per object the store hands out (tools/cases/memo.py),
and an analysis served from what was kept says exactly what one computed from nothing says."""

from __future__ import annotations

import gc

from conftest import mismatch_result, passed_result

from tools.analyze_failures import analyze_failures
from tools.cases import memo
from tools.cases.axes import case_axes
from tools.cases.derived import structured_axes
from tools.conditions.properties import case_properties
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.record_result import record_result
from tools.schemas import Case

STATED = ["x.shape[0] * x.shape[-1] > 24", "attr.alpha % 3 == 0"]


def _case(i: int) -> dict:
    return {
        "id": f"c{i}",
        "inputs": [{"name": "x", "shape": [i % 5 + 1, 8]}, {"name": "y", "shape": [8]}],
        "attributes": {"alpha": i},
    }


def _run(root, plan_request_dict, n: int = 24) -> str:
    request = plan_request_dict("memo", ("c0",))
    request["cases"] = [_case(i) for i in range(n)]
    plan_cases(request, root=root)
    for i in range(n):
        record_result("memo", mismatch_result(f"c{i}") if i % 3 == 0 else passed_result(f"c{i}"), root=root)
    return "memo"


def _comparable(analysis) -> dict:
    doc = analysis.model_dump(mode="json")
    doc.pop("analyzed_at")
    return doc


def test_a_sealed_object_computes_once_and_every_caller_gets_its_own_copy() -> None:
    case = Case.model_validate(_case(3))
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"a": 1}

    assert memo.once(case, "k", compute) == {"a": 1} and memo.once(case, "k", compute) == {"a": 1}
    assert len(calls) == 2  # not sealed: computed every time
    memo.seal(case)
    first = memo.once(case, "k", compute)
    first["a"] = 99  # a caller changes its copy
    assert memo.once(case, "k", compute) == {"a": 1} and len(calls) == 3
    memo.clear()
    assert memo.once(case, "k", compute) == {"a": 1} and len(calls) == 4  # cleared: computed again


def test_a_copy_of_a_sealed_case_is_another_case() -> None:
    case = Case.model_validate(_case(3))
    memo.seal(case)
    assert case_axes(case)["mode"] == "eager"
    other = case.model_copy(update={"mode": "graph"})
    assert not memo.sealed(other)
    assert case_axes(other)["mode"] == "graph" and structured_axes(other)["mode"] == "graph"
    labels = dict(case_axes(case), mode="compile")  # labels handed in that are not the case's own are read
    assert structured_axes(case, labels)["mode"] == "compile" and structured_axes(case)["mode"] == "eager"


def test_a_sealed_object_is_forgotten_with_it() -> None:
    case = Case.model_validate(_case(3))
    memo.seal(case)
    case_axes(case)
    key = id(case)
    del case
    gc.collect()
    assert key not in memo._SEALED


def test_the_store_hands_out_the_same_sealed_objects_and_a_grown_matrix_keeps_them(
    evidence_root, plan_request_dict
) -> None:
    run_id = _run(evidence_root, plan_request_dict)
    store = RunStore(evidence_root, run_id)
    cases, results = store.read_cases(), store.read_results()
    assert all(memo.sealed(c) for c in cases) and all(memo.sealed(r) for r in results.values())
    assert all(a is b for a, b in zip(cases, store.read_cases(), strict=True))
    assert all(results[k] is v for k, v in store.read_results().items())
    plan_cases({"run_id": run_id, "append": True, "cases": [_case(100)]}, root=evidence_root)
    grown = store.read_cases()
    assert len(grown) == len(cases) + 1 and all(a is b for a, b in zip(cases, grown, strict=False))
    assert memo.sealed(grown[-1])


def test_an_analysis_read_from_what_was_kept_says_what_one_from_nothing_says(evidence_root, plan_request_dict) -> None:
    run_id = _run(evidence_root, plan_request_dict)
    memo.clear()
    cold = analyze_failures(run_id, root=evidence_root, conditions=STATED)
    warm = analyze_failures(run_id, root=evidence_root, conditions=STATED)
    assert _comparable(warm) == _comparable(cold)
    assert [a.fate for a in warm.conditions] == [a.fate for a in cold.conditions]
    store = RunStore(evidence_root, run_id)
    results = store.read_results()
    for case in store.read_cases():
        fresh = Case.model_validate(case.model_dump(mode="json"))  # not sealed: computed from nothing
        assert case_properties(case, results.get(case.id)) == case_properties(fresh, results.get(case.id))


def test_a_tensor_of_equal_content_shares_its_axes_and_one_of_other_content_does_not() -> None:
    a, b = Case.model_validate(_case(3)), Case.model_validate(_case(8))  # x: 4x8 in both (8 % 5 + 1 == 4)
    c = Case.model_validate(_case(4))  # x: 5x8
    calls = []

    def compute(spec) -> dict:
        calls.append(1)
        return {"shape": list(spec.shape)}

    got = [
        memo.by_content("test", "x", case.inputs[0], lambda case=case: compute(case.inputs[0])) for case in (a, b, c)
    ]
    assert got == [{"shape": [4, 8]}, {"shape": [4, 8]}, {"shape": [5, 8]}] and len(calls) == 2
    got[0]["shape"] = "changed"  # a caller's copy
    assert memo.by_content("test", "x", b.inputs[0], lambda: compute(b.inputs[0])) == {"shape": [4, 8]}
    assert memo.by_content("test", "y", a.inputs[0], lambda: compute(a.inputs[0])) and len(calls) == 3  # by name too
    assert case_axes(a)["x.shape"] == case_axes(b)["x.shape"] == "4x8" and case_axes(c)["x.shape"] == "5x8"


def test_the_collector_is_paused_during_an_analysis_and_as_it_was_after(evidence_root, plan_request_dict) -> None:
    from tools.analyze_failures import collector_paused

    run_id = _run(evidence_root, plan_request_dict)
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # two analyses at once: on again only when the last ends
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:  # a process that runs with the collector off keeps it off
        analyze_failures(run_id, root=evidence_root)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_kept_column_atoms_are_the_atoms_and_a_signed_zero_is_not_served_from_another() -> None:
    from tools.analysis import hypotheses as hyp

    cols = [([1, 2, 3], [4, 5, 0]), ([True, True], [False, True]), (["a", "b"], ["c", "a"]), ([1.5], [2.5, -1.0])]
    for fvals, pvals in cols:
        assert hyp.column_atoms("x.shape[0]", fvals, pvals) == hyp._atoms("x.shape[0]", fvals, pvals)
        assert hyp.column_atoms("x.shape[0]", fvals, pvals) == hyp._atoms("x.shape[0]", fvals, pvals)  # kept
    assert hyp.column_atoms("m", [1, 1], [2]) != hyp.column_atoms("m", [True, True], [2])  # equal, of other types
    pos = hyp.column_atoms("m", [0.0, 1.0], [2.0])
    neg = hyp.column_atoms("m", [-0.0, 1.0], [2.0])
    assert [a.text for a, _ in pos] == [a.text for a, _ in hyp._atoms("m", [0.0, 1.0], [2.0])]
    assert [a.text for a, _ in neg] == [a.text for a, _ in hyp._atoms("m", [-0.0, 1.0], [2.0])]
