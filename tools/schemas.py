"""Pydantic contracts shared by every tool.

Every model is strict about its shape: unknown fields are rejected, ids are
safe slugs, numbers that must be finite are finite.  The runner (which is
shipped to NPU hosts) never imports this module: it speaks plain JSON whose
shape these models define, and the server validates what comes back.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Union

from typing_extensions import TypeAliasType

from pydantic.json_schema import SkipJsonSchema, WithJsonSchema
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)

SCHEMA_VERSION = 1

# A slug starts with a letter or digit, so ".", ".." and "-x" are impossible;
# "/" and "\" are not in the alphabet, so a slug is always one path component.
SLUG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
_SLUG_RE = re.compile(SLUG_PATTERN)
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_MODULE_FILE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.py$")

DTYPES = (
    "float16", "bfloat16", "float32", "float64",
    "int8", "uint8", "int16", "int32", "int64", "bool",
    # issue 8: float8, complex, wide unsigned, and the Ascend-only dtypes (torch_npu names; packed carriers)
    "float8_e4m3fn", "float8_e5m2", "complex64", "complex128", "uint16", "uint32", "uint64",
    "hifloat8", "float4_e2m1fn_x2", "float4_e1m2fn_x2", "int4",
)
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# Dtype families (value specs may be keyed by a family, see ValueSpec.by_dtype); mirrored in tools/runner/inputs.py.
DTYPE_FAMILIES = {
    "float": FLOAT_DTYPES, "float8": ("float8_e4m3fn", "float8_e5m2"), "complex": ("complex64", "complex128"),
    "int": ("int8", "int16", "int32", "int64"), "uint": ("uint8", "uint16", "uint32", "uint64"), "bool": ("bool",),
    "ascend": ("hifloat8", "float4_e2m1fn_x2", "float4_e1m2fn_x2", "int4"),
}
ASCEND_ONLY_DTYPES = DTYPE_FAMILIES["ascend"]


def dtype_family(dtype: str) -> str:
    return next(f for f, members in DTYPE_FAMILIES.items() if dtype in members)
# Ascend storage formats (torch_npu.npu_format_cast ids live in the runner).
LAYOUTS = ("ND", "NCHW", "NHWC", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ")
MODES = ("eager", "compile", "graph")
# The most storage elements one input may need (16 Gi elements: 64 GiB of
# float32).  Above it the host (CPU generation, then the device copy) would
# only run out of memory or overflow; refuse it when the case is planned.
MAX_STORAGE_ELEMENTS = 2**34
STATUSES = ("passed", "numerical_mismatch", "crash", "unsupported")

# A named alias: published once in $defs and referenced (the schema stays compact).
Dtype = TypeAliasType("Dtype", Literal[  # type: ignore[valid-type]
    "float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
    "float8_e4m3fn", "float8_e5m2", "complex64", "complex128", "uint16", "uint32", "uint64",
    "hifloat8", "float4_e2m1fn_x2", "float4_e1m2fn_x2", "int4"])
Layout = Literal["ND", "NCHW", "NHWC", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"]
Mode = Literal["eager", "compile", "graph"]
Status = Literal["passed", "numerical_mismatch", "crash", "unsupported"]


def _slug(value: str) -> str:
    if not isinstance(value, str) or not _SLUG_RE.fullmatch(value):
        raise ValueError(
            "must be a safe slug: 1-96 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no '/', no '..', no spaces)"
        )
    if ".." in value:
        raise ValueError("must not contain '..'")
    return value


def _ident(value: str) -> str:
    if not _IDENT_RE.fullmatch(value):
        raise ValueError("must be a Python identifier of at most 64 characters")
    return value


def _dotted(value: str) -> str:
    if not _DOTTED_RE.fullmatch(value):
        raise ValueError("must be a dotted callable path such as 'torch_npu.npu_rms_norm' (module.attr)")
    return value


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _finite_non_negative(value: float) -> float:
    """Finite first, so a NaN says "must be a finite number", not a bound."""
    _finite(value)
    if value < 0:
        raise ValueError("must be greater than or equal to 0")
    return value


def _finite_ratio(value: float) -> float:
    _finite_non_negative(value)
    if value > 1:
        raise ValueError("must be less than or equal to 1")
    return value


def _finite_json(value: Any) -> Any:
    """Free-form JSON whose numbers are all finite (it is written as standard JSON)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("numbers must be finite (write non-finite values as strings)")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return value


