"""The properties of a case by the names conditions read (tools/conditions/properties.py), and a
condition against a run's recorded cases (tools/conditions/predict.py)."""

from __future__ import annotations

import hashlib

import pytest

from tools.cases.axes import case_axes
from tools.cases.derived import structured_axes
from tools.conditions.language import ConditionError, parse
from tools.conditions.predict import answer_conditions, parse_conditions
from tools.conditions.properties import case_properties, flatten_measured, memory_format
from tools.schemas import Case, CaseResult


def _case(shape: list[int], id: str = "c") -> Case:
    return Case.model_validate({"id": id, "inputs": [{"name": "x", "shape": shape}]})


@pytest.mark.parametrize(
    ("shape", "front", "back"),
    [
        ([3, 5], {0: 3, 1: 5}, {-1: 5, -2: 3}),
        ([2, 3, 5], {0: 2, 1: 3, 2: 5}, {-1: 5, -2: 3, -3: 2}),
        ([7, 2, 3, 5], {0: 7, 1: 2, 2: 3, 3: 5}, {-1: 5, -2: 3, -3: 2, -4: 7}),
    ],
)
def test_an_index_is_pythons_at_every_rank(shape, front, back) -> None:
    p = case_properties(_case(shape))
    assert p["x.rank"] == len(shape)
    assert {i: p[f"x.shape[{i}]"] for i in front} == front
    assert {i: p[f"x.shape[{i}]"] for i in back} == back
    # a dimension the rank does not have is absent: a condition on it is undefined
    assert f"x.shape[{len(shape)}]" not in p and f"x.shape[{-len(shape) - 1}]" not in p
    assert parse(f"x.shape[{len(shape)}] > 0").evaluate(p) is None
    assert parse(f"x.shape[-{len(shape) + 1}] > 0").evaluate(p) is None
    assert parse("x.shape[-1] == 5").evaluate(p) is True  # the last dimension whatever the rank
    # strides by the same indices (contiguous when none are given)
    assert p["x.stride[-1]"] == 1 and p[f"x.stride[{-len(shape)}]"] == p["x.stride[0]"]


def test_the_names_contract_of_one_tensor_and_the_call() -> None:
    case = Case.model_validate(
        {
            "id": "strided",
            "mode": "compile",
            "inputs": [
                {"name": "x", "shape": [2, 3, 4], "strides": [12, 1, 3], "storage_offset": 6, "dtype": "bfloat16"},
                {"name": "ts", "tensors": [{"shape": [4]}, {"shape": [2, 2], "dtype": "float16"}]},
            ],
            "attributes": {
                "groups": 3,
                "reduction": "mean",
                "out_dtype": {"kind": "dtype", "value": "float16"},
                "dims": [0, -1],
                "bias": None,
                "eps": 1e-5,
                "affine": True,
            },
        }
    )
    p = case_properties(case)
    assert p["x.stride[0]"] == 12 and p["x.stride[-2]"] == 1 and p["x.stride[2]"] == 3
    assert p["x.storage_offset"] == 6 and p["x.offset"] == 6  # the older name stays an alias
    assert p["x.itemsize"] == 2 and p["x.nbytes"] == 48 and p["x.bytes"] == 48 and p["x.numel"] == 24
    assert p["x.dtype"] == "bfloat16" and p["x.contiguous"] is False and p["x.contiguity"] == "transposed"
    assert p["x.memory_format"] == "none"
    assert p["ts.len"] == 2 and p["ts[1].shape[-1]"] == 2 and p["ts[1].dtype"] == "float16"
    assert p["ts[0].contiguous"] is True and p["ts[0].memory_format"] == "contiguous_format"
    assert p["attr.groups"] == 3 and p["attr.reduction"] == "mean" and p["attr.out_dtype"] == "float16"
    assert p["attr.dims[0]"] == p["attr.dims[-2]"] == 0 and p["attr.dims[-1]"] == p["attr.dims[1]"] == -1
    assert "attr.bias" not in p and p["attr.eps"] == 1e-5 and p["attr.affine"] is True
    assert p["mode"] == "compile"
    # the seed the runner derives from the id when the case has none (tools/runner/inputs.case_seed)
    assert p["seed"] == int.from_bytes(hashlib.sha256(b"strided").digest()[:7], "big")
    assert case_properties(case.model_copy(update={"seed": 5}))["seed"] == 5
    # conditions read them as written in references/conditions.md
    assert parse("attr.out_dtype == float16 and mode == compile").evaluate(p) is True
    assert parse("x.dtype in {float16, bfloat16} and not x.contiguous").evaluate(p) is True
    assert parse("pow2(x.storage_offset * x.itemsize) < 32").evaluate(p) is True  # 12 bytes: 4-aligned
    # every axis the analysis derives is a property too (one vocabulary), relations aside
    derived = structured_axes(case, case_axes(case))
    assert set(derived) - {k for k in derived if k.startswith("attr.")} <= set(p)
    assert not any("~" in k for k in p)


