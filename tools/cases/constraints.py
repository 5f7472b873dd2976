"""Valid calls: the constraints a run's reference refusals teach, and the one check every proposal passes.

A call the reference refuses (a size not divisible by an attribute, a size two inputs must share) is not a
call of the operator: run_case_remote leaves it pending and notes the refusal in the run
(``RunStore.note_refusal``); a result whose error carries ``reference_error`` (the candidate raised, the
reference refused another way) or that is unsupported because the reference refuses it too is one as well.
The accepted calls are the cases the reference computed (passed or a numerical mismatch).

:func:`learn` reads those two sets over each case's integer properties (names of references/conditions.md:
``x.rank``, ``x.shape[i]`` from the front and from the back, ``x.numel``, a list's ``x.len``, an integer
attribute ``attr.NAME``, a list attribute's members ``attr.NAME[k]``) and keeps the relations, simplest family
first, that hold on every accepted call where both sides exist:

1. ``p == q``          a size shared across inputs, equal ranks;
2. ``p % q == 0``      a size divisible by an attribute or by another size;
3. ``p < q``, ``p <= q``  an index attribute below a rank, a window within a size; ``p == q`` of an
   attribute and a size, or within one input;
4. ``p % c == 0``      an alignment every accepted call had (``c`` their gcd, above 1);
5. ``p >= c``, ``p <= c``  the range the accepted calls spanned.

Of those, few that exclude every refused call (greedy: a relation between two properties before a constant
one - an alignment or a range the accepted calls happened to have -, then the one excluding the most refused
calls still unexplained, then the one more accepted calls bear out (``x.shape[0] % attr.dim == 0`` said by
one accepted call of dim 2 loses to ``attr.dim < x.rank`` said by all), then the simpler family, then an
attribute before a size, a front index before a back one).  A refused call no relation excludes stays
unexplained: nothing is learned from it.  Nothing is learned without an accepted call (a reference that refuses
everything is broken, not constraining).  A name a case lacks leaves the relation unchecked on it.

:func:`valid_call` is the one check: ``None`` for a valid call, else why not.  Proposals (analysis next cases
and probes), narrow_failure's rounds and shrink_case's steps all go through it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any

from pydantic import BaseModel

from ..schemas import Case, CaseResult

REFUSED_TOO = "refused by the reference too"  # the runner's matched_rule for a call both sides refuse
RELATIONS = ("==", "%", "<", "<=")
FAMILY = {"==": 0, "%": 1, "<": 2, "<=": 2, "%c": 3, ">=c": 4, "<=c": 4}
MAX_SHOWN = 3


@dataclass(frozen=True)
class Constraint:
    """One learned relation: ``left op right`` (``right`` a property name, or a number for ``%c``/``>=c``/``<=c``)."""

    left: str
    op: str
    right: str | int
    refused: tuple[str, ...] = ()  # the refused calls it excludes
    support: int = 0  # the accepted calls that meet it and say something (a divisor above 1)

    @property
    def text(self) -> str:
        """The relation in the condition language (``x.shape[1] % attr.groups == 0``)."""
        if self.op in ("%", "%c"):
            return f"{self.left} % {self.right} == 0"
        return f"{self.left} {self.op.rstrip('c')} {self.right}"

    def holds(self, props: Mapping[str, int]) -> bool | None:
        """Whether a case with these properties meets it; None when a name is absent (or a divisor is 0)."""
        a = props.get(self.left)
        b = self.right if isinstance(self.right, int) else props.get(self.right)
        if a is None or b is None:
            return None
        return _relation(self.op.rstrip("c"), a, b)


def _relation(op: str, a: int, b: int) -> bool | None:
    if op == "%":
        return None if b <= 0 else a % b == 0
    return {"==": a == b, "<": a < b, "<=": a <= b, ">=": a >= b}[op]


@dataclass
class Constraints:
    """What a run's refusals taught: the relations learned and the refused calls none explains."""

    learned: list[Constraint] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.learned)

    def sentences(self) -> list[str]:
        """One line per learned relation, naming the refused calls it excludes."""
        return [
            f"the reference refuses calls where not {c.text} (refused: {', '.join(c.refused[:MAX_SHOWN])}"
            + (f" and {len(c.refused) - MAX_SHOWN} more" if len(c.refused) > MAX_SHOWN else "")
            + ")"
            for c in self.learned
        ]


