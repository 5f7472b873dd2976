"""The integration boundary: what a failing captured call has that no passing
planned case has, and the planned cases that bridge the two.

When the model's real calls (cases planned from a capture or a dump:
``case.origin`` is ``captured_call`` or ``accuracy_dump``) fail and planned
cases pass, the difference is at the call site: the model feeds the operator
something the planned cases do not have.  :func:`integration_diff` lists it
per failing captured call, as boundary features over these axes:

- per input: ``<in>.kind`` (tensor, none, list[N]), ``<in>.dtype``, ``<in>.strides_class`` (contiguous, expanded,
  permuted(...) for a transposed/permuted view, strided), ``<in>.offset``
  (0 or nonzero), ``<in>.layout`` (storage format), ``<in>.values_class``
  (finite, nan, inf, large: |x| > 1e4, from the recorded statistics or the
  planned value spec);
- ``dtypes_mixed`` (floating inputs of different dtypes, e.g. a bfloat16
  activation beside a float32 weight);
- ``attr.<name>`` (the attribute's JSON).

Each feature comes with bridging cases: a star around the closest passing
planned case that changes exactly that one axis to the captured value,
ready for ``plan_cases`` (``append: true``, ``stars: [bridge.star]``).  The
reverse (planned cases fail, captured calls pass) lists what the failing
planned case has that no passing captured call has.  Pure functions over
cases and results.
"""

from __future__ import annotations

import json

from ..cases.derived import attr_json
from ..cases.stars import expand_star
from ..errors import ToolError
from ..schemas import (
    BoundaryFeature,
    BridgeCase,
    Case,
    CaseResult,
    InputSpec,
    IntegrationDiff,
    StarSpec,
    contiguous_strides,
)

CAPTURED = ("captured_call", "accuracy_dump")
NOT_PASSING = ("numerical_mismatch", "crash", "unsupported")
LARGE_MAGNITUDE = 1e4
MAX_DIFFS = 5
FLOATS = ("float16", "bfloat16", "float32", "float64")


def is_captured(case: Case) -> bool:
    return case.origin is not None and case.origin.kind in CAPTURED


def _permutation(shape: list[int], strides: list[int]) -> list[int] | None:
    """The dimension order that makes the view dense and row-major, if any."""
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    acc = 1
    for d in reversed(order):
        if shape[d] > 1 and strides[d] != acc:
            return None
        acc *= max(shape[d], 1)
    return order


def strides_class(spec: InputSpec) -> str:
    shape, strides = spec.shape, spec.strides
    if shape is None or strides is None or spec.is_contiguous():
        return "contiguous"
    if any(st == 0 and size > 1 for size, st in zip(shape, strides, strict=True)):
        return "expanded"
    perm = _permutation(shape, strides)
    if perm is not None and perm != list(range(len(shape))):
        return "permuted(" + ",".join(str(d) for d in perm) + ")"
    return "strided"


def permuted_strides(shape: list[int], perm: list[int]) -> list[int]:
    """Strides of a dense view of ``shape`` laid out in the order ``perm``."""
    dense = contiguous_strides([shape[d] for d in perm])
    out = [0] * len(shape)
    for pos, d in enumerate(perm):
        out[d] = dense[pos]
    return out


def values_class(case: Case, spec: InputSpec) -> str | None:
    """finite / nan / inf / large (joined with '+'), or None when unknown."""
    classes: set[str] = set()
    stats = case.origin.stats.get(spec.name) if case.origin is not None else None
    if stats:
        numbers = {k: v for k, v in stats.items() if isinstance(v, (int, float))}  # the rest: not recorded
        if numbers.get("nan", 0) > 0:
            classes.add("nan")
        if numbers.get("inf", 0) > 0:
            classes.add("inf")
        mags = [abs(numbers[k]) for k in ("absmax", "min", "max") if k in numbers]
        if mags and max(mags) > LARGE_MAGNITUDE:
            classes.add("large")
    else:
        v = spec.values
        if v.kind == "captured":
            return None
        for s in v.specials:
            classes.add(
                {"nan": "nan", "inf": "inf", "-inf": "inf", "large": "large", "-large": "large"}.get(s.value, "")
            )
        mag = {
            "normal": abs(v.mean) + 6 * v.std,
            "uniform": max(abs(v.low or 0), abs(v.high or 0)),
            "full": abs(v.fill or 0),
            "randint": max(abs(v.low or 0), abs(v.high or 0)),
        }.get(v.kind, 0.0)
        if mag > LARGE_MAGNITUDE:
            classes.add("large")
    classes.discard("")
    return "+".join(sorted(classes)) or "finite"


def features(case: Case) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in case.inputs:
        n = spec.name
        if spec.none or spec.tensors is not None:  # None and tensor-list inputs: their kind and length only
            out[f"{n}.kind"] = "none" if spec.none else f"list[{len(spec.tensors or [])}]"
            continue
        out[f"{n}.kind"] = "tensor"
        out[f"{n}.dtype"] = spec.dtype
        out[f"{n}.strides_class"] = strides_class(spec)
        out[f"{n}.offset"] = "0" if spec.storage_offset == 0 else "nonzero"
        out[f"{n}.layout"] = spec.layout
        vc = values_class(case, spec)
        if vc is not None:
            out[f"{n}.values_class"] = vc
    floats = {s.dtype for s in case.inputs if s.dtype in FLOATS and not s.none and s.tensors is None}
    out["dtypes_mixed"] = "yes" if len(floats) > 1 else "no"
    for name in sorted(case.attributes):
        out[f"attr.{name}"] = json.dumps(attr_json(case.attributes[name]), sort_keys=True)
    return out


