"""The operator config: the exact call, the trusted reference, the judge and
the tolerances, fixed before any result."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic.json_schema import SkipJsonSchema, WithJsonSchema
from pydantic import ConfigDict, Field, field_validator, model_validator

from .base import Dotted, Dtype, FreeJson, Ident, ModuleFile, NonNegFinite, Slug, Strict, drop_titles
from .consistency import BatchInvariance

# --------------------------------------------------------------------------
# Operator config
# --------------------------------------------------------------------------


_Tol = Annotated[NonNegFinite | None, WithJsonSchema({"type": "number", "minimum": 0})]


class Tolerance(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)

    atol: _Tol = None  # given together with rtol, or neither
    rtol: _Tol = None

    @model_validator(mode="after")
    def _together(self) -> "Tolerance":
        if (self.atol is None) != (self.rtol is None):
            given, missing = ("atol", "rtol") if self.rtol is None else ("rtol", "atol")
            raise ValueError(f"atol and rtol are given together or not at all: {given} is given, {missing} is "
                             f"missing (torch.testing.assert_close's rule; a silent default would decide)")
        return self


class ToleranceSpec(Tolerance):
    per_dtype: dict[Dtype, Tolerance] = Field(default_factory=dict, description="by output dtype")

    @model_validator(mode="after")
    def _complete_entries(self) -> "ToleranceSpec":
        empty = sorted(d for d, t in self.per_dtype.items() if t.atol is None)
        if empty:
            raise ValueError(f"per_dtype entries {empty} give neither atol nor rtol; give both or drop the entry")
        return self

    def for_dtype(self, dtype: str) -> tuple[float, float, str]:
        """(atol, rtol, source): "per_dtype", "config" (the blanket pair) or "default" (the table)."""
        from ..runner.precision import tolerance_for  # stdlib only: the one table, shared with the runner

        return tolerance_for(self.model_dump(), dtype)


class CallSpec(Strict):
    """How inputs map onto the callable's arguments."""

    style: Literal["keywords", "positional"] = "keywords"
    order: list[Ident] | None = Field(
        None, description="positional: names in argument order")

    @model_validator(mode="after")
    def _order(self) -> "CallSpec":
        if self.style == "positional" and not self.order:
            raise ValueError("style 'positional' needs 'order'")
        return self


class OperatorSpec(Strict):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    candidate: Dotted = Field(description="run on the device")
    reference: Dotted = Field(description="trusted, run on CPU")
    modules: list[ModuleFile] = Field(
        default_factory=list, description="files given in module_sources")
    call: CallSpec = Field(default_factory=CallSpec)
    outputs: list[Ident] | None = Field(None, description="tuple/list output names")
    reference_dtype: Literal["float32", "float64"] = Field(
        "float32", description="floating inputs upcast to it")
    baseline: Dotted | None = Field(default=None, description="CPU baseline in the case's dtypes.")
    compile_backend: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")] | None = Field(
        None, description="null: inductor; torchair on NPU")
    unsupported_rules: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default_factory=list, description="regexes: a candidate error matching one is unsupported")
    # Seconds the worker may spend importing the user modules and resolving the
    # callables; past it the case stays pending and the next cases go on.
    # Validated, not published (the plan schema's size budget): see SKILL.md.
    import_timeout_s: SkipJsonSchema[Annotated[float, Field(gt=0, le=3600)]] = 300.0
    random: bool = Field(False, description="draws random numbers (the reference runs twice)")
    writes: list[Ident] = Field(default_factory=list, description="inputs it writes (compared as outputs)")

    @field_validator("unsupported_rules")
    @classmethod
    def _compile_rules(cls, rules: list[str]) -> list[str]:
        for rule in rules:
            try:
                re.compile(rule)
            except re.error as exc:
                raise ValueError(f"rule {rule!r} is not a valid regular expression: {exc}") from None
        return rules


class OperatorConfig(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)  # schema budget

    schema_version: Literal[1] = 1
    run_id: Slug
    operator: OperatorSpec
    tolerance: ToleranceSpec = Field(default_factory=ToleranceSpec)
    judge: Literal["tolerance", "baseline", "both"] = Field(
        default="tolerance", description="atol/rtol, error ratio vs the baseline, or both.")
    source_model_failure: Annotated[str, Field(max_length=20000)] | None = None
    environment: FreeJson = Field(default_factory=dict)
    model: Annotated[str, Field(max_length=2000)] | None = None
    command: Annotated[str, Field(max_length=20000)] | None = None
    default_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    compile_timeout_s: Annotated[float, Field(gt=0)] = Field(default=600.0, description="compile budget, s")
    repeats: Annotated[int, Field(ge=0, le=10)] = Field(2, description="failing cases run again N times, 0 off")
    # Validated, not published in tools/list (its size budget; SKILL.md documents them):
    repeats_passing: SkipJsonSchema[Annotated[int, Field(ge=0, le=1000)]] = Field(
        0, description="also repeat the first case and N-1 sampled others")
    batch_invariance: SkipJsonSchema[BatchInvariance | None] = Field(
        None, description="run a slice of the batch too; it must equal the same rows of the full run")
