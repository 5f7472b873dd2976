"""When a finding is exact (references/behavior.md, "Exactness").

The leading hypothesis is ``exact`` only when

(a) no competing hypothesis survives: every other hypothesis of the space
    was ruled out by a recorded case (and the space was not capped);
(b) its boundary is pinned: adjacent values recorded on each side - an
    integer axis (a dimension, an element count, an offset, a rank) 1 apart;
    an alignment a factor 2 apart; a size in bytes one element apart (the
    largest element size of the input's failing dtypes); a float (a
    magnitude, a float attribute) within a factor 2 - and no untried value of
    a categorical axis or relation is left;
(c) it held when crossed with the run's other axes: every value another axis
    takes in a passing case has also been seen failing with it (or cannot be
    built);

and a minimal pair shows each of its terms.  ``why_not_exact`` lists what is open.
"""

from __future__ import annotations

import json

from ..cases.relations import element_bytes
from ..schemas import Finding
from .hypotheses import CAP_TEXT, Hypothesis, is_align


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)


def pinned(t: Finding, dtypes: dict[str, list[str]]) -> bool:
    """Is a threshold's bracket within its axis' resolution (see (b) above)?"""
    p, q = t.passes_at, t.fails_at
    if p is None or q is None:
        return False
    lo, hi = min(p, q), max(p, q)
    if is_align(t.axis):
        return hi == 2 * lo
    if t.axis.endswith(".bytes"):
        name = t.axis.rsplit(".", 1)[0]
        sizes = [element_bytes(d) or 1 for d in dtypes.get(name, [])] or [1]
        return hi - lo <= max(sizes)
    values = [v for v in (*t.failing_values, *t.passing_values, p, q) if v is not None]
    if all(isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in values) and not t.axis.endswith(
        ".magnitude"
    ):
        return hi - lo <= 1
    return lo > 0 and hi / lo <= 2.0


def settle(
    lead: Finding,
    terms: list[Finding],
    hyps: list[Hypothesis],
    capped: bool,
    narrow: dict,
    cross: list,
    dtypes: dict[str, list[str]] | None = None,
) -> None:
    """Set ``exact`` and ``why_not_exact`` of the leading finding."""
    why: list[str] = []
    others = [h.text for h in hyps[1:]]
    if others:
        shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        why.append(f"{len(others)} competing hypothesis(es) separate the recorded cases as well: {shown}")
    if capped:
        why.append(f"the hypothesis space was capped ({CAP_TEXT}): not every competitor was enumerated")
    for t in terms:
        if t.minimal_pair is None:
            why.append(f"no minimal pair for {t.predicate} yet: no passing and failing case differ only in {t.source}")
        if t.kind == "threshold" and not pinned(t, dtypes or {}):
            why.append(
                f"the boundary of {t.axis} is not pinned: passes at {_fmt(t.passes_at)}, "
                f"fails at {_fmt(t.fails_at)}"
                + ("" if narrow.get(t.axis) else " (no case the variations can build lies between)")
            )
        elif narrow.get(t.axis) and t.kind != "threshold":
            values = ", ".join(str(c.hax.get(t.axis, c.axes.get(t.axis))) for c in narrow[t.axis])
            why.append(f"untried values of {t.axis}: {values}")
    if cross:
        changes = "; ".join(
            json.dumps(
                {c.var["axis"]: c.value, **{a["axis"]: a["values"][0] for a in c.var.get("also") or []}}, default=str
            )
            for c in cross
        )
        why.append(f"not crossed yet with the run's other axes ({changes})")
    lead.exact = not why
    lead.why_not_exact = why
    if lead.exact and lead.kind == "set" and len(lead.passing_values) == 1:
        lead.predicate = f"{lead.axis} != {lead.passing_values[0]}"  # every other value it can have fails


def competitor_note(f: Finding, lead: Finding) -> None:
    f.exact = False
    f.why_not_exact = [
        f"competes with the leading finding {lead.predicate}: the recorded cases do not tell them apart yet"
    ]
