"""Failing groups: which failing cases each finding is asked to explain.

When one hypothesis of the space separates every failing case from every
passing one, there is one group.  Otherwise each failing status (crash,
numerical_mismatch) is a group of its own, and a group that still has no
hypothesis is tried as **several separate causes**: a few *pure* atoms - each
true on some failing cases of the group and on no passing case - that cover
the group together (``dtype == bfloat16`` or ``x.shape[-1] > 1024``: an OR,
never read as an AND).  Each cause is a group of its own (its own finding,
minimal pair and exactness); failing cases nothing covers are a group without
a finding, reported as such with the predicates that came closest.

Cases identical on every axis (their seeds aside) that disagree on the outcome
say the failure depends on the values drawn: the passing twins are left out of
the passing side, so a structural predicate can still stand as a necessary
condition (never exact).

Pure: sets of case ids, ties broken by names and ids (nothing depends on the
order cases arrived).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .hypotheses import KIND_RANK, Atom, Space, covering_atoms, derivation_rank, enumerate_hypotheses
from .hypotheses import columns as rows_columns

MAX_CAUSES = 3
MAX_SURVIVORS = 3
MAX_PAIRS = 8


@dataclass
class Group:
    cases: list[str]  # the failing cases the group explains
    status: str | None  # their one status when the groups were split by status
    space: Space | None  # None: no finding for these cases
    cause: int | None = None  # one of several pure causes: its number
    alternative: list[str] | None = None  # separate causes that cover the failing cases as well as a conjunction
    # the other causes' conditions, each with its failing cases (probes.cause_requirements crosses them)
    others: list[tuple[Atom, list[str]]] = field(default_factory=list)


def _pure_atoms(
    hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str], aliases: dict[str, str]
) -> list[tuple[Atom, frozenset[str]]]:
    """Per axis, the widest atoms that hold on no passing case and on some failing cases, with those cases."""
    fcols, pcols = columns(hax, failing), columns(hax, passing)
    out = []
    for key in sorted((set(fcols) | set(pcols)) - set(aliases)):
        pvals = pcols.get(key) or [None] * len(passing)
        fvals = fcols.get(key) or [None] * len(failing)
        # candidate subsets: the failing values no passing case has; those above / below every passing value
        subsets = [_unseen(fvals, pvals)]
        nums = [v for v in pvals if isinstance(v, (int, float)) and not isinstance(v, bool)]  # _num, inline
        if nums:
            hi, lo = max(nums), min(nums)
            subsets.append([v for v in fvals if _num(v) and v > hi])
            subsets.append([v for v in fvals if _num(v) and v < lo])
        for sub in subsets:
            if not sub:
                continue
            for atom, mask in covering_atoms(key, sub, pvals):
                if mask == 0:
                    # fvals: one value per failing case (columns' contract)
                    holds = frozenset(c for c, v in zip(failing, fvals, strict=True) if atom.holds(v))
                    out.append((atom, holds))
    return out


def _unseen(fvals: list, pvals: list) -> list:
    """The failing values no passing case has (compared as _hashable reads them)."""
    if {list, dict}.isdisjoint(map(type, pvals)) and {list, dict}.isdisjoint(map(type, fvals)):
        try:
            seen = set(pvals)  # every value is its own _hashable
            return [v for v in fvals if v not in seen]
        except TypeError:  # a value of another unhashable type: as _hashable reads it
            pass
    seen = {_hashable(v) for v in pvals}
    return [v for v in fvals if _hashable(v) not in seen]


def columns(hax: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, list]:
    """Axis -> its value in each case of ``ids`` (None where a case lacks it): hypotheses.columns."""
    return rows_columns([hax[c] for c in ids])


def _hashable(v: Any) -> Any:
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, dict)) else v


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def pure_cover(
    hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str], aliases: dict[str, str] | None = None
) -> list[tuple[Atom, list[str]]]:
    """Greedily, the pure atoms that cover the failing cases together (the one covering most of the uncovered
    first, then the simplest), at most MAX_CAUSES; none when they do not cover every failing case."""
    atoms = _pure_atoms(hax, sorted(failing), sorted(passing), aliases or {})
    left = set(failing)
    chosen: list[tuple[Atom, list[str]]] = []
    while left and len(chosen) < MAX_CAUSES and atoms:
        atoms.sort(key=lambda t: (-len(t[1] & left), KIND_RANK[t[0].kind], derivation_rank(t[0].axis), t[0].text))
        atom, holds = atoms.pop(0)
        gain = holds & left
        if not gain:
            break
        chosen.append((atom, sorted(holds)))
        left -= gain
    return [] if left else chosen  # only a cover of every case: a tail of a few cases beyond the passing ones is noise


def failure_groups(
    hax: dict[str, dict[str, Any]],
    failing: list[str],
    passing: list[str],
    kinds: Mapping[str, str],
    aliases: dict[str, str] | None = None,
    space: Any = None,
) -> list[Group]:
    """The groups of failing cases, each with its hypothesis space (see the module's docstring); ``space``:
    the whole run's space when already enumerated."""
    if space is None:
        space = enumerate_hypotheses(hax, failing, passing, aliases)
    if space.hypotheses or not failing or not passing:
        group = Group(sorted(failing), None, space)
        if space.conjunctions and space.hypotheses:  # an AND, unless the cases read as well as an OR
            cover = pure_cover(hax, failing, passing, aliases)
            if len(cover) > 1 and set().union(*(cs for _, cs in cover)) >= set(failing):
                group.alternative = [a.text for a, _ in cover]
        return [group]
    statuses = sorted({kinds[c] for c in failing})
    parts = (
        [(s, sorted(c for c in failing if kinds[c] == s)) for s in statuses]
        if len(statuses) > 1
        else [(None, sorted(failing))]
    )
    groups: list[Group] = []
    for status, sub in parts:
        sp = enumerate_hypotheses(hax, sub, passing, aliases) if status else space
        if sp.hypotheses:
            groups.append(Group(sub, status, sp))
            continue
        cover = pure_cover(hax, sub, passing, aliases)
        covered: set[str] = set()
        for n, (atom, cases) in enumerate(cover, 1):
            groups.append(
                Group(
                    cases,
                    status,
                    enumerate_hypotheses(hax, cases, passing, aliases),
                    n if len(cover) > 1 or len(cases) < len(sub) else None,
                    others=[(b, cs) for b, cs in cover if b is not atom],
                )
            )
            covered.update(cases)
        rest = [c for c in sub if c not in covered]
        if rest:
            groups.append(Group(rest, status, None))
    return groups


def closest(hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str]) -> list[str]:
    """The atoms that hold on every one of the failing cases and on the fewest passing cases, each with
    (the first of) the passing cases that contradict it."""
    fcols, pcols = columns(hax, failing), columns(hax, passing)
    scored = []
    for key in sorted(set(fcols) | set(pcols)):
        pvals = pcols.get(key) or [None] * len(passing)
        for atom, mask in covering_atoms(key, fcols.get(key) or [None] * len(failing), pvals):
            n = bin(mask).count("1")
            if 0 < n < len(passing):
                scored.append((n, KIND_RANK[atom.kind], derivation_rank(atom.axis), atom.text, mask))
    scored.sort(key=lambda t: t[:4])
    out = []
    for n, _, _, text, mask in scored[:MAX_SURVIVORS]:
        against = [passing[i] for i, b in enumerate(bin(mask)[:1:-1]) if b == "1"][:2]  # bit i: passing[i]
        out.append(f"{text} (but {n} passing case(s) have it too: {', '.join(against)}{', ...' if n > 2 else ''})")
    return out


def identical_pairs(
    dist: dict[str, dict[str, str]], status: dict[str, str], cases: dict[str, Any]
) -> list[tuple[str, str]]:
    """(passing, failing) cases equal in everything but their id and seed: first grouped by their variation
    axes (cheap), then by their whole content (two value specs may read the same in a label)."""
    groups: dict[str, list[str]] = {}
    for c in sorted(dist):
        if status.get(c) in ("pass", "fail"):
            groups.setdefault(json.dumps(dist[c], sort_keys=True), []).append(c)
    out: list[tuple[str, str]] = []
    for members in groups.values():
        if len({status[c] for c in members}) < 2:
            continue
        by_content: dict[str, list[str]] = {}
        for c in members:
            doc = cases[c].model_dump(mode="json", exclude={"id", "seed", "description", "origin"})
            by_content.setdefault(json.dumps(doc, sort_keys=True), []).append(c)
        for same in by_content.values():
            ps = [c for c in same if status[c] == "pass"]
            fs = [c for c in same if status[c] == "fail"]
            if ps and fs:  # every passing twin (each is left out of the passing side), against the first failing
                out.extend((p, fs[0]) for p in ps)
    return out