def _module_file(value: str) -> str:
    if not _MODULE_FILE_RE.fullmatch(value):
        raise ValueError("module file must be NAME.py with NAME a Python identifier (no directories)")
    return value


# The pattern is published in the JSON schema (what an agent fills ids in from);
# _slug validates, with a message that says what a slug is.
Slug = Annotated[str, AfterValidator(_slug), Field(json_schema_extra={"pattern": SLUG_PATTERN})]
FreeJson = Annotated[dict[str, Any], AfterValidator(_finite_json)]
ModuleFile = Annotated[str, AfterValidator(_module_file)]
Ident = Annotated[str, AfterValidator(_ident)]
Dotted = Annotated[str, AfterValidator(_dotted)]
FiniteFloat = Annotated[float, AfterValidator(_finite)]
# Non-finite input is refused before the bound is checked: NaN says "must be a finite number".
NonNegFinite = Annotated[float, AfterValidator(_finite_non_negative), Field(json_schema_extra={"minimum": 0})]
# A tensor element as JSON: finite numbers as numbers, the rest spelled out.
ElementValue = Union[float, int, bool, Literal["nan", "inf", "-inf"]]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=False)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

SpecialKind = Literal["nan", "inf", "-inf", "denormal", "+0", "-0", "large", "-large"]


class SpecialValues(Strict):
    """Special values put into a generated tensor."""

    value: SpecialKind
    positions: list[list[Annotated[int, Field(ge=0)]]] | None = Field(
        None, description="multi-indices")
    count: Annotated[int, Field(ge=1)] | None = Field(None, description="or: N seeded random positions")

    @model_validator(mode="after")
    def _one_way(self) -> "SpecialValues":
        if (self.positions is None) == (self.count is None):
            raise ValueError("give exactly one of 'positions' or 'count'")
        return self


class ValueSpec(Strict):
    """Values made on CPU from the case seed: mean/std normal; low/high uniform, randint; fill full."""

    kind: Literal["normal", "uniform", "randint", "zeros", "ones", "full", "arange", "captured"] = "normal"
    mean: FiniteFloat = 0.0
    std: NonNegFinite = 1.0
    low: FiniteFloat | None = None
    high: FiniteFloat | None = None
    fill: FiniteFloat | None = None
    captured: Annotated[str, AfterValidator(_slug)] | None = Field(
        None, description="captured: a captured_files name (artifacts/captured/)")
    specials: list[SpecialValues] = Field(default_factory=list)
    exclude_zero: bool = Field(False, description="generated zeros become the smallest non-zero step")
    by_dtype: dict[str, "ValueSpec"] = Field(
        default_factory=dict, description="per dtype or family (float, int...): dtype, then family, then this spec")

    @model_validator(mode="after")
    def _check(self) -> "ValueSpec":
        if self.kind in ("uniform", "randint"):
            if self.low is None or self.high is None:
                raise ValueError(f"kind '{self.kind}' needs 'low' and 'high'")
            if not self.low < self.high:
                raise ValueError("'low' must be below 'high'")
        if self.kind == "full" and self.fill is None:
            raise ValueError("kind 'full' needs 'fill'")
        if self.kind == "captured" and not self.captured:
            raise ValueError("kind 'captured' needs 'captured' (a file in artifacts/captured/)")
        for key, sub in self.by_dtype.items():
            if key not in DTYPES and key not in DTYPE_FAMILIES:
                raise ValueError(f"by_dtype key {key!r} is neither a dtype nor a family {sorted(DTYPE_FAMILIES)}")
            if sub.by_dtype:
                raise ValueError(f"by_dtype[{key!r}] cannot have its own by_dtype")
        return self

    def for_dtype(self, dtype: str) -> "ValueSpec":
        """The spec that applies to an input of ``dtype``."""
        sub = self.by_dtype.get(dtype) or self.by_dtype.get(dtype_family(dtype))
        return sub if sub is not None else self


