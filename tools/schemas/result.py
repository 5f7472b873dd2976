"""A case's result: one comparison per output (metrics, verdict), the error of
a crash or an unsupported combination, where the raw evidence is, timing."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic.json_schema import SkipJsonSchema
from pydantic import AfterValidator, Field, model_validator

from .consistency import ConsistencyEvidence
from .base import ElementValue, FiniteFloat, FreeJson, NonNegFinite, Slug, Status, Strict, finite_ratio

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
        description="Share of small values whose absolute error exceeds the dtype's small-value atol.")
    max_rel_error: NonNegFinite | None = Field(description="Max |d|/(|ref|+eps) over the other finite elements.")
    mean_rel_error: NonNegFinite | None = Field(description="Mean |d|/(|ref|+eps) over the other finite elements.")
    rmse: NonNegFinite | None = Field(description="Root mean square error over finite pairs.")
    error_balance: Annotated[float, Field(ge=0, le=1)] = Field(
        description="|#(d>0) - #(d<0)| / count (msprobe's error balance).")
    nonzero_errors: Annotated[int, Field(ge=0)] = Field(description="Elements with d != 0.")
    thousandth_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Share of elements with |d|/(|ref|+eps) < 1e-3.")
    ten_thousandth_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        description="Share of elements with |d|/(|ref|+eps) < 1e-4.")
    special_mismatch: Annotated[int, Field(ge=0)] = Field(description="NaN/Inf pattern mismatches.")
    sign_balance: Annotated[float, Field(ge=-1, le=1)] | None = Field(
        None, description="(#(d>0) - #(d<0)) / count: the signed error balance.")
    magnitude_balance: Annotated[float, Field(ge=-1, le=1)] | None = Field(
        None, description="(#(|cand|>|ref|) - #(|cand|<|ref|)) / count: -1 is every error toward zero.")


class Comparison(Strict):
    """One output: expected_* the reference's, actual_* the candidate's; d = cand - ref over finite
    pairs: max_rel = |d|/max(|ref|, guard), max_ulp in ulps of ref, error_balance = mean d;
    mismatch: |d| > atol + rtol*|ref| or a NaN/Inf pattern difference."""

    output: Annotated[str, Field(min_length=1, max_length=200)]
    passed: bool
    expected_shape: list[int] | None = None
    actual_shape: list[int] | None = None
    expected_dtype: str | None = None
    actual_dtype: str | None = None
    contract_mismatch: Annotated[str, Field(max_length=2000)] | None = None
    atol: NonNegFinite | None = None
    rtol: NonNegFinite | None = None
    numel: Annotated[int, Field(ge=0)] = 0
    max_abs: NonNegFinite | None = None
    max_rel: NonNegFinite | None = None
    # The runner's further statistics: accepted from record_result, not published (tools/list
    # budget; references/runner-protocol.md defines them).
    mean_abs: SkipJsonSchema[NonNegFinite | None] = None
    rmse: SkipJsonSchema[NonNegFinite | None] = None
    cosine: SkipJsonSchema[FiniteFloat | None] = None
    error_balance: SkipJsonSchema[FiniteFloat | None] = None
    max_ulp: SkipJsonSchema[NonNegFinite | None] = None
    mismatch_count: Annotated[int, Field(ge=0)] = 0
    mismatch_ratio: Annotated[float, AfterValidator(finite_ratio),
                              Field(json_schema_extra={"minimum": 0, "maximum": 1})] = 0.0
    nan_mismatch: Annotated[int, Field(ge=0)] = 0
    inf_mismatch: Annotated[int, Field(ge=0)] = 0
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
    bias: SkipJsonSchema[FiniteFloat | None] = Field(
        None, description="mean signed error / mean tolerance (atol + rtol*|ref|) over finite pairs")


class ErrorInfo(Strict):
    type: Annotated[str, Field(min_length=1, max_length=200)]
    message: Annotated[str, Field(max_length=20000)]
    signature: Annotated[str, Field(min_length=1, max_length=300)] = Field(
        description="short, stable: groups identical crashes")
    signal: Annotated[str, Field(max_length=32)] | None = None
    exit_code: int | None = None
    traceback_tail: Annotated[str, Field(max_length=20000)] | None = None
    matched_rule: Annotated[str, Field(max_length=500)] | None = Field(
        None, description="unsupported: the rule that matched")


class ResultSource(Strict):
    # kind and raw_path are set by the server when it records: accepted, not published
    kind: SkipJsonSchema[Literal["run_case_remote", "record_result"]] = "record_result"
    tool: Annotated[str, Field(max_length=200)] | None = None
    host: Annotated[str, Field(max_length=200)] | None = None
    device: Annotated[str, Field(max_length=64)] | None = None
    raw_path: SkipJsonSchema[Annotated[str, Field(max_length=500)] | None] = None  # relative to the run directory
    note: Annotated[str, Field(max_length=5000)] | None = None


class Timing(Strict):
    """Microseconds per phase."""

    compile_us: NonNegFinite | None = Field(default=None, description="compile or capture, apart from the run")
    candidate_us: NonNegFinite | None = None
    reference_us: NonNegFinite | None = None
    baseline_us: NonNegFinite | None = Field(default=None, description="The same-precision baseline's call.")
    compare_us: NonNegFinite | None = None
    total_us: NonNegFinite | None = None
    input_check_us: NonNegFinite | None = Field(default=None, description="checking the inputs for writes")
    consistency_us: NonNegFinite | None = Field(default=None, description="repeats and the batch slice")


class CaseResult(Strict):
    schema_version: Literal[1] = 1
    case_id: Slug
    status: Status
    comparisons: list[Comparison] = Field(default_factory=list)
    error: ErrorInfo | None = None
    timing_us: SkipJsonSchema[Timing | None] = None  # runner-measured; accepted, not published (tools/list budget)
    source: ResultSource = Field(default_factory=ResultSource)
    environment: FreeJson = Field(default_factory=dict)
    recorded_at: datetime | None = None
    consistency: SkipJsonSchema[ConsistencyEvidence | None] = Field(
        None, description="repeats, the run alone, inputs written, batch slice (issue 21)")

    @model_validator(mode="after")
    def _consistent(self) -> "CaseResult":
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
