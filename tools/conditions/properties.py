"""The properties of one case, by the names a condition reads (references/conditions.md).

:func:`case_properties` flattens a case into ``{name: value}``:

- every axis the analysis already derives (tools/cases/derived.py, the productions of
  tools/analysis/grammar.py:
  ``x.offset``, ``x.bytes``, ``x.last_align``, ``x.magnitude``, ``x.stride[-1]`` ...), so the
  tool's own hypotheses and the agent's conditions name the same things; relations written
  with ``~`` are left out (``x.shape[0] < x.shape[-1]`` says them in the language);
- per tensor ``x`` (a list member is ``x[1]``): ``x.rank``, ``x.shape[i]`` and ``x.stride[i]``
  under both the index from the front and the one from the back (``x.shape[1]`` and
  ``x.shape[-2]`` of a rank-3 tensor are one dimension; a dimension the rank does not have
  is absent), ``x.storage_offset``, ``x.itemsize``, ``x.nbytes``, ``x.dtype``,
  ``x.contiguous``, ``x.contiguity``, ``x.memory_format``; ``x.len`` for a tensor list;
- of the call: ``attr.NAME`` (a dtype attribute as its dtype name, a list's scalar members as
  ``attr.NAME[i]``; an attribute that is None is absent), ``mode``, ``seed`` (the effective
  one: the case's, or the one the runner derives from its id);
- from the recorded result, when given: the statistics of the values actually built
  (``x.values.min``, ``x.values.sumsq[-1]`` ...) and where each output's wrong elements
  are (``out.wrong.rows``, ``grad.x.wrong.tail[-1]`` ...), as the runner measured them;
  ``out.wrong.count`` / ``out.wrong.fraction`` fall back to the comparison's mismatch count
  and ratio when the runner measured no more, and a passing output has nothing wrong (every
  count 0).

Nothing here runs anything: a case and its recorded result in, a dict out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ..artifacts.common import case_seed
from ..cases.axes import case_axes, own_labels
from ..cases.derived import contiguity, memory_format, structured_axes
from ..cases.memo import by_content, once, sealed
from ..cases.relations import element_bytes
from ..schemas import Case, CaseResult, DtypeArg, TensorSpec, contiguous_strides
from ..schemas.result import WrongWhere
from .grammar import named

NOTHING_WRONG = WrongWhere()  # a passing output: every count 0, no tail, no period


def _both_indices(prefix: str, values: list[Any] | Mapping[int, Any], rank: int) -> dict[str, Any]:
    """``prefix[i]`` under the index from the front and the one from the back, for each dimension
    ``i`` of a tensor of ``rank`` (a key outside the rank is dropped)."""
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    out: dict[str, Any] = {}
    for i, v in items:
        front = i + rank if i < 0 else i
        if 0 <= front < rank:
            out[f"{prefix}[{front}]"] = v
            out[f"{prefix}[{front - rank}]"] = v
    return out


def tensor_properties(spec: TensorSpec, n: str) -> dict[str, Any]:
    """The names of one tensor the derived axes do not already give (see the module docstring); once per
    distinct spec (cases/memo.py's by_content)."""
    return by_content("tensor_properties", n, spec, lambda: _tensor_properties(spec, n))


def _tensor_properties(spec: TensorSpec, n: str) -> dict[str, Any]:
    shape, rank = spec.shape, len(spec.shape)
    strides = spec.strides if spec.strides is not None else contiguous_strides(shape)
    numel = math.prod(shape)
    out: dict[str, Any] = {f"{n}.rank": rank, f"{n}.numel": numel, f"{n}.dtype": spec.dtype}
    out.update(_both_indices(f"{n}.shape", shape, rank))
    out.update(_both_indices(f"{n}.stride", strides, rank))
    out[f"{n}.storage_offset"] = spec.storage_offset
    size = element_bytes(spec.dtype)
    if size is not None:
        out[f"{n}.itemsize"] = int(size) if size.is_integer() else size
        nbytes = numel * size
        out[f"{n}.nbytes"] = int(nbytes) if nbytes.is_integer() else nbytes
    out[f"{n}.contiguity"] = contiguity(shape, spec.strides)
    out[f"{n}.contiguous"] = out[f"{n}.contiguity"] == "contiguous"
    out[f"{n}.memory_format"] = memory_format(shape, spec.strides)
    return out


def _tensors(case: Case) -> dict[str, TensorSpec]:
    """Each tensor the call passes, by its name in conditions: ``x``, or ``x[1]`` for a list member."""
    out: dict[str, TensorSpec] = {}
    for spec in case.inputs:
        if spec.none:
            continue
        if spec.tensors is not None:
            out.update({f"{spec.name}[{j}]": m for j, m in enumerate(spec.tensors)})
        else:
            out[spec.name] = spec
    return out


def attribute_properties(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attr.NAME`` per attribute: a number, bool or string as it is, a dtype attribute as its
    dtype name, a list as its JSON text with its scalar members as ``attr.NAME[i]`` (both
    indices); an attribute that is None is absent, and ``attr.NAME.none`` says whether it is."""
    out: dict[str, Any] = {}
    for name, value in attributes.items():
        key = f"attr.{name}"
        out[f"{key}.none"] = value is None
        if value is None:
            continue
        if isinstance(value, DtypeArg):
            out[key] = value.value
        elif isinstance(value, list):
            out[key] = json.dumps(value)
            scalars = {i: v for i, v in enumerate(value) if isinstance(v, (bool, int, float, str))}
            out.update(_both_indices(key, scalars, len(value)))
        else:
            out[key] = value
    return out


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def _dim_keys(value: Mapping[Any, Any]) -> dict[int, Any] | None:
    """A mapping keyed by dimensions (``{"0": v, "-1": w}``) as ints; None for another mapping."""
    try:
        return {int(k): v for k, v in value.items()}
    except (TypeError, ValueError):
        return None


def flatten_measured(prefix: str, stats: Mapping[str, Any], rank: int | None = None) -> dict[str, Any]:
    """What the runner measured, by name: ``{"max": 3, "sumsq": [4.0, 9.0]}`` under ``x.values`` ->
    ``x.values.max``, ``x.values.sumsq[1]`` and ``x.values.sumsq[-1]`` (a list is per dimension,
    indexed like ``shape``: both indices); a mapping keyed by dimensions reads the same under ``rank``,
    another mapping nests its names; None (not measured, not a tail block) is absent."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        name = f"{prefix}.{key}"
        if isinstance(value, list):
            scalars = {i: v for i, v in enumerate(value) if isinstance(v, (bool, int, float, str))}
            out.update(_both_indices(name, scalars, len(value)))
        elif isinstance(value, Mapping):
            dims = _dim_keys(value) if value else None
            if dims is None:
                out.update(flatten_measured(name, value, rank))
            elif rank is None:
                out.update({f"{name}[{d}]": v for d, v in dims.items() if v is not None})
            else:
                out.update(_both_indices(name, {d: v for d, v in dims.items() if v is not None}, rank))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
    return out


def value_properties(result: CaseResult) -> dict[str, Any]:
    """``x.values.*``: the statistics of the values actually built, as the runner recorded them
    (CaseResult.values, by input name; a list's members as ``x[0]``...)."""
    out: dict[str, Any] = {}
    for name, stats in (result.values or {}).items():
        out.update(flatten_measured(f"{name}.values", _dump(stats)))
    return out


def wrong_properties(result: CaseResult) -> dict[str, Any]:
    """``out.wrong.*`` per compared output: where its wrong elements are, as the runner measured
    them (Comparison.wrong); at least the count and the fraction of the comparison; a passing
    output without a measurement has nothing wrong (every count 0: ``out.wrong.rows == 0``)."""
    out: dict[str, Any] = {}
    for c in result.comparisons:
        if c.contract_mismatch:
            continue  # another shape or dtype: there are no elements to place
        prefix = f"{c.output}.wrong"
        out[f"{prefix}.count"] = c.mismatch_count
        out[f"{prefix}.fraction"] = c.mismatch_ratio
        wrong = c.wrong if c.wrong is not None or not c.passed else NOTHING_WRONG  # a pass: no row, no zero
        if wrong is not None:
            out.update(flatten_measured(prefix, _dump(wrong)))
    return out


def case_properties(
    case: Case, recorded_result: CaseResult | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """Every property of a case by name (the module docstring); ``labels``: its ``case_axes`` when
    already at hand.  Once per sealed case and result (tools/cases/memo.py: a case a run recorded is
    read again by every later analysis)."""
    if sealed(case) and (labels is None or labels == own_labels(case)):
        out = once(case, "properties", lambda: _own_properties(case, case_axes(case)))
    else:
        out = _own_properties(case, labels if labels is not None else case_axes(case))
    if recorded_result is not None:
        result = recorded_result
        out.update(once(result, "properties", lambda: {**value_properties(result), **wrong_properties(result)}))
    return out


def _own_properties(case: Case, labels: dict[str, str]) -> dict[str, Any]:
    """The properties of the call alone (no recorded result)."""
    # every production of the hypothesis grammar a condition names by itself (relations and patterns say
    # themselves in the language: x.shape[0] < x.shape[-1], x.stride[-1] == 1); attributes are typed below
    derived = {**structured_axes(case, labels), **named(case)}
    out = {k: v for k, v in derived.items() if "~" not in k and " " not in k and not k.startswith("attr.")}
    for n, spec in _tensors(case).items():
        out.update(tensor_properties(spec, n))
    for spec in case.inputs:  # an optional input passed as None
        out[f"{spec.name}.none"] = bool(spec.none)
    out.update(attribute_properties(case.attributes))
    out["mode"] = case.mode
    out["seed"] = case_seed({"id": case.id, "seed": case.seed})
    return out
