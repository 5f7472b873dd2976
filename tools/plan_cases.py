"""plan_cases: validate an operator config and its explicit cases, and create
(or grow) the run's evidence directory.

Cases come either explicitly (``cases``) or from stars: a base case plus
one-axis variations, expanded by :func:`expand_star` into explicit cases with
ids derived from the change.  Every case of the run is returned with its axes
(:func:`case_axes`), the values analysis groups failures by.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import ToolError
from .workspace_files import allowed_roots, read_workspace_file
from .evidence import RunStore, few_ids, file_sha256
from .schemas import (
    DTYPE_FAMILIES,
    FLOAT_DTYPES,
    PLANNED_LIST_LIMIT,
    Case,
    contiguous_strides,
    CaseResult,
    InputSpec,
    OperatorConfig,
    PlannedCase,
    PlanRequest,
    PlanResponse,
    StarSpec,
    StarVariation,
    TensorSpec,
    ValueSpec,
    format_validation_error,
)

MAX_ID_LEN = 96
_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


# --------------------------------------------------------------------------
# Axes
# --------------------------------------------------------------------------


def shape_text(shape: list[int]) -> str:
    return "x".join(str(s) for s in shape) if shape else "scalar"


def strides_text(spec: TensorSpec) -> str:
    return "contiguous" if spec.is_contiguous() else ",".join(str(s) for s in spec.strides or [])


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
    if values.by_dtype:  # the per-dtype specs, as planned (case_axes shows the one that applies)
        text += "{" + ",".join(f"{k}:{values_text(v)}" for k, v in sorted(values.by_dtype.items())) + "}"
    return text


def _tensor_axes(axes: dict[str, str], prefix: str, spec: TensorSpec, effective_values: bool = True) -> None:
    axes[f"{prefix}.dtype"] = spec.dtype
    axes[f"{prefix}.shape"] = shape_text(spec.shape)
    axes[f"{prefix}.strides"] = strides_text(spec)
    axes[f"{prefix}.offset"] = str(spec.storage_offset)
    axes[f"{prefix}.layout"] = spec.layout
    values = spec.values
    if effective_values:  # the spec that applies to this dtype, without the other dtypes' entries
        values = values.for_dtype(spec.dtype).model_copy(update={"by_dtype": {}})
    axes[f"{prefix}.values"] = values_text(values)


def _attr_text(case: Case, name: str) -> str:
    value = case.attributes[name]
    if isinstance(value, BaseModel):  # a dtype argument: {"kind": "dtype", "value": ...}
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True)


def case_axes(case: Case, *, effective_values: bool = True) -> dict[str, str]:
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
    return axes


def _input_kinds(spec: InputSpec, field: str) -> str:
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
    axes = case_axes(case, effective_values=False)
    out = {"mode": axes["mode"],
           "dtype": ",".join(_input_kinds(i, "dtype") for i in case.inputs),
           "layout": ",".join(_input_kinds(i, "layout") for i in case.inputs)}
    for key, value in axes.items():
        if key.startswith("attr.") or key.endswith((".shape", ".strides", ".offset", ".values", ".len", ".none")):
            out[key] = value
    return out


def _owner(key: str) -> str:
    """The input an axis key belongs to: ``x`` for ``x.shape`` and ``x[1].shape``."""
    return key.split(".", 1)[0].split("[", 1)[0]


def axes_difference(da: dict[str, str], db: dict[str, str]) -> list[str]:
    """The variation axes in which two cases differ, given their
    :func:`distance_axes`.  A strides difference does not count when the
    shapes differ too (strides of different shapes are not comparable; a
    shape variation drops explicit strides); a list-length difference hides
    its members' axes, a None-or-not difference every other axis of that input."""
    diff = [k for k in dict.fromkeys([*da, *db]) if da.get(k) != db.get(k)]
    lens = {_owner(k) for k in diff if k.endswith(".len")}
    nones = {_owner(k) for k in diff if k.endswith(".none")}
    return [k for k in diff
            if not (k.endswith(".strides") and k[: -len(".strides")] + ".shape" in diff)
            and not (_owner(k) in lens and "[" in k)
            and not (_owner(k) in nones and not k.endswith(".none"))]


def differing_axes(a: Case, b: Case) -> list[str]:
    return axes_difference(distance_axes(a), distance_axes(b))


