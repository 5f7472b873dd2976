"""Next cases that narrow the findings, each ready to append as it is.

A candidate case is one variation of a recorded case (a star of one base).
Every finding predicts each candidate: ``fail``, ``pass`` or unknown (a value
inside a threshold's bracket, an untried categorical value).  A candidate is
kept only when it can teach something: some finding does not know its outcome
(it narrows), or two findings disagree about it (it decides between them).  A
candidate every finding already predicts the same way is implied by the
recorded cases and never proposed.

Order: cases that decide between competing findings; then per finding not yet
exact, bisection of an ordered axis between the largest passing and smallest
failing value (powers of two first, then the exact values next to the passing
side) or the untried values of a categorical axis; then crossings of the
leading finding with the run's distractors; exploration when nothing
separates yet; the planned cases still missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..cases.axes import axes_difference, case_axes
from ..cases.derived import (CONTIGUITY, DTYPE_BITS, UNSET, alignment, contiguity, dim_axis, parse_dim_axis,
                             structured_axes)
from ..cases.ids import case_content
from ..cases.stars import apply_variation
from ..schemas import FLOAT_DTYPES, MODES, Case, Finding, NextCase, StarVariation, contiguous_strides
from .findings import predict

MAX_BISECT_VALUES = 3
MAX_CROSSINGS = 4
MAX_MISSING_SUGGESTIONS = 20
MAX_EXPLORE_BASES = 3


@dataclass
class Candidate:
    base: Case
    var: dict  # a star variation without its values
    value: Any
    doc: dict
    axes: dict
    finding: str  # the axis of the finding it was made for
    preds: dict = field(default_factory=dict)

    @property
    def group(self) -> tuple:
        return (self.base.id, tuple(sorted((k, str(v)) for k, v in self.var.items())))


@dataclass
class Context:
    cases: dict[str, Case]
    axes: dict[str, dict]
    dist: dict[str, dict]
    status: dict[str, str]  # 'fail' | 'pass' | 'unsupported'
    planned: set[str]
    findings: list[Finding]
    ties: dict[str, list[str]]
    no_modes: set[str]
    cpu_only: bool
    seen_contents: set[str] = field(default_factory=set)


# --------------------------------------------------------------------------
# Context
# --------------------------------------------------------------------------


def dim_ties(cases: list[Case]) -> dict[str, list[str]]:
    """Dimensions of different inputs that are equal in every case of the run
    (a hidden size shared by ``x.shape[-1]`` and ``weight.shape[-1]``): they
    move together, or the call would not be valid."""
    if not cases:
        return {}

    def dims(case: Case) -> dict[str, tuple[str, int]]:
        out = {}
        for spec in case.inputs:
            for i, size in enumerate([] if spec.none or spec.shape is None else spec.shape):
                out[dim_axis(spec.name, i, len(spec.shape))] = (spec.name, size)
        return out

    ordered = sorted(cases, key=lambda c: c.id)
    first = dims(ordered[0])
    pairs = {(a, b) for a in first for b in first
             if a < b and first[a][0] != first[b][0] and first[a][1] == first[b][1]}
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


def unusable_modes(cases: list[Case], results: dict, status: dict[str, str]) -> tuple[set[str], bool]:
    """Modes already known unsupported (some case in it unsupported, none ran
    it), and whether every recorded result ran on a CPU device (no graph mode)."""
    ran = {c.mode for c in cases if status.get(c.id) in ("pass", "fail")}
    refused = {c.mode for c in cases if status.get(c.id) == "unsupported"}
    kinds = {(r.environment or {}).get("device_kind") for r in results.values()}
    cpu_only = bool(kinds) and kinds <= {"cpu"}
    no_modes = refused - ran
    if cpu_only:
        no_modes.add("graph")
    return no_modes, cpu_only


# --------------------------------------------------------------------------
# Candidates
# --------------------------------------------------------------------------


def make_candidate(ctx: Context, base: Case, var: dict, value: Any, finding: str) -> Candidate | None:
    try:
        sv = StarVariation.model_validate(var | {"values": [value]})
        doc = apply_variation(base, sv, value)
        case = Case.model_validate(doc)
    except (ValueError, ValidationError):
        return None
    content = case_content(doc)
    if content in ctx.planned or content in ctx.seen_contents:
        return None
    if case.mode in ctx.no_modes:
        return None
    if ctx.cpu_only and any(i.layout != "ND" for i in case.inputs):
        return None
    cand = Candidate(base=base, var=var, value=value, doc=doc, axes=structured_axes(case, case_axes(case)),
                     finding=finding)
    cand.preds = {f.axis: predict(f, cand.axes.get(f.axis)) for f in ctx.findings}
    return cand


def decisive(c: Candidate) -> bool:
    known = {p for p in c.preds.values() if p is not None}
    return known == {"pass", "fail"}


def informative(c: Candidate, f: Finding) -> bool:
    return c.preds.get(f.axis) is None or decisive(c)


def _dim_moves(ctx: Context, base: Case, name: str, index: int) -> list[dict]:
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or not spec.shape:
        return []
    ref = dim_axis(name, index % len(spec.shape), len(spec.shape))
    return [{"axis": "dim", "dims": [ref] + ctx.ties.get(ref, [])}]


def moves(ctx: Context, base: Case, axis: str, target: Any) -> list[tuple[dict, Any]]:
    """Ways to set ``axis`` of ``base`` to ``target`` with one star variation:
    (variation without values, value)."""
    if target == UNSET:
        return []  # an axis a case does not have (an attribute left out, a captured input's magnitude)
    numeric = isinstance(target, (int, float)) and not isinstance(target, bool)
    dim = parse_dim_axis(axis)
    if (dim is not None or axis.endswith((".numel", ".offset", ".magnitude", ".last_align", ".offset_align"))) \
            and not numeric:
        return []
    if dim is not None:
        return [(v, int(target)) for v in _dim_moves(ctx, base, *dim)]
    if axis.startswith("attr."):
        return [({"axis": "attribute", "name": axis[5:]}, target)]
    if axis == "mode":
        return [({"axis": "mode"}, target)]
    if axis == "dtype":
        return [({"axis": "dtype"}, target)]
    name, _, fld = axis.partition(".")
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or spec.shape is None or spec.none:  # a tensor list or a None input: not moved here
        return []
    if fld == "dtype":
        return [({"axis": "dtype", "input": name}, target)]
    if fld == "offset":
        return [({"axis": "storage_offset", "input": name}, int(target))]
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
        return out
    if fld == "last_align" and spec.shape:
        # the nearest last-dimension sizes above the current one aligned exactly to the target
        a, cur = int(target), spec.shape[-1]
        sizes = [v for v in range((cur // a + 1) * a, (cur // a + 9) * a, a) if alignment(v) == a][:1]
        return [(var, v) for v in sizes for var in _dim_moves(ctx, base, name, len(spec.shape) - 1)]
    if fld == "offset_align":
        return [({"axis": "storage_offset", "input": name}, int(target))]  # the smallest offset aligned exactly so
    if fld == "contiguity":
        strides = strides_for(spec.shape, target)
        return [({"axis": "strides", "input": name}, strides)] if strides is not None or target == "contiguous" else []
    if fld == "magnitude":
        values = spec.values.model_dump(mode="json", exclude_none=True)
        if spec.values.kind == "normal" and target > abs(spec.values.mean):
            return [({"axis": "values", "input": name}, values | {"std": target - abs(spec.values.mean)})]
        if spec.values.kind == "uniform" and spec.values.low is not None:
            scale = target / max(abs(spec.values.low), abs(spec.values.high), 1e-30)
            return [({"axis": "values", "input": name},
                     values | {"low": spec.values.low * scale, "high": spec.values.high * scale})]
        return []
    return []


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
    while 2.0 ** k < hi:
        if 2.0 ** k > lo:
            out.append(2.0 ** k)
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
    (is the boundary exactly there?) and the middle."""
    if f.direction == "above":
        p, q = f.largest_passing, f.smallest_failing
    else:
        p, q = f.smallest_passing, f.largest_failing
    lo, hi = min(p, q), max(p, q)
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
    pw = _pow2_between(lo, hi)
    return _spread(pw, MAX_BISECT_VALUES) if pw else [math.sqrt(lo * hi)]


