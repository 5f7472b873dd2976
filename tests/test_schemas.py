"""The contracts refuse what they must, and say which field was wrong."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tools.errors import ToolError
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.record_result import record_result
from tools.schemas import (
    Case,
    CaseResult,
    Comparison,
    InputSpec,
    OperatorConfig,
    PlanRequest,
    Tolerance,
    format_validation_error,
)


def _case(**over):
    doc = {"id": "c1", "inputs": [{"name": "x", "shape": [2, 3]}]}
    doc.update(over)
    return doc


def _messages(exc: ValidationError) -> str:
    return format_validation_error(exc)


@pytest.mark.parametrize("bad_id", ["../x", "a/b", ".", "..", "a" * 200, "a\\b", "-x", "a b", "", "x/../y"])
def test_case_id_must_be_a_safe_slug(bad_id):
    with pytest.raises(ValidationError) as info:
        Case.model_validate(_case(id=bad_id))
    text = _messages(info.value)
    assert "id:" in text
    assert "slug" in text or "'..'" in text


@pytest.mark.parametrize("good_id", ["c1", "rms.dtype-bfloat16", "A_b-1.x", "a" * 96])
def test_safe_ids_are_accepted(good_id):
    assert Case.model_validate(_case(id=good_id)).id == good_id


def test_unknown_fields_are_refused_with_their_path():
    with pytest.raises(ValidationError) as info:
        Case.model_validate(_case(inputs=[{"name": "x", "shape": [2], "colour": "red"}], speed=3))
    text = _messages(info.value)
    assert "inputs.0.colour: unknown field" in text
    assert "speed: unknown field" in text


def test_several_errors_are_reported_at_once():
    bad = {
        "run_id": "../escape",
        "operator": {"name": "op", "candidate": "notdotted", "reference": "m.ref", "extra": 1},
        "tolerance": {"atol": -1.0, "rtol": float("nan")},
    }
    with pytest.raises(ValidationError) as info:
        OperatorConfig.model_validate(bad)
    text = _messages(info.value)
    for path in ("run_id", "operator.candidate", "operator.extra", "tolerance.atol", "tolerance.rtol"):
        assert f"{path}:" in text, (path, text)
    assert text.startswith("5 validation error(s)")


def test_shape_strides_rank_mismatch_is_refused():
    with pytest.raises(ValidationError) as info:
        InputSpec.model_validate({"name": "x", "shape": [2, 3], "strides": [1]})
    assert "'strides' has rank 1 but 'shape' has rank 2" in _messages(info.value)


@pytest.mark.parametrize("field,value", [("shape", [2, -1]), ("strides", [-3, 1]), ("storage_offset", -1)])
def test_negative_sizes_are_refused(field, value):
    doc = {"name": "x", "shape": [2, 3], field: value}
    with pytest.raises(ValidationError) as info:
        InputSpec.model_validate(doc)
    assert [e["loc"][0] for e in info.value.errors()] == [field], info.value.errors()


@pytest.mark.parametrize("field,value", [("dtype", "float8"), ("layout", "NZ"), ("dtype", "torch.float32")])
def test_unknown_dtype_and_layout_are_refused(field, value):
    with pytest.raises(ValidationError) as info:
        InputSpec.model_validate({"name": "x", "shape": [2], field: value})
    assert f"{field}:" in _messages(info.value)


@pytest.mark.parametrize("atol,rtol,field", [(float("inf"), 0.0, "atol"), (0.0, float("nan"), "rtol"),
                                             (-1e-3, 0.0, "atol"), (0.0, -1.0, "rtol")])
def test_non_finite_or_negative_tolerance_is_refused(atol, rtol, field):
    with pytest.raises(ValidationError) as info:
        Tolerance.model_validate({"atol": atol, "rtol": rtol})
    assert [e["loc"] for e in info.value.errors()] == [(field,)]


@pytest.mark.parametrize("metric", ["max_abs", "mean_abs", "rmse", "cosine", "max_ulp"])
def test_non_finite_metric_is_refused(metric):
    with pytest.raises(ValidationError) as info:
        Comparison.model_validate({"output": "out", "passed": False, metric: float("nan")})
    assert [e["loc"] for e in info.value.errors()] == [(metric,)]


def test_crash_and_unsupported_need_an_error():
    for status in ("crash", "unsupported"):
        with pytest.raises(ValidationError) as info:
            CaseResult.model_validate({"case_id": "c1", "status": status})
        assert "needs 'error'" in str(info.value)
    ok = CaseResult.model_validate({"case_id": "c1", "status": "crash",
                                    "error": {"type": "SIGSEGV", "message": "", "signature": "SIGSEGV"}})
    assert ok.error.signature == "SIGSEGV"


def test_passed_with_a_failed_comparison_is_refused():
    with pytest.raises(ValidationError) as info:
        CaseResult.model_validate({"case_id": "c1", "status": "passed",
                                   "comparisons": [{"output": "y", "passed": False}]})
    assert "comparisons failed for outputs ['y']" in str(info.value)


def test_mismatch_needs_a_failed_comparison():
    with pytest.raises(ValidationError) as info:
        CaseResult.model_validate({"case_id": "c1", "status": "numerical_mismatch",
                                   "comparisons": [{"output": "y", "passed": True}]})
    assert "status 'numerical_mismatch' but every comparison passed" in _messages(info.value)


def test_negative_timing_is_refused():
    with pytest.raises(ValidationError) as info:
        CaseResult.model_validate({"case_id": "c1", "status": "passed", "timing_us": {"candidate_us": -1.0}})
    assert "timing_us.candidate_us" in _messages(info.value)


def test_run_store_refuses_path_escapes(evidence_root):
    for bad in ("../x", "a/b", "..", "."):
        with pytest.raises(ToolError) as info:
            RunStore(evidence_root, bad)
        assert info.value.code == "invalid_id"
    store = RunStore(evidence_root, "run-1")
    # each refused for its own reason (any error would not show which guard held)
    with pytest.raises(ToolError) as info:
        store.path("..", "other-run", "results.json")
    assert info.value.code == "invalid_id" and "escapes the run directory" in info.value.message
    with pytest.raises(ToolError) as info:
        store.raw_dir("../../etc")
    assert info.value.code == "invalid_id" and "case_id '../../etc' must be a safe slug" in info.value.message
    with pytest.raises(ToolError) as info:
        store.write_artifact("modules/../../x.py", "print(1)")
    assert info.value.code == "invalid_id" and "artifact path component '..'" in info.value.message
    assert not (evidence_root.parent / "x.py").exists()


def test_tool_errors_name_the_field_path(evidence_root, plan_request_dict):
    req = plan_request_dict("run-1")
    req["cases"][0]["inputs"][0]["shape"] = [4, -8]
    req["cases"][1]["id"] = "../graph"
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    msg = info.value.message
    assert info.value.code == "validation_error"
    assert "cases.0.inputs.0.shape.1" in msg and "cases.1.id" in msg
    assert not (evidence_root / "run-1").exists()

    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    with pytest.raises(ToolError) as info:
        record_result("run-1", {"case_id": "eager-f32", "status": "passed", "bogus": 1,
                                "comparisons": [{"output": "out", "passed": True, "max_abs": -1}]},
                      root=evidence_root)
    assert "bogus: unknown field" in info.value.message
    assert "comparisons.0.max_abs" in info.value.message


def test_plan_request_shape_rules():
    with pytest.raises(ValidationError) as info:
        PlanRequest.model_validate({"cases": []})
    assert "needs 'config'" in str(info.value)


@pytest.mark.parametrize("spec, needed", [
    ({"shape": [2**40]}, 2**40),
    ({"shape": [2**20, 2**20]}, 2**40),
    ({"shape": [10**30]}, 10**30),
    # small numel, but strides/offset that need an absurd storage
    ({"shape": [4, 8], "strides": [2**40, 1]}, 3 * 2**40 + 8),
    ({"shape": [4, 8], "storage_offset": 2**50}, 2**50 + 32),
    # a tiny storage broadcast (stride 0) to 2**40 elements: every output of the call would be that large
    ({"shape": [2**40], "strides": [0]}, 2**40),
])
def test_absurdly_large_input_storage_is_refused_at_plan_time(evidence_root, spec, needed):
    request = {
        "config": {"run_id": "huge", "operator": {"name": "add", "candidate": "torch.add", "reference": "torch.add"}},
        "cases": [{"id": "c1", "inputs": [{"name": "x", **spec}]}],
    }
    with pytest.raises(ToolError) as info:
        plan_cases(request, root=evidence_root)
    text = str(info.value)
    assert "cases.0.inputs.0" in text and str(needed) in text and "elements" in text
    assert not (evidence_root / "huge").exists()


def test_large_but_sane_and_zero_size_storage_is_accepted():
    # 2**32 elements (16 GiB of float32) is a real large-model tensor; zero-size and scalars are fine too
    for spec in ({"shape": [2**16, 2**16]}, {"shape": [0, 2**40]}, {"shape": []}):
        InputSpec.model_validate({"name": "x", **spec})


def test_special_positions_and_counts_must_fit_the_shape_at_plan_time(evidence_root):
    def spec(shape, special):
        return {"name": "x", "shape": shape, "values": {"kind": "normal", "specials": [special]}}

    InputSpec.model_validate(spec([4, 8], {"value": "nan", "positions": [[3, 7], [0, 0]]}))
    InputSpec.model_validate(spec([4, 8], {"value": "nan", "count": 32}))
    for bad, words in (({"value": "nan", "positions": [[4, 0]]}, ["[4, 0]", "outside shape [4, 8]"]),
                       ({"value": "inf", "positions": [[1]]}, ["[1]", "outside shape [4, 8]"]),
                       ({"value": "nan", "count": 33}, ["33", "32 elements"])):
        with pytest.raises(ValidationError) as info:
            Case.model_validate(_case(inputs=[spec([4, 8], bad)]))
        text = _messages(info.value)
        assert "inputs.0" in text and all(w in text for w in words), text
    # a star that shrinks the shape under a placed special value is refused when planned, not at run time
    request = {
        "config": {"run_id": "sp", "operator": {"name": "op", "candidate": "m.f", "reference": "m.g"}},
        "stars": [{"base": {"id": "b", "inputs": [spec([4, 8], {"value": "nan", "positions": [[3, 7]]})]},
                   "vary": [{"axis": "shape", "values": [[2, 4]]}]}],
    }
    with pytest.raises(ToolError) as err:
        plan_cases(request, root=evidence_root)
    assert "vary[0]" in err.value.message and "outside shape [2, 4]" in err.value.message


def test_non_finite_numbers_in_free_form_environments_are_refused(evidence_root):
    # results.json and operator-config.json stay standard JSON (no Infinity/NaN tokens)
    plan_cases({"config": {"run_id": "env", "operator": {"name": "add", "candidate": "torch.add",
                                                         "reference": "torch.add"}},
                "cases": [{"id": "c1", "inputs": [{"name": "input", "shape": [2]}]}]}, root=evidence_root)
    with pytest.raises(ToolError) as info:
        record_result("env", {"case_id": "c1", "status": "passed",
                              "environment": {"npu": {"free_gb": float("inf")}}}, root=evidence_root)
    assert "environment" in str(info.value) and "finite" in str(info.value)
    with pytest.raises(ValidationError) as exc:
        OperatorConfig.model_validate({"run_id": "r", "environment": {"tags": [1.0, float("nan")]},
                                       "operator": {"name": "op", "candidate": "m.f", "reference": "m.g"}})
    assert "environment" in _messages(exc.value)
    assert RunStore(evidence_root, "env").read_results() == {}
