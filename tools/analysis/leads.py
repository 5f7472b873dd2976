"""Refuted leads: the findings of the run's previous analysis (analysis.json
on disk) that a case recorded since contradicts, each with that case - so a
lead never vanishes without a word.

A finding is rebuilt as the predicate it states (its axis, kind, failing
values or boundary; a conjunction from its terms) and checked on the cases
that ran: a passing case where it holds refutes it, and so does a failing
case of its group where it does not hold (its status's cases, or every
failing case when it claimed them all; a finding that was one of several
causes is refuted only by a passing case).  Leads refuted earlier are carried
forward while they stay refuted.
"""

from __future__ import annotations

from typing import Any

from ..schemas import Analysis, Finding, RefutedLead
from .hypotheses import Atom

MAX_REFUTED = 10
MAX_CASES_NAMED = 5


def _atom(f: Any) -> Atom | None:
    """A finding or a term as the atom it states (None for a trend or a kind it cannot be rebuilt from)."""
    if f.kind == "class":
        return Atom(f.axis, "class", (not f.predicate.startswith("not "),))
    if f.kind == "threshold" and f.direction and f.fails_at is not None:
        return Atom(f.axis, "threshold", direction=f.direction, fails_at=f.fails_at, passes_at=f.passes_at)
    if f.kind in ("value", "set", "relation") and f.failing_values:
        return Atom(f.axis, f.kind, tuple(f.failing_values))
    return None


def _atoms(f: Finding) -> list[Atom] | None:
    parts = [_atom(t) for t in f.terms] if f.kind == "conjunction" else [_atom(f)]
    return None if not parts or any(a is None for a in parts) else parts  # type: ignore[return-value]


def contradicting(f: Finding, hax: dict[str, dict], status: dict[str, str], kinds: dict[str, str]) -> list[str]:
    """The recorded cases that contradict a finding (see the module's docstring)."""
    atoms = _atoms(f)
    if atoms is None or f.necessary_only:
        return []
    out = []
    for c in sorted(hax):
        holds = all(a.holds(hax[c].get(a.axis)) for a in atoms)
        if status.get(c) == "pass" and holds:
            out.append(c)
        elif (
            kinds.get(c) in ("crash", "numerical_mismatch")
            and not holds
            and f.cause is None
            and (f.status is None or kinds[c] == f.status)
        ):
            out.append(c)
    return out


def refuted_leads(
    previous: Analysis | None,
    findings: list[Finding],
    competing: list[Finding],
    hax: dict[str, dict],
    status: dict[str, str],
    kinds: dict[str, str],
) -> list[RefutedLead]:
    """The previous analysis' findings (and the leads it had found refuted) that a recorded case contradicts
    now; a lead that leads again, or still competes, is not refuted."""
    if previous is None:
        return []
    alive = {f.predicate for f in [*findings, *competing]}
    out: dict[str, RefutedLead] = {}
    for f in previous.findings:
        if f.kind == "trend" or f.predicate in alive:
            continue
        against = contradicting(f, hax, status, kinds)
        if against:
            out[f.predicate] = RefutedLead(
                predicate=f.predicate,
                was_exact=f.exact,
                refuted_by=against[:MAX_CASES_NAMED],
                since=previous.analyzed_at,
            )
    for lead in previous.refuted:
        if lead.predicate not in alive and lead.predicate not in out:
            out[lead.predicate] = lead
    return list(out.values())[:MAX_REFUTED]
