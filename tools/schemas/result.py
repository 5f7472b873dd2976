"""A case's result: one comparison per output (metrics, verdict), the error of
a crash or an unsupported combination, where the raw evidence is, timing."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from .base import ElementValue, FiniteFloat, FreeJson, NonNegFinite, Slug, Status, Strict, finite_ratio
from .consistency import ConsistencyEvidence

# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


def _element(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("non-finite element values are written as 'nan', 'inf' or '-inf'")
    return value


Element = Annotated[ElementValue, AfterValidator(_element)]


class PrecisionMetrics(Strict):
    """Ascend accuracy checker's benchmark metric set; formulas in references/behavior.md."""

    count: Annotated[int, Field(ge=0)] = Field(description="Elements compared.")
    small_value: NonNegFinite = Field(description="Small-value threshold of the output dtype.")
    small_value_count: Annotated[int, Field(ge=0)] = Field(description="Finite elements with |ref| <= small_value.")
    small_value_error_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Share of small values whose absolute error exceeds the dtype's small-value atol."
    )
    max_rel_error: NonNegFinite | None = Field(description="Max |d|/(|ref|+eps) over the other finite elements.")
    mean_rel_error: NonNegFinite | None = Field(description="Mean |d|/(|ref|+eps) over the other finite elements.")
    rmse: NonNegFinite | None = Field(
        description="msprobe's RMSE: over the same elements, scaled sqrt(S/N*(N/(N-M+1e-4)+1e-4))."
    )
    error_balance: Annotated[float, Field(ge=0, le=1)] = Field(
        description="|#(x>g) - #(x<g)| / count, g the reference rounded to the output dtype (msprobe's EB)."
    )
    nonzero_errors: Annotated[int, Field(ge=0)] = Field(description="Elements with x != g (g rounded as above).")
    thousandth_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Share of elements with |d|/(|ref|+eps) < 1e-3."
    )
    ten_thousandth_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Share of elements with |d|/(|ref|+eps) < 1e-4."
    )
    special_mismatch: Annotated[int, Field(ge=0)] = Field(description="NaN/Inf pattern mismatches.")
    sign_balance: Annotated[float, Field(ge=-1, le=1)] | None = Field(
        None, description="(#(d>0) - #(d<0)) / count: the signed error balance."
    )
    magnitude_balance: Annotated[float, Field(ge=-1, le=1)] | None = Field(
        None, description="(#(|cand|>|ref|) - #(|cand|<|ref|)) / count: -1 is every error toward zero."
    )


StageNumber = FiniteFloat | int | Literal["nan", "inf", "-inf"] | None


class StandardJudgement(Strict):
    """What msprobe 26.2's standard decides on this output (references/behavior.md, "Standards")."""

    standard: Literal["benchmark", "ulp", "binary", "thousandth", "absolute", "quantization"] = Field(
        description="The standard that decided."
    )
    level: Literal["L0", "L1", "L2"] | None = Field(None, description="The benchmark standard's level (else null).")
    passed: bool = Field(description="The standard's verdict alone (the checks are apart).")
    ratios: dict[str, NonNegFinite | None] = Field(
        description="The numbers it decides on; null where msprobe's ratio is NaN (a NaN ratio passes)."
    )
    thresholds: dict[str, NonNegFinite] = Field(description="Their limits (see rule).")
    rule: Annotated[str, Field(max_length=500)] = Field(description="How the numbers meet the limits.")
    failed: list[str] = Field(default_factory=list, description="The numbers past their limits.")
    routed: Annotated[str, Field(max_length=500)] | None = Field(None, description="Why this standard.")
    level_source: Annotated[str, Field(max_length=500)] | None = Field(None, description="Why this level.")
    baseline: Annotated[str, Field(max_length=500)] | None = Field(
        None, description="Where the same-dtype baseline ran."
    )
    msprobe: Annotated[str, Field(max_length=64)] | None = Field(None, description="The msprobe version followed.")
    candidate: dict[str, StageNumber] | None = Field(
        None, description="The candidate's stage-1 numbers (standards other than benchmark)."
    )
    baseline_metrics: dict[str, StageNumber] | None = Field(
        None, description="The baseline's stage-1 numbers (the ULP standard)."
    )
    baseline_repaired: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="Baseline elements that overflowed where the truth and the candidate are finite, set to "
        "the truth in the baseline's dtype before the standard judged (runner/judge.py).",
    )