def default_tolerance_warnings(config, cases: list[Case]) -> list[str]:
    """One warning per floating input dtype whose tolerance comes from the default table."""
    from .runner.precision import TOLERANCE_SOURCE  # stdlib only

    dtypes = sorted({i.dtype for c in cases for i in c.inputs if i.dtype.startswith(("float", "bfloat"))})
    out = []
    for dtype in dtypes:
        atol, rtol, source = config.tolerance.for_dtype(dtype)
        if source == "default":
            out.append(f"tolerance: {dtype} has no per_dtype entry and the config gives no atol/rtol: using "
                       f"atol {atol:g}, rtol {rtol:g} from {TOLERANCE_SOURCE}"
                       + ("" if config.judge == "tolerance" else f" (judge {config.judge!r})"))
    return out


MAX_WARNINGS = 10


def _one_axis_keys(axes: dict[str, str], keys: list[str]) -> list[tuple]:
    """One key per way of leaving one variation axis out: two cases that share
    a key differ at most in that axis and the ones :func:`axes_difference`
    hides with it (an input's strides with its shape, a list's members with its
    length, every other axis of an input with its None-or-not)."""
    full = tuple(axes.get(k) for k in keys)
    out = []
    for i, key in enumerate(keys):
        owner = _owner(key)
        if key.endswith(".shape"):
            drop = {i} | {j for j, k in enumerate(keys) if k == key[: -len(".shape")] + ".strides"}
        elif key.endswith(".len"):
            drop = {i} | {j for j, k in enumerate(keys) if _owner(k) == owner and "[" in k}
        elif key.endswith(".none"):
            drop = {j for j, k in enumerate(keys) if _owner(k) == owner}
        else:
            drop = {i}
        out.append((i, tuple(None if j in drop else v for j, v in enumerate(full))))
    return out


def multi_axis_warnings(cases: list[Case], *, limit: int = MAX_WARNINGS) -> list[str]:
    """One warning per case that differs from every other case in more than
    one axis, naming its closest neighbour and the differing axes (the first
    ``limit`` such cases; one more line counts the rest).

    Near-linear in the number of cases: cases are grouped by their axes with
    one axis left out at a time; a case is checked with :func:`axes_difference`
    against a few members of each group it shares, instead of against every case."""
    warnings: list[str] = []
    if len(cases) < 2:
        return warnings
    axes = [distance_axes(c) for c in cases]
    keys = sorted({k for a in axes for k in a})
    groups: dict[tuple, list[int]] = {}
    per_case = [_one_axis_keys(a, keys) for a in axes]
    for i, ks in enumerate(per_case):
        for k in ks:
            groups.setdefault(k, []).append(i)

    def has_neighbour(i: int) -> bool:
        for k in per_case[i]:
            others = [j for j in groups[k][:4] if j != i][:3]
            if any(len(axes_difference(axes[i], axes[j])) <= 1 for j in others):
                return True
        return False

    lonely = [i for i in range(len(cases)) if not has_neighbour(i)]
    for i in lonely[:limit]:
        best: tuple[int, str, list[str]] | None = None
        for j, other in enumerate(cases):
            if i == j:
                continue
            diff = axes_difference(axes[i], axes[j])
            if best is None or len(diff) < best[0]:
                best = (len(diff), other.id, diff)
                if len(diff) <= 2:
                    break
        assert best is not None
        warnings.append(
            f"case {cases[i].id!r} differs from every other case in more than one axis; closest is "
            f"{best[1]!r}, differing in {best[0]} axes: {', '.join(best[2])}. A failure there cannot be "
            "pinned to one axis - add a case between them that changes one axis at a time."
        )
    if len(lonely) > limit:
        warnings.append(f"... and {len(lonely) - limit} more case(s) that differ from every other case in more "
                        "than one axis (the first ones are named above).")
    return warnings


# --------------------------------------------------------------------------
# Stars
# --------------------------------------------------------------------------


def slugify(text: str) -> str:
    """Text squeezed into the slug alphabet ('.', '_', '-', letters, digits)."""
    slug = _SLUG_BAD.sub("-", text)
    slug = re.sub(r"\.{2,}", ".", slug)
    slug = re.sub(r"-{2,}", "-", slug)
    return slug.strip("-.") or "x"


def fit_id(candidate: str) -> str:
    """A derived id as a valid slug: sanitized, and if longer than 96
    characters truncated with a short hash of the full text so it stays unique."""
    slug = slugify(candidate)
    if len(slug) > MAX_ID_LEN:
        digest = hashlib.sha1(candidate.encode("utf-8")).hexdigest()[:8]
        slug = slug[: MAX_ID_LEN - 9].rstrip("-.") + "-" + digest
    return slug


