"""Stars: a base case plus one-axis variations, expanded into explicit cases.

:func:`expand_star` gives one case per value per variation, each with exactly
one axis changed from the base (or a dimension shared by several inputs), with
an id derived from the change; :func:`apply_variation` applies one variation;
:func:`restride` keeps an input's layout class when its shape changes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from pydantic import ValidationError

from ..errors import ToolError
from ..schemas import (
    DTYPE_FAMILIES,
    FLOAT_DTYPES,
    Case,
    StarSpec,
    StarVariation,
    ValueSpec,
    contiguous_strides,
    format_validation_error,
)
from .axes import shape_text, values_text
from .derived import contiguity
from .ids import MAX_ID_LEN, case_content, fit_id


def signed_slug(text: str) -> str:
    """Signs spelled as words, which the slug alphabet would fold into separators: ``-large`` and
    ``+large`` (``normal+-large``), ``mean=-3.0`` and ``mean=3.0``, ``-0`` and ``+0`` stay apart as
    ``neg-large``, ``mean-neg3.0``, ``neg0`` and ``pos0``; ``+`` between parts becomes ``-``."""
    text = re.sub(r"(?:(?<=^)|(?<=[=(,+\[ ]))-(?=[A-Za-z])", "neg-", text)
    text = re.sub(r"(?:(?<=^)|(?<=[=(,+\[ ]))-(?=[\d.])", "neg", text)
    text = re.sub(r"(?<=\+)\+(?=\d)", "pos", text)
    return text.replace("+", "-")


def value_slug(axis: str, value: Any) -> str:
    if axis == "shape" and isinstance(value, list):
        return shape_text(value)
    if axis == "values" and isinstance(value, dict):
        try:
            return signed_slug(values_text(ValueSpec.model_validate(value)))
        except ValidationError:
            pass
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return signed_slug(str(value))
    if isinstance(value, dict) and value.get("kind") == "dtype":  # a dtype argument
        return str(value.get("value"))
    if value is None:
        return "contiguous" if axis == "strides" else "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "-".join(value_slug(axis, v) for v in value) or "empty"
    if isinstance(value, (dict,)):
        return json.dumps(value, sort_keys=True)
    return str(value)


_FLOATING = FLOAT_DTYPES + DTYPE_FAMILIES["float8"] + DTYPE_FAMILIES["complex"]


def _tensor_docs(spec: dict) -> list[dict]:
    """The tensor specs of one input (JSON): its members for a list, else itself."""
    return spec["tensors"] if spec.get("tensors") is not None else [spec]


def _input_targets(base: dict, var: StarVariation) -> list[dict]:
    """The tensor specs (JSON dicts) a variation changes: a list input's
    member ``var.member``, every member (dtype/layout), or a plain input."""
    inputs = base["inputs"]
    if var.input is not None:
        named = [i for i in inputs if i["name"] == var.input]
        if not named:
            raise ValueError(
                f"input {var.input!r} is not an input of the base case (inputs: {[i['name'] for i in inputs]})"
            )
        spec = named[0]
        if var.member is not None:
            members = spec.get("tensors")
            if members is None or var.member >= len(members):
                raise ValueError(
                    f"'member' {var.member} is not a member of input {var.input!r} "
                    f"({'a list of ' + str(len(members)) if members else 'not a tensor list'})"
                )
            return [members[var.member]]
        if spec.get("tensors") is not None and var.axis not in ("dtype", "layout"):
            raise ValueError(f"input {var.input!r} is a tensor list: name the 'member' whose {var.axis} varies")
        return _tensor_docs(spec)
    if var.member is not None:
        raise ValueError("'member' needs 'input' (the tensor-list input)")
    tensors = [t for i in inputs if not i.get("none") for t in _tensor_docs(i)]
    if var.axis == "dtype":
        floating = [t for t in tensors if t["dtype"] in _FLOATING]
        return floating or tensors
    if var.axis == "layout":
        return tensors
    first = inputs[0]
    if first.get("tensors") is not None:
        raise ValueError(f"the first input {first['name']!r} is a tensor list: name 'input' and 'member'")
    return [first]


def _apply_list_axis(doc: dict, var: StarVariation, value: Any) -> None:
    spec = next((i for i in doc["inputs"] if i["name"] == var.input), None)
    if spec is None:
        raise ValueError(f"input {var.input!r} is not an input of the base case")
    if var.axis == "none":
        if not isinstance(value, bool):
            raise ValueError("axis 'none' takes true (pass None) or false (pass the tensor)")
        spec["none"] = value
        return
    members = spec.get("tensors")
    if members is None:
        raise ValueError(f"axis 'length' needs a tensor-list input; {var.input!r} has no 'tensors'")
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 128:
        raise ValueError("a list length is an int from 1 to 128")
    # shorter: the first members; longer: copies of the last member
    spec["tensors"] = (members + [copy.deepcopy(members[-1]) for _ in range(value - len(members))])[:value]


def apply_variation(base: Case, var: StarVariation, value: Any) -> dict:
    """The base case (as a JSON dict, id unchanged) with one axis set to
    ``value`` (and each variation of ``var.also`` set to its one value: two
    axes at once).  Raises ValueError for a variation that does not fit."""
    doc = _apply_one(base, var, value)
    for change in var.also:
        doc = _apply_one(Case.model_validate(doc), change, change.values[0])
    return doc


def _apply_one(base: Case, var: StarVariation, value: Any) -> dict:
    doc = copy.deepcopy(base.model_dump(mode="json", exclude_none=False))
    doc.pop("origin", None)  # a variation of a captured call is a planned case, not the model's call
    if var.axis in ("mode", "attribute", "grad_inputs", "compile_dynamic", "seed") and (
        var.input is not None or var.member is not None
    ):
        raise ValueError(f"'input' and 'member' do not apply to axis {var.axis!r}")
    if var.axis == "dim":
        _set_dims(doc, var.dims or [], value)
    elif var.axis == "mode":
        doc["mode"] = value
    elif var.axis == "seed":  # the same call with other values drawn: is the outcome a property of the values?
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise ValueError("axis 'seed' takes integers from 0 to 2**63-1")
        doc["seed"] = value
    elif var.axis == "grad_inputs":  # which inputs' gradients are compared: a list of names, [] forward only
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ValueError(
                "axis 'grad_inputs' takes lists of input names (e.g. ['x', 'weight'], [] for forward only)"
            )
        doc["grad_inputs"] = value
    elif var.axis == "compile_dynamic":  # true, false, or the dimensions marked dynamic
        if not isinstance(value, bool) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError("axis 'compile_dynamic' takes true, false or lists of dimensions ('x.shape[0]')")
        doc["compile_dynamic"] = value
    elif var.axis == "attribute":
        doc["attributes"][var.name] = value
    elif var.axis in ("length", "none"):
        _apply_list_axis(doc, var, value)
    else:
        for spec in _input_targets(doc, var):
            if var.axis == "dtype":
                spec["dtype"] = value
            elif var.axis == "layout":
                spec["layout"] = value
            elif var.axis == "shape":
                spec["shape"] = value
                spec["strides"] = None
            elif var.axis == "strides":
                if value is not None and (not isinstance(value, list) or len(value) != len(spec["shape"])):
                    raise ValueError(
                        f"strides {value!r} must be a list of {len(spec['shape'])} ints "
                        f"(the rank of input {spec.get('name', var.input)!r}, shape {spec['shape']})"
                    )
                spec["strides"] = value
            elif var.axis == "storage_offset":
                spec["storage_offset"] = value
            elif var.axis == "values":
                spec["values"] = value
    return doc


_DIM_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\.shape\[(-?[0-9]+)\]$")


def parse_dim(ref: str) -> tuple[str, int]:
    match = _DIM_RE.match(ref)
    if not match:
        raise ValueError(f"dimension {ref!r} must read NAME.shape[INDEX], e.g. 'x.shape[-1]'")
    return match.group(1), int(match.group(2))


def restride(shape: list[int], strides: list[int] | None, new_shape: list[int]) -> list[int] | None:
    """Strides for ``new_shape`` that keep the input's layout class: contiguous
    stays contiguous (None); a dense permutation (transposed) stays that
    permutation; a broadcast keeps its 0 strides; other patterns keep their strides."""
    kind = contiguity(shape, strides)
    if strides is None or kind == "contiguous":
        return None
    if kind in ("sliced", "overlapping"):
        return list(strides)
    order = sorted(range(len(shape)), key=lambda i: (strides[i], i))  # innermost first
    acc, rebuilt = 1, [0] * len(shape)
    for i in order:
        if strides[i] == 0 and shape[i] != 1:
            continue
        rebuilt[i] = acc
        acc *= max(new_shape[i], 1)
    return None if rebuilt == contiguous_strides(new_shape) else rebuilt


def _set_dims(doc: dict, dims: list[str], value: Any) -> None:
    by_name = {i["name"]: i for i in doc["inputs"]}
    for ref in dims:
        name, index = parse_dim(ref)
        spec = by_name.get(name)
        if spec is None:
            raise ValueError(
                f"dimension {ref!r}: {name!r} is not an input of the base case (inputs: {sorted(by_name)})"
            )
        if spec.get("shape") is None or spec.get("none"):
            raise ValueError(f"dimension {ref!r}: input {name!r} is a tensor list or None, not one tensor")
        rank = len(spec["shape"])
        if not -rank <= index < rank:
            raise ValueError(f"dimension {ref!r} is outside input {name!r} of rank {rank} (shape {spec['shape']})")
        new_shape = list(spec["shape"])
        new_shape[index] = value
        spec["strides"] = restride(spec["shape"], spec["strides"], new_shape)
        spec["shape"] = new_shape


def _derived_id(base: Case, var: StarVariation, value: Any) -> str:
    case_id = _one_id(base, var, value)
    for change in var.also:  # two axes at once: <base>.<first change>.<second change>
        case_id = _one_id(base.model_copy(update={"id": case_id}), change, change.values[0])
    return case_id


def _one_id(base: Case, var: StarVariation, value: Any) -> str:
    vslug = value_slug(var.axis, value)
    if var.axis == "dim":
        parts = "_".join(f"{n}.shape{i}" for n, i in (parse_dim(d) for d in var.dims or []))
        return fit_id(f"{base.id}.{parts}-{vslug}")
    if var.axis in ("mode", "grad_inputs", "compile_dynamic", "seed"):
        part = f"{var.axis.replace('_', '-')}-{vslug}"
    elif var.axis == "attribute":
        part = f"attr-{var.name}-{vslug}"
    elif var.axis in ("dtype", "layout") and var.input is None:
        part = f"{var.axis}-{vslug}"
    elif var.axis == "length":
        part = f"{var.input}.len-{vslug}"
    else:
        name = (var.input or base.inputs[0].name) + (f".{var.member}" if var.member is not None else "")
        axis = "offset" if var.axis == "storage_offset" else var.axis
        part = f"{name}.{axis}-{vslug}"
    return fit_id(f"{base.id}.{part}")


def star_base(star: StarSpec) -> Case:
    """A star's base case: a base given as an id is resolved to the planned case before a star is expanded."""
    if isinstance(star.base, str):
        raise ToolError(f"star base {star.base!r} is an id not resolved to its planned case", code="internal_error")
    return star.base


