"""Structured axes of a case: the labels analysis has always used plus derived
ones, typed so that ordered axes (sizes, element counts, offsets, widths,
magnitudes, numeric attributes) are numbers and the rest are strings or bools.

Axis names (per input ``x``): ``x.rank``, ``x.shape[0]`` ... ``x.shape[-1]``
(the last dimension is always ``[-1]``, the others count from 0), ``x.numel``,
``x.zero_size``, ``x.last_align`` (the largest power of two dividing the last
dimension, uncapped; absent for a size of 0), ``x.contiguity`` (contiguous / transposed / sliced /
broadcast / overlapping), ``x.offset`` (a number), ``x.offset_nonzero`` and ``x.offset_align`` (its
alignment, uncapped; absent for offset 0, which every power of two divides),
``x.dtype_family`` / ``x.dtype_bits``, ``x.has_nan`` / ``x.has_inf`` /
``x.has_large`` / ``x.has_denormal``, ``x.magnitude`` (the scale of the
generated values); for the case: ``mode``, ``dtype`` and ``attr.NAME`` (an attribute passed as None is
absent, as the condition language reads it, and ``attr.NAME.none`` is true).
Each derived axis has a *source*: the variation axis (axes.distance_axes) that moves
it (``x.shape``, ``x.strides``, ``x.offset``, ``x.values``, ``dtype``,
``mode``, ``attr.NAME``); minimal pairs are looked for among cases that
differ only in that source.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..schemas import DTYPE_FAMILIES, Case, TensorSpec, contiguous_strides
from .axes import OPTION_AXES, case_axes, distance_axes, distance_from_labels, own_labels
from .memo import by_content, once, sealed

UNSET = "unset"
NONE_ATTR = ".none"  # attr.NAME.none: the attribute is passed as None
CONTIGUITY = ("contiguous", "transposed", "sliced", "broadcast", "overlapping")
DTYPE_BITS = {
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float64": 64,
    "int8": 8,
    "uint8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
    "bool": 8,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
    "complex64": 64,
    "complex128": 128,
    "uint16": 16,
    "uint32": 32,
    "uint64": 64,
    "hifloat8": 8,
    "float4_e2m1fn_x2": 8,
    "float4_e1m2fn_x2": 8,
    "int4": 4,
}
_SHAPE_SUFFIX = ".shape["


def dim_axis(name: str, index: int, rank: int) -> str:
    """The axis name of one dimension: the last is ``[-1]``, the others count from 0."""
    return f"{name}.shape[-1]" if index == rank - 1 else f"{name}.shape[{index}]"


def parse_dim_axis(axis: str) -> tuple[str, int] | None:
    """``x.shape[-1]`` -> ("x", -1); None for another axis."""
    if not axis.endswith("]") or _SHAPE_SUFFIX not in axis:
        return None
    name, _, index = axis[:-1].partition(_SHAPE_SUFFIX)
    try:
        return name, int(index)
    except ValueError:
        return None


def alignment(size: int) -> int | None:
    """The largest power of two dividing a size (uncapped: up to the size);
    None for 0 (every power of two divides it: the axis is left out)."""
    return size & -size if size > 0 else None


def contiguity(shape: list[int], strides: list[int] | None) -> str:
    """contiguous (row-major dense), transposed (dense in another dimension
    order), sliced (no element twice, with gaps), broadcast (a 0 stride on a
    dimension over 1), overlapping (some element reached twice otherwise)."""
    if strides is None:
        return "contiguous"
    # one stride per dimension: TensorSpec checks the rank, the callers build them so
    dims = [(st, sz) for sz, st in zip(shape, strides, strict=True) if sz != 1]
    if any(sz == 0 for sz in shape) or not dims:
        return "contiguous"
    if any(st == 0 for st, _ in dims):
        return "broadcast"
    if [st for st, _ in dims] == [st for sz, st in zip(shape, contiguous_strides(shape), strict=True) if sz != 1]:
        return "contiguous"
    ordered = sorted(dims)
    acc, dense, overlapping = 1, True, False
    for st, sz in ordered:
        if st != acc:
            dense = False
        if st < acc:
            overlapping = True
        acc = st * sz if st >= acc else acc + st * (sz - 1)
    if dense:
        return "transposed"
    return "overlapping" if overlapping else "sliced"


def magnitude(spec: TensorSpec) -> float | None:
    """The scale of the generated values (specials aside): |mean| + std for
    normal, the largest |bound| for uniform/randint, |fill|, 1 for ones..."""
    v = spec.values.for_dtype(spec.dtype)
    if v.kind == "normal":
        return abs(v.mean) + v.std
    if v.kind in ("uniform", "randint"):
        return max(abs(v.low or 0.0), abs(v.high or 0.0))
    if v.kind == "full":
        return abs(v.fill or 0.0)
    if v.kind == "ones":
        return 1.0
    if v.kind == "zeros":
        return 0.0
    if v.kind == "arange":
        return float(max(math.prod(spec.shape) - 1, 0))
    return None


def _family(dtype: str) -> str:
    return next((fam for fam, members in DTYPE_FAMILIES.items() if dtype in members), "other")


def input_axes(spec: TensorSpec, n: str) -> dict[str, Any]:
    """The derived axes of one tensor, named ``n`` (an input, or ``x[1]`` for a list member); once per
    distinct spec (memo.by_content)."""
    return by_content("input_axes", n, spec, lambda: _input_axes(spec, n))


def _input_axes(spec: TensorSpec, n: str) -> dict[str, Any]:
    rank = len(spec.shape)
    out: dict[str, Any] = {f"{n}.rank": rank}
    for i, size in enumerate(spec.shape):
        out[dim_axis(n, i, rank)] = size
    if rank and spec.shape[-1] > 0:
        out[f"{n}.last_align"] = alignment(spec.shape[-1])
    numel = math.prod(spec.shape)
    out[f"{n}.numel"] = numel
    out[f"{n}.zero_size"] = numel == 0
    out[f"{n}.contiguity"] = contiguity(spec.shape, spec.strides)
    out[f"{n}.offset"] = spec.storage_offset
    out[f"{n}.offset_nonzero"] = spec.storage_offset != 0
    if spec.storage_offset > 0:
        out[f"{n}.offset_align"] = alignment(spec.storage_offset)
    out[f"{n}.dtype_family"] = _family(spec.dtype)
    if spec.dtype in DTYPE_BITS:
        out[f"{n}.dtype_bits"] = DTYPE_BITS[spec.dtype]
    specials = {s.value for s in spec.values.for_dtype(spec.dtype).specials}
    out[f"{n}.has_nan"] = "nan" in specials
    out[f"{n}.has_inf"] = bool(specials & {"inf", "-inf"})
    out[f"{n}.has_large"] = bool(specials & {"large", "-large"})
    out[f"{n}.has_denormal"] = "denormal" in specials
    mag = magnitude(spec)
    if mag is not None:
        out[f"{n}.magnitude"] = mag
    return out


def attr_json(value: Any) -> Any:
    """An attribute as JSON data: a dtype argument as ``{"kind": "dtype", "value": ...}``."""
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def _attr_value(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return json.dumps(attr_json(value), sort_keys=True)


def attr_from_axis(value: Any) -> Any:
    """The attribute an ``attr.NAME`` axis value stands for (the inverse of the axis text: a number as it
    is, anything else decoded once from its JSON text - a dtype argument back to its ``{"kind": "dtype"}``
    form, never the text itself)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def structured_axes(case: Case, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Every axis of a case: the string labels of ``case_axes`` (``x.offset``
    and numeric attributes as numbers) plus the derived per-input axes.  ``labels``: its
    ``case_axes`` when at hand; once per sealed case (memo.py) when they are (or are None)."""
    if not sealed(case):
        return _structured_axes(case, labels if labels is not None else case_axes(case))
    own = own_labels(case)
    if labels is None or labels == own:
        return once(case, "structured_axes", lambda: _structured_axes(case, own))
    return _structured_axes(case, labels)


def _structured_axes(case: Case, labels: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(labels)
    for spec in case.inputs:
        if spec.none:
            continue
        if spec.tensors is not None:
            out[f"{spec.name}.len"] = len(spec.tensors)
            for j, member in enumerate(spec.tensors):
                out.update(input_axes(member, f"{spec.name}[{j}]"))
        else:
            out.update(input_axes(spec, spec.name))
    for name, value in case.attributes.items():
        if value is None:  # absent, as the condition language reads it; the class attr.NAME.none says it
            out.pop(f"attr.{name}", None)
            out[f"attr.{name}{NONE_ATTR}"] = True
        else:
            out[f"attr.{name}"] = _attr_value(value)
    return out


CHANNELS_LAST = {4: "channels_last", 5: "channels_last_3d"}  # by rank


def memory_format(shape: list[int], strides: list[int] | None) -> str:
    """torch's name of the layout: ``contiguous_format`` (row-major), ``channels_last`` (rank 4,
    the channels innermost: N, H, W, C in memory), ``channels_last_3d`` (rank 5), else ``none``.
    Dimensions of size 1 take any stride, as torch's own checks allow."""
    if contiguity(shape, strides) == "contiguous":
        return "contiguous_format"
    rank = len(shape)
    if rank not in CHANNELS_LAST or strides is None:
        return "none"
    expected, acc = [0] * rank, 1
    for d in [1, *range(rank - 1, 1, -1), 0]:  # innermost first: C, W, H, (D), N
        expected[d] = acc
        acc *= max(shape[d], 1)
    same = all(st == ex for st, ex, size in zip(strides, expected, shape, strict=True) if size != 1)
    return CHANNELS_LAST[rank] if same else "none"