def probe_values(ctx: Context, f: Finding, base: Case) -> list:
    """Untried values of a categorical axis worth trying, the closest first."""
    seen = set(f.failing_values) | set(f.passing_values)
    axis = f.axis
    if axis == "mode":
        return [m for m in MODES if m not in seen and m not in ctx.no_modes]
    if axis == "dtype" or axis.endswith(".dtype"):
        if not all(v in FLOAT_DTYPES for v in f.failing_values):
            return []
        widths = {DTYPE_BITS[v] for v in f.failing_values}
        same = [d for d in FLOAT_DTYPES if d not in seen and DTYPE_BITS[d] in widths]
        if same:
            return same
        wider = [d for d in FLOAT_DTYPES if d not in seen and DTYPE_BITS[d] > max(widths)
                 and not any(DTYPE_BITS[p] > max(widths) for p in f.passing_values if p in DTYPE_BITS)]
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


def _attr_raw(axis: str, value: Any) -> Any:
    if axis.startswith("attr.") and isinstance(value, str):
        import json
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _bases(ctx: Context, f: Finding) -> list[Case]:
    """The cases to move from: the minimal pair's passing then failing case,
    else the passing case nearest the boundary (ties by id)."""
    if f.minimal_pair is not None:
        return [ctx.cases[f.minimal_pair.passing], ctx.cases[f.minimal_pair.failing]]
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    if f.kind == "threshold":
        bound = f.largest_passing if f.direction == "above" else f.smallest_passing
        passing = [c for c in passing if ctx.axes[c].get(f.axis) == bound] or passing
    return [ctx.cases[c] for c in passing[:1]]


