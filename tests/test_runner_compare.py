"""The comparison engine on tensors whose right answers are known."""

from __future__ import annotations

import math

import pytest
import torch

from tools.runner import compare
from tools.runner.compare import compare_outputs as measure_outputs
from tools.runner.compare import compare_tensor as measure_tensor
from tools.runner.judge import apply_judge


def compare_tensor(*args, **kwargs) -> dict:
    """Measured (compare.py), then decided by the tolerance judge (judge.py): ``passed`` is set there alone."""
    return apply_judge([measure_tensor(*args, **kwargs)], "tolerance")[0]


def compare_outputs(*args, **kwargs) -> list[dict]:
    return apply_judge(measure_outputs(*args, **kwargs), "tolerance")


def test_the_engine_measures_and_the_judge_alone_decides() -> None:
    ref = torch.tensor([1.0, 2.0, 3.0])
    measured = measure_tensor("y", ref + 1, ref, atol=1e-5, rtol=1e-5)
    assert "passed" not in measured and measured["mismatch_count"] == 3
    assert not any("passed" in c for c in measure_outputs((ref, ref), (ref,), names=None, tolerance={},
                                                          strict_dtype=True))
    assert not apply_judge([measured], "tolerance")[0]["passed"]


def test_metrics_of_a_known_difference() -> None:
    ref = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    cand = ref.clone()
    cand[1, 2] = 6.5  # the only mismatch: |d| = 0.5
    cand[0, 0] = 1.0 + 1e-7  # within tolerance
    c = compare_tensor("y", cand, ref, atol=1e-5, rtol=1e-5)
    assert not c["passed"] and c["mismatch_count"] == 1 and c["mismatch_ratio"] == pytest.approx(1 / 6)
    assert c["max_abs"] == pytest.approx(0.5) and c["worst_index"] == [1, 2]
    assert c["worst_candidate"] == 6.5 and c["worst_reference"] == 6.0
    assert c["first_mismatch_index"] == [1, 2]
    assert c["max_rel"] == pytest.approx(0.5 / 6)
    assert c["mean_abs"] == pytest.approx((0.5 + 1e-7) / 6, rel=1e-3)
    assert c["rmse"] == pytest.approx(math.sqrt(0.25 / 6), rel=1e-4)
    assert c["error_balance"] > 0  # the candidate is high
    assert 0.99 < c["cosine"] < 1.0
    assert c["nan_mismatch"] == 0 and c["inf_mismatch"] == 0


def test_identical_outputs_pass_with_zero_error() -> None:
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    c = compare_tensor("y", x, x.clone(), atol=0.0, rtol=0.0)
    assert c["passed"] and c["max_abs"] == 0 and c["max_ulp"] == 0 and c["cosine"] == pytest.approx(1.0)
    assert "worst_index" not in c and "first_mismatch_index" not in c


def test_max_ulp_counts_units_in_the_candidates_last_place() -> None:
    ref = torch.tensor([1.0, 3.0, 1000.0])
    one_ulp = torch.nextafter(ref, torch.full_like(ref, math.inf))
    c = compare_tensor("y", one_ulp, ref, atol=0.0, rtol=0.0)
    assert c["max_ulp"] == pytest.approx(1.0)
    # a bfloat16 candidate: ULPs of bfloat16 (eps 2**-7), measured against the float32 reference
    ref = torch.tensor([1.0, 2.0])
    cand = torch.tensor([1.0 + 2 ** -7, 2.0], dtype=torch.bfloat16)
    c = compare_tensor("y", cand, ref, atol=0.0, rtol=0.0, strict_dtype=False)
    assert c["max_ulp"] == pytest.approx(1.0)
    # near zero: the subnormal spacing of float16
    tiny = torch.finfo(torch.float16).tiny * torch.finfo(torch.float16).eps
    c = compare_tensor("y", torch.tensor([tiny * 3], dtype=torch.float16), torch.tensor([0.0]), atol=0.0, rtol=0.0,
                       strict_dtype=False)
    assert c["max_ulp"] == pytest.approx(3.0)


def test_max_rel_is_guarded_by_atol_near_zero() -> None:
    c = compare_tensor("y", torch.tensor([1e-3]), torch.tensor([1e-9]), atol=1e-2, rtol=0.0)
    assert c["max_rel"] == pytest.approx(1e-3 / 1e-2, rel=1e-4)  # not 1e6
    assert c["passed"]