# --------------------------------------------------------------------------
# The integer properties of a case
# --------------------------------------------------------------------------


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(out: dict[str, int], name: str, shape: list[int]) -> None:
    out[f"{name}.rank"] = len(shape)
    out[f"{name}.numel"] = math.prod(shape)
    for i, size in enumerate(shape):
        out[f"{name}.shape[{i}]"] = size
        out[f"{name}.shape[{i - len(shape)}]"] = size


def properties(case: Case | Mapping[str, Any]) -> dict[str, int]:
    """The integer properties of a case (a Case or its JSON document), by their condition-language names."""
    doc = case.model_dump(mode="json") if isinstance(case, BaseModel) else case
    out: dict[str, int] = {}
    for spec in doc.get("inputs") or []:
        if spec.get("none"):
            continue
        name = spec["name"]
        if spec.get("tensors") is not None:
            out[f"{name}.len"] = len(spec["tensors"])
            for j, member in enumerate(spec["tensors"]):
                if member.get("shape") is not None:
                    _tensor(out, f"{name}[{j}]", member["shape"])
        elif spec.get("shape") is not None:
            _tensor(out, name, spec["shape"])
    for key, value in (doc.get("attributes") or {}).items():
        if _int(value):
            out[f"attr.{key}"] = value
        elif isinstance(value, list) and value and all(_int(v) for v in value):
            out.update({f"attr.{key}[{k}]": v for k, v in enumerate(value)})
    return out


# --------------------------------------------------------------------------
# Refused and accepted calls
# --------------------------------------------------------------------------


def refused_calls(results: Mapping[str, CaseResult], refusals: Mapping[str, str] | None = None) -> dict[str, str]:
    """Case id -> the reference's refusal: the pending cases noted refused, and the recorded cases whose
    error says the reference refused the call (another way, or the same way as the candidate)."""
    out = dict(refusals or {})
    for case_id, result in results.items():
        err = result.error
        if err is None:
            continue
        if err.reference_error:
            out.setdefault(case_id, err.reference_error)
        elif result.status == "unsupported" and (err.matched_rule or "").startswith(REFUSED_TOO):
            out.setdefault(case_id, f"{err.type}: {err.message}"[:500])
    return out


def accepted_calls(results: Mapping[str, CaseResult]) -> list[str]:
    """The cases the reference computed: passed or a numerical mismatch."""
    return [c for c, r in results.items() if r.status in ("passed", "numerical_mismatch")]


# --------------------------------------------------------------------------
# Learning
# --------------------------------------------------------------------------


def _candidates(refused: dict[str, dict[str, int]], accepted: list[dict[str, int]]) -> list[Constraint]:
    """Every relation some refused call breaks and every accepted call (where both sides exist) meets."""
    found: dict[tuple, set[str]] = {}
    for case_id, props in refused.items():
        for a, b in permutations(props, 2):
            for op in RELATIONS:
                if (op == "==" and a > b) or _relation(op, props[a], props[b]) is not False:
                    continue
                found.setdefault((a, op, b), set()).add(case_id)
        for a, value in props.items():
            for key in _bounds(a, value, accepted):
                found.setdefault(key, set()).add(case_id)
    out = []
    for (a, op, b), ids in found.items():
        support = _support(a, op, b, accepted)
        if support:
            out.append(Constraint(a, op, b, tuple(sorted(ids)), support))
    return out


def _bounds(name: str, value: int, accepted: list[dict[str, int]]) -> list[tuple]:
    """The constant relations on ``name`` that the refused ``value`` breaks: its alignment, its range."""
    seen = [p[name] for p in accepted if name in p]
    if not seen:
        return []
    out: list[tuple] = []
    step = math.gcd(*seen)
    if step > 1 and value % step:
        out.append((name, "%c", step))
    if value < min(seen):
        out.append((name, ">=c", min(seen)))
    if value > max(seen):
        out.append((name, "<=c", max(seen)))
    return out