def narrowing(ctx: Context, f: Finding) -> list[Candidate]:
    """The informative candidates that narrow one finding (bisect or probe)."""
    out: list[Candidate] = []
    for base in _bases(ctx, f)[:1]:
        if f.kind == "threshold":
            integer = all(isinstance(v, int) for v in f.failing_values + f.passing_values)
            targets = bisect_values(f, integer)
        else:
            targets = probe_values(ctx, f, base)
        for target in targets:
            best = None
            for var, value in moves(ctx, base, f.axis, _attr_raw(f.axis, target)):
                cand = make_candidate(ctx, base, var, value, f.axis)
                if cand is None or not informative(cand, f):
                    continue
                score = (len(var.get("dims") or [1]) if var["axis"] == "dim" else 5, _others_named(ctx, f, var))
                if best is None or score < best[0]:
                    best = (score, cand)
            if best is not None:
                ctx.seen_contents.add(case_content(best[1].doc))
                out.append(best[1])
    return out


def _others_named(ctx: Context, f: Finding, var: dict) -> int:
    """How many other live findings a move touches (fewer is a cleaner step)."""
    touched = set(var.get("dims") or [])
    return sum(1 for g in ctx.findings if g.axis != f.axis and g.axis in touched)


def discriminating(ctx: Context) -> list[Candidate]:
    """Cases on which two findings disagree (one says fail, the other pass):
    moving each ordered finding's axis to its boundary values by every move,
    keeping one case per pair of findings it separates."""
    pool: list[Candidate] = []
    for f in ctx.findings:
        if f.kind != "threshold":
            continue
        for base in _bases(ctx, f)[:1]:
            bounds = ([f.smallest_failing, f.largest_passing] if f.direction == "above"
                      else [f.largest_failing, f.smallest_passing])
            for target in bounds:
                for var, value in moves(ctx, base, f.axis, target):
                    cand = make_candidate(ctx, base, var, value, f.axis)
                    if cand is not None and decisive(cand):
                        pool.append(cand)
    for f in ctx.findings:
        if f.kind == "threshold":
            continue
        # a categorical finding: its tried values (which make a minimal pair where none is yet) and the
        # untried ones, moved onto the base
        for base in _bases(ctx, f)[:1]:
            targets = f.failing_values[:2] + f.passing_values[:2] + probe_values(ctx, f, base)
            for target in targets:
                for var, value in moves(ctx, base, f.axis, _attr_raw(f.axis, target)):
                    cand = make_candidate(ctx, base, var, value, f.axis)
                    if cand is not None and decisive(cand):
                        pool.append(cand)
    chosen: list[Candidate] = []
    covered: set[tuple[str, str]] = set()
    for cand in sorted(pool, key=lambda c: (c.var["axis"] == "shape", len(c.var.get("dims") or []), c.base.id,
                                            str(c.var), str(c.value))):
        fails = sorted(a for a, p in cand.preds.items() if p == "fail")
        passes = sorted(a for a, p in cand.preds.items() if p == "pass")
        pairs = {(a, b) for a in fails for b in passes}
        content = case_content(cand.doc)
        if pairs - covered and content not in ctx.seen_contents:
            covered |= pairs
            ctx.seen_contents.add(content)
            chosen.append(cand)
    return chosen


# --------------------------------------------------------------------------
# Next cases
# --------------------------------------------------------------------------


def _star(cands: list[Candidate]) -> tuple[Case, list[dict]]:
    base = cands[0].base
    vary: dict[tuple, dict] = {}
    for c in cands:
        key = tuple(sorted((k, str(v)) for k, v in c.var.items()))
        vary.setdefault(key, dict(c.var, values=[]))["values"].append(c.value)
    return base, list(vary.values())


