"""Judgement (issue 7, and issue 9's tolerance rule): the same-precision
baseline, the tolerance/baseline/both judges, the Ascend benchmark metric
set, refusals the reference shares, binding errors as harness errors.

Real operators throughout (torch's own, and the planted ones in
tests/operators/); the comparison is never mocked.  The in-process tests run
execute_case on the cpu device; the sweep runs one run of many cases through
run_case_remote on one warm local worker.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.run_case_remote import run_case_remote
from tools.runner import compare as compare_mod
from tools.runner.compare import compare_outputs, compare_tensor, precision_metrics
from tools.runner.devices import make_device
from tools.runner.execute import environment, execute_case
from tools.runner.judge import apply_judge
from tools.runner.precision import DEFAULT_TOLERANCES
from tools.runner.routing import LEVEL_THRESHOLDS
from tools.schemas import OperatorConfig, PlanRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_spec import DTYPES, OPS, direct_refusal, sweep_case  # noqa: E402

OPERATORS = Path(__file__).resolve().parent / "operators"


@pytest.fixture(scope="module")
def device():
    dev = make_device("cpu")
    return dev, environment(dev)


def execute(device, candidate: str, reference: str, case: dict, *, judge: str = "tolerance", tolerance=None,
            modules_dir=None, standard=None, **operator) -> dict:
    dev, env = device
    config = {"run_id": "r", "judge": judge, "tolerance": tolerance or {},
              "operator": {"name": "op", "candidate": candidate, "reference": reference, **operator},
              **({"standard": standard} if standard else {})}
    if modules_dir:
        config["operator"]["modules"] = [p.name for p in Path(modules_dir).glob("*.py")]
    return execute_case({"config": config, "case": case, "modules_dir": modules_dir}, dev, env)


def one(name="input", shape=(4, 8), dtype="float32", **values) -> dict:
    return {"name": name, "shape": list(shape), "dtype": dtype, **({"values": values} if values else {})}


def a_case(*inputs, attributes=None, cid="c") -> dict:
    return {"id": cid, "inputs": list(inputs), "attributes": attributes or {}}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("planted")
    (d / "bf16_accumulate.py").write_text((OPERATORS / "bf16_accumulate.py").read_text())
    return str(d)


# --------------------------------------------------------------------------
# 3. the metric set: formulas, chunking, non-finite values
# --------------------------------------------------------------------------


def test_precision_metrics_by_hand() -> None:
    ref = torch.tensor([0.0, 1e-7, 1.0, 2.0, -4.0])
    cand = torch.tensor([0.0, 2e-7, 1.0005, 2.0, -4.01])
    p = compare_tensor("out", cand, ref, atol=1e-5, rtol=1e-5)["precision"]
    eps = torch.finfo(torch.float32).eps
    assert p["small_value"] == 2 ** -20 and p["small_value_count"] == 2
    assert p["small_value_error_ratio"] == 0.5  # 1e-7 error on a small value > 2**-30; the exact zero is fine
    d2, d4 = float(torch.tensor(1.0005) - 1.0), float(torch.tensor(-4.01) + 4.0)
    assert p["max_rel_error"] == pytest.approx(abs(d4) / (4 + eps), rel=1e-6)
    assert p["mean_rel_error"] == pytest.approx((d2 / (1 + eps) + abs(d4) / (4 + eps)) / 3, rel=1e-6)
    assert p["thousandth_ratio"] == 3 / 5 and p["ten_thousandth_ratio"] == 2 / 5
    assert p["error_balance"] == pytest.approx(1 / 5) and p["nonzero_errors"] == 3
    # msprobe's RMSE (algorithm.get_rmse): the two small values masked out, then its scaling
    assert p["rmse"] == pytest.approx(math.sqrt((d2 ** 2 + d4 ** 2) / 5 * (5 / (5 - 2 + 1e-4) + 1e-4)), rel=1e-6)
    assert precision_metrics(cand, ref) == p  # the baseline's pass gives the same figures


def whole_tensor(cand: torch.Tensor, ref: torch.Tensor) -> dict:
    """The formulas of references/behavior.md on whole float64 tensors (the slow, obvious way)."""
    c, r = cand.double(), ref.double()
    # msprobe's masks: the reference cast to the output dtype (float32 for bfloat16, converted first)
    cast = torch.float32 if cand.dtype == torch.bfloat16 else cand.dtype
    g = ref.to(cast).double()
    fin = torch.isfinite(c) & torch.isfinite(g)
    d = torch.where(fin, c - r, torch.zeros((), dtype=torch.float64))
    ar = torch.where(fin, r.abs(), torch.zeros((), dtype=torch.float64))
    eps = 2 ** -8 if cand.dtype == torch.bfloat16 else torch.finfo(ref.dtype).eps
    sv = {torch.bfloat16: 2 ** -10, torch.float16: 2 ** -10}.get(cand.dtype, 2 ** -20)
    small = fin & (ar <= sv)
    normal = fin & ~small
    rel = d.abs() / (ar + eps)
    matched = (torch.isnan(c) & torch.isnan(r)) | ((torch.isinf(c) | torch.isinf(r)) & (c == r))
    within = lambda t: int(((rel < t) & fin).sum() + (matched & ~fin).sum())  # noqa: E731
    return {"small_value_count": int(small.sum()), "max_rel_error": float(rel[normal].max()),
            "mean_rel_error": float(rel[normal].mean()), "thousandth_ratio": within(1e-3) / c.numel(),
            "ten_thousandth_ratio": within(1e-4) / c.numel(),
            "error_balance": abs(int((c > g).sum()) - int((c < g).sum())) / c.numel(),
            "rmse": math.sqrt(float((torch.where(normal, d, 0.0) ** 2).sum()) / c.numel()
                              * (c.numel() / (int(normal.sum()) + 1e-4) + 1e-4)),
            "special_mismatch": int((~fin & ~matched).sum())}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_chunked_metrics_equal_the_whole_tensor_formulas(monkeypatch, dtype) -> None:
    monkeypatch.setattr(compare_mod, "CHUNK", 1000)  # several chunks, some with NaN/Inf, some without
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(3500, generator=g) * 3
    ref[::97] *= 1e-4  # small values
    cand = (ref + 0.01 * torch.randn(3500, generator=g)).to(dtype)
    cand[10], ref[11], cand[12], ref[12] = float("nan"), float("inf"), float("nan"), float("nan")
    cand[2500], ref[2500] = float("-inf"), float("-inf")
    got = precision_metrics(cand, ref)
    want = whole_tensor(cand, ref)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-5), key
    assert got["special_mismatch"] == 2
    full = compare_tensor("out", cand, ref, atol=1e-5, rtol=1e-5, strict_dtype=False)["precision"]
    assert {k: full[k] for k in want} == pytest.approx({k: got[k] for k in want})


# --------------------------------------------------------------------------
# 1 + 2. the baseline and the judges
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_prod_fails_the_tolerance_judge_but_is_within_its_dtype(device, dtype) -> None:
    # torch.prod accumulates float16/bfloat16 products in the low precision: right, yet outside
    # assert_close's defaults.  The baseline judge sees the same error from a correct computation.
    case = a_case(one(shape=(8, 256), dtype=dtype, kind="uniform", low=0.9, high=1.1), attributes={"dim": -1})
    tol = execute(device, "torch.prod", "torch.prod", case)["result"]
    assert tol["status"] == "numerical_mismatch"
    assert tol["comparisons"][0]["verdict"].startswith("tolerance judge: ")
    base = execute(device, "torch.prod", "torch.prod", case, judge="baseline")["result"]
    comp = base["comparisons"][0]
    assert base["status"] == "passed", comp["verdict"]
    assert comp["judge"] == "baseline" and comp["verdict"].startswith(f"baseline judge: msprobe L0: pass, within {dtype} precision (")
    assert comp["ratios"]["max_rel"] == 1.0 and comp["ratios"]["rmse"] == 1.0  # the baseline is the same computation
    assert comp["baseline"]["rmse"] == comp["precision"]["rmse"] > 0
    assert base["timing_us"]["baseline_us"] > 0
    both = execute(device, "torch.prod", "torch.prod", case, judge="both")["result"]
    assert both["status"] == "numerical_mismatch"
    assert both["comparisons"][0]["verdict"].startswith("tolerance judge: ")  # the judge that failed says so


def test_a_planted_bfloat16_accumulation_bug_fails_the_baseline_judge(device, planted) -> None:
    case = a_case(one(name="x", shape=(16, 512), dtype="bfloat16"))
    answer = execute(device, "bf16_accumulate.cand", "bf16_accumulate.ref", case, judge="baseline",
                     modules_dir=planted)
    result = answer["result"]
    comp = result["comparisons"][0]
    print(f"planted bf16 accumulation: {comp['verdict']}")
    assert result["status"] == "numerical_mismatch"
    assert comp["verdict"].startswith("baseline judge: ") and "of a correct bfloat16 computation" in comp["verdict"]
    assert comp["ratios"]["rmse"] > LEVEL_THRESHOLDS["L0"]["rmse"] and comp["ratios"]["mean_rel"] > 2
    # the right dtypes pass, and a named baseline callable is used when given
    ok = execute(device, "bf16_accumulate.cand", "bf16_accumulate.ref", a_case(one(name="x", shape=(16, 512))),
                 judge="baseline", modules_dir=planted)["result"]
    assert ok["status"] == "passed"
    named = execute(device, "bf16_accumulate.cand", "bf16_accumulate.ref", case, judge="baseline",
                    modules_dir=planted, baseline="bf16_accumulate.rounded_once")["result"]["comparisons"][0]
    assert named["baseline"]["rmse"] == pytest.approx(comp["baseline"]["rmse"], rel=0.2)
    assert "of a correct bfloat16 computation" in named["verdict"]


@pytest.fixture(scope="module")
def overflow_ops(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("overflow")
    (d / "half_overflow.py").write_text((OPERATORS / "half_overflow.py").read_text())
    return str(d)


BF16_HALF_MAX = float(torch.finfo(torch.bfloat16).max) / 2


def overflowing(dtype: str) -> tuple[str, dict]:
    """(operator, case) whose float32 truth is finite but beyond ``dtype``'s range at every element:
    a float16 matmul, 64*(-32)*33 = -67584 < -65504; a bfloat16 add, -(max/2) - 2**127 = -3.3962e38,
    which rounds to -inf in bfloat16 (half way to 2**128, to even) while float32 holds it."""
    if dtype == "float16":
        return "half_overflow.matmul", a_case(one(shape=(2, 64), dtype=dtype, kind="full", fill=-32.0),
                                              one(name="other", shape=(64, 3), dtype=dtype, kind="full", fill=33.0))
    return "torch.add", a_case(one(shape=(2, 3), dtype=dtype, kind="full", fill=-BF16_HALF_MAX),
                               one(name="other", shape=(2, 3), dtype=dtype, kind="full", fill=-2.0 ** 127))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("judge", ["tolerance", "baseline", "both"])
def test_a_result_beyond_the_dtypes_range_is_the_infinity_a_correct_computation_gives(device, overflow_ops, dtype,
                                                                                        judge) -> None:
    # the blind scenario: a float16 matmul whose truth is -67584 correctly returns -inf; each judge passes it
    op, case = overflowing(dtype)
    answer = execute(device, op, op, case, judge=judge, modules_dir=overflow_ops)
    result = answer["result"]
    comp = result["comparisons"][0]
    assert result["status"] == "passed", comp["verdict"]
    assert comp["dtype_overflow"] == comp["numel"] == 6 and comp["inf_mismatch"] == 0 and comp["mismatch_count"] == 0
    if judge != "baseline":
        assert f"6 infinite where the truth is beyond {dtype}'s range" in comp["verdict"]
    if judge != "tolerance":
        assert comp["benchmark"]["passed"] and all(c["passed"] for c in comp["checks"])


@pytest.mark.parametrize("standard", ["ulp", "thousandth", "absolute"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_other_standards_count_the_truths_overflow_as_exact(device, overflow_ops, standard, dtype) -> None:
    # msprobe's ULP and thousandth stage 1 would count an infinite error where the candidate is the
    # infinity the truth rounds to (and so would the same-dtype baseline's): a false failure
    op, case = overflowing(dtype)
    for judge in ("baseline", "both"):
        result = execute(device, op, op, case, judge=judge, modules_dir=overflow_ops, standard=standard)["result"]
        comp = result["comparisons"][0]
        assert comp["benchmark"]["standard"] == standard
        assert result["status"] == "passed", comp["verdict"]


@pytest.mark.parametrize("judge", ["tolerance", "baseline", "both"])
def test_infinity_where_the_truth_is_within_range_still_fails(device, overflow_ops, judge) -> None:
    # 64*31*31 = 61504 < 65504: the truth is finite in float16; infinity there is the kernel's fault
    case = a_case(one(shape=(2, 64), dtype="float16", kind="full", fill=31.0),
                  one(name="other", shape=(64, 3), dtype="float16", kind="full", fill=31.0))
    result = execute(device, "half_overflow.inf_when_big", "half_overflow.matmul", case, judge=judge,
                     modules_dir=overflow_ops)["result"]
    comp = result["comparisons"][0]
    assert result["status"] == "numerical_mismatch", comp["verdict"]
    assert comp["inf_mismatch"] == 6 and not comp.get("dtype_overflow") and not comp.get("specials_as_baseline")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_other_infinity_is_not_the_truths_overflow(dtype) -> None:
    ref = torch.tensor([-67584.0 if dtype == "float16" else -3.3962e38, 1.0])
    wrong = torch.tensor([float("inf"), 1.0], dtype=getattr(torch, dtype))
    comp = compare_tensor("out", wrong, ref, atol=1e-5, rtol=1e-3, strict_dtype=False)
    assert comp["mismatch_count"] == 1 and comp["inf_mismatch"] == 1 and "dtype_overflow" not in comp
    right = compare_tensor("out", torch.tensor([-math.inf, 1.0], dtype=wrong.dtype), ref, atol=1e-5, rtol=1e-3, strict_dtype=False)
    assert right["mismatch_count"] == 0 and right["dtype_overflow"] == 1
    # msprobe's precision set keeps its own count (its mask drops the pair; parity with msprobe)
    assert right["precision"]["special_mismatch"] == comp["precision"]["special_mismatch"] == 1


def test_nan_a_correct_same_dtype_computation_has_passes_the_tolerance_half_of_both(device, overflow_ops) -> None:
    # exp(12) > 65504 overflows float16, inf/inf is NaN, where the float32 truth is finite: the same-dtype
    # baseline has the same NaN at the same places
    dtype = "float16"
    case = a_case(one(name="x", shape=(2, 4), dtype=dtype, kind="full", fill=12.0))
    both = execute(device, "half_overflow.naive_softmax", "half_overflow.naive_softmax", case, judge="both",
                   modules_dir=overflow_ops)["result"]
    comp = both["comparisons"][0]
    assert both["status"] == "passed", comp["verdict"]
    assert comp["nan_mismatch"] == 8 and comp["specials_as_baseline"] == 8
    assert f"8 NaN/Inf where a correct {dtype} computation has the same" in comp["verdict"]
    assert execute(device, "half_overflow.naive_softmax", "half_overflow.naive_softmax", case, judge="baseline",
                   modules_dir=overflow_ops)["result"]["status"] == "passed"


@pytest.mark.parametrize("judge", ["tolerance", "baseline", "both"])
def test_float16_nan_as_a_correct_float16_computation_has_passes_every_judge(device, overflow_ops, judge) -> None:
    # the tolerance judge runs the same-dtype baseline only for a NaN/Inf pattern mismatch, and accepts its NaN
    case = a_case(one(name="x", shape=(2, 4), dtype="float16", kind="full", fill=12.0))
    result = execute(device, "half_overflow.naive_softmax", "half_overflow.naive_softmax", case, judge=judge,
                     modules_dir=overflow_ops)["result"]
    comp = result["comparisons"][0]
    assert result["status"] == "passed", comp["verdict"]
    assert comp["nan_mismatch"] == 8 and result["timing_us"]["baseline_us"] > 0
    if judge != "baseline":
        assert comp["specials_as_baseline"] == 8
        assert "8 NaN/Inf where a correct float16 computation has the same" in comp["verdict"]
    # no pattern mismatch, no baseline run under the tolerance judge
    calm = execute(device, "half_overflow.naive_softmax", "half_overflow.naive_softmax",
                   a_case(one(name="x", shape=(2, 4), dtype="float16", kind="full", fill=3.0)), judge=judge,
                   modules_dir=overflow_ops)["result"]
    assert calm["status"] == "passed" and ("baseline_us" in calm["timing_us"]) is (judge != "tolerance")


def test_a_baseline_that_cannot_run_leaves_the_tolerance_judge_as_it_was(device, overflow_ops) -> None:
    # the tolerance judge needs no baseline: one that fails is said, and the NaN is judged against the truth alone
    case = a_case(one(name="x", shape=(2, 4), dtype="float16", kind="full", fill=12.0))
    answer = execute(device, "half_overflow.naive_softmax", "half_overflow.naive_softmax", case,
                     modules_dir=overflow_ops, baseline="torch.linalg.inv")
    assert answer["outcome"] == "result" and answer["result"]["status"] == "numerical_mismatch"
    assert "not run" in answer["result"]["environment"]["specials_baseline"]
    assert not answer["result"]["comparisons"][0].get("specials_as_baseline")


@pytest.mark.parametrize("judge", ["tolerance", "baseline", "both"])
def test_float16_nan_where_a_correct_computation_has_none_fails_every_judge(device, overflow_ops, judge) -> None:
    # exp(5) is far inside float16's range: the same-dtype baseline is finite, so the NaN is the kernel's
    case = a_case(one(name="x", shape=(2, 4), dtype="float16", kind="full", fill=5.0))
    result = execute(device, "half_overflow.nan_when_big", "half_overflow.naive_softmax", case, judge=judge,
                     modules_dir=overflow_ops)["result"]
    comp = result["comparisons"][0]
    assert result["status"] == "numerical_mismatch", comp["verdict"]
    assert comp["nan_mismatch"] == 8 and not comp.get("specials_as_baseline")
    assert "NaN" in comp["verdict"]


@pytest.mark.parametrize("judge", ["tolerance", "baseline", "both"])
def test_bfloat16_truth_widens_to_float64_where_the_float32_reference_overflows(device, overflow_ops, judge) -> None:
    # (1e20)^2 overflows float32 (bfloat16's range too): the float32 norm is Inf, the right kernel's finite
    # 2.82e20 is the float64 truth; the case says its reference ran in float64
    case = a_case(one(name="x", shape=(2, 8), dtype="bfloat16", kind="full", fill=1e20))
    answer = execute(device, "half_overflow.scaled_norm", "half_overflow.norm", case, judge=judge,
                     modules_dir=overflow_ops, reference_dtype="auto")
    result, meta = answer["result"], answer["input_metadata"]
    comp = result["comparisons"][0]
    assert result["status"] == "passed", comp["verdict"]
    assert comp["inf_mismatch"] == comp["nan_mismatch"] == 0
    assert meta["reference_dtype"] == "float64" and meta["inputs"][0]["reference_dtype"] == "float64"
    assert meta["reference_widened"]["elements"] == 2 and meta["reference_widened"]["from"] == "float32"
    # the reference's backward runs again in float64 too: the right kernel's gradient x/|x| passes
    graded = execute(device, "half_overflow.scaled_norm", "half_overflow.norm", dict(case, grad_inputs=["x"]),
                     judge=judge, modules_dir=overflow_ops, reference_dtype="auto")["result"]
    assert graded["status"] == "passed" and [c["output"] for c in graded["comparisons"]] == ["out", "grad.x"]
    # a finite but wrong kernel there fails against the float64 truth
    wrong = execute(device, "half_overflow.max_for_norm", "half_overflow.norm", case, judge=judge,
                    modules_dir=overflow_ops, reference_dtype="auto")
    assert wrong["result"]["status"] == "numerical_mismatch", wrong["result"]["comparisons"][0]["verdict"]
    assert wrong["input_metadata"]["reference_dtype"] == "float64"
    # within float32's range nothing widens
    calm = execute(device, "half_overflow.scaled_norm", "half_overflow.norm",
                   a_case(one(name="x", shape=(2, 8), dtype="bfloat16", kind="full", fill=1e10)), judge=judge,
                   modules_dir=overflow_ops, reference_dtype="auto")
    assert calm["result"]["status"] == "passed" and calm["input_metadata"]["reference_dtype"] == "auto: float32"
    assert "reference_widened" not in calm["input_metadata"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_tolerance_half_of_both_accepts_only_the_baselines_own_nan_and_inf(dtype) -> None:
    # bfloat16 has float32's range, so no bfloat16 kernel overflows where float32 does not: the rule on
    # tensors - NaN and -inf where the same-dtype baseline has them, an extra NaN where it has none
    t = getattr(torch, dtype)
    ref = torch.tensor([2.0, 3.0, 1.0, 5.0])
    base = torch.tensor([math.nan, -math.inf, 1.0, 5.0], dtype=t)
    for cand, expect, shared in ((base.clone(), True, 2),
                                 (torch.tensor([math.nan, -math.inf, math.nan, 5.0], dtype=t), False, 2),
                                 (torch.tensor([math.nan, math.inf, 1.0, 5.0], dtype=t), False, 1)):
        comps = compare_outputs(cand, ref, names=None, tolerance={}, strict_dtype=False)
        apply_judge(comps, "both", baseline=base, reference=ref, candidate=cand)
        assert comps[0]["passed"] is expect, comps[0]["verdict"]
        assert comps[0]["specials_as_baseline"] == shared


def test_a_failing_baseline_is_a_harness_error(device) -> None:
    # the reference takes float32 upcast inputs; the same call in float16 on CPU is refused by a named baseline
    answer = execute(device, "torch.exp", "torch.exp", a_case(one(dtype="float16")), judge="baseline",
                     baseline="torch.linalg.inv")
    assert answer["outcome"] == "harness_error" and answer["harness_error"]["where"] == "baseline"
    assert "name another operator.baseline or use judge 'tolerance'" in answer["harness_error"]["message"]


# --------------------------------------------------------------------------
# 4. refusals the reference shares; 5. binding errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize("op,dtype,attributes", [
    ("torch.mean", "int32", {}),
    ("torch.std", "int64", {}),
    ("torch.nn.functional.hardtanh", "uint8", {"min_val": -1.0, "max_val": 1.0}),
])
def test_a_refusal_the_reference_shares_is_unsupported(device, op, dtype, attributes) -> None:
    result = execute(device, op, op, a_case(one(dtype=dtype), attributes=attributes))["result"]
    assert result["status"] == "unsupported", result["error"]
    assert result["error"]["matched_rule"].startswith(f"refused by the reference too: {op} on CPU")
    assert "Int" not in result["error"]["signature"] and "Byte" not in result["error"]["signature"]


def test_a_refusal_only_the_candidate_makes_stays_a_crash(device) -> None:
    # torch.linalg.inv refuses a non-square input; the reference (torch.exp) takes it
    result = execute(device, "torch.linalg.inv", "torch.exp", a_case(one(name="A", shape=(3, 4))))["result"]
    assert result["status"] == "crash" and result["error"].get("matched_rule") is None


def test_binding_errors_are_harness_errors_that_say_what_to_change(device) -> None:
    # a Python callable: inspect.signature refuses the keyword before anything runs
    answer = execute(device, "torch.nn.functional.silu", "torch.nn.functional.silu", a_case(one(name="x")))
    err = answer["harness_error"]
    assert answer["outcome"] == "harness_error" and err["where"] == "resolve" and err["type"] == "BindingError"
    assert "has no parameter named 'x'" in err["message"] and "operator.call" in err["message"]
    assert "silu(input" in err["message"]  # the signature it checked against
    # a builtin without a signature: its own argument parser refuses the call
    answer = execute(device, "torch.add", "torch.add", a_case(one(name="x"), one(name="y")))
    assert answer["outcome"] == "harness_error" and answer["harness_error"]["where"] == "resolve"
    assert "operator.call" in answer["harness_error"]["message"]
    # positional order that fits: passes
    fixed = execute(device, "torch.nn.functional.silu", "torch.nn.functional.silu", a_case(one(name="x")),
                    call={"style": "positional", "order": ["x"]})
    assert fixed["result"]["status"] == "passed"


# --------------------------------------------------------------------------
# issue 9: atol and rtol together; one default table
# --------------------------------------------------------------------------


def test_a_half_given_tolerance_is_refused_by_name() -> None:
    base = {"run_id": "t", "operator": {"name": "x", "candidate": "torch.add", "reference": "torch.add"}}
    for tol, where, missing in (({"per_dtype": {"bfloat16": {"atol": 0.02}}}, "tolerance.per_dtype.bfloat16", "rtol"),
                                ({"rtol": 1e-3}, "tolerance", "atol")):
        with pytest.raises(Exception) as info:
            OperatorConfig.model_validate(dict(base, tolerance=tol))
        text = str(info.value)
        assert where in text and f"{missing} is missing" in text and "together" in text
    with pytest.raises(Exception, match="neither atol nor rtol"):
        OperatorConfig.model_validate(dict(base, tolerance={"per_dtype": {"float16": {}}}))


def test_the_default_table_is_torchs_and_the_runner_and_schema_agree() -> None:
    from torch.testing._comparison import _DTYPE_PRECISIONS

    for dtype, (rtol, atol) in DEFAULT_TOLERANCES.items():
        assert _DTYPE_PRECISIONS[getattr(torch, dtype)] == (rtol, atol), dtype
    config = OperatorConfig.model_validate({"run_id": "t", "operator": {"name": "x", "candidate": "a.b",
                                                                        "reference": "a.b"},
                                            "tolerance": {"per_dtype": {"float16": {"atol": 1e-2, "rtol": 1e-2}}}})
    for dtype in ("float16", "bfloat16", "float32", "float64", "int32"):
        atol, rtol, _ = config.tolerance.for_dtype(dtype)
        assert compare_mod.tolerance_for(config.tolerance.model_dump(), getattr(torch, dtype)) == (atol, rtol)
    assert config.tolerance.for_dtype("bfloat16") == (1e-5, 1.6e-2, "default")
    assert config.tolerance.for_dtype("float16") == (1e-2, 1e-2, "per_dtype")


def test_the_plan_warns_when_the_default_table_decides(tmp_path: Path) -> None:
    req = {"config": {"run_id": "w", "operator": {"name": "x", "candidate": "torch.add", "reference": "torch.add"},
                      "tolerance": {"per_dtype": {"float16": {"atol": 1e-3, "rtol": 1e-3}}}},
           "cases": [a_case(one(dtype=d), cid=f"c-{d}") for d in ("float16", "bfloat16", "int8")]}
    PlanRequest.model_validate(req)
    resp = plan_cases(req, root=tmp_path)
    tol = [w for w in resp.warnings if w.startswith("tolerance:")]
    assert len(tol) == 1 and "bfloat16" in tol[0] and "atol 1e-05, rtol 0.016" in tol[0]
    assert "_DTYPE_PRECISIONS" in tol[0]


# --------------------------------------------------------------------------
# the sweep: many PyTorch operators x every dtype, one run, one warm local worker
# --------------------------------------------------------------------------


def test_sweep_refusals_are_unsupported_and_right_operators_pass_the_baseline_judge(loop, tmp_path: Path) -> None:
    module = (OPERATORS / "sweep_dispatch.py").read_text()
    # a few runs of ~70 cases on the same warm worker (recording is linear in a run's size per case)
    groups = [[sweep_case(op, d) for op in OPS for d in pair] for pair in zip(DTYPES[::2], DTYPES[1::2])]
    groups.append([sweep_case(op, d, precise=True) for op in OPS for d in ("float16", "bfloat16")])
    cases, got = [c for g in groups for c in g], {}
    for i, group in enumerate(groups):
        plan_cases({"config": {"run_id": f"sweep-{i}", "judge": "baseline",
                               "operator": {"name": "sweep", "candidate": "sweep_dispatch.call",
                                            "reference": "sweep_dispatch.reference",
                                            "modules": ["sweep_dispatch.py"]}},
                    "cases": group, "module_sources": {"sweep_dispatch.py": module}}, root=tmp_path)
        resp = loop.run_until_complete(run_case_remote(f"sweep-{i}", root=tmp_path))
        assert resp.pending == []
        got.update({o.case_id: o for o in resp.outcomes})
    assert len(got) == len(cases)
    refused = {c["id"]: direct_refusal(_op_of(c), _dtype_of(c)) for c in cases}
    wrong = {cid: (got[cid].state, refused[cid], got[cid].summary) for cid in got
             if got[cid].state != ("unsupported" if refused[cid] else "passed")}
    n_refused = sum(1 for r in refused.values() if r)
    print(f"sweep: {len(cases)} cases, {n_refused} refused by PyTorch on CPU, agreement "
          f"{len(cases) - len(wrong)}/{len(cases)}")
    assert wrong == {}
    assert n_refused >= 40  # the sweep does exercise refusals (int std/mean/softmax..., bool arithmetic...)
    results = {k: v for i in range(len(groups)) for k, v in RunStore(tmp_path, f"sweep-{i}").read_results().items()}
    assert all(r.error.matched_rule for r in results.values() if r.status == "unsupported")
    from tools.analyze_failures import analyze_failures

    for i in range(len(groups)):
        analysis = analyze_failures(f"sweep-{i}", root=tmp_path)
        assert analysis.verdict in ("inconclusive", "passed") and analysis.crash_groups == {}  # never diagnosed
    # one refusal kind, one signature whatever dtype it names
    sigs = {r.error.signature for r in results.values() if r.status == "unsupported"}
    assert not any(word in s for s in sigs for word in ("'Int'", "'Long'", "'Byte'", "'Char'", "'Short'", "'Bool'"))
    assert len(sigs) < n_refused / 2


def _op_of(case: dict) -> str:
    dotted = case["attributes"]["op"]
    return next(name for name, spec in OPS.items() if spec[0] == dotted and case["id"].startswith(
        name.replace("_", "-") + "-"))


def _dtype_of(case: dict) -> str:
    return next(i["dtype"] for i in case["inputs"] if i["name"] != "condition")


def test_the_planted_bug_fails_and_binding_stays_pending_through_the_local_transport(loop, tmp_path: Path) -> None:
    plan_cases({"config": {"run_id": "acc", "judge": "baseline",
                           "operator": {"name": "acc", "candidate": "bf16_accumulate.cand",
                                        "reference": "bf16_accumulate.ref", "modules": ["bf16_accumulate.py"]}},
                "cases": [a_case(one(name="x", shape=(16, 512), dtype=d), cid=f"acc-{d}") for d in ("bfloat16", "float32")],
                "module_sources": {"bf16_accumulate.py": (OPERATORS / "bf16_accumulate.py").read_text()}},
               root=tmp_path)
    resp = loop.run_until_complete(run_case_remote("acc", root=tmp_path))
    got = {o.case_id: o for o in resp.outcomes}
    print(f"planted bug through the local transport: {got['acc-bfloat16'].summary}")
    assert got["acc-bfloat16"].state == "numerical_mismatch" and got["acc-float32"].state == "passed"
    assert "of a correct bfloat16 computation" in got["acc-bfloat16"].summary
    assert "baseline judge: msprobe L0: pass, within float32 precision" in got["acc-float32"].summary
    from tools.analyze_failures import analyze_failures

    analysis = analyze_failures("acc", root=tmp_path)
    assert "of a correct bfloat16 computation" in analysis.failures[0].reason
    report = (tmp_path / "acc" / "report.md").read_text()
    assert "judge: baseline" in report and "within float32 precision (" in report

    plan_cases({"config": {"run_id": "bind", "operator": {"name": "silu", "candidate": "torch.nn.functional.silu",
                                                          "reference": "torch.nn.functional.silu"}},
                "cases": [a_case(one(name="x"), cid="silu-x")]}, root=tmp_path)
    resp = loop.run_until_complete(run_case_remote("bind", root=tmp_path))
    out = resp.outcomes[0]
    assert out.state == "pending" and not out.recorded and resp.pending == ["silu-x"]
    assert "operator.call" in out.error and "has no parameter named 'x'" in out.error
    assert RunStore(tmp_path, "bind").read_results() == {}


@pytest.mark.parametrize("judge", ["tolerance", "both", "baseline"])
def test_the_plan_warns_of_a_tolerance_below_a_dtypes_resolution(tmp_path: Path, judge: str) -> None:
    # the blind plan: atol = rtol = 1e-5 with float16 and bfloat16 cases (fp32-level on half precision)
    req = {"config": {"run_id": f"tight-{judge}", "judge": judge, "tolerance": {"atol": 1e-5, "rtol": 1e-5},
                      "operator": {"name": "x", "candidate": "torch.add", "reference": "torch.add"}},
           "cases": [a_case(one(dtype=d), cid=f"c-{d}") for d in ("float16", "bfloat16", "float32", "int8")]}
    tight = [w for w in plan_cases(req, root=tmp_path).warnings if "resolution" in w]
    if judge == "baseline":  # the tolerance decides nothing
        assert tight == []
        return
    assert len(tight) == 2, tight
    f16, bf16 = sorted(tight, key=lambda w: "bfloat16" in w)
    assert "below float16's resolution (eps 0.000976562)" in f16 and "atol 1e-05, rtol 0.001" in f16
    assert "below bfloat16's resolution (eps 0.0078125)" in bf16 and "atol 1e-05, rtol 0.016" in bf16
    assert all("torch.testing" in w for w in tight)
    # a per_dtype pair at the dtype's resolution or the default table: no such warning
    req["config"]["run_id"] = f"loose-{judge}"
    req["config"]["tolerance"]["per_dtype"] = {"float16": {"atol": 1e-3, "rtol": 1e-3},
                                               "bfloat16": {"atol": 1e-2, "rtol": 1.6e-2}}
    assert not [w for w in plan_cases(req, root=tmp_path).warnings if "resolution" in w]


def test_the_judges_agree_with_a_correct_half_precision_computation_through_the_local_transport(loop,
                                                                                                tmp_path: Path) -> None:
    # float16: NaN as a correct float16 computation has (right) or where it has none (wrong); bfloat16: a finite
    # norm where the float32 truth overflowed (right, against the float64 truth) or a finite wrong one
    import json

    f16 = {"name": "x", "shape": [2, 4], "dtype": "float16"}
    bf16 = {"name": "x", "shape": [2, 8], "dtype": "bfloat16", "values": {"kind": "full", "fill": 1e20}}
    cases = [{"id": "f16-right", "inputs": [dict(f16, values={"kind": "full", "fill": 12.0})],
              "attributes": {"which": "naive_softmax"}},
             {"id": "f16-wrong", "inputs": [dict(f16, values={"kind": "full", "fill": 5.0})],
              "attributes": {"which": "nan_when_big"}},
             {"id": "bf16-right", "inputs": [bf16], "attributes": {"which": "scaled_norm"}},
             {"id": "bf16-wrong", "inputs": [bf16], "attributes": {"which": "max_for_norm"}}]
    for judge in ("tolerance", "baseline", "both"):
        run_id = f"half-{judge}"
        plan_cases({"config": {"run_id": run_id, "judge": judge,
                               "operator": {"name": "half", "candidate": "half_overflow.kernel",
                                            "reference": "half_overflow.truth", "modules": ["half_overflow.py"],
                                            "reference_dtype": "auto"}},
                    "cases": cases, "module_sources": {"half_overflow.py": (OPERATORS / "half_overflow.py").read_text()}},
                   root=tmp_path)
        got = {o.case_id: o for o in loop.run_until_complete(run_case_remote(run_id, root=tmp_path)).outcomes}
        states = {cid: o.state for cid, o in got.items()}
        assert states == {"f16-right": "passed", "f16-wrong": "numerical_mismatch", "bf16-right": "passed",
                          "bf16-wrong": "numerical_mismatch"}, {cid: o.summary for cid, o in got.items()}
        store = RunStore(tmp_path, run_id)
        meta = {cid: json.loads(store.input_meta_path(cid).read_text()) for cid in got}
        assert meta["bf16-right"]["reference_dtype"] == "float64" and meta["bf16-right"]["reference_widened"]
        assert meta["f16-right"]["reference_dtype"] == "auto: float32"