class TensorSpec(Strict):
    """One tensor of a list."""

    shape: list[Annotated[int, Field(ge=0)]]
    strides: list[Annotated[int, Field(ge=0)]] | None = Field(None, description="null: contiguous")
    storage_offset: Annotated[int, Field(ge=0)] = Field(0, description="in elements")
    dtype: Dtype = "float32"
    layout: Layout = "ND"  # not ND: torch_npu.npu_format_cast on npu
    values: ValueSpec = Field(default_factory=ValueSpec)

    @model_validator(mode="after")
    def _rank(self) -> "TensorSpec":
        if self.shape is None:  # an InputSpec that is a tensor list or None
            return self
        if self.strides is not None and len(self.strides) != len(self.shape):
            raise ValueError(
                f"'strides' has rank {len(self.strides)} but 'shape' has rank {len(self.shape)}"
            )
        numel = math.prod(self.shape)
        if numel > MAX_STORAGE_ELEMENTS:
            raise ValueError(
                f"shape {self.shape} has {numel} elements, over the limit of {MAX_STORAGE_ELEMENTS} (2**34) per "
                "input: the call's inputs and outputs would exhaust the host's memory - plan a smaller shape "
                "that still shows the failure"
            )
        strides = self.strides if self.strides is not None else contiguous_strides(self.shape)
        needed = storage_elements(self.shape, strides, self.storage_offset)
        if needed > MAX_STORAGE_ELEMENTS:
            raise ValueError(
                f"shape {self.shape}, strides {strides} and storage_offset {self.storage_offset} need a storage "
                f"of {needed} elements, over the limit of {MAX_STORAGE_ELEMENTS} (2**34) per input: building it "
                "would exhaust the host's memory - plan a smaller shape that still shows the failure"
            )
        values = self.values.for_dtype(self.dtype)
        for special in values.specials:
            for pos in special.positions or []:
                if len(pos) != len(self.shape) or any(i >= size for i, size in zip(pos, self.shape)):
                    raise ValueError(f"special '{special.value}' position {pos} is outside shape {self.shape}")
            if special.count is not None and special.count > numel:
                raise ValueError(f"special '{special.value}' count {special.count} is over the {numel} elements "
                                 f"of shape {self.shape}")
        floating = FLOAT_DTYPES + DTYPE_FAMILIES["float8"]
        for special in values.specials:
            if self.dtype not in floating and special.value != "+0":
                raise ValueError(f"special value '{special.value}' needs a floating dtype, not {self.dtype}")
            if self.dtype == "float8_e4m3fn" and special.value in ("inf", "-inf"):
                raise ValueError("float8_e4m3fn has no infinity (an inf becomes NaN); use 'nan' or 'large'")
        return self

    def is_contiguous(self) -> bool:
        return self.strides is None or self.shape is None or self.strides == contiguous_strides(self.shape)


class InputSpec(TensorSpec):
    name: Ident = Field(description="argument name")
    shape: list[Annotated[int, Field(ge=0)]] | None = None  # type: ignore[assignment]
    tensors: list[TensorSpec] | None = Field(
        None, min_length=1, max_length=128, description="a Tensor[] argument: one spec per member")
    none: bool = Field(False, description="pass None (an optional Tensor? argument)")

    @model_validator(mode="after")
    def _kind(self) -> "InputSpec":
        if self.tensors is not None and self.shape is not None and not self.none:
            raise ValueError("a tensor list ('tensors') has its shapes in its members, not in 'shape'")
        if self.tensors is None and self.shape is None and not self.none:
            raise ValueError("give 'shape' (a tensor), 'tensors' (a tensor list) or none=true")
        return self

    def members(self) -> list[TensorSpec]:
        """The tensors this input passes: none for None, the members of a list, else itself."""
        if self.none:
            return []
        return list(self.tensors) if self.tensors is not None else [self]


def storage_elements(shape: list[int], strides: list[int], offset: int) -> int:
    """Elements of the storage an as_strided view needs (as the runner builds it)."""
    if any(size == 0 for size in shape):
        return offset
    return offset + sum((size - 1) * stride for size, stride in zip(shape, strides)) + 1


