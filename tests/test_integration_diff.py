"""tools/analysis/integration_diff.py as pure functions over cases and results."""

from __future__ import annotations

from typing import Any

from conftest import mismatch_result, passed_result

from tools.analysis.integration_diff import features, integration_diff, permuted_strides
from tools.cases.stars import expand_star
from tools.schemas import Case, CaseResult, StarSpec


def case(cid: str, inputs: list[dict], attributes: dict | None = None, origin: dict | None = None) -> Case:
    return Case.model_validate({"id": cid, "inputs": inputs, "attributes": attributes or {}, "origin": origin})


def captured(cid: str, inputs: list[dict], stats: dict[str, Any], attributes: dict | None = None) -> Case:
    return case(cid, inputs, attributes, {"kind": "captured_call", "source": "cap", "call": cid.replace("cap-", ""),
                                          "exact": False, "stats": stats})


def results(**status: str) -> dict[str, CaseResult]:
    make = {"passed": passed_result, "numerical_mismatch": mismatch_result}
    return {cid: CaseResult.model_validate(make[s](cid)) for cid, s in status.items()}


def test_offset_nan_large_and_attribute_features_with_bridges_of_another_shape() -> None:
    planned = case("p", [{"name": "x", "shape": [4, 6]}], {"eps": 1e-6})
    cap = captured("cap-rms-0", [{"name": "x", "shape": [6, 4], "strides": [1, 6], "storage_offset": 3}],
                   {"x": {"numel": 24, "nan": 2, "inf": 0, "min": -3e5, "max": 2.0, "absmax": 3e5}}, {"eps": 1e-5})
    (diff,) = integration_diff([planned, cap], results(p="passed", **{"cap-rms-0": "numerical_mismatch"}))
    got = {(f.axis, f.value, tuple(f.passing_values)) for f in diff.features}
    assert got == {("x.strides_class", "permuted(1,0)", ("contiguous",)), ("x.offset", "nonzero", ("0",)),
                   ("x.values_class", "large+nan", ("finite",)), ("attr.eps", "1e-05", ("1e-06",))}
    bridges = {b.axis: b.star["vary"][0] for b in diff.bridges}
    # the planned case is 4x6: the transposition is carried over as strides of its own shape
    assert bridges["x.strides_class"] == {"axis": "strides", "input": "x", "values": [[1, 4]]}
    assert bridges["x.offset"] == {"axis": "storage_offset", "input": "x", "values": [3]}
    assert bridges["attr.eps"] == {"axis": "attribute", "name": "eps", "values": [1e-05]}
    assert bridges["x.values_class"]["values"][0] == {"kind": "uniform", "low": -3e5, "high": 3e5,
                                                      "specials": [{"value": "nan", "count": 1}]}
    # every bridge is a valid star that plans exactly one case, one axis away from the base
    for b in diff.bridges:
        (new,) = expand_star(StarSpec.model_validate(b.star))
        assert new.origin is None and new.id.startswith("p.")
    assert permuted_strides([2, 3, 4], [2, 0, 1]) == [3, 1, 6]


def test_the_reverse_names_what_the_failing_planned_case_has() -> None:
    cap = captured("cap-mm-0", [{"name": "x", "shape": [4, 4], "dtype": "float16"}],
                   {"x": {"numel": 16, "nan": 0, "inf": 0, "min": -1.0, "max": 1.0}})
    bad = case("p-bf16", [{"name": "x", "shape": [4, 4], "dtype": "bfloat16"}])
    (diff,) = integration_diff([cap, bad], results(**{"cap-mm-0": "passed", "p-bf16": "numerical_mismatch"}))
    assert (diff.direction, diff.failing_case, diff.closest_passing) == ("planned_fails", "p-bf16", "cap-mm-0")
    assert [(f.axis, f.value, f.passing_values) for f in diff.features] == [("x.dtype", "bfloat16", ["float16"])]
    # nothing to say when both kinds fail, or when no captured case was planned
    assert integration_diff([cap, bad], results(**{"cap-mm-0": "numerical_mismatch",
                                                   "p-bf16": "numerical_mismatch"})) == []
    assert integration_diff([bad], results(**{"p-bf16": "numerical_mismatch"})) == []
    assert features(bad)["dtypes_mixed"] == "no"


def test_tensor_list_and_none_inputs_compare_by_kind() -> None:
    planned = case("p", [{"name": "xs", "tensors": [{"shape": [2, 3]}, {"shape": [2, 3]}]},
                         {"name": "bias", "shape": [3]}])
    cap = captured("cap-cat-0", [{"name": "xs", "tensors": [{"shape": [2, 3]}] * 3}, {"name": "bias", "none": True}],
                   {})
    (diff,) = integration_diff([planned, cap], results(p="passed", **{"cap-cat-0": "numerical_mismatch"}))
    assert {(f.axis, f.value) for f in diff.features} == {("xs.kind", "list[3]"), ("bias.kind", "none")}
    assert diff.bridges == []  # a list length or a None flip is not bridged from here (yet)