def _variation(failing: Case, base: Case, axis: str) -> list[dict]:
    """StarVariation dicts that move ``base`` one axis toward ``failing``."""
    if axis.startswith("attr."):
        name = axis[len("attr.") :]
        return [{"axis": "attribute", "name": name, "values": [attr_json(failing.attributes.get(name))]}]
    if axis == "dtypes_mixed":
        base_inputs = {s.name: s for s in base.inputs if s.shape is not None}
        return [
            {"axis": "dtype", "input": s.name, "values": [s.dtype]}
            for s in failing.inputs
            if s.shape is not None and s.name in base_inputs and base_inputs[s.name].dtype != s.dtype
        ]
    name, what = axis.rsplit(".", 1)
    f = next((s for s in failing.inputs if s.name == name), None)
    b = next((s for s in base.inputs if s.name == name), None)
    if f is None or b is None or what == "kind" or f.shape is None or b.shape is None:
        return []
    if what == "dtype":
        return [{"axis": "dtype", "input": name, "values": [f.dtype]}]
    if what == "layout":
        return [{"axis": "layout", "input": name, "values": [f.layout]}]
    if what == "offset":
        return [{"axis": "storage_offset", "input": name, "values": [f.storage_offset]}]
    if what == "strides_class":
        if f.shape == b.shape:
            return [{"axis": "strides", "input": name, "values": [f.strides]}]
        perm = _permutation(f.shape, f.strides or contiguous_strides(f.shape))
        if perm is not None and len(b.shape) == len(f.shape):
            return [{"axis": "strides", "input": name, "values": [permuted_strides(b.shape, perm)]}]
        return []
    if what == "values_class":
        values = b.values.model_dump(mode="json", exclude_defaults=True)
        if b.values.kind == "captured":
            values = {"kind": "normal"}
        stats = failing.origin.stats.get(name, {}) if failing.origin is not None else {}
        cls = features(failing)[axis].split("+")
        specials = list(values.get("specials", []))
        for kind in ("nan", "inf"):
            if kind in cls:
                specials.append({"value": kind, "count": 1})
        if "large" in cls:
            mags = [abs(v) for k in ("absmax", "min", "max") if isinstance((v := stats.get(k)), (int, float))]
            top = max(mags) if mags else 10 * LARGE_MAGNITUDE
            values = {"kind": "uniform", "low": -top, "high": top}
        if specials:
            values["specials"] = specials
        return [{"axis": "values", "input": name, "values": [values]}]
    return []


def _bridges(failing: Case, base: Case, axis: str) -> list[BridgeCase]:

    out = []
    base_doc = base.model_dump(mode="json")
    base_doc["origin"] = None
    for var in _variation(failing, base, axis):
        star = {"base": base_doc, "vary": [var], "include_base": False}
        try:
            if not expand_star(StarSpec.model_validate(star)):
                continue
        except (ToolError, ValueError):
            continue
        out.append(BridgeCase(axis=axis, base_case=base.id, star=star))
    return out


def _diff(failing: Case, passing: list[Case], direction: str) -> IntegrationDiff:
    fa = features(failing)
    pas = [(p, features(p)) for p in passing]
    found = []
    for axis, value in fa.items():
        seen = sorted({pf[axis] for _, pf in pas if axis in pf})
        if not seen and not axis.startswith("attr."):
            continue  # no passing case has this input (other names): nothing to compare
        if value not in seen:
            found.append(BoundaryFeature(axis=axis, value=value, passing_values=seen))
    closest = None
    if pas:
        closest = min(
            pas,
            key=lambda item: (
                sum(item[1].get(k) != v for k, v in fa.items()) + sum(k not in fa for k in item[1]),
                item[0].id,
            ),
        )[0]
    bridges = [b for feat in found for b in _bridges(failing, closest, feat.axis)] if closest is not None else []
    return IntegrationDiff(
        direction=direction,
        failing_case=failing.id,
        closest_passing=closest.id if closest else None,
        features=found,
        bridges=bridges,
    )


def integration_diff(cases: list[Case], results: dict[str, CaseResult]) -> list[IntegrationDiff]:
    """Per failing captured call (when some planned case passes), its boundary
    features and bridges; else, per failing planned case (when some captured
    call passes), what it has that the passing captured calls do not."""

    def status(c: Case) -> str | None:
        r = results.get(c.id)
        return r.status if r else None

    captured = [c for c in cases if is_captured(c)]
    planned = [c for c in cases if not is_captured(c)]
    cap_fail = [c for c in captured if status(c) in NOT_PASSING]
    plan_pass = [c for c in planned if status(c) == "passed"]
    if cap_fail and plan_pass:
        return [_diff(c, plan_pass, "captured_fails") for c in cap_fail[:MAX_DIFFS]]
    plan_fail = [c for c in planned if status(c) in NOT_PASSING]
    cap_pass = [c for c in captured if status(c) == "passed"]
    if plan_fail and cap_pass and not cap_fail:
        return [_diff(c, cap_pass, "planned_fails") for c in plan_fail[:MAX_DIFFS]]
    return []
