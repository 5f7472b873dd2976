"""The operator config: the exact call, the trusted reference, the judge and
the tolerances, fixed before any result."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import WithJsonSchema

from .base import MAX_NAMES, Dotted, Dtype, FreeJson, Ident, ModuleFile, NonNegFinite, Slug, Strict, drop_titles
from .case import GradOutput, OutputMap
from .consistency import BatchInvariance

# --------------------------------------------------------------------------
# Operator config
# --------------------------------------------------------------------------


_Tol = Annotated[NonNegFinite | None, WithJsonSchema({"type": "number", "minimum": 0})]


class Tolerance(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)

    atol: _Tol = Field(None, description="absolute tolerance; given together with rtol, or neither")
    rtol: _Tol = Field(None, description="relative tolerance (times |reference|); given together with atol")

    @model_validator(mode="after")
    def _together(self) -> Tolerance:
        if (self.atol is None) != (self.rtol is None):
            given, missing = ("atol", "rtol") if self.rtol is None else ("rtol", "atol")
            raise ValueError(
                f"atol and rtol are given together or not at all: {given} is given, {missing} is "
                f"missing (torch.testing.assert_close's rule; a silent default would decide)"
            )
        return self


class OutputTolerance(Tolerance):
    """One output's tolerance."""

    per_dtype: dict[Dtype, Tolerance] = Field(default_factory=dict, max_length=64, description="by output dtype")

    @model_validator(mode="after")
    def _complete_entries(self) -> OutputTolerance:
        empty = sorted(d for d, t in self.per_dtype.items() if t.atol is None)
        if empty:
            raise ValueError(f"per_dtype entries {empty} give neither atol nor rtol; give both or drop the entry")
        if self.atol is None and not self.per_dtype:
            raise ValueError("a per_output entry gives atol and rtol, per_dtype pairs, or both")
        return self


class ToleranceSpec(Tolerance):
    per_dtype: dict[Dtype, Tolerance] = Field(default_factory=dict, max_length=64, description="by output dtype")
    per_output: OutputMap[OutputTolerance] = Field(
        default_factory=dict,
        max_length=MAX_NAMES,
        description="by output name ('grad.weight'; 'grad.*': every gradient); first",
    )

    @model_validator(mode="after")
    def _complete_entries(self) -> ToleranceSpec:
        empty = sorted(d for d, t in self.per_dtype.items() if t.atol is None)
        if empty:
            raise ValueError(f"per_dtype entries {empty} give neither atol nor rtol; give both or drop the entry")
        return self

    def for_dtype(self, dtype: str, output: str | None = None) -> tuple[float, float, str]:
        """(atol, rtol, source): "per_output", "per_dtype", "config" (the blanket pair) or "default" (the table)."""
        from ..runner.precision import tolerance_for  # stdlib only: the one table, shared with the runner

        return tolerance_for(self.model_dump(), dtype, output)


class CallSpec(Strict):
    """How inputs map onto the callable's arguments."""

    style: Literal["keywords", "positional"] = Field(
        "keywords", description="keywords: each input and attribute by its name; positional: in 'order'"
    )
    order: list[Ident] | None = Field(None, max_length=MAX_NAMES, description="positional: names in argument order")

    @model_validator(mode="after")
    def _order(self) -> CallSpec:
        if self.style == "positional" and not self.order:
            raise ValueError("style 'positional' needs 'order'")
        return self


class OperatorSpec(Strict):
    name: Annotated[str, Field(min_length=1, max_length=200)] = Field(description="the operator's name, for people")
    candidate: Dotted = Field(description="run on the device")
    reference: Dotted = Field(description="trusted, run on CPU")
    modules: list[ModuleFile] = Field(
        default_factory=list, max_length=MAX_NAMES, description="files given in module_sources"
    )
    call: CallSpec = Field(default_factory=CallSpec, description="how inputs and attributes map onto arguments")
    outputs: list[Ident] | None = Field(None, max_length=MAX_NAMES, description="tuple/list output names")
    reference_dtype: Literal["auto", "float32", "float64"] = Field(
        "auto", description="floating inputs upcast to it (auto: float64 for float32)"
    )
    baseline: Dotted | None = Field(default=None, description="CPU baseline in the case's dtypes.")
    compile_backend: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")] | None = Field(
        None, description="null: inductor; torchair on NPU"
    )
    unsupported_rules: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default_factory=list, max_length=MAX_NAMES, description="regexes: a candidate error matching one is unsupported"
    )
    import_timeout_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        300.0, description="seconds to import the user modules and resolve the callables; past it: pending"
    )
    random: bool = Field(False, description="draws random numbers (the reference runs twice)")
    writes: list[Ident] = Field(
        default_factory=list, max_length=MAX_NAMES, description="inputs it writes (compared as outputs)"
    )

    @field_validator("unsupported_rules")
    @classmethod
    def _compile_rules(cls, rules: list[str]) -> list[str]:
        for rule in rules:
            try:
                re.compile(rule)
            except re.error as exc:
                raise ValueError(f"rule {rule!r} is not a valid regular expression: {exc}") from None
        return rules