class Check(Strict):
    """One of this project's rules beyond msprobe's standard."""

    name: Literal["nan_inf", "error_balance"] = Field(description="nan_inf: NaN/Inf pattern; error_balance: EB.")
    passed: bool = Field(description="This rule's verdict.")
    value: NonNegFinite = Field(description="The candidate's number.")
    limit: NonNegFinite = Field(description="The most it may be.")
    text: Annotated[str, Field(max_length=1000)] = Field(description="One sentence.")


OptionalNumber = FiniteFloat | int | None


class WrongWhere(Strict):
    """Where an output's wrong elements are (runner/wrong_where.py), measured from the mismatch mask
    (outside atol + rtol*|ref|, or a NaN/Inf pattern difference). Keys, as the condition language reads
    them (``out.wrong.KEY``): ``count``, ``fraction``; ``rows`` (whole rows along the last dimension, all
    wrong; ``of_rows`` rows in all, ``row_index`` the first few flat row indices); ``rows_zero`` (rows the
    candidate gives entirely 0 where the reference's row is not and something in it is wrong;
    ``zero_row_index``); ``cols`` (whole columns: an index of the last
    dimension wrong in every row; ``of_cols``, ``col_index``); ``tail[d]`` (per dimension, indexed like
    ``shape``: the index along d from which every wrong element lies, up to the end; null when not a
    tail block); ``period[d]`` (the smallest period of the wrong indices along d; null when none);
    ``channels`` ([lo, hi): the wrong elements are confined to this block of dimension 1, narrower than
    it); ``zeros`` / ``nan`` / ``inf`` (wrong elements that are 0 / NaN / Inf where the reference is not)."""

    count: Annotated[int, Field(ge=0)] = 0
    fraction: Annotated[float, AfterValidator(finite_ratio)] = 0.0
    shape: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    rows: Annotated[int, Field(ge=0)] = 0
    of_rows: Annotated[int, Field(ge=0)] = 0
    row_index: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, max_length=16)
    rows_zero: Annotated[int, Field(ge=0)] = 0
    zero_row_index: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, max_length=16)
    cols: Annotated[int, Field(ge=0)] = 0
    of_cols: Annotated[int, Field(ge=0)] = 0
    col_index: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, max_length=16)
    tail: list[Annotated[int, Field(ge=0)] | None] = Field(default_factory=list)
    period: list[Annotated[int, Field(ge=2)] | None] = Field(default_factory=list)
    channels: list[Annotated[int, Field(ge=0)]] | None = Field(None, min_length=2, max_length=2)
    zeros: Annotated[int, Field(ge=0)] = 0
    nan: Annotated[int, Field(ge=0)] = 0
    inf: Annotated[int, Field(ge=0)] = 0


class InputValues(Strict):
    """The values actually built for one input tensor (generated, placed, special or captured), measured
    by the runner where the tensors are made (runner/value_stats.py); a tensor list's members under
    ``x[0]``, ``x[1]``... Keys, as the condition language reads them (``x.values.KEY``): ``min``, ``max``,
    ``max_abs`` (over the finite values; null when there are none; complex: max_abs of |z|, no min/max);
    ``nan``, ``inf``, ``zeros`` (counts); ``distinct`` (distinct values, exact up to a cap:
    ``distinct_capped`` true says at least that many); ``sumsq[d]`` and ``sum_abs[d]`` (per dimension,
    indexed like ``shape`` - Python indexing, so ``sumsq[-1]`` is the last dimension: the largest over
    the slices reduced along d of the sum of x*x and of |x|, finite values only, accumulated in float64)."""

    numel: Annotated[int, Field(ge=0)] = 0
    min: OptionalNumber = None
    max: OptionalNumber = None
    max_abs: OptionalNumber = None
    nan: Annotated[int, Field(ge=0)] = 0
    inf: Annotated[int, Field(ge=0)] = 0
    zeros: Annotated[int, Field(ge=0)] = 0
    distinct: Annotated[int, Field(ge=0)] = 0
    distinct_capped: bool = False
    sumsq: list[NonNegFinite | None] = Field(default_factory=list)
    sum_abs: list[NonNegFinite | None] = Field(default_factory=list)