def contiguous_strides(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return list(reversed(strides))


# --------------------------------------------------------------------------
# Captures: a case planned from a model's real call (issue 14)
# --------------------------------------------------------------------------


class CaseOrigin(Strict):
    """Where a case came from when it was planned from a capture or a dump."""

    kind: Literal["captured_call", "accuracy_dump", "capture_star"] = Field(
        description="captured_call/accuracy_dump: the model's real call; capture_star: a one-axis variation around it")
    source: Annotated[str, Field(max_length=4096)] = Field(description="the capture directory or dump.json it came from")
    call: Annotated[str, Field(max_length=512)] = Field(description="the call id in the capture index (stage#N) or the dump's API name")
    target: Annotated[str, Field(max_length=512)] | None = Field(None, description="the operator the model called, as recorded")
    exact: bool = Field(description="true when every tensor input replays the recorded values exactly")
    stats: dict[str, dict[str, Union[float, int, str, None]]] = Field(
        default_factory=dict, description="per input, the recorded value statistics (numel, nan, inf, min, max, mean, absmax)")
    stack: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=16, description="the innermost source frames of the recorded call")


def _at_most_16(value: list) -> list:
    if len(value) > 16:
        raise ValueError("at most 16 captures per request")
    return value


def _compact_schema(schema: dict) -> None:
    """Drop the generated titles and null defaults (the published schema stays small)."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        if "default" in prop and prop["default"] is None:
            prop.pop("default")


def _capture_dir(value: str) -> str:
    if not 1 <= len(value) <= 4096:
        raise ValueError("must be a path of 1-4096 characters")
    return value


def _capture_calls(value: list[str]) -> list[str]:
    if len(value) > 256 or any(not 1 <= len(c) <= 512 for c in value):
        raise ValueError("at most 256 call ids of 1-512 characters")
    return value


class CaptureSelection(Strict):
    # A capture dir or accuracy-checker dump (references/captures.md); server paths, in the workspace.
    # validated by the AfterValidators; the published schema stays small (titles and limits left out)
    model_config = ConfigDict(extra="forbid", json_schema_extra=_compact_schema)

    dir: Annotated[str, AfterValidator(_capture_dir)] = Field(description="capture dir or dump.json")
    calls: Annotated[list[str], AfterValidator(_capture_calls)] = Field(
        default_factory=list, description="call ids; omit: all")
    star: bool = Field(False, description="one-axis variations too")


class DtypeArg(Strict):
    """Passed as torch.<value> (torch_npu.<value> if Ascend-only)."""

    kind: Literal["dtype"]
    value: Dtype


AttributeValue = Union[None, bool, int, float, str, DtypeArg, list[Union[None, bool, int, float, str]]]


class Case(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_compact_schema)  # titles dropped: schema budget

    id: Slug
    mode: Mode = Field("eager", description="graph: capture + replay")
    inputs: list[InputSpec] = Field(min_length=1)
    attributes: dict[Ident, AttributeValue] = Field(default_factory=dict, description="non-tensor arguments")
    seed: Annotated[int, Field(ge=0, lt=2**63)] | None = Field(None, description="null: from the id")
    timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        None, description="null: default_timeout_s")
    compile_timeout_s: Annotated[float, Field(gt=0)] | None = Field(default=None, description="compile budget, s")
    description: Annotated[str, Field(max_length=2000)] | None = None
    # set by plan_cases for a case planned from 'captures' (not published in the input schema: agents never write it)
    origin: SkipJsonSchema[CaseOrigin | None] = None

    @field_validator("attributes")
    @classmethod
    def _finite_attrs(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            items = item if isinstance(item, list) else [item]
            for x in items:
                if isinstance(x, float) and not math.isfinite(x):
                    raise ValueError(f"attribute '{key}' must be finite")
        return value

    @model_validator(mode="after")
    def _unique_inputs(self) -> "Case":
        names = [i.name for i in self.inputs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"input names must be unique; repeated: {dupes}")
        return self


# --------------------------------------------------------------------------
# Operator config
# --------------------------------------------------------------------------


_Tol = Annotated[NonNegFinite | None, WithJsonSchema({"type": "number", "minimum": 0})]


class Tolerance(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_compact_schema)

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
        from .runner.precision import tolerance_for  # stdlib only: the one table, shared with the runner

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
    model_config = ConfigDict(extra="forbid", json_schema_extra=_compact_schema)  # schema budget

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
    mismatch_ratio: Annotated[float, AfterValidator(_finite_ratio),
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


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


# --------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------


class CaseFailure(Strict):
    case_id: str = Field(description="the case")
    status: Status = Field(description="its status")
    signature: str | None = Field(None, description="crash/mismatch signature")
    reason: str | None = Field(None, description="what failed")
    axes: dict[str, str] = Field(description="the case's axis values")


class FailureAxis(Strict):
    axis: str = Field(description="axis name")
    value: str = Field(description="axis value")
    failing: int = Field(description="failing cases with it")
    total_with_value: int = Field(description="cases with it")
    explains_all: bool = Field(description="every failure has it and no pass does")


class MinimalPair(Strict):
    """The closest passing and failing cases that differ only in one variation axis."""

    passing: str = Field(description="id of the passing case")
    failing: str = Field(description="id of the failing case")
    passing_value: Any = Field(description="the finding's axis value in the passing case")
    failing_value: Any = Field(description="the finding's axis value in the failing case")
    differs_in: list[str] = Field(description="the variation axes in which the two cases differ (one, or a shape "
                                              "and its strides)")


class Finding(Strict):
    """A predicate over one axis that separates every failing case from every passing one."""

    axis: str = Field(description="the axis, e.g. 'x.shape[-1]', 'x.numel', 'x.contiguity', 'attr.approximate'")
    kind: Literal["value", "set", "threshold", "class"] = Field(
        description="value (axis == v), set (axis in {...}), threshold (ordered axis above/below a bound), "
                    "class (a true/false axis such as x.zero_size)")
    predicate: str = Field(description="the finding as text, e.g. 'x.shape[-1] > 2048'")
    source: str = Field(description="the variation axis that moves this axis (x.shape, x.strides, dtype, attr.NAME)")
    failing_values: list[Any] = Field(description="the axis values seen in failing cases")
    passing_values: list[Any] = Field(description="the axis values seen in passing cases")
    direction: Literal["above", "below"] | None = Field(
        default=None, description="threshold only: failures lie above (or below) the bound")
    largest_passing: float | None = Field(default=None, description="threshold above: the largest passing value")
    smallest_failing: float | None = Field(default=None, description="threshold above: the smallest failing value")
    smallest_passing: float | None = Field(default=None, description="threshold below: the smallest passing value")
    largest_failing: float | None = Field(default=None, description="threshold below: the largest failing value")
    exact: bool = Field(description="the boundary is exact (no value left between passing and failing) or every "
                                    "informative value of the axis is tried, and a minimal pair shows it")
    minimal_pair: MinimalPair | None = Field(default=None, description="the evidence: a passing and a failing "
                                                                        "case differing only there")
    failing: int = Field(description="failing cases (all of them satisfy the predicate)")
    passing: int = Field(description="passing cases (none satisfies it)")


class NextCase(Strict):
    reason: str = Field(description="what it would settle")
    base_case: str = Field(description="case to vary")
    change: dict[str, Any] = Field(description="axis changes to plan")
    kind: Literal["bisect", "probe", "discriminate", "crossing", "explore", "missing"] | None = Field(
        default=None, description="what it does to the findings")
    axis: str | None = Field(default=None, description="the finding axis it narrows or tests")
    star: dict[str, Any] | None = Field(default=None, description="append as is: stars=[star]")
    if_fails: str | None = Field(default=None, description="what a failure tells")
    if_passes: str | None = Field(default=None, description="what a pass tells")


class BoundaryFeature(Strict):
    """One thing a failing captured call has that no passing planned case has."""

    axis: str = Field(description="e.g. x.dtype, x.strides_class, x.offset, x.layout, x.values_class, dtypes_mixed, attr.eps")
    value: str = Field(description="the captured call's value on that axis")
    passing_values: list[str] = Field(default_factory=list, description="the values the passing planned cases have there")


class BridgeCase(Strict):
    """A planned case between a passing planned case and the failing captured call (one axis)."""

    axis: str = Field(description="the boundary axis this case crosses")
    base_case: str = Field(description="the passing planned case it starts from")
    star: dict[str, Any] = Field(description="a StarSpec (include_base false) ready for plan_cases append=true 'stars'")


class IntegrationDiff(Strict):
    """Captured calls vs planned cases at the integration boundary."""

    direction: Literal["captured_fails", "planned_fails"] = Field(
        description="captured_fails: captured calls fail and planned cases pass; planned_fails: the reverse")
    failing_case: str = Field(description="the failing case the features belong to")
    closest_passing: str | None = Field(None, description="the passing case of the other kind closest to it")
    features: list[BoundaryFeature] = Field(description="what the failing case has that no passing case of the other kind has")
    bridges: list[BridgeCase] = Field(default_factory=list, description="planned cases that cross one feature each")


class Analysis(Strict):
    schema_version: Literal[1] = Field(1, description="contract version")
    run_id: str = Field(description="the run")
    verdict: Literal["diagnosed", "inconclusive", "passed"] = Field(description="diagnosed, inconclusive or passed")
    summary: str = Field(description="the finding in words")
    status_counts: dict[str, int] = Field(description="cases per status")
    planned: int = Field(description="planned cases")
    recorded: int = Field(description="recorded cases")
    missing: list[str] = Field(description="pending case ids")
    failures: list[CaseFailure] = Field(description="mismatches and crashes")
    unsupported: list[CaseFailure] = Field(description="unsupported, not failures")
    crash_groups: dict[str, list[str]] = Field(description="signature -> case ids")
    failure_axes: list[FailureAxis] = Field(description="axis values the failures share")
    integration_hint: str | None = Field(None, description="when every isolated case passes")
    next_cases: list[NextCase] = Field(default_factory=list, description="cases that would settle it")
    findings: list[Finding] = Field(default_factory=list, description="one-axis predicates with minimal pairs")
    integration_diff: list[IntegrationDiff] = Field(
        default_factory=list, description="captured calls vs planned cases: what differs at the integration boundary")
    analyzed_at: datetime = Field(description="when")


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """All errors at once, each with its field path and what was wrong."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        if prefix:
            loc = f"{prefix}.{loc}" if loc != "(root)" else prefix
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not part of the contract)"
        lines.append(f"{loc}: {msg}")
    return f"{len(lines)} validation error(s):\n" + "\n".join(f"  - {line}" for line in lines)