def value_slug(axis: str, value: Any) -> str:
    if axis == "shape" and isinstance(value, list):
        return shape_text(value)
    if axis == "values" and isinstance(value, dict):
        try:
            return values_text(ValueSpec.model_validate(value)).replace("+", "-")
        except ValidationError:
            pass
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
            raise ValueError(f"input {var.input!r} is not an input of the base case "
                             f"(inputs: {[i['name'] for i in inputs]})")
        spec = named[0]
        if var.member is not None:
            members = spec.get("tensors")
            if members is None or var.member >= len(members):
                raise ValueError(f"'member' {var.member} is not a member of input {var.input!r} "
                                 f"({'a list of ' + str(len(members)) if members else 'not a tensor list'})")
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
    ``value``.  Raises ValueError for a variation that does not fit."""
    doc = copy.deepcopy(base.model_dump(mode="json", exclude_none=False))
    doc.pop("origin", None)  # a variation of a captured call is a planned case, not the model's call
    if var.axis in ("mode", "attribute") and (var.input is not None or var.member is not None):
        raise ValueError(f"'input' and 'member' do not apply to axis {var.axis!r}")
    if var.axis == "dim":
        _set_dims(doc, var.dims or [], value)
    elif var.axis == "mode":
        doc["mode"] = value
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
                        f"(the rank of input {spec.get('name', var.input)!r}, shape {spec['shape']})")
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
    from .analysis.axes import contiguity

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
            raise ValueError(f"dimension {ref!r}: {name!r} is not an input of the base case "
                             f"(inputs: {sorted(by_name)})")
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
    vslug = value_slug(var.axis, value)
    if var.axis == "dim":
        parts = "_".join(f"{n}.shape{i}" for n, i in (parse_dim(d) for d in var.dims or []))
        return fit_id(f"{base.id}.{parts}-{vslug}")
    if var.axis == "mode":
        part = f"mode-{vslug}"
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


def case_content(doc: dict) -> str:
    """A case's content as canonical JSON, without its id and description."""
    body = {k: v for k, v in doc.items() if k not in ("id", "description", "origin")}
    return json.dumps(body, sort_keys=True)


def expand_star(star: StarSpec) -> list[Case]:
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
    skipped.  Raises ToolError naming the variation and value that did not fit.
    """
    base = star.base
    produced: list[Case] = [base] if star.include_base else []
    seen_content = {case_content(base.model_dump(mode="json"))}
    ids = {c.id for c in produced}
    for j, var in enumerate(star.vary):
        for value in var.values:
            where = f"vary[{j}] (axis {var.axis!r}" + (f", input {var.input!r}" if var.input else "") + \
                (f", attribute {var.name!r}" if var.name else "") + f", value {json.dumps(value)})"
            try:
                doc = apply_variation(base, var, value)
            except ValueError as exc:
                raise ToolError(f"star {where}: {exc}", code="validation_error") from None
            content = case_content(doc)
            if content in seen_content:
                continue
            case_id = _derived_id(base, var, value)
            if case_id in ids:
                digest = hashlib.sha1(content.encode("utf-8")).hexdigest()[:6]
                case_id = fit_id(f"{case_id[: MAX_ID_LEN - 7]}-{digest}")
            doc["id"] = case_id
            try:
                case = Case.model_validate(doc)
            except ValidationError as exc:
                raise ToolError(f"star {where} gives an invalid case: " + format_validation_error(exc),
                                code="validation_error") from None
            seen_content.add(content)
            ids.add(case_id)
            produced.append(case)
    return produced


# --------------------------------------------------------------------------
# plan_cases
# --------------------------------------------------------------------------


def _check_call_order(config: OperatorConfig, cases: list[Case]) -> None:
    order = config.operator.call.order or []
    problems = []
    for case in cases:
        names = {i.name for i in case.inputs} | set(case.attributes)
        missing = [n for n in order if n not in names]
        if missing:
            problems.append(f"case {case.id!r}: {missing} (it has inputs {[i.name for i in case.inputs]} "
                            f"and attributes {sorted(case.attributes)})")
    if problems:
        raise ToolError("config.operator.call.order names arguments that some cases do not provide:\n  - "
                        + "\n  - ".join(problems), code="validation_error")


def _changed_paths(old: Any, new: Any, path: str) -> list[str]:
    """Dotted paths at which two JSON documents differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [p for k in dict.fromkeys([*old, *new])
                for p in _changed_paths(old.get(k), new.get(k), f"{path}.{k}")]
    return [] if old == new else [path]