class Comparison(Strict):
    """One output: expected_* the reference's, actual_* the candidate's; d = cand - ref over finite
    pairs: max_rel = |d|/max(|ref|, guard), max_ulp in ulps of ref, error_balance = mean d;
    mismatch: |d| > atol + rtol*|ref| or a NaN/Inf pattern difference."""

    output: Annotated[str, Field(min_length=1, max_length=200)] = Field(description="the output's name")
    passed: bool = Field(description="within tolerance (and the same shape, dtype and NaN/Inf pattern)")
    expected_shape: list[int] | None = Field(None, description="the reference output's shape")
    actual_shape: list[int] | None = Field(None, description="the candidate output's shape")
    expected_dtype: str | None = Field(None, description="the dtype the output should have")
    actual_dtype: str | None = Field(None, description="the candidate output's dtype")
    contract_mismatch: Annotated[str, Field(max_length=2000)] | None = Field(
        None, description="shape or dtype differ: what differs (no metrics then)"
    )
    atol: NonNegFinite | None = Field(None, description="the absolute tolerance applied")
    rtol: NonNegFinite | None = Field(None, description="the relative tolerance applied")
    numel: Annotated[int, Field(ge=0)] = Field(0, description="elements compared")
    max_abs: NonNegFinite | None = Field(None, description="largest |candidate - reference| over finite pairs")
    max_rel: NonNegFinite | None = Field(None, description="largest |d| / max(|reference|, guard)")
    # The runner's further statistics: accepted from record_result, not published (tools/list
    # budget; references/runner-protocol.md defines them).
    mean_abs: SkipJsonSchema[NonNegFinite | None] = None
    rmse: SkipJsonSchema[NonNegFinite | None] = None
    cosine: SkipJsonSchema[FiniteFloat | None] = None
    error_balance: SkipJsonSchema[FiniteFloat | None] = None
    max_ulp: SkipJsonSchema[NonNegFinite | None] = None
    mismatch_count: Annotated[int, Field(ge=0)] = Field(0, description="elements outside atol + rtol*|reference|")
    mismatch_ratio: Annotated[
        float, AfterValidator(finite_ratio), Field(json_schema_extra={"minimum": 0, "maximum": 1})
    ] = Field(0.0, description="mismatch_count / numel")
    nan_mismatch: Annotated[int, Field(ge=0)] = Field(0, description="elements NaN on one side only")
    inf_mismatch: Annotated[int, Field(ge=0)] = Field(
        0, description="elements infinite on one side only (or of another sign)"
    )
    # Where the worst and the first mismatch are, as the runner found them: accepted from
    # record_result too, not published (as above).
    worst_index: SkipJsonSchema[list[int] | None] = None
    worst_candidate: SkipJsonSchema[Element | None] = None
    worst_reference: SkipJsonSchema[Element | None] = None
    first_mismatch_index: SkipJsonSchema[list[int] | None] = None
    first_candidate: SkipJsonSchema[Element | None] = None
    first_reference: SkipJsonSchema[Element | None] = None
    # The judge's own fields, computed by the runner (references/behavior.md): accepted from
    # record_result too, but left out of the published schema (tools/list budget).
    precision: SkipJsonSchema[PrecisionMetrics | None] = None  # the candidate's Ascend metric set
    baseline: SkipJsonSchema[PrecisionMetrics | None] = None  # the baseline's, against the same reference
    baseline_mismatch_count: SkipJsonSchema[Annotated[int, Field(ge=0)] | None] = None  # exact outputs
    ratios: SkipJsonSchema[dict[str, NonNegFinite] | None] = None  # candidate / baseline error ratios
    judge: SkipJsonSchema[Literal["tolerance", "baseline", "both"] | None] = None  # the judge that decided
    verdict: SkipJsonSchema[Annotated[str, Field(max_length=2000)] | None] = None  # one sentence, with ratios
    benchmark: SkipJsonSchema[StandardJudgement | None] = Field(
        None, description="The msprobe standard's own verdict on this output (the baseline judge)."
    )
    checks: SkipJsonSchema[list[Check] | None] = Field(
        None, description="This project's extra rules beyond the standard, each with its own verdict."
    )
    bias: SkipJsonSchema[FiniteFloat | None] = Field(
        None, description="mean signed error / mean tolerance (atol + rtol*|ref|) over finite pairs"
    )
    # NaN/Inf the judges accept because a correct computation in the output's dtype has them too
    # (runner-written, not published): the candidate's infinity where the truth rounded to the output's
    # dtype is that infinity; the candidate's NaN/Inf where the same-dtype baseline has the same value
    dtype_overflow: SkipJsonSchema[Annotated[int, Field(ge=0)] | None] = None
    specials_as_baseline: SkipJsonSchema[Annotated[int, Field(ge=0)] | None] = None
    # where the wrong elements are (runner-written, not published; WrongWhere names the keys)
    wrong: SkipJsonSchema[WrongWhere | None] = None