def source_of(axis: str) -> str:
    """The variation axis (a key of axes.distance_axes) that moves ``axis``."""
    if axis.startswith("attr.") and axis.endswith((".value", NONE_ATTR)):  # an integer attribute as a category,
        return axis.rsplit(".", 1)[0]  # or an attribute passed as None
    if axis in ("mode",) or axis in OPTION_AXES or axis.startswith("attr."):
        return axis
    if "~" in axis:  # a relation: the source of its first side (relations.relation_sides gives both)
        return source_of(axis.split("~", 1)[0])
    if axis == "dtype" or axis.endswith((".dtype", ".dtype_family", ".dtype_bits")):
        return "dtype"
    if axis.endswith(".layout"):
        return "layout"
    name = axis.split(".", 1)[0]
    field = axis[len(name) + 1 :]
    if field in (
        "shape",
        "rank",
        "numel",
        "zero_size",
        "last_align",
        "bytes",
        "rows",
        "last_align_bytes",
    ) or field.startswith(("shape[", "align[")):
        return f"{name}.shape"
    if field in ("strides", "contiguity", "memory_format") or field.startswith("stride["):
        return f"{name}.strides"
    if field in ("offset", "offset_nonzero", "offset_align"):
        return f"{name}.offset"
    return f"{name}.values"


def case_distance_axes(case: Case, labels: dict[str, str] | None = None) -> dict[str, str]:
    """The variation axes of a case (axes.distance_axes), from its
    labels when they are at hand and no value spec depends on the dtype (then
    the planned and effective values are the same): no second pass."""
    if sealed(case) and labels is None:
        return once(case, "distance_axes", lambda: _distance_axes(case, None))
    if sealed(case) and labels == own_labels(case):
        return once(case, "case_distance_axes", lambda: _distance_axes(case, own_labels(case)))
    return _distance_axes(case, labels)


def _distance_axes(case: Case, labels: dict[str, str] | None) -> dict[str, str]:
    members = [m for i in case.inputs for m in i.members()]
    if labels is None or any(m.values.by_dtype for m in members) or any(i.values.by_dtype for i in case.inputs):
        return distance_axes(case)
    return distance_from_labels(case, labels)
