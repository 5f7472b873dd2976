"""When a finding is exact (references/behavior.md, "Exactness").

The leading hypothesis is ``exact`` only when

(a) no competing hypothesis survives: every other hypothesis of the space
    was ruled out by a recorded case (and the space was not capped);
(b) its boundary is pinned: no buildable value is left strictly between its
    passing and failing values (an integer bracket 1 wide; an alignment at a
    factor 2; a float within a factor 2; a size in bytes or elements at the
    step one dimension can move it), and no untried value of a categorical
    axis or relation is left;
(c) it held when crossed with the run's other axes: every value another axis
    takes in a passing case has also been seen failing with it (or cannot be
    built);

and a minimal pair shows each of its terms.  ``why_not_exact`` lists what is open.
"""

from __future__ import annotations

import json

from ..schemas import Finding
from .hypotheses import CAP_TEXT, Hypothesis


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)


def settle(lead: Finding, terms: list[Finding], hyps: list[Hypothesis], capped: bool, narrow: dict,
           cross: list) -> None:
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
        if narrow.get(t.axis):
            if t.kind == "threshold":
                why.append(f"the boundary of {t.axis} is not pinned: passes at {_fmt(t.passes_at)}, "
                           f"fails at {_fmt(t.fails_at)}")
            else:
                values = ", ".join(str(c.hax.get(t.axis, c.axes.get(t.axis))) for c in narrow[t.axis])
                why.append(f"untried values of {t.axis}: {values}")
    if cross:
        changes = "; ".join(json.dumps({c.var["axis"]: c.value, **{a["axis"]: a.get("value")
                                                                    for a in c.var.get("also") or []}},
                                       default=str) for c in cross)
        why.append(f"not crossed yet with the run's other axes ({changes})")
    lead.exact = not why
    lead.why_not_exact = why
    if lead.exact and lead.kind == "set" and len(lead.passing_values) == 1:
        lead.predicate = f"{lead.axis} != {lead.passing_values[0]}"  # every other value it can have fails


def competitor_note(f: Finding, lead: Finding) -> None:
    f.exact = False
    f.why_not_exact = [f"competes with the leading finding {lead.predicate}: the recorded cases do not tell them "
                       f"apart yet"]