class ErrorInfo(Strict):
    type: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="the exception type, or 'signal' / 'timeout'"
    )
    message: Annotated[str, Field(max_length=20000)] = Field(description="the error message")
    signature: Annotated[str, Field(min_length=1, max_length=300)] = Field(
        description="short, stable: groups identical crashes"
    )
    signal: Annotated[str, Field(max_length=32)] | None = Field(None, description="the fatal signal, e.g. SIGSEGV")
    exit_code: int | None = Field(None, description="the worker's exit code, when it died")
    traceback_tail: Annotated[str, Field(max_length=20000)] | None = Field(
        None, description="the traceback's last lines"
    )
    matched_rule: Annotated[str, Field(max_length=500)] | None = Field(
        None, description="unsupported: the rule that matched"
    )
    # runner-written (like timing_us): accepted, not published (tools/list budget)
    phase: SkipJsonSchema[Literal["forward", "backward"] | None] = Field(
        None, description="a case with gradients: forward (the call) or backward (its gradients) failed"
    )
    # the reference's own refusal of the call, when it differs from the candidate's (an invalid call)
    reference_error: SkipJsonSchema[Annotated[str, Field(max_length=500)] | None] = None


class ResultSource(Strict):
    # kind and raw_path are set by the server when it records: accepted, not published
    kind: SkipJsonSchema[Literal["run_case_remote", "record_result"]] = "record_result"
    tool: Annotated[str, Field(max_length=200)] | None = Field(None, description="what produced the result")
    host: Annotated[str, Field(max_length=200)] | None = Field(None, description="where it ran")
    device: Annotated[str, Field(max_length=64)] | None = Field(None, description="the device, e.g. npu:3")
    raw_path: SkipJsonSchema[Annotated[str, Field(max_length=500)] | None] = None  # relative to the run directory
    note: Annotated[str, Field(max_length=5000)] | None = Field(None, description="free text for people")


class Timing(Strict):
    """Microseconds per phase."""

    compile_us: NonNegFinite | None = Field(default=None, description="compile or capture, apart from the run")
    candidate_us: NonNegFinite | None = None
    reference_us: NonNegFinite | None = None
    baseline_us: NonNegFinite | None = Field(default=None, description="The same-precision baseline's call.")
    compare_us: NonNegFinite | None = None
    total_us: NonNegFinite | None = None
    backward_us: NonNegFinite | None = Field(
        default=None, description="the candidate's backward, apart from candidate_us"
    )
    input_check_us: NonNegFinite | None = Field(default=None, description="checking the inputs for writes")
    consistency_us: NonNegFinite | None = Field(default=None, description="repeats and the batch slice")


class CaseResult(Strict):
    schema_version: Literal[1] = Field(1, description="contract version")
    case_id: Slug = Field(description="a planned, pending case of the run")
    status: Status = Field(description="passed, numerical_mismatch, crash or unsupported")
    comparisons: list[Comparison] = Field(default_factory=list, description="one per output")
    error: ErrorInfo | None = Field(None, description="required for crash and unsupported")
    timing_us: SkipJsonSchema[Timing | None] = None  # runner-measured; accepted, not published (tools/list budget)
    source: ResultSource = Field(default_factory=ResultSource, description="where the result came from")
    environment: FreeJson = Field(default_factory=dict, description="the run's environment (torch, CANN...)")
    recorded_at: datetime | None = Field(None, description="null: set when recorded")
    consistency: SkipJsonSchema[ConsistencyEvidence | None] = Field(
        None, description="repeats, the run alone, inputs written, batch slice"
    )
    # the values actually built, by input name (list members as x[0], x[1]...; InputValues names the
    # keys): runner-measured, accepted, not published (tools/list budget)
    values: SkipJsonSchema[dict[str, InputValues] | None] = None

    @model_validator(mode="after")
    def _consistent(self) -> CaseResult:
        if self.status in ("crash", "unsupported") and self.error is None:
            raise ValueError(f"status '{self.status}' needs 'error' (type, message, signature)")
        if self.status == "passed":
            if self.error is not None:
                raise ValueError("status 'passed' cannot carry an 'error'")
            failed = [c.output for c in self.comparisons if not c.passed]
            if failed:
                raise ValueError(f"status 'passed' but comparisons failed for outputs {failed}")
        if self.status == "numerical_mismatch":
            if not self.comparisons:
                raise ValueError("status 'numerical_mismatch' needs the 'comparisons' that show it")
            if all(c.passed for c in self.comparisons):
                raise ValueError("status 'numerical_mismatch' but every comparison passed")
        return self