JudgeLevel = Literal["auto", "L0", "L1", "L2"]
JudgeStandard = Literal["auto", "benchmark", "ulp", "binary", "thousandth", "absolute", "quantization"]


class OutputJudge(Strict):
    """One output's own level and/or standard (the config's apply to the others)."""

    judge_level: JudgeLevel | None = Field(None, description="L0, L1, L2 or auto for this output")
    standard: JudgeStandard | None = Field(None, description="the msprobe standard for this output")


class OperatorConfig(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)  # schema budget

    schema_version: Literal[1] = Field(1, description="contract version")
    run_id: Slug = Field(description="the new run's id: its evidence directory's name")
    operator: OperatorSpec = Field(description="the exact call under test and its trusted reference")
    tolerance: ToleranceSpec = Field(
        default_factory=ToleranceSpec, description="fixed before any result; a dtype without a pair gets the default"
    )
    judge: Literal["tolerance", "baseline", "both"] = Field(
        default="tolerance", description="atol/rtol, error ratio vs the baseline, or both."
    )
    source_model_failure: Annotated[str, Field(max_length=20000)] | None = Field(
        None, description="what the model showed (error text, wrong output) that led here"
    )
    environment: FreeJson = Field(default_factory=dict, description="free JSON about the environment, kept as given")
    model: Annotated[str, Field(max_length=2000)] | None = Field(None, description="the model, for people")
    command: Annotated[str, Field(max_length=20000)] | None = Field(
        None, description="the model command verify_fix runs after a fix (split into words, no shell)"
    )
    default_timeout_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        60.0, description="seconds per case (a case's timeout_s overrides it); past it the case is a crash: timeout"
    )
    compile_timeout_s: Annotated[float, Field(gt=0)] = Field(default=600.0, description="compile budget, s")
    grad_inputs: list[Ident] | None = Field(None, max_length=MAX_NAMES, description="default of the cases' grad_inputs")
    grad_output: GradOutput | None = Field(None, description="default of the cases' grad_output")
    judge_level: JudgeLevel = Field("auto", description="baseline judge's msprobe level; auto: the operator's")
    standard: JudgeStandard = Field(
        "auto", description="baseline judge's msprobe standard; auto: msprobe 26.2's routing by output dtype"
    )
    output_judges: dict[Annotated[str, Field(min_length=1, max_length=200)], OutputJudge] = Field(
        default_factory=dict, max_length=MAX_NAMES, description="per output name: its own judge_level and/or standard"
    )
    baseline_host: Annotated[Slug | None, WithJsonSchema({"type": "string"})] = Field(
        None, description="inventory host running the baseline"
    )
    repeats: Annotated[int, Field(ge=0, le=10)] = Field(2, description="failing cases run again N times, 0 off")
    repeats_passing: Annotated[int, Field(ge=0, le=1000)] = Field(
        0, description="also repeat the first case and N-1 sampled others"
    )
    batch_invariance: BatchInvariance | None = Field(
        None, description="run a slice of the batch too; it must equal the same rows of the full run"
    )

    @model_validator(mode="after")
    def _standard_needs_the_baseline_judge(self) -> OperatorConfig:
        asked = (
            [
                name
                for name, value in (("judge_level", self.judge_level), ("standard", self.standard))
                if value != "auto"
            ]
            + (["output_judges"] if self.output_judges else [])
            + (["baseline_host"] if self.baseline_host else [])
        )
        if asked and self.judge == "tolerance":
            raise ValueError(
                f"{', '.join(asked)} set but judge is 'tolerance': they apply to the baseline judge "
                "(msprobe's standards); set judge to 'baseline' or 'both', or drop them"
            )
        return self