def _next(kind: str, axis: str | None, cands: list[Candidate], reason: str, if_fails: str,
          if_passes: str) -> NextCase:
    base, vary = _star(cands)
    star = {"base": base.model_dump(mode="json", exclude_none=True), "vary": vary, "include_base": False}
    return NextCase(reason=reason, base_case=base.id, change=vary[0], kind=kind, axis=axis, star=star,
                    if_fails=if_fails, if_passes=if_passes)


def _by_base(cands: list[Candidate]) -> list[list[Candidate]]:
    groups: dict[str, list[Candidate]] = {}
    for c in cands:
        groups.setdefault(c.base.id, []).append(c)
    return list(groups.values())


def _values_text(cands: list[Candidate], axis: str) -> str:
    return ", ".join(str(c.axes.get(axis)) for c in cands)


def next_cases(ctx: Context, ranked: list[Finding], narrow: dict[str, list[Candidate]], results: dict,
               missing: list[str]) -> list[NextCase]:
    out: list[NextCase] = []
    for group in _by_base(discriminating(ctx)):
        names = sorted({a for c in group for a, p in c.preds.items() if p is not None})
        out.append(_next(
            "discriminate", group[0].finding, group,
            reason=(f"findings {', '.join(names)} separate the recorded cases equally well but disagree on these "
                    f"case(s) of {group[0].base.id!r}: each outcome refutes at least one of them"),
            if_fails="every finding that predicted pass is refuted",
            if_passes="every finding that predicted fail is refuted"))
    for f in ranked:
        cands = narrow.get(f.axis) or []
        if f.exact or not cands:
            continue
        for group in _by_base(cands):
            shown = _values_text(group, f.axis)
            if f.kind == "threshold":
                side = (f"largest passing {f.largest_passing:g}, smallest failing {f.smallest_failing:g}"
                        if f.direction == "above" else
                        f"smallest passing {f.smallest_passing:g}, largest failing {f.largest_failing:g}")
                out.append(_next(
                    "bisect", f.axis, group,
                    reason=f"{f.predicate} is not exact yet ({side}): bisect {f.axis} at {shown}",
                    if_fails=f"each failing value moves the boundary of {f.axis} toward the passing side",
                    if_passes=f"each passing value moves the boundary of {f.axis} toward the failing side"))
            else:
                out.append(_next(
                    "probe", f.axis, group,
                    reason=f"{f.predicate}: try the untried value(s) {shown} of the same axis",
                    if_fails=f"the failure covers those {f.axis} values too",
                    if_passes=f"the failure is limited to {f.failing_values}"))
    lead = next((f for f in ranked if f.minimal_pair is not None), None)
    if lead is not None:
        out.extend(crossings(ctx, lead))
    elif not ranked and any(s == "fail" for s in ctx.status.values()):
        out.extend(explore(ctx))
    for cid in missing[:MAX_MISSING_SUGGESTIONS]:
        out.append(NextCase(reason=f"planned case {cid!r} has no result: run it (or record its result)",
                            base_case=cid, change={}, kind="missing"))
    return out


def _variation_for(axis_key: str) -> dict[str, Any] | None:
    if axis_key in ("mode", "dtype", "layout"):
        return {"axis": axis_key}
    if axis_key.startswith("attr."):
        return {"axis": "attribute", "name": axis_key[len("attr."):]}
    name, _, fld = axis_key.partition(".")
    mapping = {"shape": "shape", "strides": "strides", "offset": "storage_offset", "values": "values"}
    return {"axis": mapping[fld], "input": name} if fld in mapping else None


def _raw_value(case: Case, axis_key: str) -> Any:
    if axis_key == "mode":
        return case.mode
    if axis_key.startswith("attr."):
        return case.attributes.get(axis_key[len("attr."):])
    if axis_key in ("dtype", "layout"):
        return None  # per-input lists: not one star value
    name, _, fld = axis_key.partition(".")
    spec = next((i for i in case.inputs if i.name == name), None)
    if spec is None:
        return None
    if fld == "values":
        return spec.values.model_dump(mode="json")
    return {"offset": spec.storage_offset}.get(fld, getattr(spec, fld, None))


