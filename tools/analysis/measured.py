"""The values actually built, as the tool's own hypotheses: the statistics the runner measured
(``CaseResult.values``) named as the condition language reads them, and each against the largest value
of the narrow floating dtypes (references/conditions.md: ``x.values.sumsq[-1] > float16.max``).

- :func:`measured_quantities`: per input of a recorded case, every statistic of ``InputValues`` that is
  one number (``x.values.min``, ``x.values.max``, ``x.values.max_abs``) and every per-dimension one at the
  last dimension (``x.values.sumsq[-1]``, ``x.values.sum_abs[-1]``: a row's), and for the non-negative ones
  a class per limit (``x.values.max_abs > float16.max``) - the names come from the schema the runner
  fills, not from a list here;
- :func:`predicted_quantities`: the same names for a case not yet run, where its value spec decides them
  (zeros, ones, a fill, values placed at positions; a placed value beyond a bounded generator's range is
  its maximum or minimum) - every other statistic is unknown until it ran, and a prediction over it is
  unknown too (hypotheses.Atom.predict), never a guess;
- :func:`stat_moves`: value specs that put a statistic at a target with known values, two ways (one
  outlier placed into zeros or into the base's bounded generator, or every element the same fill): the
  other generators and draws that put the statistic on either side of a boundary.

Bounded: one pass over each recorded case's measured statistics; nothing reads a tensor.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from ..conditions.limits import LIMITS
from ..schemas import Case, CaseResult, TensorSpec
from ..schemas.result import InputValues

VALUES = ".values."
LIMIT_DTYPES = tuple(d for d in ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2") if d in LIMITS)
ABOVE = " > "
LIMIT_STEP = 0.05  # a limit class is moved to 5% either side of the limit
_LISTS = tuple(k for k, f in InputValues.model_fields.items() if getattr(f.annotation, "__origin__", None) is list)
_SCALARS = tuple(
    k
    for k, f in InputValues.model_fields.items()
    if k not in _LISTS and f.default is None  # the statistics that are one number (absent when none is finite)
)
_NONNEG = ("max_abs", *(f"{k}[-1]" for k in _LISTS))


def is_measured(axis: str) -> bool:
    return VALUES in axis


def limit_sides(axis: str) -> tuple[str, float] | None:
    """``x.values.sumsq[-1] > float16.max`` -> ("x.values.sumsq[-1]", 65504.0); None for another axis."""
    if VALUES not in axis or ABOVE not in axis:
        return None
    stat, _, lim = axis.partition(ABOVE)
    dtype, _, field = lim.partition(".")
    value = LIMITS.get(dtype, {}).get(field)
    return None if value is None else (stat, float(value))


def _with_limits(out: dict[str, Any]) -> dict[str, Any]:
    for key in [k for k in out if k.endswith(_NONNEG)]:
        for d in LIMIT_DTYPES:
            out[f"{key}{ABOVE}{d}.max"] = out[key] > LIMITS[d]["max"]
    return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def measured_quantities(result: CaseResult | None) -> dict[str, Any]:
    """The statistics the runner measured of one recorded case (see the module docstring)."""
    out: dict[str, Any] = {}
    for name, stats in ((result.values or {}) if result is not None else {}).items():
        for k in _SCALARS:
            v = getattr(stats, k, None)
            if _num(v):
                out[f"{name}{VALUES}{k}"] = v
        for k in _LISTS:
            seq = getattr(stats, k, None) or []
            if seq and _num(seq[-1]):
                out[f"{name}{VALUES}{k}[-1]"] = seq[-1]
    return _with_limits(out)


# --------------------------------------------------------------------------
# Predicted: what a value spec decides before the case runs
# --------------------------------------------------------------------------


def as_dtype(v: float, dtype: str) -> float | None:
    """``v`` as ``dtype`` holds it (round to nearest even); None when unknown here or past its range."""
    try:
        if dtype == "float16":
            out = struct.unpack("<e", struct.pack("<e", v))[0]
        elif dtype == "float32":
            out = struct.unpack("<f", struct.pack("<f", v))[0]
        elif dtype == "bfloat16":
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            out = struct.unpack("<f", struct.pack("<I", bits))[0]
        elif dtype == "float64":
            out = float(v)
        elif dtype in LIMITS and "tiny" not in LIMITS[dtype]:  # an integer dtype
            out = int(v) if float(v).is_integer() and LIMITS[dtype]["min"] <= v <= LIMITS[dtype]["max"] else None
        else:
            return None
    except (OverflowError, struct.error):
        return None
    return out if out is not None and math.isfinite(out) else None


def _bounds(spec: TensorSpec) -> tuple[float | None, float | None, float | None]:
    """(fill, low, high): every element equals ``fill`` (before placed values), else the generator's range
    (inclusive, as the dtype rounds it); all None when the spec does not bound its values."""
    v = spec.values.for_dtype(spec.dtype)
    if v.specials or v.exclude_zero:
        return None, None, None
    fill = {"zeros": 0.0, "ones": 1.0}.get(v.kind, v.fill if v.kind == "full" else None)
    if v.kind == "normal" and v.std == 0:
        fill = v.mean
    if fill is not None:
        return as_dtype(fill, spec.dtype), None, None
    if v.kind in ("uniform", "randint") and v.low is not None and v.high is not None:
        high = v.high - 1 if v.kind == "randint" else v.high
        return None, as_dtype(v.low, spec.dtype), as_dtype(high, spec.dtype)
    return None, None, None


def _placed(spec: TensorSpec) -> list[tuple[list[int], float]] | None:
    out = []
    for p in spec.values.for_dtype(spec.dtype).place:
        if isinstance(p.value, str):
            return None
        v = as_dtype(p.value, spec.dtype)
        if v is None:
            return None
        out.append((list(p.index), v))
    return out


def tensor_predicted(spec: TensorSpec, n: str) -> dict[str, Any]:
    """The statistics of one input that its value spec decides (see the module docstring)."""
    shape = spec.shape or []
    numel = math.prod(shape)
    placed = _placed(spec)
    if not shape or numel == 0 or placed is None:
        return {}
    fill, low, high = _bounds(spec)
    out: dict[str, Any] = {}
    last = {tuple(i): v for i, v in placed}  # the last write at a position wins
    vals = list(last.values())
    if fill is not None:
        covered = len(last) >= numel
        every = vals + ([] if covered else [fill])
        row = shape[-1]
        rows: dict[tuple, dict[int, float]] = {}
        for i, v in last.items():
            rows.setdefault(i[:-1], {})[i[-1]] = v
        sums = [(row - len(r)) * fill * fill + sum(v * v for v in r.values()) for r in rows.values()]
        abs_ = [(row - len(r)) * abs(fill) + sum(abs(v) for v in r.values()) for r in rows.values()]
        if len(rows) < numel // max(row, 1):
            sums.append(row * fill * fill)
            abs_.append(row * abs(fill))
        out.update({"min": min(every), "max": max(every), "max_abs": max(abs(v) for v in every)})
        out.update({"sumsq[-1]": max(sums), "sum_abs[-1]": max(abs_)})
    elif low is not None and high is not None and vals:
        top, bottom = max(vals), min(vals)
        if top >= high:
            out["max"] = top
        if bottom <= low:
            out["min"] = bottom
        big = max(abs(v) for v in vals)
        if big >= max(abs(low), abs(high)):
            out["max_abs"] = big
    return {f"{n}{VALUES}{k}": v for k, v in out.items()}


def predicted_quantities(case: Case) -> dict[str, Any]:
    """The statistics a case's value specs decide before it runs, with their limit classes."""
    out: dict[str, Any] = {}
    for spec in case.inputs:
        if not spec.none and spec.tensors is None and spec.shape is not None:
            out.update(tensor_predicted(spec, spec.name))
    return _with_limits(out)


