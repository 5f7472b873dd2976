"""The labelled axes of a case, as stable strings (what a person reads and what
analysis groups failures by), and the variation axes two cases differ in (the
distance a star's one-axis rule is measured in).

- :func:`case_axes`: ``mode``, ``dtype``, per input ``.dtype/.shape/.strides/
  .offset/.layout/.values``, per attribute ``attr.NAME``;
- :func:`distance_axes` / :func:`axes_difference` / :func:`differing_axes`:
  the axes one variation changes, and which of them two cases differ in.

Typed and derived axes (ranks, dimensions, alignments, contiguity classes...)
are derived.py.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel

from ..schemas import Case, InputSpec, TensorSpec, ValueSpec
from .memo import by_content, once


def shape_text(shape: list[int]) -> str:
    return "x".join(str(s) for s in shape) if shape else "scalar"


def strides_text(spec: TensorSpec) -> str:
    return "contiguous" if spec.is_contiguous() else ",".join(str(s) for s in spec.strides or [])


MAX_PLACED_SHOWN = 4


def values_text(values: ValueSpec) -> str:
    """The value kind, its non-default parameters, and the special values:
    e.g. ``normal``, ``normal+nan``, ``uniform(high=1.0,low=-1.0)+inf``."""
    defaults = ValueSpec()
    params = []
    for field in ("mean", "std", "low", "high", "fill", "captured"):
        value = getattr(values, field)
        if value != getattr(defaults, field):
            params.append(f"{field}={value}")
    text = values.kind + (f"({','.join(sorted(params))})" if params else "")
    specials = sorted({s.value for s in values.specials})
    text += "".join(f"+{s}" for s in specials) + ("+nonzero" if values.exclude_zero else "")
    if values.place:  # the values placed are planned too: cases that differ in them differ in their values
        shown = [f"{p.value}@{'.'.join(map(str, p.index))}" for p in values.place]
        digest = hashlib.sha256(json.dumps(shown).encode()).hexdigest()[:8]
        text += (
            "+place("
            + ",".join(shown[:MAX_PLACED_SHOWN])
            + (f",...{digest}" if len(shown) > MAX_PLACED_SHOWN else "")
            + ")"
        )
    if values.by_dtype:  # the per-dtype specs, as planned (case_axes shows the one that applies)
        text += "{" + ",".join(f"{k}:{values_text(v)}" for k, v in sorted(values.by_dtype.items())) + "}"
    return text


def _tensor_axes(axes: dict[str, str], prefix: str, spec: TensorSpec, effective_values: bool = True) -> None:
    """The six axes of one tensor, once per distinct spec (memo.by_content)."""
    kind = "tensor_axes" if effective_values else "tensor_axes:planned"
    axes.update(by_content(kind, prefix, spec, lambda: _tensor_labels(prefix, spec, effective_values)))


def _tensor_labels(prefix: str, spec: TensorSpec, effective_values: bool) -> dict[str, str]:
    axes: dict[str, str] = {f"{prefix}.dtype": spec.dtype}
    axes[f"{prefix}.shape"] = shape_text(spec.shape)
    axes[f"{prefix}.strides"] = strides_text(spec)
    axes[f"{prefix}.offset"] = str(spec.storage_offset)
    axes[f"{prefix}.layout"] = spec.layout
    values = spec.values
    if effective_values:  # the spec that applies to this dtype, without the other dtypes' entries
        values = values.for_dtype(spec.dtype).model_copy(update={"by_dtype": {}})
    axes[f"{prefix}.values"] = values_text(values)
    return axes


def _attr_text(case: Case, name: str) -> str:
    value = case.attributes[name]
    if isinstance(value, BaseModel):  # a dtype argument: {"kind": "dtype", "value": ...}
        return json.dumps(value.model_dump(mode="json"), sort_keys=True)
    return json.dumps(value, sort_keys=True)


def case_axes(case: Case, *, effective_values: bool = True) -> dict[str, str]:
    """Once per sealed case (memo.py): :func:`_case_axes`."""
    return once(case, f"case_axes:{effective_values}", lambda: _case_axes(case, effective_values))


def own_labels(case: Case) -> dict[str, str]:
    """``case_axes(case)`` as kept for a sealed case (memo.py), not copied: only to compare with (a caller's
    labels are its own when they equal these); never change it."""
    return once(case, "case_axes:True", lambda: _case_axes(case, True), copy=False)


def _case_axes(case: Case, effective_values: bool) -> dict[str, str]:
    """The axis values of a case, as stable strings, in a fixed order: ``mode``,
    ``dtype`` (shared by every tensor, else ``mixed``), then per input
    ``<name>.dtype/.shape/.strides/.offset/.layout/.values``, then
    ``attr.<name>`` (the attribute's JSON text).  A tensor-list input gives
    ``<name>.len`` and the six axes of each member as ``<name>[<i>].dtype`` ...;
    a None input gives only ``<name>.none`` = ``true``.  ``.values`` is the
    value spec that applies to the dtype (``effective_values``) or, for
    distances, the spec as planned (with its ``by_dtype`` entries)."""
    tensors = [m for i in case.inputs for m in i.members()]
    dtypes = {m.dtype for m in tensors}
    axes = {"mode": case.mode, "dtype": dtypes.pop() if len(dtypes) == 1 else ("mixed" if dtypes else "none")}
    for spec in case.inputs:
        if spec.none:
            axes[f"{spec.name}.none"] = "true"
        elif spec.tensors is not None:
            axes[f"{spec.name}.len"] = str(len(spec.tensors))
            for j, member in enumerate(spec.tensors):
                _tensor_axes(axes, f"{spec.name}[{j}]", member, effective_values)
        else:
            _tensor_axes(axes, spec.name, spec, effective_values)
    for name in sorted(case.attributes):
        axes[f"attr.{name}"] = _attr_text(case, name)
    axes.update(option_axes(case))
    return axes


# Case options that are axes of their own: which gradients are compared, dynamic shapes.
OPTION_AXES = ("grad_inputs", "compile_dynamic")


def option_axes(case: Case) -> dict[str, str]:
    """``grad_inputs`` (the inputs whose gradients the case compares, ``none`` for forward only) when
    the case sets it; ``compile_dynamic`` (``true`` or the marked dimensions) for a compile case that
    sets it."""
    out = {}
    if case.grad_inputs is not None:
        out["grad_inputs"] = ",".join(case.grad_inputs) or "none"
    if case.mode == "compile" and case.compile_dynamic:
        dyn = case.compile_dynamic
        out["compile_dynamic"] = "true" if dyn is True else ",".join(dyn)
    return out


def input_kinds(spec: InputSpec, field: str) -> str:
    """One input's dtypes (layouts) for the combined distance axis: a list's
    distinct member values (its length is its own axis), a None input's kept spec."""
    if spec.tensors is not None:
        return "/".join(sorted({getattr(m, field) for m in spec.tensors}))
    return getattr(spec, field)


def distance_axes(case: Case) -> dict[str, str]:
    """Axes as one variation changes them: the dtypes of all inputs form one
    axis (a dtype variation may change several inputs at once), so do the
    layouts; the summary ``dtype`` axis is left out (it is derived); values
    count as planned (a ``by_dtype`` spec does not change with the dtype)."""
    return distance_from_labels(case, case_axes(case, effective_values=False))


def distance_from_labels(case: Case, axes: dict[str, str]) -> dict[str, str]:
    """The variation axes of ``case`` from its labelled axes (``case_axes``)."""
    out = {
        "mode": axes["mode"],
        "dtype": ",".join(input_kinds(i, "dtype") for i in case.inputs),
        "layout": ",".join(input_kinds(i, "layout") for i in case.inputs),
    }
    for key, value in axes.items():
        if (
            key.startswith("attr.")
            or key.endswith((".shape", ".strides", ".offset", ".values", ".len", ".none"))
            or key in OPTION_AXES
        ):
            out[key] = value
    return out


def owner(key: str) -> str:
    """The input an axis key belongs to: ``x`` for ``x.shape`` and ``x[1].shape``."""
    return key.split(".", 1)[0].split("[", 1)[0]


def axes_difference(da: dict[str, str], db: dict[str, str]) -> list[str]:
    """The variation axes in which two cases differ, given their
    :func:`distance_axes`.  A strides difference does not count when the
    shapes differ too (strides of different shapes are not comparable; a
    shape variation drops explicit strides); a list-length difference hides
    its members' axes, a None-or-not difference every other axis of that input."""
    diff = [k for k, v in da.items() if v != db.get(k)]  # in the order of dict.fromkeys([*da, *db])
    diff += [k for k, v in db.items() if v is not None and k not in da]
    if not diff:
        return diff
    lens = {owner(k) for k in diff if k.endswith(".len")}
    nones = {owner(k) for k in diff if k.endswith(".none")}
    kept = [k for k in diff if not (k.endswith(".strides") and k[: -len(".strides")] + ".shape" in diff)]
    if not lens and not nones:
        return kept
    return [
        k for k in kept if not (owner(k) in lens and "[" in k) and not (owner(k) in nones and not k.endswith(".none"))
    ]


def differing_axes(a: Case, b: Case) -> list[str]:
    return axes_difference(distance_axes(a), distance_axes(b))