def test_memory_formats_as_torch_names_them() -> None:
    assert memory_format([2, 3, 4, 5], None) == "contiguous_format"
    assert memory_format([2, 3, 4, 5], [60, 1, 15, 3]) == "channels_last"  # N, H, W, C in memory
    assert memory_format([2, 3, 4, 5, 6], [360, 1, 90, 18, 3]) == "channels_last_3d"
    assert memory_format([2, 1, 4, 5], [20, 7, 5, 1]) == "contiguous_format"  # a size-1 dim takes any stride
    assert memory_format([2, 3, 4, 5], [60, 20, 1, 4]) == "none"  # H and W swapped
    assert memory_format([2, 3, 4], [12, 1, 3]) == "none"  # rank 3 has no channels_last


def test_the_recorded_values_and_wrong_places_read_under_both_indices() -> None:
    case = Case.model_validate({"id": "rows", "inputs": [{"name": "x", "shape": [4, 300], "dtype": "float16"}]})
    wrong = {
        "count": 300,
        "fraction": 0.25,
        "shape": [4, 300],
        "rows": 1,
        "of_rows": 4,
        "row_index": [1],
        "rows_zero": 1,
        "tail": [1, None],
        "period": [None, None],
        "zeros": 300,
    }
    result = CaseResult.model_validate(
        {
            "case_id": "rows",
            "status": "numerical_mismatch",
            "comparisons": [
                {
                    "output": "out",
                    "passed": False,
                    "numel": 1200,
                    "mismatch_count": 300,
                    "mismatch_ratio": 0.25,
                    "wrong": wrong,
                }
            ],
            "values": {
                "x": {
                    "numel": 1200,
                    "min": -3.0,
                    "max": 300.0,
                    "max_abs": 300.0,
                    "distinct": 1100,
                    "sumsq": [9e4, 9.3e4],
                    "sum_abs": [310.0, 540.0],
                }
            },
        }
    )
    p = case_properties(case, result)
    assert p["x.values.max"] == 300.0 and p["x.values.nan"] == 0 and p["x.values.distinct"] == 1100
    assert p["x.values.sumsq[-1]"] == p["x.values.sumsq[1]"] == 9.3e4  # the largest row sum of squares
    assert p["x.values.sum_abs[0]"] == p["x.values.sum_abs[-2]"] == 310.0
    assert p["out.wrong.rows"] == 1 and p["out.wrong.rows_zero"] == 1 and p["out.wrong.row_index[0]"] == 1
    assert p["out.wrong.tail[0]"] == p["out.wrong.tail[-2]"] == 1
    assert "out.wrong.tail[-1]" not in p and "out.wrong.period[0]" not in p  # measured: not a tail, no period
    assert parse("x.dtype == float16 and x.values.sumsq[-1] > float16.max").evaluate(p) is True
    assert parse("out.wrong.rows_zero == out.wrong.rows and out.wrong.rows >= 1").evaluate(p) is True
    assert parse("out.wrong.tail[-1] >= 0").evaluate(p) is None


