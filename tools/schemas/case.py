"""A case as data: how each input is made (values, specials, shape, strides,
offset, dtype, layout), a case with its mode and attributes, where a case
planned from a capture came from, and stars (a base case plus one-axis
variations)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, ConfigDict, Field, PlainValidator, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from .base import (
    DTYPE_FAMILIES,
    DTYPES,
    FLOAT_DTYPES,
    MAX_STORAGE_ELEMENTS,
    Dtype,
    FiniteFloat,
    Ident,
    Layout,
    Mode,
    NonNegFinite,
    Slug,
    Strict,
    check_slug,
    drop_titles,
    dtype_family,
)
from .consistency import BatchInvariance

# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

SpecialKind = Literal["nan", "inf", "-inf", "denormal", "+0", "-0", "large", "-large"]


class SpecialValues(Strict):
    """Special values put into a generated tensor."""

    value: SpecialKind = Field(
        description="the special value: nan, inf, -inf, denormal (the dtype's smallest "
        "subnormal), +0, -0, large/-large (near the dtype's max)"
    )
    positions: list[list[Annotated[int, Field(ge=0)]]] | None = Field(None, description="multi-indices")
    count: Annotated[int, Field(ge=1)] | None = Field(None, description="or: N seeded random positions")

    @model_validator(mode="after")
    def _one_way(self) -> SpecialValues:
        if (self.positions is None) == (self.count is None):
            raise ValueError("give exactly one of 'positions' or 'count'")
        return self


MAX_PLACED = 64


class PlacedValue(Strict):
    """One given value at one given position, written after generation and the specials."""

    index: list[Annotated[int, Field(ge=0)]] = Field(description="the multi-index, one per dimension")
    value: FiniteFloat | int | Literal["nan", "inf", "-inf"] = Field(description="a number, nan, inf or -inf")


class ValueSpec(Strict):
    """Values made on CPU from the case seed: mean/std normal; low/high uniform, randint; fill full."""

    kind: Literal["normal", "uniform", "randint", "zeros", "ones", "full", "arange", "captured"] = Field(
        "normal",
        description="how the values are made on CPU from the case seed (the same bits for candidate and reference)",
    )
    mean: FiniteFloat = Field(0.0, description="normal: the mean")
    std: NonNegFinite = Field(1.0, description="normal: the standard deviation")
    low: FiniteFloat | None = Field(None, description="uniform, randint: the lower bound (inclusive)")
    high: FiniteFloat | None = Field(None, description="uniform, randint: the upper bound (exclusive)")
    fill: FiniteFloat | None = Field(None, description="full: the value of every element")
    captured: Annotated[str, AfterValidator(check_slug)] | None = Field(
        None, description="captured: a captured_files name (artifacts/captured/)"
    )
    specials: list[SpecialValues] = Field(
        default_factory=list, description="special values put in after generation (nan, inf, denormal...)"
    )
    exclude_zero: bool = Field(False, description="generated zeros become the smallest non-zero step")
    # given values at given positions, written last (one outlier of 300): accepted, not published
    # (tools/list budget; references/behavior.md, "Values")
    place: SkipJsonSchema[list[PlacedValue]] = Field(default_factory=list, max_length=MAX_PLACED)
    by_dtype: dict[str, ValueSpec] = Field(
        default_factory=dict, description="per dtype or family (float, int...): dtype, then family, then this spec"
    )

    @model_validator(mode="after")
    def _check(self) -> ValueSpec:
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

    def for_dtype(self, dtype: str) -> ValueSpec:
        """The spec that applies to an input of ``dtype``."""
        sub = self.by_dtype.get(dtype) or self.by_dtype.get(dtype_family(dtype))
        return sub if sub is not None else self


def _check_placed(place: list[PlacedValue], shape: list[int], floating: bool) -> None:
    """Each placed value's index against the input's shape, its value against the dtype."""
    for k, item in enumerate(place):
        where = f"values.place[{k}]"
        if len(item.index) != len(shape) or any(i >= size for i, size in zip(item.index, shape, strict=True)):
            raise ValueError(f"{where}.index {item.index} is outside the input's shape {shape}")
        if not floating and (isinstance(item.value, str) or item.value != int(item.value)):
            raise ValueError(f"{where}.value {item.value!r} needs a floating dtype (the input's is not)")


class TensorSpec(Strict):
    """One tensor of a list."""

    shape: list[Annotated[int, Field(ge=0)]] = Field(description="sizes per dimension ([] is a scalar tensor)")
    strides: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="in elements, one per dimension (built with as_strided); null: contiguous"
    )
    storage_offset: Annotated[int, Field(ge=0)] = Field(0, description="in elements, into the storage")
    dtype: Dtype = Field("float32", description="the tensor's dtype, built exactly (never cast)")
    layout: Layout = Field("ND", description="storage format; not ND: torch_npu.npu_format_cast on npu")
    values: ValueSpec = Field(default_factory=ValueSpec, description="how the values are made (default normal)")

    @model_validator(mode="after")
    def _rank(self) -> TensorSpec:
        if self.shape is None:  # an InputSpec that is a tensor list or None
            return self
        if self.strides is not None and len(self.strides) != len(self.shape):
            raise ValueError(f"'strides' has rank {len(self.strides)} but 'shape' has rank {len(self.shape)}")
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
                if len(pos) != len(self.shape) or any(i >= size for i, size in zip(pos, self.shape, strict=True)):
                    raise ValueError(f"special '{special.value}' position {pos} is outside shape {self.shape}")
            if special.count is not None and special.count > numel:
                raise ValueError(
                    f"special '{special.value}' count {special.count} is over the {numel} elements "
                    f"of shape {self.shape}"
                )
        floating = FLOAT_DTYPES + DTYPE_FAMILIES["float8"]
        _check_placed(values.place, self.shape, self.dtype in floating)
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
    shape: list[Annotated[int, Field(ge=0)]] | None = Field(  # type: ignore[assignment]
        None, description="sizes per dimension ([] is a scalar tensor); null for a tensor list or none=true"
    )
    tensors: list[TensorSpec] | None = Field(
        None, min_length=1, max_length=128, description="a Tensor[] argument: one spec per member"
    )
    none: bool = Field(False, description="pass None (an optional Tensor? argument)")

    @model_validator(mode="after")
    def _kind(self) -> InputSpec:
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
    return offset + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True)) + 1


def contiguous_strides(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return list(reversed(strides))


# --------------------------------------------------------------------------
# Captures: a case planned from a model's real call
# --------------------------------------------------------------------------


class CaseOrigin(Strict):
    """Where a case came from when it was planned from a capture or a dump."""

    kind: Literal["captured_call", "accuracy_dump", "capture_star"] = Field(
        description="captured_call/accuracy_dump: the model's real call; capture_star: a one-axis variation around it"
    )
    source: Annotated[str, Field(max_length=4096)] = Field(
        description="the capture directory or dump.json it came from"
    )
    call: Annotated[str, Field(max_length=512)] = Field(
        description="the call id in the capture index (stage#N) or the dump's API name"
    )
    target: Annotated[str, Field(max_length=512)] | None = Field(
        None, description="the operator the model called, as recorded"
    )
    exact: bool = Field(description="true when every tensor input replays the recorded values exactly")
    stats: dict[str, dict[str, float | int | str | None]] = Field(
        default_factory=dict,
        description="per input, the recorded value statistics (numel, nan, inf, min, max, mean, absmax)",
    )
    stack: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=16, description="the innermost source frames of the recorded call"
    )


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
    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)

    dir: Annotated[str, AfterValidator(_capture_dir)] = Field(description="capture dir or dump.json")
    calls: Annotated[list[str], AfterValidator(_capture_calls)] = Field(
        default_factory=list, description="call ids; omit: all"
    )
    star: bool = Field(False, description="one-axis variations too")


class DtypeArg(Strict):
    """Passed as torch.<value> (torch_npu.<value> if Ascend-only)."""

    kind: Literal["dtype"] = Field(description="always 'dtype': this attribute is a torch dtype")
    value: Dtype = Field(description="the dtype passed")


AttributeValue = None | bool | int | float | str | DtypeArg | list[None | bool | int | float | str]

# --------------------------------------------------------------------------
# Backward: which inputs' gradients are compared, how the upstream
# gradient is made, compile with dynamic shapes
# --------------------------------------------------------------------------

# An output's name as comparisons name it: "out", "y", "state.0", "grad.weight", "grad.x[1]"
# (and "grad.*" for every gradient, in tolerance.per_output).  Checked by the validator, not
# by a published pattern (the tools/list budget).
_OUTPUT_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]*-]{0,199}$")


def _output_names(value: dict) -> dict:
    bad = [k for k in value if not _OUTPUT_NAME_RE.fullmatch(k)]
    if bad:
        raise ValueError(f"keys {bad} are not output names (e.g. 'out', 'y', 'grad.weight', 'grad.*')")
    return value


_Item = TypeVar("_Item")
OutputMap = Annotated[dict[str, _Item], AfterValidator(_output_names)]  # dict[output name, item], keys checked


OutputName = str
# The upstream gradient: one value spec for every differentiated output, one per output
# ({output: spec}; only those outputs are differentiated), or the gradient of a reduction
# of every output ("sum": ones, "mean": 1/numel).
GradOutput = Literal["sum", "mean"] | ValueSpec | OutputMap[ValueSpec]


def grad_output_captures(spec) -> list[str]:
    """The captured tensors (artifacts/captured/ names) a grad_output replays."""
    specs = (
        [] if spec is None or isinstance(spec, str) else [spec] if isinstance(spec, ValueSpec) else list(spec.values())
    )
    return [v.captured for v in specs if v.kind == "captured" and v.captured]


def check_grad_inputs(names: list[str], inputs: list[InputSpec], where: str) -> None:
    """``names`` (grad_inputs) name distinct tensor inputs of the case (a None input has no gradient)."""
    by_name = {i.name: i for i in inputs}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"{where} names {unknown}, which are not inputs of the case (inputs: {sorted(by_name)})")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{where} repeats {dupes}")
    nones = [n for n in names if by_name[n].none]
    if nones:
        raise ValueError(f"{where} names {nones}, passed as None: a None argument has no gradient")


def check_dynamic_dims(dims: list[str], inputs: list[InputSpec]) -> None:
    """Each ``NAME.shape[INDEX]`` of compile_dynamic names a dimension of a single-tensor input."""
    by_name = {i.name: i for i in inputs}
    bad = [d for d in dims if not _DIM_REF_RE.match(d)]
    if bad:
        raise ValueError(f"compile_dynamic dims {bad} must read NAME.shape[INDEX], e.g. 'x.shape[0]'")
    for ref in dims:
        name, index = ref[:-1].split(".shape[")
        spec = by_name.get(name)
        if spec is None:
            raise ValueError(f"compile_dynamic: {ref!r} names no input of the case (inputs: {sorted(by_name)})")
        if spec.shape is None or spec.none:
            raise ValueError(f"compile_dynamic: {ref!r}: input {name!r} is a tensor list or None, not one tensor")
        rank = len(spec.shape)
        if not -rank <= int(index) < rank:
            raise ValueError(f"compile_dynamic: {ref!r} is outside input {name!r} of rank {rank}")


class Case(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)  # titles dropped: schema budget

    id: Slug = Field(description="unique in the run; never reused (a recorded case is never overwritten)")
    mode: Mode = Field("eager", description="graph: capture + replay")
    inputs: list[InputSpec] = Field(min_length=1, description="the tensor arguments, in call order")
    attributes: dict[Ident, AttributeValue] = Field(default_factory=dict, description="non-tensor arguments")
    seed: Annotated[int, Field(ge=0, lt=2**63)] | None = Field(None, description="null: from the id")
    timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = Field(None, description="null: default_timeout_s")
    compile_timeout_s: Annotated[float, Field(gt=0)] | None = Field(default=None, description="compile budget, s")
    description: Annotated[str, Field(max_length=2000)] | None = Field(None, description="free text for people")
    # set by plan_cases for a case planned from 'captures' (not published in the input schema: agents never write it)
    origin: SkipJsonSchema[CaseOrigin | None] = None
    grad_inputs: list[Ident] | None = Field(
        None, description="inputs whose gradients are compared (outputs grad.<input>); null: the config's; []: none"
    )
    grad_output: GradOutput | None = Field(
        None, description="upstream gradient from the seed: a value spec, {output: spec}, 'sum' or 'mean'"
    )
    compile_dynamic: bool | list[str] | None = Field(
        None, description="compile with dynamic shapes (true) or these dims dynamic (['x.shape[0]'])"
    )
    repeats: Annotated[int, Field(ge=0, le=10)] | None = Field(
        None, description="failing case run again N times (null: config.repeats)"
    )
    batch_invariance: BatchInvariance | None = Field(None, description="null: the config's batch_invariance")
    after: list[Slug] = Field(
        default_factory=list,
        max_length=64,
        description="a probe: these planned cases run first, in order, on a fresh worker (order-dependence)",
    )

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
    def _unique_inputs(self) -> Case:
        names = [i.name for i in self.inputs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"input names must be unique; repeated: {dupes}")
        if self.grad_inputs:
            check_grad_inputs(self.grad_inputs, self.inputs, "grad_inputs")
        if isinstance(self.compile_dynamic, list):
            check_dynamic_dims(self.compile_dynamic, self.inputs)
        return self


# --------------------------------------------------------------------------
# Stars: a base case plus one-axis variations
# --------------------------------------------------------------------------

StarAxis = Literal[
    "dtype",
    "shape",
    "strides",
    "storage_offset",
    "layout",
    "mode",
    "attribute",
    "values",
    "length",
    "none",
    "dim",
    "grad_inputs",
    "compile_dynamic",
    "seed",
]
_DIM_REF_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.shape\[-?[0-9]{1,2}\]$")


# What a star value can be on some axis: a dtype, layout or mode name, a shape or strides list, an
# offset, length or size, a bool (axis none), an attribute value, or a ValueSpec (axis values).
# Published as that union; the value stays as given (JSON) and expand_star checks it against its
# axis, naming the variation and the value.
StarValue = Annotated[Any, PlainValidator(lambda value: value, json_schema_input_type=AttributeValue | ValueSpec)]


class StarVariation(Strict):
    """One axis varied around the base case; one new case per value."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)  # titles dropped: schema budget

    axis: StarAxis = Field(
        description="what varies: dtype, shape, strides, storage_offset, layout, mode, "
        "attribute (with name), values, length/none (a list or optional input), "
        "dim (sizes shared by several inputs)"
    )
    input: Ident | None = Field(None, description="null: all (dtype/layout) or the first")
    name: Ident | None = Field(None, description="axis attribute: name")
    member: Annotated[int, Field(ge=0)] | None = Field(None, description="tensor-list member the input axis varies")
    values: list[StarValue] = Field(
        min_length=1, max_length=64, description="one new case per value (of the axis' kind: a dtype, a shape...)"
    )
    dims: list[str] = Field(default_factory=list, description="axis 'dim': ['x.shape[0]']")
    also: list[StarVariation] = Field(
        default_factory=list,
        max_length=4,
        description="other axes set with each value: variations of one value each (two axes at once, e.g. a 2x2 cell)",
    )

    @model_validator(mode="after")
    def _needs_name(self) -> StarVariation:
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
        bad_also = [i for i, a in enumerate(self.also) if len(a.values) != 1 or a.also]
        if bad_also:
            raise ValueError(f"'also' entries {bad_also} must have exactly one value and no 'also' of their own")
        return self


StarVariation.model_rebuild()


class StarSpec(Strict):
    """A base case plus one-axis variations (not a product)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)  # titles dropped: schema budget

    base: Case | Annotated[str, AfterValidator(check_slug)] = Field(
        description="the base case, or a planned case's id (when appending)"
    )
    vary: list[StarVariation] = Field(min_length=1, description="one-axis variations of the base (not a product)")
    include_base: bool = Field(True, description="plan the base case too (false: only the variations)")