# --------------------------------------------------------------------------
# Tool requests and responses
# --------------------------------------------------------------------------

StarAxis = Literal["dtype", "shape", "strides", "storage_offset", "layout", "mode", "attribute", "values",
                   "length", "none", "dim"]
_DIM_REF_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.shape\[-?[0-9]{1,2}\]$")


# What a star value can be on some axis: a dtype, layout or mode name, a shape or strides list, an
# offset, length or size, a bool (axis none), an attribute value, or a ValueSpec (axis values).
# Published as that union; the value stays as given (JSON) and expand_star checks it against its
# axis, naming the variation and the value.
StarValue = Annotated[Any, PlainValidator(lambda value: value, json_schema_input_type=Union[AttributeValue, ValueSpec])]


class StarVariation(Strict):
    """One axis varied around the base case; one new case per value."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_compact_schema)  # titles dropped: schema budget

    axis: StarAxis
    input: Ident | None = Field(None, description="null: all (dtype/layout) or the first")
    name: Ident | None = Field(None, description="axis attribute: name")
    member: Annotated[int, Field(ge=0)] | None = Field(None, description="tensor-list member the input axis varies")
    values: list[StarValue] = Field(min_length=1, max_length=64)
    dims: list[str] = Field(default_factory=list, description="axis 'dim': ['x.shape[0]']")

    @model_validator(mode="after")
    def _needs_name(self) -> "StarVariation":
        if self.axis == "attribute" and not self.name:
            raise ValueError("axis 'attribute' needs 'name'")
        if self.axis != "attribute" and self.name is not None:
            raise ValueError("'name' is only for axis 'attribute'")
        if self.axis in ("length", "none") and not self.input:
            raise ValueError(f"axis '{self.axis}' needs 'input'")
        if self.axis == "dim":
            if not self.dims or len(self.dims) > 16:
                raise ValueError("axis 'dim' needs 'dims', 1 to 16 of them (e.g. ['x.shape[-1]', 'weight.shape[0]'])")
            bad_refs = [d for d in self.dims if not _DIM_REF_RE.match(d)]
            if bad_refs:
                raise ValueError(f"dims {bad_refs} must read NAME.shape[INDEX], e.g. 'x.shape[-1]'")
            if self.input is not None:
                raise ValueError("axis 'dim' names its inputs in 'dims', not 'input'")
            bad = [v for v in self.values if isinstance(v, bool) or not isinstance(v, int) or v < 0]
            if bad:
                raise ValueError(f"axis 'dim' values must be non-negative integers (sizes), not {bad}")
        elif self.dims:
            raise ValueError("'dims' is only for axis 'dim'")
        return self


class StarSpec(Strict):
    """A base case plus one-axis variations (not a product)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_compact_schema)  # titles dropped: schema budget

    base: Union[Case, Annotated[str, AfterValidator(_slug)]]  # a case, or a planned case's id
    vary: list[StarVariation] = Field(min_length=1)
    include_base: bool = True


