"""Findings: predicates over one axis that separate every failing case from
every passing one, each with its minimal pair.

Linear in the number of cases per axis (sets, minima and maxima, hashing),
never pairwise over the run: minimal pairs are looked for inside groups of
cases that share every variation axis but the finding's source, found by
hashing the other axes.  Nothing depends on the order cases were appended:
values are compared as sets, ties broken by case id.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable

from ..schemas import Finding, MinimalPair
from ..cases.derived import UNSET, is_ordered, parse_dim_axis, source_of

# Label axes that a structured axis of the same source says better.
LABEL_FIELDS = (".shape", ".strides", ".values")


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _sort_key(value: Any):
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def predicate_text(axis: str, kind: str, failing: list, direction: str | None, bound: Any) -> str:
    if kind == "threshold":
        return f"{axis} > {_fmt(bound)}" if direction == "above" else f"{axis} < {_fmt(bound)}"
    if kind == "class":
        return axis if failing == [True] else f"not {axis}"
    if kind == "value":
        return f"{axis} == {_fmt(failing[0])}"
    return f"{axis} in {{{', '.join(_fmt(v) for v in failing)}}}"


def separating_findings(axes: dict[str, dict[str, Any]], failing: list[str], passing: list[str]) -> list[Finding]:
    """Every axis whose failing values and passing values do not overlap, as
    a finding (minimal pair and exactness filled in later)."""
    if not failing or not passing:
        return []
    ids = sorted(failing) + sorted(passing)
    keys: dict[str, None] = {}
    for cid in sorted(ids):
        for k in axes[cid]:
            keys.setdefault(k, None)
    fsets, psets = _value_sets(axes, failing), _value_sets(axes, passing)
    found: list[Finding] = []
    seen_vectors: set[int] = set()
    for key in keys:
        fvals, pvals = fsets[key], psets[key]
        if fvals & pvals:
            continue
        if key == "dtype" and "mixed" in fvals:
            continue  # not a dtype: the per-input NAME.dtype axes say which input differs
        if UNSET in fvals and is_derived(key):
            continue  # a derived axis some failing case lacks (a captured input has no generated magnitude)
        vector = hash(tuple(_sort_key(axes[c].get(key, UNSET)) for c in ids))
        if vector in seen_vectors:
            continue  # an alias of an axis already kept (dtype and x.dtype of a one-input case)
        seen_vectors.add(vector)
        fl, pl = sorted(fvals, key=_sort_key), sorted(pvals, key=_sort_key)
        direction = bound = None
        extra: dict[str, Any] = {}
        if all(isinstance(v, bool) for v in fvals | pvals):
            kind = "class"
        elif is_ordered(fvals | pvals) and (max(pvals) < min(fvals) or max(fvals) < min(pvals)):
            kind = "threshold"
            if max(pvals) < min(fvals):
                direction, bound = "above", max(pvals)
                extra = {"largest_passing": max(pvals), "smallest_failing": min(fvals)}
            else:
                direction, bound = "below", min(pvals)
                extra = {"smallest_passing": min(pvals), "largest_failing": max(fvals)}
        else:
            kind = "value" if len(fvals) == 1 else "set"
        found.append(Finding(
            axis=key, kind=kind, predicate=predicate_text(key, kind, fl, direction, bound), source=source_of(key),
            failing_values=fl, passing_values=pl, direction=direction, exact=False,
            failing=len(failing), passing=len(passing), **extra))
    # a list of failing sizes (x.shape[-1] in {1, 33, 40}) says nothing a threshold or another axis of the
    # same source does not say better: kept only when it is all there is for that source
    ordered_sets = [f for f in found if f.kind in ("value", "set") and not f.axis.startswith("attr.")
                    and is_ordered(f.failing_values + f.passing_values)]
    other_sources = {f.source for f in found if f not in ordered_sets}
    found = [f for f in found if not (f in ordered_sets and f.source in other_sources)]
    structured_sources = {f.source for f in found if not f.axis.endswith(LABEL_FIELDS) and "." in f.axis}
    found = [f for f in found if not (f.axis.endswith(LABEL_FIELDS) and f.source in structured_sources)]
    # zero failing elements is the zero-size class: `x.numel < k` with only 0 failing says nothing more
    zero = {f.axis.rsplit(".", 1)[0] for f in found if f.axis.endswith(".zero_size") and f.failing_values == [True]}
    found = [f for f in found if not (f.axis.endswith(".numel") and f.direction == "below"
                                      and f.axis.rsplit(".", 1)[0] in zero and f.largest_failing == 0)]
    return found


DERIVED_FIELDS = ("rank", "numel", "zero_size", "last_align", "contiguity", "offset_nonzero", "offset_align",
                  "dtype_family", "dtype_bits", "has_nan", "has_inf", "has_large", "has_denormal", "magnitude")


def is_derived(axis: str) -> bool:
    """A structured axis analysis derives (not a label of case_axes)."""
    if axis.startswith("attr.") or "." not in axis:
        return False
    field = axis.rsplit(".", 1)[1] if "shape[" not in axis else "shape["
    return field in DERIVED_FIELDS or field == "shape["


def _value_sets(axes: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, set]:
    """key -> the set of its values over ``ids`` (UNSET where a case lacks the key): one pass per case."""
    sets: dict[str, set] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for cid in ids:
        for key, value in axes[cid].items():
            sets[key].add(value)
            counts[key] += 1
    for key, n in counts.items():
        if n < len(ids):
            sets[key].add(UNSET)
    return _Missing(sets, bool(ids))


class _Missing(dict):
    """A key no case has reads as {UNSET}."""

    def __init__(self, sets: dict, any_ids: bool):
        super().__init__(sets)
        self.any_ids = any_ids

    def __missing__(self, key):
        return {UNSET} if self.any_ids else set()


def predict(f: Finding, value: Any) -> str | None:
    """What the finding says a case with this axis value does: 'fail', 'pass',
    or None when the finding does not know (a value inside a threshold's
    bracket, an untried categorical value)."""
    if value is None:
        return None
    if f.kind == "threshold":
        if not is_ordered([value]):
            return None
        if f.direction == "above":
            return "fail" if value >= f.smallest_failing else "pass" if value <= f.largest_passing else None
        return "fail" if value <= f.largest_failing else "pass" if value >= f.smallest_passing else None
    if value in f.failing_values:
        return "fail"
    if value in f.passing_values:
        return "pass"
    if f.kind == "class":
        return "pass" if value not in f.failing_values else "fail"
    return None


def minimal_pairs(findings: list[Finding], axes: dict[str, dict[str, Any]], dist: dict[str, dict[str, str]],
                  failing: list[str], passing: list[str], differ: Callable[[dict, dict], list[str]]) -> None:
    """Set each finding's minimal pair: among cases that share every variation
    axis except the finding's source (grouped by a hash of the others), the
    passing and failing case closest on the finding's axis."""
    status = {c: "fail" for c in failing} | {c: "pass" for c in passing}
    by_source: dict[str, dict[tuple, list[str]]] = {}
    for f in findings:
        src = f.source
        if src not in by_source:
            groups: dict[tuple, list[str]] = defaultdict(list)
            # a shape change keeps the layout class, not the stride numbers: compare the class
            name = src[: -len(".shape")] if src.endswith(".shape") else None
            for cid in status:
                d = dist[cid]
                key = [(k, v) for k, v in d.items() if k != src and (name is None or k != name + ".strides")]
                if name is not None:
                    key.append((name + ".contiguity", str(axes[cid].get(name + ".contiguity"))))
                groups[tuple(sorted(key))].append(cid)
            by_source[src] = {k: sorted(v) for k, v in groups.items()
                              if any(status[c] == "fail" for c in v) and any(status[c] == "pass" for c in v)}
        best = None
        for members in by_source[src].values():
            if f.kind == "threshold":
                ordered = sorted(members, key=lambda c: (axes[c].get(f.axis), c))
                cands = [(a, b) for a, b in zip(ordered, ordered[1:]) if status[a] != status[b]]
                for a, b in cands:
                    p, q = (a, b) if status[a] == "pass" else (b, a)
                    score = (abs(axes[q][f.axis] - axes[p][f.axis]), _dim_changes(axes[p], axes[q], f.axis), p, q)
                    best = min(best, score) if best else score
            else:
                ps = [c for c in members if status[c] == "pass"]
                fs = [c for c in members if status[c] == "fail"]
                score = (0, 0, ps[0], fs[0])
                best = min(best, score) if best else score
        if best is None:
            continue
        p, q = best[2], best[3]
        f.minimal_pair = MinimalPair(passing=p, failing=q, passing_value=axes[p].get(f.axis, UNSET),
                                     failing_value=axes[q].get(f.axis, UNSET), differs_in=differ(dist[p], dist[q]))


def _dim_changes(a: dict, b: dict, axis: str) -> int:
    dim = parse_dim_axis(axis)
    name = dim[0] if dim else axis.split(".", 1)[0]
    prefix = f"{name}.shape["
    return sum(1 for k, v in a.items() if k.startswith(prefix) and b.get(k) != v)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Exact first, then with a minimal pair, then structured before labels,
    class/value before threshold/set; ties by axis name (order independent)."""
    kind_rank = {"class": 0, "value": 1, "threshold": 2, "set": 3}

    def key(f: Finding):
        return (not f.exact, f.minimal_pair is None, f.axis.endswith(LABEL_FIELDS), kind_rank[f.kind],
                f.axis.endswith((".numel", ".rank")), f.axis)
    return sorted(findings, key=key)


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
