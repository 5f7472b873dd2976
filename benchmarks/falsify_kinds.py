"""Planted kinds whose truth lies outside the first enumerated space (issue:
falsify before exact), shared by tests/test_falsify.py and
benchmarks/bench_narrow.py.  Each: an operator in tests/operators/, a first
star with distractors, and what the end may be - ``exact``: the predicates an
exact finding may have (any other exact finding is wrong); ``reach``: the run
must end on one of them, exact; ``necessary``: the failure is value-dependent,
the lead may only be a necessary condition.  A kind with no ``reach`` may end
on no exact finding (its counterexamples and survivors said), never on a wrong
exact one."""

from __future__ import annotations

from narrow_kinds import DTYPE_DISTRACTOR, OPERATORS, _base, _x, config

FALSIFY_KINDS: dict[str, dict] = {
    # a threshold "groups > 1" that is really "any value but 1"
    "all_but_one": dict(
        module="planted_all_but_one.py",
        star={"base": _base(attributes={"groups": 1}),
              "vary": [{"axis": "attribute", "name": "groups", "values": [2, 4, 8]}, DTYPE_DISTRACTOR,
                       {"axis": "shape", "input": "x", "values": [[8, 64]]}]},
        exact=["attr.groups != 1"], reach=True),
    # a sign class that is really "every element above 0.4": another generator of the class passes
    "values_min": dict(
        module="planted_values_min.py",
        star={"base": _base(), "vary": [{"axis": "values", "input": "x", "values": [
            {"kind": "uniform", "low": 0.5, "high": 1.5}]}, DTYPE_DISTRACTOR,
            {"axis": "shape", "input": "x", "values": [[8, 64]]}]},
        exact=[]),
    # an element alignment that is really 32 bytes: it moves with the element size
    "row_bytes": dict(
        module="planted_row_bytes.py",
        star={"base": _base([_x((4, 64), dtype="float16")]),
              "vary": [{"axis": "shape", "input": "x", "values": [[4, 24], [4, 40], [4, 128]]},
                       {"axis": "dtype", "values": ["float32", "bfloat16"]}]},
        exact=["x.last_align_bytes < 32"], reach=True),
    # x.shape[1] > 7 on rank 3; a rank-2 input (its dimension 1 is its last) passes
    "batched_dim": dict(
        module="planted_batched_dim.py",
        star={"base": _base([_x((2, 4, 64))]),
              "vary": [{"axis": "shape", "input": "x", "values": [[2, 16, 64], [2, 8, 64], [32, 64], [4, 64]]},
                       DTYPE_DISTRACTOR]},
        exact=["x.shape[1] > 7 and x.rank > 2", "x.rank > 2 and x.shape[1] > 7"]),
    # the row stride must be a multiple of 16 elements: no planned axis holds it
    "row_stride": dict(
        module="planted_row_stride.py",
        star={"base": _base([_x((8, 64))]),
              "vary": [{"axis": "shape", "input": "x", "values": [[8, 40], [8, 24]]}, DTYPE_DISTRACTOR,
                       {"axis": "shape", "input": "x", "values": [[8, 40]],
                        "also": [{"axis": "strides", "input": "x", "values": [[64, 1]]}]}]},
        exact=[]),
    # long rows are necessary; the values drawn decide (some seeds fail, some pass)
    "data_hits": dict(
        module="planted_data_hits.py",
        star={"base": _base([_x((1, 32))]),
              "vary": [{"axis": "shape", "input": "x", "values": [[1, 128], [1, 256], [1, 512]]}, DTYPE_DISTRACTOR]},
        exact=[], necessary="x.shape[-1] > 32"),
}


def falsify_plan_request(run_id: str, kind: str) -> dict:
    spec = FALSIFY_KINDS[kind]
    return {"config": config(run_id, spec["module"]), "stars": [spec["star"]],
            "module_sources": {spec["module"]: (OPERATORS / spec["module"]).read_text()}}


def wrong_exact(kind: str, findings: list[dict]) -> list[str]:
    """The exact findings of a run's end that are not the planted condition (must be empty)."""
    return [f["predicate"] for f in findings if f.get("exact") and f["predicate"] not in FALSIFY_KINDS[kind]["exact"]]