class PlanRequest(Strict):
    config: OperatorConfig | None = Field(None, description="new run")
    run_id: Slug | None = Field(None, description="append: the run")
    append: bool = Field(False, description="add to an existing run")
    cases: list[Case] = Field(default_factory=list, description="explicit cases")
    stars: list[StarSpec] = Field(default_factory=list, description="base + one-axis variations")
    module_sources: dict[ModuleFile, Annotated[str, Field(max_length=2_000_000)]] = Field(
        default_factory=dict, description="source of each config.operator.modules file")
    captured_files: dict[Slug, Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=dict, description="name -> torch.save file path on the server's machine")
    captures: Annotated[list[CaptureSelection], AfterValidator(_at_most_16)] = Field(
        default_factory=list, description="calls to replay")

    @model_validator(mode="after")
    def _shape(self) -> "PlanRequest":
        if self.append:
            if self.run_id is None and self.config is None:
                raise ValueError("append needs 'run_id' (or 'config' whose run_id names the run)")
        elif self.config is None:
            raise ValueError("a new run needs 'config' (set append=true to add cases to an existing run)")
        if self.config is not None and self.run_id is not None and self.run_id != self.config.run_id:
            raise ValueError(f"'run_id' {self.run_id!r} differs from config.run_id {self.config.run_id!r}")
        if not self.cases and not self.stars and not self.captures:
            raise ValueError("give at least one case in 'cases', one star in 'stars' or one capture in 'captures'")
        if self.config is not None and not self.append:
            missing = [m for m in self.config.operator.modules if m not in self.module_sources]
            if missing:
                raise ValueError(f"config.operator.modules names {missing} but 'module_sources' lacks them")
        return self

    @property
    def target_run_id(self) -> str:
        return self.run_id or self.config.run_id  # type: ignore[union-attr]


