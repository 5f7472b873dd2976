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
from dataclasses import dataclass
from typing import Any

from .hypotheses import KIND_RANK, Atom, Space, covering_atoms, derivation_rank, enumerate_hypotheses

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


def _pure_atoms(hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str],
                aliases: dict[str, str]) -> list[tuple[Atom, frozenset[str]]]:
    """Per axis, the widest atoms that hold on no passing case and on some failing cases, with those cases."""
    keys = sorted({k for c in failing + passing for k in hax[c]} - set(aliases))
    out = []
    for key in keys:
        pvals = [hax[c].get(key) for c in passing]
        seen = {json.dumps(v, sort_keys=True, default=str) for v in pvals}
        # candidate subsets: the failing cases whose value no passing case has; those above / below every passing value
        nums = [v for v in pvals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        subsets = [[c for c in failing if json.dumps(hax[c].get(key), sort_keys=True, default=str) not in seen]]
        if nums:
            subsets.append([c for c in failing if _num(hax[c].get(key)) and hax[c][key] > max(nums)])
            subsets.append([c for c in failing if _num(hax[c].get(key)) and hax[c][key] < min(nums)])
        for sub in subsets:
            if not sub:
                continue
            for atom, mask in covering_atoms(key, [hax[c].get(key) for c in sub], pvals):
                if mask == 0:
                    holds = frozenset(c for c in failing if atom.holds(hax[c].get(key)))
                    out.append((atom, holds))
    return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def pure_cover(hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str],
               aliases: dict[str, str] | None = None) -> list[tuple[Atom, list[str]]]:
    """Greedily, the pure atoms that cover the failing cases (the one covering most of the uncovered first,
    then the simplest): at most MAX_CAUSES; an atom covering one case only when it completes the cover."""
    atoms = _pure_atoms(hax, sorted(failing), sorted(passing), aliases or {})
    left, chosen = set(failing), []
    while left and len(chosen) < MAX_CAUSES and atoms:
        atoms.sort(key=lambda t: (-len(t[1] & left), KIND_RANK[t[0].kind], derivation_rank(t[0].axis), t[0].text))
        atom, holds = atoms.pop(0)
        gain = holds & left
        if not gain:
            break
        chosen.append((atom, sorted(holds)))
        left -= gain
    if left and any(len(cs) < 2 for _, cs in chosen):  # a partial cover keeps only causes of two cases or more
        chosen = [(a, cs) for a, cs in chosen if len(cs) >= 2]
    return chosen


def failure_groups(hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str],
                   kinds: dict[str, str], aliases: dict[str, str] | None = None) -> list[Group]:
    """The groups of failing cases, each with its hypothesis space (see the module's docstring)."""
    space = enumerate_hypotheses(hax, failing, passing, aliases)
    if space.hypotheses or not failing or not passing:
        group = Group(sorted(failing), None, space)
        if space.conjunctions and space.hypotheses:  # an AND, unless the cases read as well as an OR
            cover = pure_cover(hax, failing, passing, aliases)
            if len(cover) > 1 and set().union(*(cs for _, cs in cover)) >= set(failing):
                group.alternative = [a.text for a, _ in cover]
        return [group]
    statuses = sorted({kinds[c] for c in failing})
    parts = [(s, sorted(c for c in failing if kinds[c] == s)) for s in statuses] if len(statuses) > 1 \
        else [(None, sorted(failing))]
    groups: list[Group] = []
    for status, sub in parts:
        sp = enumerate_hypotheses(hax, sub, passing, aliases) if status else space
        if sp.hypotheses:
            groups.append(Group(sub, status, sp))
            continue
        cover = pure_cover(hax, sub, passing, aliases)
        covered: set[str] = set()
        for n, (_, cases) in enumerate(cover, 1):
            groups.append(Group(cases, status, enumerate_hypotheses(hax, cases, passing, aliases),
                                n if len(cover) > 1 or len(cases) < len(sub) else None))
            covered.update(cases)
        rest = [c for c in sub if c not in covered]
        if rest:
            groups.append(Group(rest, status, None))
    return groups


def closest(hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str]) -> list[str]:
    """The atoms that hold on every one of the failing cases and on the fewest passing cases, each with
    (the first of) the passing cases that contradict it."""
    keys = sorted({k for c in failing + passing for k in hax[c]})
    scored = []
    for key in keys:
        pvals = [hax[c].get(key) for c in passing]
        for atom, mask in covering_atoms(key, [hax[c].get(key) for c in failing], pvals):
            against = [passing[i] for i in range(len(passing)) if mask >> i & 1]
            if against and len(against) < len(passing):
                scored.append((len(against), KIND_RANK[atom.kind], derivation_rank(atom.axis), atom.text, against))
    scored.sort(key=lambda t: t[:4])
    return [f"{text} (but {n} passing case(s) have it too: {', '.join(against[:2])}"
            f"{', ...' if n > 2 else ''})" for n, _, _, text, against in scored[:MAX_SURVIVORS]]


def identical_pairs(dist: dict[str, dict[str, str]], status: dict[str, str],
                    cases: dict[str, Any]) -> list[tuple[str, str]]:
    """(passing, failing) cases equal in everything but their id and seed: first grouped by their variation
    axes (cheap), then by their whole content (two value specs may read the same in a label)."""
    groups: dict[str, list[str]] = {}
    for c in sorted(dist):
        if status.get(c) in ("pass", "fail"):
            groups.setdefault(json.dumps(dist[c], sort_keys=True), []).append(c)
    out = []
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
