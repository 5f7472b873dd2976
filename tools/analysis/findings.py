"""Findings: the hypotheses of hypotheses.py as the contract's ``Finding``s -
each with its boundary (``passes_at`` / ``fails_at`` whatever the direction),
its minimal pair in the planned space (pairs.py), its terms when it is a
conjunction, and a statement in plain words (alignments and sizes in
elements and in bytes).

Nothing depends on the order cases were appended: values are compared as
sets, ties broken by case id.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable

from ..cases.derived import UNSET, is_ordered, parse_dim_axis, source_of
from ..cases.relations import element_bytes
from ..schemas import Finding, Term
from .hypotheses import Atom, Hypothesis, axis_sources
from .pairs import best_pair, make_pair

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


MAX_VALUES_SHOWN = 32


def _values(axes: dict[str, dict[str, Any]], ids: list[str], axis: str, above: bool | None = None) -> list:
    vals = sorted({axes[c].get(axis) for c in ids if axes[c].get(axis) is not None}, key=_sort_key)
    if len(vals) > MAX_VALUES_SHOWN:  # the values nearest a threshold's boundary
        vals = vals[-MAX_VALUES_SHOWN:] if above else vals[:MAX_VALUES_SHOWN]
    return vals


def _bounds(a: Atom) -> dict[str, Any]:
    if a.kind != "threshold":
        return {}
    out = {"direction": a.direction, "passes_at": a.passes_at, "fails_at": a.fails_at}
    if a.direction == "above":
        out |= {"largest_passing": a.passes_at, "smallest_failing": a.fails_at}
    else:
        out |= {"smallest_passing": a.passes_at, "largest_failing": a.fails_at}
    return out


def hypothesis_finding(h: Hypothesis, hax: dict[str, dict[str, Any]], dist: dict[str, dict[str, str]],
                       failing: list[str], passing: list[str], index: dict,
                       differ: Callable[[dict, dict], list[str]], dtypes: dict[str, list[str]]) -> Finding:
    """One hypothesis as a Finding (exactness is settled later)."""
    if len(h.atoms) == 1:
        a = h.atoms[0]
        pair = best_pair(index, axis_sources(a.axis))
        f = Finding(axis=a.axis, kind=a.kind, predicate=h.text, source=source_of(a.axis),
                    failing_values=_values(hax, failing, a.axis, False),
                    passing_values=_values(hax, passing, a.axis, a.direction == "above"),
                    exact=False, failing=len(failing), passing=len(passing),
                    minimal_pair=make_pair(pair[0], pair[1], a.axis, hax, dist, differ, UNSET) if pair else None,
                    equivalent=list(h.equivalent), **_bounds(a))
        f.statement = statement(f, dtypes)
        return f
    terms = []
    for i, a in enumerate(h.atoms):
        others = [b for j, b in enumerate(h.atoms) if j != i]

        def accept(p: str, q: str, others=others) -> bool:
            return all(b.holds(hax[p].get(b.axis)) for b in others)

        pair = best_pair(index, axis_sources(a.axis), accept)
        ctx_passing = [c for c in passing if accept(c, "")]
        bounds = {k: v for k, v in _bounds(a).items() if k in ("direction", "passes_at", "fails_at")}
        terms.append(Term(axis=a.axis, kind=a.kind, predicate=a.text, source=source_of(a.axis),
                          failing_values=_values(hax, failing, a.axis, False),
                          passing_values=_values(hax, ctx_passing, a.axis, a.direction == "above"),
                          minimal_pair=make_pair(pair[0], pair[1], a.axis, hax, dist, differ, UNSET) if pair else None,
                          **bounds))
    first = terms[0]
    f = Finding(axis=" & ".join(t.axis for t in terms), kind="conjunction", predicate=h.text,
                source=", ".join(dict.fromkeys(t.source for t in terms)), failing_values=[], passing_values=[],
                exact=False, failing=len(failing), passing=len(passing), minimal_pair=first.minimal_pair,
                terms=terms, equivalent=list(h.equivalent))
    f.statement = statement(f, dtypes)
    return f


def term_findings(f: Finding) -> list[Finding]:
    """A finding's terms as findings of their own (itself when it has none):
    what bisecting and probing work on."""
    if not f.terms:
        return [f]
    out = []
    for t in f.terms:
        extra = {}
        if t.kind == "threshold":
            extra = ({"largest_passing": t.passes_at, "smallest_failing": t.fails_at} if t.direction == "above"
                     else {"smallest_passing": t.passes_at, "largest_failing": t.fails_at})
        out.append(Finding(axis=t.axis, kind=t.kind, predicate=t.predicate, source=t.source,
                           failing_values=t.failing_values, passing_values=t.passing_values, direction=t.direction,
                           passes_at=t.passes_at, fails_at=t.fails_at, exact=False, failing=f.failing,
                           passing=f.passing, minimal_pair=t.minimal_pair, **extra))
    return out


def _in_bytes(elements: float, name: str, dtypes: dict[str, list[str]]) -> str:
    parts = []
    for d in dtypes.get(name, []):
        size = element_bytes(d)
        if size:
            parts.append(f"{_fmt(elements * size)} bytes in {d}")
    return ", ".join(parts)


def _in_elements(nbytes: float, name: str, dtypes: dict[str, list[str]]) -> str:
    parts = []
    for d in dtypes.get(name, []):
        size = element_bytes(d)
        if size:
            parts.append(f"{_fmt(nbytes / size)} {d} elements")
    return ", ".join(parts)


def statement(f: Finding, dtypes: dict[str, list[str]]) -> str | None:
    """The finding in plain words; alignments and sizes in elements and bytes
    (for the dtypes the failing cases have)."""
    if f.kind == "conjunction":
        texts = [statement(g, dtypes) or g.predicate for g in term_findings(f)]
        return "fails only when both hold: " + "; and ".join(texts)
    if f.kind == "threshold":
        name = f.axis.split(".", 1)[0].split("[", 1)[0]
        side = (f"passes at {_fmt(f.passes_at)}, fails at {_fmt(f.fails_at)}" if f.passes_at is not None
                else f"fails at {_fmt(f.fails_at)}, no passing value on the other side yet")
        what = None
        if f.axis.endswith(("last_align", "offset_align")) or ".align[" in f.axis:
            where = ("the last dimension" if f.axis.endswith("last_align") else "the storage offset"
                     if f.axis.endswith("offset_align") else f"dimension {f.axis.rsplit('[', 1)[1][:-1]}")
            if f.direction == "below" and f.passes_at is not None:
                b = _in_bytes(f.passes_at, name, dtypes)
                what = (f"{where} of {name} must be a multiple of {_fmt(f.passes_at)} elements"
                        + (f" ({b})" if b else ""))
            elif f.direction == "above":
                b = _in_bytes(f.fails_at, name, dtypes)
                what = (f"fails when {where} of {name} is a multiple of {_fmt(f.fails_at)} elements"
                        + (f" ({b})" if b else ""))
        elif f.axis.endswith(".bytes"):
            bound = f.passes_at if f.passes_at is not None else f.fails_at
            e = _in_elements(bound, name, dtypes)
            what = (f"{name} fails {'above' if f.direction == 'above' else 'below'} {_fmt(bound)} bytes"
                    + (f" ({e})" if e else ""))
        elif f.axis.endswith(".numel") and f.passes_at is not None:
            b = _in_bytes(f.passes_at, name, dtypes)
            what = (f"{name} fails {'above' if f.direction == 'above' else 'below'} {_fmt(f.passes_at)} elements"
                    + (f" ({b})" if b else ""))
        return f"{f.predicate}: " + (f"{what}; " if what else "") + side
    return None