# --------------------------------------------------------------------------
# Moves: a statistic set to a target with known values
# --------------------------------------------------------------------------


def _value_docs(spec: TensorSpec, stat: str, target: float) -> list[dict]:
    """Value specs that put ``stat`` of ``spec`` near ``target``: one outlier (into the base's own bounded
    generator when the outlier passes its range, else into zeros), and every element one fill."""
    shape = spec.shape or []
    row, numel = (shape[-1] if shape else 1), math.prod(shape)
    integer = "tiny" not in LIMITS.get(spec.dtype, {"tiny": 0})
    if not shape or numel == 0 or row == 0:
        return []
    if stat in ("sumsq[-1]",):
        one, each = (math.sqrt(target), math.sqrt(target / row)) if target >= 0 else (None, None)
    elif stat in ("sum_abs[-1]",):
        one, each = (target, target / row) if target >= 0 else (None, None)
    elif stat in ("max", "min", "max_abs"):
        one, each = target, target
        if stat == "max_abs" and target < 0:
            return []
    else:
        return []
    if integer:
        one = float(round(one)) if one is not None else None
        each = float(round(each)) if each is not None and float(each).is_integer() else None
    index = [0] * len(shape)
    out: list[dict] = []
    v = spec.values.for_dtype(spec.dtype)
    _, low, high = _bounds(spec)
    signs = (1, -1) if stat == "max_abs" and as_dtype(-1.0, spec.dtype) == -1.0 else (1,)  # |x| from either side
    for value in [s * one for s in signs] if one is not None and as_dtype(one, spec.dtype) is not None else []:
        outlier = {"place": [{"index": index, "value": int(value) if integer else value}]}
        own = v.model_dump(mode="json", exclude_none=True, exclude_defaults=True) or {"kind": "normal"}
        own.pop("by_dtype", None)
        own.pop("place", None)
        past = low is not None and high is not None and (value <= low if stat == "min" else value >= high)
        if past or (stat == "max_abs" and low is not None and high is not None and abs(value) >= max(-low, high)):
            out.append(own | outlier)  # the base's draw kept: one element moved past its range
        if stat != "min" or value < 0:
            out.append({"kind": "zeros"} | outlier)
    if each is not None and as_dtype(each, spec.dtype) is not None:
        out.append({"kind": "full", "fill": int(each) if integer else each} if each else {"kind": "zeros"})
    return out


def stat_moves(base: Case, axis: str, target: Any) -> list[tuple[dict, Any]]:
    """Set a measured statistic (``x.values.max``) to a number, or a limit class
    (``x.values.sumsq[-1] > float16.max``) true or false: each a values variation of that input whose
    statistic is known before it runs (:func:`predicted_quantities` reads it back)."""
    lim = limit_sides(axis)
    if lim is not None:
        if not isinstance(target, bool):
            return []
        axis, bound = lim[0], lim[1] * (1 + LIMIT_STEP if target else 1 - LIMIT_STEP)
        target = bound
    if isinstance(target, bool) or not _num(target):
        return []
    name, _, stat = axis.partition(VALUES)
    spec = next((i for i in base.inputs if i.name == name and not i.none and i.tensors is None), None)
    if spec is None or spec.shape is None:
        return []
    current = spec.values.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    return [
        ({"axis": "values", "input": name}, doc) for doc in _value_docs(spec, stat, float(target)) if doc != current
    ]