def test_measured_mappings_keyed_by_dimension_read_like_lists() -> None:
    p = flatten_measured("x.values", {"sumsq": {"-1": 7.0, "0": 2.0}, "rows": {"count": 2}}, 2)
    assert p == {
        "x.values.sumsq[-1]": 7.0,
        "x.values.sumsq[1]": 7.0,
        "x.values.sumsq[0]": 2.0,
        "x.values.sumsq[-2]": 2.0,
        "x.values.rows.count": 2,
    }


def test_a_comparison_gives_the_wrong_count_of_each_output() -> None:
    case = _case([4, 8], id="f")
    result = CaseResult.model_validate(
        {
            "case_id": "f",
            "status": "numerical_mismatch",
            "comparisons": [
                {"output": "out", "passed": False, "numel": 32, "mismatch_count": 8, "mismatch_ratio": 0.25},
                {"output": "grad.x", "passed": True, "numel": 32},
            ],
        }
    )
    p = case_properties(case, result)
    assert p["out.wrong.count"] == 8 and p["out.wrong.fraction"] == 0.25 and p["grad.x.wrong.count"] == 0
    assert "out.wrong.rows" not in p  # a failure the runner did not place: only its count
    assert p["grad.x.wrong.rows"] == 0 and p["grad.x.wrong.zeros"] == 0  # a pass: nothing wrong anywhere
    assert "grad.x.wrong.tail[0]" not in p
    assert "out.wrong.count" not in case_properties(case)  # no result: nothing measured


def _run(verdicts: dict[str, tuple[list[int], str]]) -> tuple[list[Case], dict[str, CaseResult]]:
    cases = [_case(shape, id=cid) for cid, (shape, _) in verdicts.items()]
    results = {
        cid: CaseResult.model_validate(
            {"case_id": cid, "status": status}
            | ({"error": {"type": "E", "message": "m", "signature": "E"}} if status in ("crash", "unsupported") else {})
            | ({"comparisons": [{"output": "out", "passed": False}]} if status == "numerical_mismatch" else {})
        )
        for cid, (_, status) in verdicts.items()
        if status != "pending"
    }
    return cases, results


def test_predictions_count_failing_and_passing_cases_only() -> None:
    cases, results = _run(
        {
            "a": ([4, 24], "numerical_mismatch"),
            "b": ([4, 16], "passed"),
            "c": ([2, 4, 24], "crash"),
            "d": ([4, 40], "unsupported"),  # not counted
            "e": ([4, 48], "pending"),  # not counted
            "f": ([4, 32], "passed"),
        }
    )
    right, wrong, rank = answer_conditions(
        ["x.shape[-1] % 16 != 0", "x.shape[-1] > 20", "x.shape[2] > 0"], cases, results
    )
    assert right.fate == "surviving" and right.agree == ["a", "b", "c", "f"] and right.contradict_count == 0
    assert wrong.fate == "refuted" and wrong.contradict == ["f"] and wrong.agree == ["a", "b", "c"]
    assert wrong.counterexamples[0].case_id == "f" and wrong.counterexamples[0].predicted == "fail"
    assert "f passed where it is true (x.shape[-1] = 32)" in wrong.text
    assert rank.undefined == ["a", "b", "f"] and rank.agree == ["c"]


def test_a_bad_condition_is_refused_with_its_place_in_the_field() -> None:
    cases, results = _run({"a": ([4, 24], "numerical_mismatch")})
    with pytest.raises(ConditionError, match=r"conditions\[1\]: .*x\.shap\[-1\] is not a property"):
        answer_conditions(["x.shape[-1] > 1", "x.shap[-1] > 1"], cases, results)
    with pytest.raises(ConditionError, match=r"conditions\[0\]: .*no '/'"):
        parse_conditions(["x.shape[-1] / 2 > 1"])
    with pytest.raises(ConditionError, match="at most 16 conditions"):
        parse_conditions(["a > 1"] * 17)