def _duplicates(ids: list[str]) -> list[str]:
    seen, dupes = set(), []
    for i in ids:
        if i in seen and i not in dupes:
            dupes.append(i)
        seen.add(i)
    return dupes


def _modules_to_store(store: RunStore, config: OperatorConfig, sources: dict[str, str]) -> dict[str, str]:
    """The user module sources still to store under artifacts/modules/, after
    checking them all: each must be listed in config.operator.modules; the
    same content as a stored module is a no-op; other content is refused
    (evidence is never overwritten)."""
    unlisted = sorted(set(sources) - set(config.operator.modules))
    if unlisted:
        raise ToolError(f"module_sources has {unlisted}, which config.operator.modules does not list "
                        f"(modules: {config.operator.modules})", code="validation_error")
    todo = {}
    for name, source in sorted(sources.items()):
        existing = store.path("artifacts", "modules", name)
        if existing.is_file():
            if existing.read_text(encoding="utf-8") != source:
                raise ToolError(f"module {name!r} is already stored in run {store.run_id!r} with other "
                                "content; evidence is never overwritten - plan a new run to change it",
                                code="module_changed")
            continue
        todo[name] = source
    return todo


MAX_CAPTURED_BYTES = 1 << 30


def _captured_to_store(store: RunStore, files: dict[str, str], cases: list[Case]) -> dict[str, bytes]:
    """The captured tensor files still to copy into artifacts/captured/, read
    completely (before the run is created, so a failed read leaves nothing
    behind) after checking them all: each file lies in the workspace, is a
    regular file of at most 1 GiB, and is read within a time limit
    (workspace_files.py); the same bytes as a stored capture are a no-op,
    other bytes are refused (evidence is never overwritten); every captured
    input of the new cases names a capture given here or already stored.  The
    server never loads them (no torch here): the runner does, and refuses a
    shape or dtype that differs from the case."""
    todo: dict[str, bytes] = {}
    roots = allowed_roots(store.root)
    for name, given in sorted(files.items()):
        data = read_workspace_file(given, f"captured_files.{name}", roots, limit=MAX_CAPTURED_BYTES)
        existing = store.path("artifacts", "captured", name)
        if existing.is_file():
            if file_sha256(existing) != hashlib.sha256(data).hexdigest():
                raise ToolError(f"captured tensor {name!r} is already stored in run {store.run_id!r} with other "
                                "content; evidence is never overwritten - give it another name", code="captured_changed")
            continue
        todo[name] = data
    for case in cases:
        for spec in case.inputs:
            for member in spec.members():
                values = member.values.for_dtype(member.dtype)
                ref = values.captured if values.kind == "captured" else None
                if ref and ref not in files and not store.path("artifacts", "captured", ref).is_file():
                    raise ToolError(f"case {case.id!r} input {spec.name!r} replays captured tensor {ref!r}, which "
                                    "is neither in 'captured_files' nor stored in the run", code="validation_error")
    return todo


def planned_cases(store: RunStore, only: list[Case] | None = None) -> list[PlannedCase]:
    """The run's cases (or ``only`` these) with their axes and state, read from disk."""
    results = store.read_result_docs()
    out = []
    for case in store.read_cases() if only is None else only:
        result = results.get(case.id)
        out.append(PlannedCase(id=case.id, mode=case.mode, axes=case_axes(case),
                               state=result["status"] if result else "pending"))
    return out


def _resolve_star_bases(store: RunStore, req: PlanRequest) -> list[StarSpec]:
    """Stars whose base is what it says: a base given as an id is the planned
    case of that id (never added again); a base body under a planned id must
    equal the planned case, else it is refused by name."""
    planned = {c.id: c for c in store.read_cases()} if (req.append and store.exists()) else {}
    out = []
    for i, star in enumerate(req.stars):
        if isinstance(star.base, str):
            if star.base not in planned:
                raise ToolError(f"stars[{i}].base names case {star.base!r}, which is not planned in run "
                                f"{req.target_run_id!r}; give the base case's body, or a planned id when appending",
                                code="unknown_case")
            out.append(star.model_copy(update={"base": planned[star.base], "include_base": False}))
            continue
        known = planned.get(star.base.id)
        if known is not None:
            old, new = known.model_dump(mode="json"), star.base.model_dump(mode="json")
            if case_content(old) != case_content(new):
                changed = _changed_paths(old, new, "base")
                raise ToolError(f"stars[{i}].base reuses the planned case id {star.base.id!r} with a different body "
                                f"(changed: {', '.join(changed[:8])}); a base must be the planned case: give only its "
                                "id, its exact body, or a new id", code="base_mismatch")
        out.append(star)
    return out