class PlannedCase(Strict):
    id: str = Field(description="case id")
    mode: Mode = Field(description="its mode")
    axes: dict[str, str] = Field(description="axis -> value")
    state: Literal["pending", "passed", "numerical_mismatch", "crash", "unsupported"] = Field(
        "pending", description="pending or its status")


class PlanResponse(Strict):
    run_id: str = Field(description="the run")
    run_dir: str = Field(description="its evidence directory")
    created: bool = Field(description="a new run")
    added: list[str] = Field(description="case ids added")
    cases: list[PlannedCase] = Field(description="The cases this call added, with their axes (the first 50).")
    cases_omitted: int = Field(0, description="Added cases left out of 'cases' (see opdebug://runs/{run_id}/matrix).")
    case_count: int = Field(0, description="Cases planned in the run, this call's included.")
    recorded_count: int = Field(0, description="Cases of the run that have a result.")
    warnings: list[str] = Field(default_factory=list, description="e.g. cases differing in several axes")


PENDING_LIST_LIMIT = 20
PLANNED_LIST_LIMIT = 50


class RecordResponse(Strict):
    run_id: str = Field(description="the run")
    case_id: str = Field(description="the case")
    status: Status = Field(description="its status")
    recorded_at: datetime = Field(description="when")
    raw_path: str = Field(description="raw evidence, relative to the run directory")
    pending: list[str] = Field(description="The first pending case ids in plan order (at most 20; see pending_count).")
    pending_count: int = Field(0, description="How many planned cases have no result yet.")