def _support(a: str, op: str, b: str | int, accepted: list[dict[str, int]]) -> int:
    """0 when an accepted call breaks the relation, else how many meet it and say something by it (both
    sides exist; a divisor above 1: every size is a multiple of 1)."""
    relation, support = Constraint(a, op, b), 0
    for props in accepted:
        held = relation.holds(props)
        if held is False:
            return 0
        if held and not (op == "%" and props[b] == 1):  # type: ignore[index]
            support += 1
    return support


def _plain(name: str | int) -> int:
    """How directly a name says a quantity: an attribute or a number 0 (a size divisible by an attribute
    before one divisible by another size), a front index 1, a back index 2, a count 3."""
    text = str(name)
    if isinstance(name, int) or text.startswith("attr."):
        return 0
    return 3 if text.endswith((".numel", ".rank", ".len")) else 2 if "[-" in text else 1


def _rank(c: Constraint, left: set[str]) -> tuple:
    constant = FAMILY[c.op] >= FAMILY["%c"]
    explained = len(left & set(c.refused))
    divides_attr = c.op == "%" and str(c.left).startswith("attr.")  # a size divisible by an attribute first
    return (constant, -explained, -c.support, _family(c), divides_attr, _plain(c.left) + _plain(c.right), c.text)


def _family(c: Constraint) -> int:
    """An equality is the simplest family between two inputs (a size they share); of an attribute and a
    size, or within one input, it ranks with the orderings (after a divisibility)."""
    if c.op != "==":
        return FAMILY[c.op]
    owners = {str(side).split(".", 1)[0].split("[", 1)[0] for side in (c.left, c.right)}
    return 0 if len(owners) == 2 and "attr" not in owners else FAMILY["<"]


def learn(
    cases: Iterable[Case | Mapping[str, Any]], refused: Mapping[str, str], accepted: Iterable[str]
) -> Constraints:
    """The fewest relations, simplest first, that every accepted call meets and that exclude the refused
    calls (ids of ``cases``); the refused calls none excludes are ``unexplained``."""
    docs = {(c.id if isinstance(c, BaseModel) else c["id"]): c for c in cases}
    accepted_props = [properties(docs[c]) for c in accepted if c in docs]
    refused_props = {c: properties(docs[c]) for c in refused if c in docs}
    if not accepted_props or not refused_props:
        return Constraints(unexplained=sorted(refused_props))
    pool = _candidates(refused_props, accepted_props)
    left = set(refused_props)
    learned: list[Constraint] = []
    while True:
        useful = [c for c in pool if left & set(c.refused)]
        if not useful:
            return Constraints(learned, sorted(left))
        best = min(useful, key=lambda c: _rank(c, left))
        learned.append(best)
        left -= set(best.refused)


def learn_from_run(
    cases: Iterable[Case], results: Mapping[str, CaseResult], refusals: Mapping[str, str] | None = None
) -> Constraints:
    """:func:`learn` over a run's cases, recorded results and noted refusals (empty when nothing was refused)."""
    refused = refused_calls(results, refusals)
    if not refused:
        return Constraints()
    return learn(cases, refused, accepted_calls(results))


def valid_call(case: Case | Mapping[str, Any], constraints: Constraints | None) -> str | None:
    """None when ``case`` meets every learned constraint, else why it is not a valid call."""
    if not constraints:
        return None
    props = properties(case)
    for c in constraints.learned:
        if c.holds(props) is False:
            values = ", ".join(f"{n} = {props[n]}" for n in (c.left, c.right) if isinstance(n, str) and n in props)
            return (
                f"not a valid call: the reference refuses calls where not {c.text} ({values}; "
                f"refused before: {', '.join(c.refused[:MAX_SHOWN])})"
            )
    return None
