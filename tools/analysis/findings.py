"""Findings: the hypotheses of hypotheses.py as the contract's ``Finding``s -
each with its boundary (``passes_at`` / ``fails_at`` whatever the direction),
its minimal pair in the planned space (pairs.py), its terms when it is a
conjunction, and a statement in plain words (alignments and sizes in
elements and in bytes).

Nothing depends on the order cases were appended: values are compared as
sets, ties broken by case id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..cases.derived import UNSET, source_of
from ..cases.relations import element_bytes
from ..schemas import Finding, Term
from ..wording import boundary, num
from .hypotheses import Atom, Hypothesis, axis_sources
from .pairs import best_pair, make_pair


def _sort_key(value: Any):
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


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


def hypothesis_finding(
    h: Hypothesis,
    hax: dict[str, dict[str, Any]],
    dist: dict[str, dict[str, str]],
    failing: list[str],
    passing: list[str],
    index: dict,
    differ: Callable[[dict, dict], list[str]],
    dtypes: dict[str, list[str]],
) -> Finding:
    """One hypothesis as a Finding (exactness is settled later)."""
    if len(h.atoms) == 1:
        a = h.atoms[0]
        pair = best_pair(index, axis_sources(a.axis))
        f = Finding(
            axis=a.axis,
            kind=a.kind,
            predicate=h.text,
            source=source_of(a.axis),
            failing_values=_values(hax, failing, a.axis, False),
            passing_values=_values(hax, passing, a.axis, a.direction == "above"),
            exact=False,
            failing=len(failing),
            passing=len(passing),
            minimal_pair=make_pair(pair[0], pair[1], a.axis, hax, dist, differ, UNSET) if pair else None,
            equivalent=list(h.equivalent),
            **_bounds(a),
        )
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
        terms.append(
            Term(
                axis=a.axis,
                kind=a.kind,
                predicate=a.text,
                source=source_of(a.axis),
                failing_values=_values(hax, failing, a.axis, False),
                passing_values=_values(hax, ctx_passing, a.axis, a.direction == "above"),
                minimal_pair=make_pair(pair[0], pair[1], a.axis, hax, dist, differ, UNSET) if pair else None,
                **bounds,
            )
        )
    first = terms[0]
    f = Finding(
        axis=" & ".join(t.axis for t in terms),
        kind="conjunction",
        predicate=h.text,
        source=", ".join(dict.fromkeys(t.source for t in terms)),
        failing_values=[],
        passing_values=[],
        exact=False,
        failing=len(failing),
        passing=len(passing),
        minimal_pair=first.minimal_pair,
        terms=terms,
        equivalent=list(h.equivalent),
    )
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
            extra = (
                {"largest_passing": t.passes_at, "smallest_failing": t.fails_at}
                if t.direction == "above"
                else {"smallest_passing": t.passes_at, "largest_failing": t.fails_at}
            )
        out.append(
            Finding(
                axis=t.axis,
                kind=t.kind,
                predicate=t.predicate,
                source=t.source,
                failing_values=t.failing_values,
                passing_values=t.passing_values,
                direction=t.direction,
                passes_at=t.passes_at,
                fails_at=t.fails_at,
                exact=False,
                failing=f.failing,
                passing=f.passing,
                minimal_pair=t.minimal_pair,
                **extra,
            )
        )
    return out


def _in_bytes(elements: float, name: str, dtypes: dict[str, list[str]]) -> str:
    parts = []
    for d in dtypes.get(name, []):
        size = element_bytes(d)
        if size:
            parts.append(f"{num(elements * size)} bytes in {d}")
    return ", ".join(parts)


def _in_elements(nbytes: float, name: str, dtypes: dict[str, list[str]]) -> str:
    parts = []
    for d in dtypes.get(name, []):
        size = element_bytes(d)
        if size:
            parts.append(f"{num(nbytes / size)} {d} elements")
    return ", ".join(parts)


def statement(f: Finding, dtypes: dict[str, list[str]]) -> str | None:
    """The finding in plain words; alignments and sizes in elements and bytes
    (for the dtypes the failing cases have)."""
    if f.kind == "conjunction":
        texts = [statement(g, dtypes) or g.predicate for g in term_findings(f)]
        return "fails only when both hold: " + "; and ".join(texts)
    if f.kind == "threshold" and f.fails_at is not None:  # a threshold always has a failing value nearest it
        name = f.axis.split(".", 1)[0].split("[", 1)[0]
        side = boundary(f.passes_at, f.fails_at)
        what = None
        if f.axis.endswith(("last_align", "offset_align")) or ".align[" in f.axis:
            where = (
                "the last dimension"
                if f.axis.endswith("last_align")
                else "the storage offset"
                if f.axis.endswith("offset_align")
                else f"dimension {f.axis.rsplit('[', 1)[1][:-1]}"
            )
            if f.direction == "below" and f.passes_at is not None:
                b = _in_bytes(f.passes_at, name, dtypes)
                what = f"{where} of {name} must be a multiple of {num(f.passes_at)} elements" + (f" ({b})" if b else "")
            elif f.direction == "above":
                b = _in_bytes(f.fails_at, name, dtypes)
                what = f"fails when {where} of {name} is a multiple of {num(f.fails_at)} elements" + (
                    f" ({b})" if b else ""
                )
        elif f.axis.endswith(".bytes"):
            bound = f.passes_at if f.passes_at is not None else f.fails_at
            e = _in_elements(bound, name, dtypes)
            what = f"{name} fails {'above' if f.direction == 'above' else 'below'} {num(bound)} bytes" + (
                f" ({e})" if e else ""
            )
        elif f.axis.endswith(".numel") and f.passes_at is not None:
            b = _in_bytes(f.passes_at, name, dtypes)
            what = f"{name} fails {'above' if f.direction == 'above' else 'below'} {num(f.passes_at)} elements" + (
                f" ({b})" if b else ""
            )
        return f"{f.predicate}: " + (f"{what}; " if what else "") + side
    return None