def test_nan_and_inf_patterns() -> None:
    ref = torch.tensor([float("nan"), 1.0, float("inf"), float("-inf"), 2.0, float("nan")])
    cand = torch.tensor([float("nan"), float("nan"), float("inf"), float("inf"), 2.0, 0.0])
    c = compare_tensor("y", cand, ref, atol=1e-5, rtol=1e-5)
    assert c["nan_mismatch"] == 2  # positions 1 and 5
    assert c["inf_mismatch"] == 1  # position 3 (+inf vs -inf); position 2 matches
    assert c["mismatch_count"] == 3 and not c["passed"]
    assert c["first_mismatch_index"] == [1] and c["first_candidate"] == "nan" and c["first_reference"] == 1.0
    assert c["max_abs"] == 0.0  # the finite pairs agree


def test_integer_and_bool_outputs_compare_exactly() -> None:
    ref = torch.arange(10, dtype=torch.int32)
    cand = ref.clone()
    cand[7] = 9
    c = compare_tensor("idx", cand, ref, atol=100.0, rtol=100.0)  # tolerance does not apply
    assert not c["passed"] and c["mismatch_count"] == 1 and c["first_mismatch_index"] == [7]
    assert c["max_abs"] == 2.0 and c["worst_candidate"] == 9 and c["worst_reference"] == 7
    m = torch.tensor([True, False, True])
    assert compare_tensor("mask", m, m.clone(), atol=0, rtol=0)["passed"]
    assert not compare_tensor("mask", ~m, m, atol=0, rtol=0)["passed"]


def test_contract_mismatches_are_their_own_reason() -> None:
    c = compare_tensor("y", torch.zeros(4), torch.zeros(4, 1), atol=1, rtol=1)
    assert not c["passed"] and "shape [4]" in c["contract_mismatch"] and "max_abs" not in c
    c = compare_tensor("y", torch.zeros(4, dtype=torch.int64), torch.zeros(4), atol=1, rtol=1)
    assert not c["passed"] and "integer" in c["contract_mismatch"] and "floating" in c["contract_mismatch"]
    c = compare_tensor("y", torch.zeros(4, dtype=torch.float16), torch.zeros(4), atol=1, rtol=1, strict_dtype=True)
    assert not c["passed"] and "float16" in c["contract_mismatch"]
    assert compare_tensor("y", torch.zeros(4, dtype=torch.float16), torch.zeros(4), atol=1, rtol=1,
                          strict_dtype=False)["passed"]


def test_outputs_by_name_tuples_and_dicts() -> None:
    a, b = torch.ones(3), torch.zeros(2)
    comps = compare_outputs((a, b), (a, b + 1), names=["y", "rstd"], tolerance={"atol": 1e-5, "rtol": 1e-5},
                            strict_dtype=True)
    assert [(c["output"], c["passed"]) for c in comps] == [("y", True), ("rstd", False)]
    comps = compare_outputs((a, b), (a, b), names=None, tolerance={}, strict_dtype=True)
    assert [c["output"] for c in comps] == ["out0", "out1"]
    comps = compare_outputs({"q": a}, {"q": a, "k": b}, names=None, tolerance={}, strict_dtype=True)
    assert {c["output"]: c["passed"] for c in comps} == {"q": True, "k": False}
    assert "did not return" in next(c for c in comps if c["output"] == "k")["contract_mismatch"]


def test_per_dtype_tolerance_is_the_candidates() -> None:
    tol = {"atol": 0.0, "rtol": 0.0, "per_dtype": {"bfloat16": {"atol": 0.1, "rtol": 0.0}}}
    comps = compare_outputs(torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([1.05]), names=None,
                            tolerance=tol, strict_dtype=False)
    assert comps[0]["passed"] and comps[0]["atol"] == 0.1


def test_chunked_passes_find_the_first_and_worst_mismatch_across_chunks(monkeypatch) -> None:
    monkeypatch.setattr(compare, "CHUNK", 64)
    ref = torch.zeros(10, 100)
    cand = ref.clone()
    cand[3, 50] = 0.5  # flat 350: the 6th chunk
    cand[7, 1] = 2.0  # flat 701: worst
    cand[9, 99] = float("nan")  # a non-finite chunk takes the careful path
    c = compare_tensor("y", cand, ref, atol=1e-3, rtol=0.0)
    assert c["first_mismatch_index"] == [3, 50] and c["worst_index"] == [7, 1]
    assert c["mismatch_count"] == 3 and c["nan_mismatch"] == 1 and c["max_abs"] == 2.0
    assert c["mean_abs"] == pytest.approx(2.5 / 999)