def expand_star(star: StarSpec, planned: dict[str, str] | None = None) -> list[Case]:
    """A base case plus one case per value per variation, each with exactly one
    axis changed from the base:

    - ``dtype`` / ``layout`` with ``input`` None change every input - except
      that a dtype variation changes only the floating inputs when the base
      has any (an index or mask input keeps its integer dtype), so "run it in
      bfloat16" means what it says.  With ``input`` named, only that input.
    - ``shape`` sets the shape of the input (``input``, default the first)
      and drops its explicit strides, which would not fit the new shape:
      the new case is contiguous.
    - ``strides`` sets the strides (a list of ints of the input's rank, or
      None for contiguous); ``storage_offset`` the offset; ``values`` the
      value spec (a ValueSpec dict).
    - ``mode`` sets the mode; ``attribute`` sets ``attributes[name]``.

    Ids are ``<base>.<axis>-<value>`` (``rms.dtype-bfloat16``,
    ``rms.x.strides-1-4``, ``rms.attr-keepdim-true``), sanitized to the slug
    alphabet, shortened with a hash when over 96 characters, and unique.  A
    value that gives back the base case (or a case already produced) is
    skipped.  ``planned`` (id -> content of the run's planned cases, when
    appending): a derived id planned with another body gets the same hash
    suffix as a clash inside the star (two value specs with the same text, say),
    so a next case never collides with the run.  Raises ToolError naming the
    variation and value that did not fit.
    """
    base = star_base(star)
    produced: list[Case] = [base] if star.include_base else []
    seen_content = {case_content(base.model_dump(mode="json"))}
    ids = {c.id for c in produced}
    for j, var in enumerate(star.vary):
        for value in var.values:
            where = (
                f"vary[{j}] (axis {var.axis!r}"
                + (f", input {var.input!r}" if var.input else "")
                + (f", attribute {var.name!r}" if var.name else "")
                + f", value {json.dumps(value)})"
            )
            try:
                doc = apply_variation(base, var, value)
            except ValueError as exc:
                raise ToolError(f"star {where}: {exc}", code="validation_error") from None
            content = case_content(doc)
            if content in seen_content:
                continue
            case_id = _derived_id(base, var, value)
            doc["id"] = case_id
            try:
                case = Case.model_validate(doc)
            except ValidationError as exc:
                raise ToolError(
                    f"star {where} gives an invalid case: " + format_validation_error(exc), code="validation_error"
                ) from None
            if case_id in ids or (
                planned and case_id in planned and planned[case_id] != case_content(case.model_dump(mode="json"))
            ):
                digest = hashlib.sha1(content.encode("utf-8")).hexdigest()[:6]
                case_id = fit_id(f"{case_id[: MAX_ID_LEN - 7]}-{digest}")
                case = case.model_copy(update={"id": case_id})
            seen_content.add(content)
            ids.add(case_id)
            produced.append(case)
    return produced