def crossings(ctx: Context, f: Finding) -> list[NextCase]:
    """The leading finding crossed with the run's distractors: the failing
    case of its minimal pair with one other axis set to a value that passed
    elsewhere.  A failure that survives them follows the finding alone."""
    base = ctx.cases[f.minimal_pair.failing]
    base_dist = ctx.dist[base.id]
    cands: list[Candidate] = []
    seen: set[tuple] = set()
    for cid in sorted(c for c, s in ctx.status.items() if s == "pass"):
        for key, value in ctx.dist[cid].items():
            if key == f.source or base_dist.get(key) in (None, value) or (key, value) in seen:
                continue
            if f.source.endswith(".shape") and key == f.source[:-len(".shape")] + ".strides":
                continue
            var = _variation_for(key)
            raw = _raw_value(ctx.cases[cid], key)
            if var is None or (raw is None and key != "dtype" and not key.endswith(".strides")):
                continue
            if key == "dtype":
                dtypes = {i.dtype for i in ctx.cases[cid].inputs if i.dtype in FLOAT_DTYPES}
                if len(dtypes) != 1:
                    continue
                raw = dtypes.pop()
            seen.add((key, value))
            cand = make_candidate(ctx, base, var, raw, f.axis)
            if cand is not None:
                ctx.seen_contents.add(case_content(cand.doc))
                cands.append(cand)
            if len(cands) >= MAX_CROSSINGS:
                break
        if len(cands) >= MAX_CROSSINGS:
            break
    if not cands:
        return []
    return [_next("crossing", f.axis, cands,
                  reason=(f"{f.predicate}: check that it holds across the run's other axes (values that pass "
                          f"elsewhere), applied to the failing case {base.id!r}"),
                  if_fails=f"the failure follows {f.axis} whatever the other axes",
                  if_passes="the failure needs the other axis value too: an interaction")]


def explore(ctx: Context) -> list[NextCase]:
    """Nothing separates yet.  With passing cases: walk from the closest
    passing case toward a failing one, one differing axis at a time.  With no
    passing case: move a failing case toward a plain one (contiguous, offset
    0, no special values, eager, float32, halved dimensions)."""
    failing = sorted(c for c, s in ctx.status.items() if s == "fail")
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    out: list[NextCase] = []
    for fid in failing[:MAX_EXPLORE_BASES]:
        cands: list[Candidate] = []
        if passing:
            near = min(passing, key=lambda p: (len(axes_difference(ctx.dist[p], ctx.dist[fid])), p))
            base = ctx.cases[near]
            for key in axes_difference(ctx.dist[near], ctx.dist[fid]):
                var = _variation_for(key)
                if var is None:
                    continue
                raw = _raw_value(ctx.cases[fid], key)
                cand = make_candidate(ctx, base, var, raw, key)
                if cand is not None:
                    ctx.seen_contents.add(case_content(cand.doc))
                    cands.append(cand)
            why = (f"no single axis separates the failing cases from the passing ones; walk from the passing case "
                   f"{near!r} toward the failing case {fid!r} one axis at a time")
        else:
            base = ctx.cases[fid]
            moves_: list[tuple[dict, Any]] = []
            moves_.extend(({"axis": "mode"}, m) for m in MODES if m != base.mode and m not in ctx.no_modes)
            if all(i.dtype in FLOAT_DTYPES for i in base.inputs):
                have = {i.dtype for i in base.inputs}
                moves_.extend(({"axis": "dtype"}, d) for d in FLOAT_DTYPES if d not in have)
            for spec in base.inputs:
                if spec.shape is None or spec.none:
                    continue
                if not spec.is_contiguous():
                    moves_.append(({"axis": "strides", "input": spec.name}, None))
                if spec.storage_offset:
                    moves_.append(({"axis": "storage_offset", "input": spec.name}, 0))
                if spec.values.specials:
                    moves_.append(({"axis": "values", "input": spec.name},
                                   spec.values.model_dump(mode="json") | {"specials": []}))
                for i, size in enumerate(spec.shape):
                    if size > 1:
                        moves_.extend((v, size // 2) for v in _dim_moves(ctx, base, spec.name, i))
            for var, value in moves_:
                cand = make_candidate(ctx, base, var, value, "explore")
                if cand is not None:
                    ctx.seen_contents.add(case_content(cand.doc))
                    cands.append(cand)
            why = (f"no case passes yet: move the failing case {fid!r} toward a plain one, one axis at a time, "
                   "to find where it starts to pass")
        groups: dict[tuple, list[Candidate]] = {}
        for c in cands:
            groups.setdefault(c.group, []).append(c)
        if len(groups) > 1:  # every axis at once first (one case per change): one round covers them all
            out.append(_next("explore", None, cands, reason=why + " (every such change at once, one case each)",
                             if_fails="that axis is not what the failure needs",
                             if_passes="that axis change removes the failure: a finding on it follows"))
        for group in groups.values():
            out.append(_next("explore", None, group, reason=why,
                             if_fails="that axis is not what the failure needs",
                             if_passes="that axis change removes the failure: a finding on it follows"))
    return out