def plan_cases(request: dict | PlanRequest, *, root=None) -> PlanResponse:
    """Validate the request and create the run (or append to it).

    A new run is refused when the run id exists.  ``append=true`` adds new
    cases to an existing run and never touches what is recorded; re-used case
    ids are refused.  Returns the cases this call added with their axes, and
    counts for the whole run.
    """
    if isinstance(request, PlanRequest):
        req = request
    else:
        try:
            req = PlanRequest.model_validate(request)
        except ValidationError as exc:
            raise ToolError.from_validation(exc, "plan request") from None

    store = RunStore(root, req.target_run_id)
    stars = _resolve_star_bases(store, req) if req.stars else []
    new_cases = list(req.cases)
    for i, star in enumerate(stars):
        try:
            new_cases.extend(expand_star(star))
        except ToolError as exc:
            raise ToolError(f"stars[{i}]: {exc.message}", code=exc.code) from None
    captured_paths = dict(req.captured_files)
    if req.captures:  # the model's real calls (tools/capture_plan.py), checked before anything is planned
        from .capture_plan import plan_from_captures
        from_captures = plan_from_captures(req.captures, root)
        new_cases.extend(from_captures.cases)
        captured_paths.update({name: str(path) for name, path in from_captures.files.items()})
    if not new_cases:
        raise ToolError("the request plans no case: every star variation value gives back its base case and "
                        "include_base is false; give values that differ from the base (or include the base)",
                        code="validation_error")
    dupes = _duplicates([c.id for c in new_cases])
    if dupes:
        raise ToolError(f"duplicate case ids in the request: {few_ids(dupes)}; every case id must be unique "
                        "(a star's base case counts too unless include_base is false)", code="duplicate_case")

    if req.append:
        store.require()
        config = store.read_config()
        if req.config is not None and req.config.model_dump(mode="json") != config.model_dump(mode="json"):
            changed = _changed_paths(config.model_dump(mode="json"), req.config.model_dump(mode="json"), "config")
            raise ToolError(f"config differs from the one run {store.run_id!r} was planned with (changed: "
                            f"{', '.join(changed)}); the operator, reference and tolerances are fixed before any "
                            "result - omit 'config' when appending, or plan a new run", code="config_changed")
        clash = sorted(store.planned_ids() & {c.id for c in new_cases})
        if clash:
            bases = sorted({s.base.id for s in stars if s.include_base} & set(clash))
            hint = (f"; {bases} are star bases: to add only the variations around a planned case, set "
                    "include_base false in its star") if bases else ""
            raise ToolError(f"case ids already planned in run {store.run_id!r}: {few_ids(clash)}; planned cases are "
                            f"never replaced - give the new cases new ids{hint}", code="duplicate_case")
        _check_call_order(config, new_cases)
        modules = _modules_to_store(store, config, req.module_sources)
        captured = _captured_to_store(store, captured_paths, new_cases)
        store.append_cases(new_cases)
        created = False
    else:
        config = req.config  # type: ignore[assignment]
        assert config is not None
        _check_call_order(config, new_cases)
        if store.exists() or (store.dir.exists() and any(store.dir.iterdir())):
            raise ToolError(f"run {store.run_id!r} already exists at {store.dir}; a run is never overwritten - "
                            "choose another run_id or append cases to it (append=true)", code="run_exists")
        modules = _modules_to_store(store, config, req.module_sources)
        captured = _captured_to_store(store, captured_paths, new_cases)
        store.create(config, new_cases)
        created = True
    for name, source in modules.items():
        store.write_artifact(f"modules/{name}", source)
    for name, data in captured.items():
        store.write_artifact(f"captured/{name}", data)

    all_cases = store.read_cases()
    return PlanResponse(
        run_id=store.run_id,
        run_dir=str(store.dir),
        created=created,
        added=[c.id for c in new_cases],
        cases=planned_cases(store, only=new_cases[:PLANNED_LIST_LIMIT]),
        cases_omitted=max(0, len(new_cases) - PLANNED_LIST_LIMIT),
        case_count=len(all_cases),
        recorded_count=len(store.recorded_ids()),
        warnings=multi_axis_warnings(all_cases) + default_tolerance_warnings(config, all_cases),
    )