class CaseOutcome(Strict):
    """One normalized outcome of run_case_remote, small enough for an agent."""

    case_id: str = Field(description="the case")
    state: Literal["passed", "numerical_mismatch", "crash", "unsupported", "pending"] = Field(
        description="status, or pending (nothing recorded)")
    recorded: bool = Field(description="a result was recorded")
    host: str | None = Field(None, description="host")
    device: str | None = Field(None, description="device")
    summary: str = Field(description="one line for people")
    failed_outputs: list[str] = Field(default_factory=list, description="outputs that failed")
    max_abs: float | None = Field(None, description="largest max_abs")
    mismatch_ratio: float | None = Field(None, description="largest mismatch_ratio")
    signature: str | None = Field(None, description="crash/unsupported signature")
    matched_rule: str | None = Field(None, description="unsupported rule matched")
    error: str | None = Field(None, description="why it stayed pending (harness, reference, connection)")
    raw_path: str | None = Field(None, description="raw evidence, relative to the run directory")
    rerun_case: dict[str, Any] | None = Field(
        None, description="this case under a new id for plan_cases(append=true, cases=[rerun_case]): killed from "
                          "outside")


class RunResponse(Strict):
    run_id: str = Field(description="the run")
    hosts: list[str] = Field(description="hosts used")
    outcomes: list[CaseOutcome] = Field(description="one per case run")
    recorded: list[str] = Field(description="case ids recorded")
    pending: list[str] = Field(description="The first pending case ids in plan order (at most 20; see pending_count).")
    pending_count: int = Field(0, description="How many planned cases of the run have no result yet.")
    refused: list[str] = Field(default_factory=list, description="already recorded, not re-run")
    rerun_hint: str | None = Field(None, description="what to do next")


# --------------------------------------------------------------------------
# narrow_failure (the autopilot)
# --------------------------------------------------------------------------


class NarrowRequest(Strict):
    run_id: Slug
    hosts: list[Slug] | None = Field(default=None, description="Default ['local'].")
    max_cases: Annotated[int, Field(ge=1, le=10000)] = Field(default=40, description="new cases in all")
    max_seconds: Annotated[float, Field(gt=0, le=86400)] = Field(default=900.0)
    max_steps: Annotated[int, Field(ge=1, le=100)] = Field(default=12, description="plan-run-analyze rounds")
    cases_per_step: Annotated[int, Field(ge=1, le=256)] = Field(default=8)


class NarrowStep(Strict):
    index: int = Field(description="1-based round number")
    kinds: list[str] = Field(description="the kinds of next cases applied (discriminate, bisect, probe, explore)")
    axes: list[str] = Field(description="the finding axes they narrowed")
    cases: dict[str, str] = Field(description="new case id -> its state after the run")
    findings: list[str] = Field(description="the findings' predicates after the round (exact ones marked)")


class NarrowResponse(Strict):
    run_id: str = Field(description="the run")
    stopped: str = Field(description="why it stopped: exact, nothing_to_try, budget_cases, budget_seconds, "
                                     "budget_steps, no_progress, no_failure")
    exact: bool = Field(description="every finding is exact")
    findings: list[Finding] = Field(description="the final findings with their minimal pairs")
    steps: list[NarrowStep] = Field(description="the rounds taken, each ordinary planned and recorded cases")
    cases_run: int = Field(description="new cases planned and run")
    seconds: float = Field(description="wall time")
    summary: str = Field(description="the analysis summary after the last round")