def test_non_contiguous_outputs_compare_by_logical_index() -> None:
    ref = torch.arange(12.0).reshape(3, 4)
    cand = ref.t().contiguous().t()  # column-major copy, same values
    assert not cand.is_contiguous()
    cand[2, 1] += 1
    c = compare_tensor("y", cand, ref, atol=1e-5, rtol=0.0)
    assert c["worst_index"] == [2, 1] and c["mismatch_count"] == 1


def test_float32_overflow_of_differences_and_squares_stays_measured() -> None:
    big = torch.finfo(torch.float32).max
    # Finite values whose difference (and squares) overflow float32.
    cand = torch.tensor([big, -big, 1.0, 0.0])
    ref = torch.tensor([-big, big, 1.0, 0.0])
    comp = compare_tensor("o", cand, ref, atol=1e-5, rtol=1e-5)
    assert comp["mismatch_count"] == 2 and not comp["passed"]
    assert comp["cosine"] == pytest.approx(-1.0)  # opposite directions, not a silent 1.0
    assert comp["max_abs"] == pytest.approx(2.0 * big) and comp["worst_index"] == [0]
    assert comp["rmse"] == pytest.approx(2.0 * big / math.sqrt(2.0))
    # Large but matching values: everything finite, cosine 1, passes.
    same = torch.tensor([3e38, 2e20, 1.0])
    ok = compare_tensor("o", same, same.clone(), atol=1e-5, rtol=1e-5)
    assert ok["passed"] and ok["cosine"] == pytest.approx(1.0) and ok["max_abs"] == 0.0


def test_int64_differences_do_not_wrap() -> None:
    cand = torch.tensor([2**62, -2**62, 5], dtype=torch.int64)
    ref = torch.tensor([-2**62, 2**62, 5], dtype=torch.int64)
    comp = compare_tensor("o", cand, ref, atol=0.0, rtol=0.0)
    assert comp["mismatch_count"] == 2 and comp["max_abs"] == pytest.approx(2.0**63)
    assert comp["worst_index"] == [0] and comp["worst_candidate"] == 2**62


def test_nested_outputs_are_compared_element_by_element() -> None:
    # an LSTM-style (out, (h, c)): the same structure on both sides is compared, not called a contract mismatch
    out, h, c = torch.ones(2, 3), torch.zeros(3), torch.full((3,), 2.0)
    comps = compare_outputs((out, (h, c)), (out, (h, c + 1)), names=["y", "state"], tolerance={},
                            strict_dtype=True)
    assert {x["output"]: x["passed"] for x in comps} == {"y": True, "state.0": True, "state.1": False}
    assert not any(x.get("contract_mismatch") for x in comps)
    comps = compare_outputs({"a": [h, {"b": c}]}, {"a": [h, {"b": c}]}, names=None, tolerance={}, strict_dtype=True)
    assert {x["output"]: x["passed"] for x in comps} == {"a.0": True, "a.1.b": True}
    # a structure that differs is still a contract mismatch
    comps = compare_outputs((out, h), (out, (h, c)), names=None, tolerance={}, strict_dtype=True)
    assert {x["output"]: x["passed"] for x in comps} == {"out0": True, "out1.0": False, "out1.1": False, "out1": False}


def test_complex_outputs_compare_their_real_and_imaginary_parts() -> None:
    ref = torch.fft.rfft(torch.arange(8.0))
    comp = compare_tensor("y", ref.clone(), ref, atol=1e-5, rtol=1e-5)
    assert comp["passed"] and not comp.get("contract_mismatch") and comp["actual_dtype"] == "complex64"
    assert comp["expected_shape"] == [5]
    bad = ref.clone()
    bad[2] += 1j
    comp = compare_tensor("y", bad, ref, atol=1e-5, rtol=1e-5)
    assert not comp["passed"] and comp["mismatch_count"] == 1 and comp["first_mismatch_index"] == [2, 1]
    comp = compare_tensor("y", ref.real.contiguous(), ref, atol=1e-5, rtol=1e-5)
    assert "complex" in comp["contract_mismatch"]
