"""Next cases: split the surviving hypotheses, pin boundaries, cross with
distractors, explore; each ready to append as it is.

A proposed case (a `Proposal`) is one variation of a recorded case (a star of one base;
a variation may set a second axis with ``also``, which builds the missing
cell of a 2x2).  Every surviving hypothesis predicts each proposal:
``fail``, ``pass`` or unknown (inside a threshold's bracket, an untried
categorical value).  A proposal every hypothesis predicts the same way is
implied by the recorded cases and never proposed.

Order (references/behavior.md, "Next cases"):

1. ``discriminate`` - the cases that split the surviving hypotheses best
   (greedily, most pairs of hypotheses told apart first; one case each, with
   the hypotheses each outcome refutes); two axes at once where no single
   change tells two hypotheses apart;
2. ``bisect`` / ``probe`` - the leading hypothesis' boundary (an ordered axis
   between its passing and failing values: powers of two first; an alignment
   in powers of two only) and its untried categorical or relation values;
3. ``crossing`` - the leading hypothesis' failing case with the values that
   pass elsewhere on every other axis of the run, all at once (one case);
4. ``explore`` - no hypothesis yet: vary each axis of a failing case once,
   and walk from the closest passing case toward it;
5. ``missing`` - planned cases without a result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..cases.axes import axes_difference, case_axes, distance_axes
from ..cases.constraints import Constraints
from ..cases.constraints import valid_call as constraint_violation
from ..cases.derived import (
    CONTIGUITY,
    DTYPE_BITS,
    UNSET,
    alignment,
    attr_from_axis,
    attr_json,
    contiguity,
    dim_axis,
    parse_dim_axis,
    structured_axes,
)
from ..cases.ids import case_content
from ..cases.relations import REL_VALUES, element_bytes, product_sides
from ..cases.stars import apply_variation, restride
from ..schemas import FLOAT_DTYPES, MODES, Case, Finding, NextCase, StarVariation, contiguous_strides
from .flips import dim_moves, exact_count_moves, flip_moves, product_moves
from .hypotheses import ALIGN_RESOLUTION, Atom, Hypothesis, axis_sources, covering_atoms, hypothesis_axes, is_align
from .probes import probe_cases, read_case, requirements, seed_pair_cases, untagged

MAX_BISECT_VALUES = 3
MAX_CROSSINGS = 4
MAX_MISSING_SUGGESTIONS = 20
MAX_SPLITS = 4  # discriminating cases per analysis
MAX_SPLIT_HYPOTHESES = 12  # the simplest survivors the splitting cases are searched for
MAX_SPLIT_BASES = 3


@dataclass
class Proposal:
    base: Case
    var: dict  # a star variation without its values (``also``: a second axis set with it)
    value: Any
    doc: dict
    axes: dict
    finding: str  # the axis it was made for
    preds: dict = field(default_factory=dict)  # hypothesis text -> 'fail' | 'pass' | None
    hax: dict = field(default_factory=dict)
    content: str = ""  # the validated case's content (what planned cases are compared by)

    @property
    def group(self) -> tuple:
        return (self.base.id, json.dumps({k: v for k, v in self.var.items()}, sort_keys=True, default=str))


@dataclass
class Context:
    cases: dict[str, Case]
    axes: dict[str, dict]
    dist: dict[str, dict]
    status: dict[str, str]  # 'fail' | 'pass' | 'unsupported'
    planned: Container[str]  # the planned cases' contents (build.py's _Planned computes them lazily)
    findings: list[Finding]  # the surviving hypotheses as findings, ranked
    ties: dict[str, list[str]]
    no_modes: set[str]
    cpu_only: bool
    seen_contents: set[str] = field(default_factory=set)
    hyps: list[Hypothesis] = field(default_factory=list)  # the surviving hypotheses, ranked
    hax: dict[str, dict] = field(default_factory=dict)  # hypothesis axes of the recorded cases
    terms: dict[str, list[Finding]] = field(default_factory=dict)  # hypothesis text -> its terms as findings
    tried_dtypes: set[str] | None = None
    refused: set[tuple[str, str]] | None = None  # (planned axis, value) that only made cases unsupported
    constraints: Constraints | None = None  # what the reference's refusals taught (cases/constraints.py)


# --------------------------------------------------------------------------
# Context
# --------------------------------------------------------------------------


def dim_ties(cases: list[Case]) -> dict[str, list[str]]:
    """Dimensions of different inputs that are equal in every case of the run
    (a hidden size shared by ``x.shape[-1]`` and ``weight.shape[-1]``): they
    move together, or the call would not be valid."""
    if not cases:
        return {}

    dims = _dims
    ordered = sorted(cases, key=lambda c: c.id)
    first = dims(ordered[0])
    pairs = {
        (a, b) for a in first for b in first if a < b and first[a][0] != first[b][0] and first[a][1] == first[b][1]
    }
    for case in ordered[1:]:
        if not pairs:
            break
        d = dims(case)
        pairs = {(a, b) for a, b in pairs if a not in d or b not in d or d[a][1] == d[b][1]}
    ties: dict[str, list[str]] = {}
    for a, b in sorted(pairs):
        ties.setdefault(a, []).append(b)
        ties.setdefault(b, []).append(a)
    return ties


def tie_aliases(ties: dict[str, list[str]], inputs: list[str] | None = None) -> dict[str, str]:
    """Axis -> the axis it always equals: a tied dimension's size and
    alignment read as those of the dimension of the first input (in the
    call's order, ``inputs``) of its tie group."""
    order = {name: i for i, name in enumerate(inputs or [])}
    out: dict[str, str] = {}
    for dim, others in ties.items():
        rep = min([dim, *others], key=lambda d: (order.get(_tied_dim(d)[0], len(order)), d))
        if rep == dim:
            continue
        out[dim] = rep
        out[_align_name(*_tied_dim(dim))] = _align_name(*_tied_dim(rep))
    return out


def _tied_dim(axis: str) -> tuple[str, int]:
    """A tied axis as (input, dimension): dim_ties pairs dimension axes only."""
    parsed = parse_dim_axis(axis)
    if parsed is None:
        raise ValueError(f"a tie names a dimension axis, not {axis!r}")
    return parsed


def _align_name(name: str, index: int) -> str:
    return f"{name}.last_align" if index == -1 else f"{name}.align[{index}]"


def unusable_modes(cases: list[Case], results: dict, status: dict[str, str]) -> tuple[set[str], bool]:
    """Modes already known unsupported (some case in it unsupported, none ran
    it), and whether every recorded result ran on a CPU device (no graph mode)."""
    ran: set[str] = {c.mode for c in cases if status.get(c.id) in ("pass", "fail")}
    refused: set[str] = {c.mode for c in cases if status.get(c.id) == "unsupported"}
    kinds = {(r.environment or {}).get("device_kind") for r in results.values()}
    cpu_only = bool(kinds) and kinds <= {"cpu"}
    no_modes = refused - ran
    if cpu_only:
        no_modes.add("graph")
    return no_modes, cpu_only


# --------------------------------------------------------------------------
# Candidates
# --------------------------------------------------------------------------


def make_proposal(ctx: Context, base: Case, var: dict, value: Any, finding: str) -> Proposal | None:
    try:
        sv = StarVariation.model_validate(var | {"values": [value]})
        doc = apply_variation(base, sv, value)
        case = Case.model_validate(doc)
    except (ValueError, ValidationError):
        return None
    content = case_content(case.model_dump(mode="json"))  # as planned cases are compared: validated, defaults in
    if content in ctx.planned or content in ctx.seen_contents:
        return None
    if case.mode in ctx.no_modes:
        return None
    if ctx.cpu_only and any(i.layout != "ND" for i in case.inputs):
        return None
    if not valid_call(ctx, case):
        return None
    axes = structured_axes(case, case_axes(case))
    named = {a.axis for h in ctx.hyps for a in h.atoms}
    cand = Proposal(
        base=base,
        var=var,
        value=value,
        doc=doc,
        axes=axes,
        finding=finding,
        hax=read_case(hypothesis_axes(case, {}, axes), case, named),
        content=content,
    )
    cand.preds = {h.text: h.predict(cand.hax) for h in ctx.hyps}
    return cand


def _dims(case: Case) -> dict[str, tuple[str, int]]:
    """Each dimension of a case's tensor inputs: axis name -> (input, size)."""
    out: dict[str, tuple[str, int]] = {}
    for spec in case.inputs:
        shape = [] if spec.none or spec.shape is None else spec.shape
        for i, size in enumerate(shape):
            out[dim_axis(spec.name, i, len(shape))] = (spec.name, size)
    return out


def valid_call(ctx: Context, case: Case) -> bool:
    """A next case is a valid call of the operator: it keeps what the reference's refusals taught
    (cases/constraints.py), the sizes the run's cases share across inputs stay equal (a matmul's inner
    dimension), and no planned value that only ever made a case unsupported comes back."""
    if constraint_violation(case, ctx.constraints) is not None:
        return False
    dims = _dims(case)
    for dim, others in ctx.ties.items():
        if dim in dims and any(o in dims and dims[o][1] != dims[dim][1] for o in others):
            return False
    if ctx.refused is None:
        ctx.refused = refused_values(ctx)
    if ctx.refused:
        axes = distance_axes(case)
        return not any(axes.get(k) == v for k, v in ctx.refused)
    return True


def refused_values(ctx: Context) -> set[tuple[str, str]]:
    """(planned axis, value) pairs some unsupported case has and no case that ran has: a change that made a
    case unsupported, never proposed again."""
    ran: set[tuple[str, str]] = {
        (k, v) for c, s in ctx.status.items() if s in ("pass", "fail", "other") for k, v in ctx.dist[c].items()
    }
    out: set[tuple[str, str]] = set()
    for c, s in ctx.status.items():
        if s == "unsupported" and c in ctx.cases:
            out |= {(k, v) for k, v in distance_axes(ctx.cases[c]).items() if (k, v) not in ran}
    return out


def decisive(c: Proposal) -> bool:
    known = {p for p in c.preds.values() if p is not None}
    return known == {"pass", "fail"}


def informative(c: Proposal, f: Finding, hyp: str | None = None) -> bool:
    return c.preds.get(hyp or f.predicate) is None or decisive(c)


def _dim_moves(ctx: Context, base: Case, name: str, index: int) -> list[dict]:
    return dim_moves(ctx.ties, base, name, index)


def moves(ctx: Context, base: Case, axis: str, target: Any) -> list[tuple[dict, Any]]:
    """Ways to set ``axis`` of ``base`` to ``target`` with one star variation:
    (variation without values, value)."""
    if target == UNSET or target is None:
        return []  # an axis a case does not have (an attribute left out, a captured input's magnitude)
    if product_sides(axis) is not None:  # x.shape[0] * x.shape[1], x.shape[1] // attr.groups
        return product_moves(ctx.ties, base, axis, target)
    numeric = isinstance(target, (int, float)) and not isinstance(target, bool)
    dim = parse_dim_axis(axis)
    if (
        dim is not None or axis.endswith((".numel", ".offset", ".magnitude", ".last_align", ".offset_align"))
    ) and not numeric:
        return []
    if dim is not None:
        return [(v, int(target)) for v in _dim_moves(ctx, base, *dim)]
    if axis.startswith("attr."):  # every proposal's attribute: typed again from its axis text
        return [({"axis": "attribute", "name": axis[5:]}, attr_from_axis(target))]
    if axis == "mode":
        return [({"axis": "mode"}, target)]
    if axis == "dtype":
        return [({"axis": "dtype"}, target)]
    if "~" in axis:
        return flip_moves(ctx.ties, base, axis, target)
    name, _, fld = axis.partition(".")
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or spec.shape is None or spec.none:  # a tensor list or a None input: not moved here
        return flip_moves(ctx.ties, base, axis, target) if fld == "none" else []
    if fld == "dtype":
        return [({"axis": "dtype", "input": name}, target)]
    if fld == "offset":
        return [({"axis": "storage_offset", "input": name}, int(target))]
    if fld == "rank" and spec.shape and int(target) >= 1:  # the leading dimensions merged, or 1s put inside
        t, shape = int(target), list(spec.shape)
        reshaped = [math.prod(shape[: len(shape) - t + 1]), *shape[len(shape) - t + 1 :]] if t < len(shape) else shape
        reshaped = reshaped[:1] + [1] * (t - len(shape)) + reshaped[1:]  # the first and the last dimension kept
        return [({"axis": "shape", "input": name}, reshaped)] if reshaped != shape and spec.strides is None else []
    if fld == "numel":
        out = []
        numel = math.prod(spec.shape)
        tied = any(dim_axis(name, i, len(spec.shape)) in ctx.ties for i in range(len(spec.shape)))
        for i, size in enumerate(spec.shape):
            rest = numel // size if size else math.prod(s for j, s in enumerate(spec.shape) if j != i)
            if rest <= 0:
                continue
            new = max(1, round(target / rest)) if target > 0 else 0
            for v in _dim_moves(ctx, base, name, i):
                out.append((v, new))
            if not tied and len(spec.shape) > 1 and target > 0 and new * rest != target:
                flat = [1] * len(spec.shape)
                flat[i] = int(target)
                out.append(({"axis": "shape", "input": name}, flat))
        if target > 0 and float(target).is_integer():
            out += exact_count_moves(ctx.ties, base, name, int(target))  # two dimensions at once: exactly it
        return out
    if fld == "last_align" and spec.shape:
        # the nearest last-dimension sizes above the current one aligned exactly to the target
        a, cur = int(target), spec.shape[-1]
        if a < 1:
            return []
        sizes = [v for v in range((cur // a + 1) * a, (cur // a + 9) * a, a) if alignment(v) == a][:1]
        return [(var, v) for v in sizes for var in _dim_moves(ctx, base, name, len(spec.shape) - 1)]
    if fld == "last_align_bytes" and spec.shape:  # a row's alignment in bytes: in elements of the base's dtype
        width = element_bytes(spec.dtype) or 1
        return moves(ctx, base, f"{name}.last_align", int(target // width)) if target >= width else []
    if fld.startswith("stride[") and numeric:  # one dimension's stride, the others kept
        strides = list(spec.strides if spec.strides is not None else contiguous_strides(spec.shape))
        i = int(fld[len("stride[") : -1])
        strides[i] = int(target)
        return [({"axis": "strides", "input": name}, strides)]
    if fld == "offset_align":
        return [({"axis": "storage_offset", "input": name}, int(target))]  # the smallest offset aligned exactly so
    if fld == "contiguity":
        laid = strides_for(spec.shape, target)
        return [({"axis": "strides", "input": name}, laid)] if laid is not None or target == "contiguous" else []
    if fld == "magnitude":
        values = spec.values.model_dump(mode="json", exclude_none=True)
        if spec.values.kind == "normal" and target > abs(spec.values.mean):
            return [({"axis": "values", "input": name}, values | {"std": target - abs(spec.values.mean)})]
        if spec.values.kind == "uniform" and spec.values.low is not None and spec.values.high is not None:
            scale = target / max(abs(spec.values.low), abs(spec.values.high), 1e-30)
            return [
                (
                    {"axis": "values", "input": name},
                    values | {"low": spec.values.low * scale, "high": spec.values.high * scale},
                )
            ]
        if spec.values.kind in ("zeros", "ones", "full") and target > 0:
            return [({"axis": "values", "input": name}, {"kind": "normal", "std": target})]
        return []
    if ctx.tried_dtypes is None:  # once per analysis
        ctx.tried_dtypes = {
            v for a in ctx.axes.values() for k, v in a.items() if k.endswith(".dtype") and isinstance(v, str)
        }
    return flip_moves(ctx.ties, base, axis, target, ctx.tried_dtypes)


def strides_for(shape: list[int], kind: str) -> list[int] | None:
    """Strides of one non-contiguous pattern of ``shape`` (None when the shape
    cannot have it, e.g. no transposition of a vector)."""
    if kind == "contiguous" or not shape:
        return None
    big = [i for i, s in enumerate(shape) if s > 1]
    dense = contiguous_strides(shape)
    if kind == "transposed" and len(big) >= 2:
        a, b = big[-2], big[-1]
        order = list(range(len(shape)))
        order[a], order[b] = order[b], order[a]
        acc, strides = 1, [0] * len(shape)
        for i in reversed(order):
            strides[i] = acc
            acc *= shape[i]
        out = strides
    elif kind == "sliced" and big:
        out = [2 * s for s in dense]
    elif kind == "broadcast" and big:
        out = list(dense)
        out[big[0]] = 0
    elif kind == "overlapping" and len(big) >= 2:
        out = list(dense)
        out[big[0]] = 1
    else:
        return None
    return out if contiguity(shape, out) == kind else None


def _pow2_between(lo: float, hi: float) -> list[float]:
    """Powers of two strictly between lo and hi (1, 2, 4... for lo < 1)."""
    k = math.floor(math.log2(lo)) + 1 if lo > 0 else 0
    out = []
    while 2.0**k < hi:
        if 2.0**k > lo:
            out.append(2.0**k)
        k += 1
    return out


def _spread(values: list, n: int) -> list:
    if len(values) <= n:
        return values
    idx = sorted({round(i * (len(values) - 1) / (n - 1)) for i in range(n)})
    return [values[i] for i in idx]


def bisect_values(f: Finding, integer: bool) -> list:
    """Values inside the bracket of a threshold finding, the most useful first:
    powers of two strictly inside; then the value next to the passing side
    (is the boundary exactly there?) and the middle.  An alignment moves in
    powers of two only (its bracket is pinned at a factor 2); one whose
    passing side is only 0 is probed up to ALIGN_RESOLUTION."""
    p, q = f.passes_at, f.fails_at
    if q is None:
        return []
    if p is None:
        if is_align(f.axis) and f.direction == "below" and q < ALIGN_RESOLUTION:
            return [ALIGN_RESOLUTION] + [int(v) for v in _spread(_pow2_between(q, ALIGN_RESOLUTION), 2)]
        return []
    lo, hi = min(p, q), max(p, q)
    if is_align(f.axis):
        return [int(v) for v in _spread(_pow2_between(lo, hi), MAX_BISECT_VALUES)]
    if integer:
        if hi - lo <= 1:
            return []
        pw = [int(v) for v in _pow2_between(lo, hi)]
        if pw:
            return _spread(pw, MAX_BISECT_VALUES)
        near = int(p) + 1 if f.direction == "above" else int(p) - 1
        inner = [int(lo) + (int(hi) - int(lo)) * k // 4 for k in (1, 2, 3)]
        return sorted(dict.fromkeys(v for v in [near, *inner] if lo < v < hi), key=lambda v: abs(v - p))
    if lo <= 0 or hi / lo <= 2.0:
        return [] if lo > 0 or hi <= 0 else [min(1.0, hi / 2)]
    powers = _pow2_between(lo, hi)
    return _spread(powers, MAX_BISECT_VALUES) if powers else [math.sqrt(lo * hi)]


def _domain(ctx: Context, f: Finding, base: Case) -> list:
    """Every value a categorical axis can take that a case can be built with (None: unknown)."""
    axis = f.axis
    if "~" in axis:
        return ["=", "!="] if axis.split("~", 1)[0].endswith(".dtype") else list(REL_VALUES)
    if axis.endswith(".sign"):
        return ["nonnegative", "nonpositive", "mixed"]
    return []


def probe_values(ctx: Context, f: Finding, base: Case) -> list:
    """Untried values of a categorical axis worth trying, the closest first."""
    seen = set(f.failing_values) | set(f.passing_values)
    axis = f.axis
    if "~" in axis or axis.endswith(".sign"):
        return [v for v in _domain(ctx, f, base) if v not in seen]
    if axis == "mode":
        return [m for m in MODES if m not in seen and m not in ctx.no_modes]
    if axis == "dtype" or axis.endswith(".dtype"):
        if not all(v in FLOAT_DTYPES for v in f.failing_values):
            return []
        widths = {DTYPE_BITS[v] for v in f.failing_values}
        same = [d for d in FLOAT_DTYPES if d not in seen and DTYPE_BITS[d] in widths]
        if same:
            return same
        wider = [
            d
            for d in FLOAT_DTYPES
            if d not in seen
            and DTYPE_BITS[d] > max(widths)
            and not any(DTYPE_BITS[p] > max(widths) for p in f.passing_values if p in DTYPE_BITS)
        ]
        return wider[:1]
    if axis.endswith(".contiguity"):
        name = axis.rsplit(".", 1)[0]
        spec = next((i for i in base.inputs if i.name == name), None)
        if spec is None or spec.shape is None or spec.none:
            return []
        return [k for k in CONTIGUITY if k not in seen and strides_for(spec.shape, k) is not None]
    if axis.startswith("attr."):
        vals = f.failing_values + f.passing_values
        if all(v in ("true", "false") for v in vals):
            return [v for v in ("true", "false") if v not in seen]
        if f.kind in ("value", "set") and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            return sorted({n for v in f.failing_values for n in (v - 1, v + 1) if n >= 0 and n not in seen})
    return []


def _bases(ctx: Context, f: Finding) -> list[Case]:
    """The cases to move from: the minimal pair's passing then failing case,
    else the passing case nearest the boundary and the first failing case (ties by id)."""
    if f.minimal_pair is not None:
        return [ctx.cases[f.minimal_pair.passing], ctx.cases[f.minimal_pair.failing]]
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    failing = sorted(c for c, s in ctx.status.items() if s == "fail")
    if f.kind == "threshold" and f.passes_at is not None:
        passing = [
            c for c in passing if ctx.axes[c].get(f.axis, ctx.hax.get(c, {}).get(f.axis)) == f.passes_at
        ] or passing
    return [ctx.cases[c] for c in passing[:1] + failing[:1]]


def narrowing(ctx: Context, f: Finding, hyp: str | None = None) -> list[Proposal]:
    """The informative candidates that narrow one finding or term (bisect or probe)."""
    out: list[Proposal] = []
    for base in _bases(ctx, f)[:1]:
        if f.kind == "threshold":
            integer = all(isinstance(v, int) for v in f.failing_values + f.passing_values)
            targets = bisect_values(f, integer)
            if f.axis.endswith(".bytes"):  # a size in bytes moves by whole elements of the base's dtype
                targets = _whole_elements(base, f, targets)
        elif f.kind in ("value", "set", "relation"):
            targets = probe_values(ctx, f, base)
        else:
            targets = []
        for target in targets:
            best = None
            for var, value in moves(ctx, base, f.axis, target):
                cand = make_proposal(ctx, base, var, value, f.axis)
                # an untried categorical value is always worth its case; inside a bracket, when it can move it
                if cand is None or (f.kind == "threshold" and not informative(cand, f, hyp)):
                    continue
                got = cand.hax.get(f.axis, cand.axes.get(f.axis))
                miss = (
                    abs(got - target)
                    if f.kind == "threshold" and isinstance(got, (int, float)) and isinstance(target, (int, float))
                    else 0
                )  # the move that lands on the value first
                score = (
                    miss,
                    len(var.get("dims") or [1]) if var["axis"] == "dim" else 5,
                    1 if var.get("also") else 0,
                    _others_named(ctx, f, var),
                )
                if best is None or score < best[0]:
                    best = (score, cand)
            if best is not None:
                ctx.seen_contents.add(best[1].content)
                out.append(best[1])
    return out


def _whole_elements(base: Case, f: Finding, targets: list) -> list:

    name = f.axis[: -len(".bytes")]
    spec = next((i for i in base.inputs if i.name == name), None)
    size = element_bytes(spec.dtype) if spec is not None and spec.shape is not None else None
    if not size or f.passes_at is None or f.fails_at is None:
        return targets
    lo, hi = sorted((f.passes_at, f.fails_at))
    step = [f.passes_at + size if f.direction == "above" else f.passes_at - size]
    out = [math.ceil(t / size) * size for t in step + list(targets)]
    return [int(t) if float(t).is_integer() else t for t in dict.fromkeys(out) if lo < t < hi]


def _others_named(ctx: Context, f: Finding, var: dict) -> int:
    """How many other live findings a move touches (fewer is a cleaner step)."""
    touched = set(var.get("dims") or [])
    return sum(1 for g in ctx.findings if g.axis != f.axis and g.axis in touched)


# --------------------------------------------------------------------------
# Splitting the surviving hypotheses
# --------------------------------------------------------------------------


def _flip_targets(ctx: Context, atom: Atom, term: Finding, base: Case) -> list:
    """Values of one term's axis on each side of it (and untried ones)."""
    if atom.kind == "class":
        return [True, False]
    if atom.kind == "threshold":
        p, q = atom.passes_at, atom.fails_at
        if q is None:  # a threshold atom always has a failing value nearest its boundary
            return []
        integer = all(isinstance(v, int) for v in (p, q) if v is not None)
        out: list = [q]
        if p is not None:
            out.append(p)
        if atom.direction == "above":
            out.append(2 * q)
            if p is not None:
                out.append(p // 2 if integer else p / 2)
        else:
            out.append(q // 2 if integer else q / 2)
            if p is not None:
                out.append(2 * p)
            elif is_align(atom.axis):
                out.append(ALIGN_RESOLUTION)
        if is_align(atom.axis):
            out = [int(v) for v in out if v and v >= 1 and not int(v) & (int(v) - 1)]
        return list(dict.fromkeys(out))
    return list(dict.fromkeys(list(atom.failing[:2]) + list(atom.passing[:2]) + probe_values(ctx, term, base)))


def _split_pairs(c: Proposal, names: list[str]) -> set[tuple[int, int]]:
    preds = [c.preds.get(n) for n in names]
    return {
        (i, j)
        for i in range(len(names))
        for j in range(i + 1, len(names))
        if preds[i] is not None and preds[j] is not None and preds[i] != preds[j]
    }


def _term_moves(ctx: Context, hyp: Hypothesis) -> list[tuple[Case, str, dict, Any]]:
    out = []
    terms = ctx.terms.get(hyp.text, [])
    for atom, term in zip(hyp.atoms, terms, strict=False):  # no terms: the hypothesis has no finding built
        for base in _bases(ctx, term)[:MAX_SPLIT_BASES]:
            for target in _flip_targets(ctx, atom, term, base):
                for var, value in moves(ctx, base, atom.axis, target):
                    out.append((base, atom.axis, var, value))
    return out


def splitting(ctx: Context) -> list[Proposal]:
    """The cases that tell the surviving hypotheses apart, chosen greedily:
    each next one tells apart the most pairs not yet told apart (then the more
    balanced split, the simpler move).  Where no single change tells two
    hypotheses apart, a change of each of their axes at once (a 2x2 cell)."""
    hyps = ctx.hyps[:MAX_SPLIT_HYPOTHESES]
    if len(hyps) < 2:
        return []
    names = [h.text for h in hyps]
    pool: list[tuple[Proposal, set]] = []
    contents: set[str] = set()
    per_hyp: dict[str, list] = {}
    for h in hyps:
        per_hyp[h.text] = _term_moves(ctx, h)
        for base, axis, var, value in per_hyp[h.text]:
            cand = make_proposal(ctx, base, var, value, axis)
            if cand is None:
                continue
            content = cand.content
            pairs = _split_pairs(cand, names)
            if pairs and content not in contents:
                contents.add(content)
                pool.append((cand, pairs))
    # the leading hypothesis against each competitor: pairs of competitors matter only once the leader falls
    # (the next analysis splits them then), so a round spends no case on them
    wanted = {(0, j) for j in range(1, len(names))}
    pool = [(c, p & wanted) for c, p in pool if p & wanted]
    uncovered = wanted - set().union(*(p for _, p in pool)) if pool else set(wanted)
    for i, j in sorted(uncovered)[:6]:  # two axes at once for the pairs no single change splits
        for base, axis, var, value in per_hyp[names[i]][:8]:
            for base2, axis2, var2, value2 in per_hyp[names[j]][:8]:
                if base2.id != base.id or axis2 == axis or var.get("also") or var2.get("also"):
                    continue
                also = dict(var2, values=[value2])
                cand = make_proposal(ctx, base, dict(var, also=[also]), value, axis)
                if cand is None:
                    continue
                content = cand.content
                pairs = _split_pairs(cand, names) & wanted
                if (i, j) in pairs and content not in contents:
                    contents.add(content)
                    pool.append((cand, pairs))
    chosen: list[Proposal] = []
    covered: set[tuple[int, int]] = set()

    def score(item):
        cand, pairs = item
        known = [p for p in cand.preds.values() if p is not None]
        balance = min(known.count("fail"), known.count("pass"))
        return (
            -len(pairs - covered),
            -balance,
            1 if cand.var.get("also") else 0,
            cand.var["axis"] == "shape",
            len(cand.var.get("dims") or []),
            cand.base.id,
            json.dumps(cand.var, sort_keys=True, default=str),
            json.dumps(cand.value, sort_keys=True, default=str),
        )

    while pool and len(chosen) < MAX_SPLITS:
        pool.sort(key=score)
        cand, pairs = pool.pop(0)
        if not pairs - covered:
            break
        covered |= pairs
        ctx.seen_contents.add(cand.content)
        chosen.append(cand)
    return chosen


# --------------------------------------------------------------------------
# Crossing with the run's other axes
# --------------------------------------------------------------------------


def _variation_for(axis_key: str) -> dict[str, Any] | None:
    if axis_key in ("mode", "dtype", "layout"):
        return {"axis": axis_key}
    if axis_key.startswith("attr."):
        return {"axis": "attribute", "name": axis_key[len("attr.") :]}
    name, _, fld = axis_key.partition(".")
    mapping = {"shape": "shape", "strides": "strides", "offset": "storage_offset", "values": "values"}
    return {"axis": mapping[fld], "input": name} if fld in mapping else None


def _raw_value(case: Case, axis_key: str) -> Any:
    if axis_key == "mode":
        return case.mode
    if axis_key.startswith("attr."):
        return attr_json(case.attributes.get(axis_key[len("attr.") :]))
    if axis_key in ("dtype", "layout"):
        return None  # per-input lists: not one star value
    name, _, fld = axis_key.partition(".")
    spec = next((i for i in case.inputs if i.name == name), None)
    if spec is None:
        return None
    if fld == "values":
        return spec.values.model_dump(mode="json")
    return {"offset": spec.storage_offset}.get(fld, getattr(spec, fld, None))


def _distractor_value(ctx: Context, key: str, cid: str) -> Any:
    """What a distractor axis reads as for crossing: a strides pattern by its
    contiguity class (it must fit another shape), the others as planned."""
    if key.endswith(".strides"):
        return ctx.axes[cid].get(key[: -len(".strides")] + ".contiguity")
    return ctx.dist[cid].get(key)


def _excluded_keys(ctx: Context, sources: list[str]) -> set[str]:
    """The hypothesis' sources and what moves with them (the shapes of inputs tied to a source's)."""
    excluded = set(sources)
    for key in list(excluded):
        if key.endswith(".shape"):
            name = key[: -len(".shape")]
            excluded |= {
                t.split(".shape[", 1)[0] + ".shape"
                for d, tied in ctx.ties.items()
                if d.startswith(name + ".shape[")
                for t in tied
            }
    if "dtype" in excluded:
        excluded.add("layout")
    return excluded


def uncrossed(ctx: Context, sources: list[str]) -> list[tuple[str, Any, str]]:
    """(planned axis, value, the passing case it comes from) that would cross
    the hypothesis with the run's other axes.  Every atom of the space over an
    axis outside the hypothesis' sources that holds on every failing case and
    not on some passing case (``x.offset <= 0``, ``x.shape[-1] >= 64``,
    ``dtype == float32``) is a term the failure might need as well: the case
    that refutes it is a failing case moved to the planned value of a passing
    case where the term does not hold.  None left: the finding held across the
    run's other axes."""

    excluded = _excluded_keys(ctx, sources)
    failing = sorted(c for c, s in ctx.status.items() if s == "fail")
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    keys = sorted({k for c in failing + passing for k in ctx.hax[c]})
    out: list[tuple[str, Any, str]] = []
    seen: set[tuple[str, Any]] = set()
    for axis in keys:
        movers = [k for k in axis_sources(axis)]
        if set(movers) & excluded or any(m == "layout" and ctx.cpu_only for m in movers):
            continue
        fvals = [ctx.hax[c].get(axis) for c in failing]
        pvals = [ctx.hax[c].get(axis) for c in passing]
        for _atom, mask in covering_atoms(axis, fvals, pvals):
            if mask == (1 << len(passing)) - 1:
                continue  # holds on every recorded case: the run never varied it
            p = next(c for i, c in enumerate(passing) if not mask >> i & 1)  # the first passing case without it
            for key in movers:
                if key not in ctx.dist[p]:
                    continue
                value = _distractor_value(ctx, key, p)
                if value is not None and (key, value) not in seen:
                    seen.add((key, value))
                    out.append((key, value, p))
    return out


def _crossing_move(ctx: Context, base: Case, key: str, value: Any, cid: str) -> list[tuple[dict, Any]] | None:
    """The change(s) that set a distractor axis of ``base`` to ``value``: one,
    or a shape and the strides that keep the input's layout class."""
    var = _variation_for(key)
    if var is None:
        return None
    if key.endswith(".shape"):
        spec = next((i for i in base.inputs if i.name == var["input"]), None)
        raw = _raw_value(ctx.cases[cid], key)
        if spec is None or spec.shape is None or spec.none or raw is None:
            return None
        if spec.is_contiguous() or len(raw) != len(spec.shape):
            return [(var, raw)] + tied_shape_moves(ctx, base, var["input"], raw) if spec.is_contiguous() else None
        strides = restride(spec.shape, spec.strides, raw)
        return (
            [(var, raw)]
            + ([({"axis": "strides", "input": var["input"]}, strides)] if strides else [])
            + tied_shape_moves(ctx, base, var["input"], raw)
        )
    one = _crossing_one(ctx, base, key, value, cid, var)
    return None if one is None else [one]


def tied_shape_moves(ctx: Context, base: Case, name: str, shape: list[int]) -> list[tuple[dict, Any]]:
    """The shape changes of the other inputs that keep their dimensions tied to ``name``'s equal when its
    shape becomes ``shape`` (a matmul's inner size, a shared batch): each named, as a crossing names every
    change it makes."""
    out = []
    for spec in base.inputs:
        if spec.name == name or spec.none or spec.shape is None or spec.tensors is not None:
            continue
        new = list(spec.shape)
        for i in range(len(spec.shape)):
            for tied in ctx.ties.get(dim_axis(spec.name, i, len(spec.shape)), []):
                owner, index = _tied_dim(tied)
                if owner == name and -len(shape) <= index < len(shape):
                    new[i] = shape[index]
        if new != spec.shape:
            strides = restride(spec.shape, spec.strides, new)
            out.append(({"axis": "shape", "input": spec.name}, new))
            if strides:
                out.append(({"axis": "strides", "input": spec.name}, strides))
    return out


def _crossing_one(ctx: Context, base: Case, key: str, value: Any, cid: str, var: dict) -> tuple[dict, Any] | None:
    if key.endswith(".strides"):
        name = key[: -len(".strides")]
        spec = next((i for i in base.inputs if i.name == name), None)
        if spec is None or spec.shape is None or spec.none:
            return None
        other = next((i for i in ctx.cases[cid].inputs if i.name == name), None)
        strides = None
        if value != "contiguous":
            strides = strides_for(spec.shape, value)
            if strides is None and other is not None and other.shape and len(other.shape) == len(spec.shape):
                strides = restride(other.shape, other.strides, spec.shape)
            if strides is None:
                return None
        return var, strides
    raw = _raw_value(ctx.cases[cid], key)
    if key == "dtype":
        dtypes = {i.dtype for i in ctx.cases[cid].inputs if i.dtype in FLOAT_DTYPES}
        if len(dtypes) != 1:
            return None
        raw = dtypes.pop()
    if raw is None and not key.endswith(".strides"):
        return None
    return var, raw


def crossing_proposals(ctx: Context, f: Finding, sources: list[str]) -> list[Proposal]:
    """The leading finding's failing case with every distractor value that
    passes elsewhere and never failed, all at once (one case, up to four
    axes); one case per axis where the combination cannot be built."""
    if f.minimal_pair is None:
        return []
    base = ctx.cases[f.minimal_pair.failing]
    # a value the failing case already has is no change (bytes move with the shape and the dtype: the one
    # that differs is the crossing)
    todo = [t for t in uncrossed(ctx, sources) if _distractor_value(ctx, t[0], base.id) != t[1]]
    if not todo:
        return []
    firsts: dict[str, tuple[str, Any, str]] = {}
    for key, value, cid in todo:
        firsts.setdefault(key, (key, value, cid))

    def has(cand: Proposal, items) -> bool:  # a strides pattern that does not fit the shape is no crossing
        return all(
            cand.axes.get(k[: -len(".strides")] + ".contiguity") == v for k, v, _ in items if k.endswith(".strides")
        )

    def combined(changes: list[tuple[dict, Any]]) -> Proposal | None:
        (var0, val0), rest = changes[0], changes[1:]
        var = dict(var0, also=[dict(v, values=[x]) for v, x in rest]) if rest else var0
        return make_proposal(ctx, base, var, val0, f.axis)

    built = [(k, v, c, m) for k, v, c in firsts.values() if (m := _crossing_move(ctx, base, k, v, c)) is not None]
    out: list[Proposal] = []
    if len(built) > 1:
        chosen = built[:MAX_CROSSINGS]
        changes = [ch for *_, m in chosen for ch in m]
        cand = combined(changes[:5]) if len(changes) <= 5 else None
        if cand is not None and has(cand, [b[:3] for b in chosen]):
            ctx.seen_contents.add(cand.content)
            return [cand]
    for key, value, cid, move in built[:MAX_CROSSINGS]:
        cand = combined(move)
        if cand is not None and has(cand, [(key, value, cid)]):
            ctx.seen_contents.add(cand.content)
            out.append(cand)
    return out


# --------------------------------------------------------------------------
# Next cases
# --------------------------------------------------------------------------


def _star(cands: list[Proposal]) -> tuple[Case, list[dict]]:
    base = cands[0].base
    vary: dict[str, dict] = {}
    for c in cands:
        key = json.dumps(c.var, sort_keys=True, default=str)
        vary.setdefault(key, dict(c.var, values=[]))["values"].append(c.value)
    return base, list(vary.values())


def _refuted(cands: list[Proposal], outcome: str) -> list[str]:
    other = "pass" if outcome == "fail" else "fail"
    return sorted({h for c in cands for h, p in c.preds.items() if p == other})


def _next(kind: str, axis: str | None, cands: list[Proposal], reason: str, if_fails: str, if_passes: str) -> NextCase:
    base, vary = _star(cands)
    doc = base.model_dump(mode="json", exclude_none=True)
    star = {"base": doc if kind == "falsify" else untagged(doc), "vary": vary, "include_base": False}
    return NextCase(
        reason=reason,
        base_case=base.id,
        change=vary[0],
        kind=kind,
        axis=axis,
        star=star,
        if_fails=if_fails,
        if_passes=if_passes,
        refutes_if_fails=_refuted(cands, "fail"),
        refutes_if_passes=_refuted(cands, "pass"),
    )


proposal_next = _next  # the one way a list of proposals becomes a next case (stated.py's probes too)


def _by_base(cands: list[Proposal]) -> list[list[Proposal]]:
    groups: dict[str, list[Proposal]] = {}
    for c in cands:
        groups.setdefault(c.base.id, []).append(c)
    return list(groups.values())


def _values_text(cands: list[Proposal], axis: str) -> str:
    return ", ".join(str(c.axes.get(axis, c.hax.get(axis))) for c in cands)


def _change_text(c: Proposal) -> str:
    parts = [f"{c.var['axis']}={json.dumps(c.value, default=str)}"]
    parts += [f"{a['axis']}={json.dumps(a['values'][0], default=str)}" for a in c.var.get("also") or []]
    return " and ".join(parts)


def next_cases(
    ctx: Context,
    lead: Finding | None,
    narrow: dict[str, list[Proposal]],
    results: dict,
    missing: list[str],
    *,
    splits: Sequence[Proposal] = (),
    cross: Sequence[Proposal] = (),
    lead_hyp: str | None = None,
) -> list[NextCase]:
    out: list[NextCase] = []
    for group in _by_base(list(splits)):  # one next case per base: each of its cases says what it refutes
        each = []
        for cand in group:
            fails, passes = _refuted([cand], "fail"), _refuted([cand], "pass")
            two = ", two axes at once: a missing cell of the 2x2" if cand.var.get("also") else ""
            each.append(
                f"{_change_text(cand)}{two} - a failure refutes {', '.join(fails) or 'nothing'}; "
                f"a pass refutes {', '.join(passes) or 'nothing'}"
            )
        out.append(
            _next(
                "discriminate",
                group[0].finding,
                group,
                reason=(
                    f"{len(ctx.hyps)} hypotheses separate the recorded cases equally well; these case(s) of "
                    f"{group[0].base.id!r} tell them apart: " + " | ".join(each)
                ),
                if_fails="each failing case refutes the hypotheses that predicted it passes (refutes_if_fails)",
                if_passes="each passing case refutes the hypotheses that predicted it fails (refutes_if_passes)",
            )
        )
    if lead is not None:
        for f in [lead, *[t for t in ctx.terms.get(lead_hyp or "", []) if t is not lead]]:
            cands = narrow.get(f.axis) or []
            if not cands:
                continue
            for group in _by_base(cands):
                shown = _values_text(group, f.axis)
                if f.kind == "threshold":
                    side = f"passes at {_fmt(f.passes_at)}, fails at {_fmt(f.fails_at)}"
                    out.append(
                        _next(
                            "bisect",
                            f.axis,
                            group,
                            reason=f"{f.predicate} is not pinned yet ({side}): bisect {f.axis} at {shown}",
                            if_fails=f"each failing value moves the boundary of {f.axis} toward the passing side",
                            if_passes=f"each passing value moves the boundary of {f.axis} toward the failing side",
                        )
                    )
                else:
                    out.append(
                        _next(
                            "probe",
                            f.axis,
                            group,
                            reason=f"{f.predicate}: try the untried value(s) {shown} of the same axis",
                            if_fails=f"the failure covers those {f.axis} values too",
                            if_passes=f"the failure is limited to {f.failing_values}",
                        )
                    )
        if cross:
            changes = "; ".join(_change_text(c) for c in cross)
            out.append(
                _next(
                    "crossing",
                    lead.axis,
                    list(cross),
                    reason=(
                        f"{lead.predicate}: check that it holds across the run's other axes - the failing case "
                        f"{cross[0].base.id!r} with the values that pass elsewhere ({changes})"
                    ),
                    if_fails=f"the failure follows {lead.predicate} whatever the other axes",
                    if_passes=f"the failure needs the other axis value too: an interaction (refutes {lead.predicate})",
                )
            )
    elif any(s == "fail" for s in ctx.status.values()):
        out.extend(explore(ctx))
    for cid in missing[:MAX_MISSING_SUGGESTIONS]:
        out.append(
            NextCase(
                reason=f"planned case {cid!r} has no result: run it (or record its result)",
                base_case=cid,
                change={},
                kind="missing",
            )
        )
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)


def _each_axis_once(ctx: Context, base: Case) -> list[tuple[dict, Any]]:
    """One other value for every axis of a case: another mode and dtype, each
    dimension halved, strides contiguous (or transposed), offset 0 (or 16),
    plain values (or zeros), each attribute's other value seen in the run."""
    out: list[tuple[dict, Any]] = []
    out.extend(({"axis": "mode"}, m) for m in MODES if m != base.mode and m not in ctx.no_modes)
    floats = [i for i in base.inputs if not i.none and i.tensors is None and i.dtype in FLOAT_DTYPES]
    if floats:
        have = {i.dtype for i in floats}
        alt = next((d for d in ("float32", "float16", "bfloat16") if d not in have), None)
        if alt:
            out.append(({"axis": "dtype"}, alt))
    for spec in base.inputs:
        if spec.shape is None or spec.none or spec.tensors is not None:
            continue
        out.append(
            (
                {"axis": "strides", "input": spec.name},
                None if not spec.is_contiguous() else strides_for(spec.shape, "transposed"),
            )
        )
        out.append(({"axis": "storage_offset", "input": spec.name}, 0 if spec.storage_offset else 16))
        v = spec.values.for_dtype(spec.dtype)
        out.append(
            (
                {"axis": "values", "input": spec.name},
                {"kind": "normal"}
                if (v.specials or v.kind != "normal")
                else {"kind": "uniform", "low": 0.5, "high": 1.5},
            )
        )
        for i, size in enumerate(spec.shape):
            if size > 1:
                out.extend((m, size // 2) for m in _dim_moves(ctx, base, spec.name, i))
    for name in sorted(base.attributes):
        seen = sorted(
            {
                json.dumps(attr_json(c.attributes.get(name)), sort_keys=True)
                for c in ctx.cases.values()
                if name in c.attributes
            }
            - {json.dumps(attr_json(base.attributes[name]), sort_keys=True)}
        )
        if seen:
            out.append(({"axis": "attribute", "name": name}, json.loads(seen[0])))
    return [
        (v, x)
        for v, x in out
        if not (
            v["axis"] == "strides"
            and x is None
            and next(i for i in base.inputs if i.name == v.get("input")).is_contiguous()
        )
    ]


def explore(ctx: Context) -> list[NextCase]:
    """No hypothesis yet: vary each axis of a failing case once (the first
    failing cases, by id), and, with passing cases, walk from the closest
    passing case toward the failing one one axis at a time."""
    failing = sorted(c for c, s in ctx.status.items() if s == "fail")
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    # one failing case, the same from one analysis to the next: the first planned (shortest id: a derived id
    # extends its base's), ties by id; once each of its axes was varied, explore is done
    failing.sort(key=lambda f: (len(f), f))
    out: list[NextCase] = []
    for fid in failing[:1]:
        cands: list[Proposal] = []
        base = ctx.cases[fid]
        for var, value in _each_axis_once(ctx, base):
            cand = make_proposal(ctx, base, var, value, "explore")
            if cand is not None:
                ctx.seen_contents.add(cand.content)
                cands.append(cand)
        why = (
            f"no hypothesis separates the failing cases from the passing ones yet: vary each axis of the "
            f"failing case {fid!r} once"
            if passing
            else f"no case passes yet: vary each axis of the failing case {fid!r} once, toward a plain case"
        )
        if passing:
            near = min(passing, key=lambda p: (len(axes_difference(ctx.dist[p], ctx.dist[fid])), p))
            for key in axes_difference(ctx.dist[near], ctx.dist[fid]):
                step = _variation_for(key)
                if step is None:
                    continue
                raw = _raw_value(ctx.cases[fid], key)
                cand = make_proposal(ctx, ctx.cases[near], step, raw, key)
                if cand is not None:
                    ctx.seen_contents.add(cand.content)
                    cands.append(cand)
            why += f", and walk from the passing case {near!r} toward it one axis at a time"
        groups: dict[tuple, list[Proposal]] = {}
        for c in cands:
            groups.setdefault(c.group, []).append(c)
        for group in _by_base(cands) if len(groups) > 1 else []:  # every axis at once first: one round covers them
            out.append(
                _next(
                    "explore",
                    None,
                    group,
                    reason=why + " (every such change at once, one case each)",
                    if_fails="that axis is not what the failure needs",
                    if_passes="that axis change removes the failure: a hypothesis on it follows",
                )
            )
        for group in groups.values():
            out.append(
                _next(
                    "explore",
                    None,
                    group,
                    reason=why,
                    if_fails="that axis is not what the failure needs",
                    if_passes="that axis change removes the failure: a hypothesis on it follows",
                )
            )
        if out:
            break
    return out


def falsifying(
    ctx: Context, lead: Finding, hyp: Hypothesis, terms: list[Finding], propose: bool, others: list | None = None
) -> tuple[list, list[NextCase]]:
    """The requirements a finding must meet before it is exact (probes.py) and,
    when ``propose``, the cases built to break it (kind ``falsify``); ``others``: the
    other causes' conditions with their cases (several causes)."""

    reqs = requirements(ctx, hyp, lead, terms, moves, others)
    return reqs, (probe_cases(ctx, lead, hyp, reqs, make_proposal, moves, _next) if propose else [])


def seed_probing(ctx: Context) -> list[NextCase]:
    """No hypothesis: the closest failing and passing cases with other seeds (probes.seed_pair_cases)."""

    return seed_pair_cases(ctx, make_proposal, _next)
