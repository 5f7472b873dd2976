"""The factors of a composite quantity moved among its dimensions (references/behavior.md, "Exactness").

A condition on a quantity several sizes combine into - an element count (``x.numel``), a size in bytes
(``x.bytes``), the rows (``x.rows``), a product of two sizes (``x.shape[0] * x.shape[1]``) - claims that how the
quantity is split among its factors does not matter: ``x.numel > 1024`` says ``[5, 16, 16]`` and
``[1, 1, 1280]`` fail alike.  Nothing else tests that claim: a far side, a re-pin or another seed keep the split,
and "the same count from another shape" is met by a factor 2 moved between two dimensions the real cause
multiplies anyway.  So, from a case on each side of the boundary, the quantity is kept exactly (the same rank,
dtype, layout and everything else - the same side of the boundary) while every one of its factors is moved into
one of its dimensions, for each of them in turn; the prediction must hold there.  A requirement no buildable
case meets is untestable (settlement.py: open, blocks exact).

The requirements are plain records (:class:`FactorNeed`); probes.py makes them its ``Req``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..cases.derived import parse_dim_axis
from ..cases.relations import product_sides
from ..schemas import Case, Finding
from .flips import dim_moves
from .hypotheses import Hypothesis


@dataclass
class FactorNeed:
    kind: str
    text: str
    done: list[str] = field(default_factory=list)
    builds: list[tuple[Case, dict, Any, str]] = field(default_factory=list)  # base, variation, value, predicted
    untestable: str | None = None


def factor_dims(axis: str, shape: list[int]) -> tuple[str, list[int]] | None:
    """(input, the dimensions whose sizes multiply into ``axis``) for a composite quantity of an input of
    that shape; None for one size, a ratio, a relation, or fewer than two factors."""
    if "~" in axis:
        return None
    rank = len(shape)
    sides = product_sides(axis)
    if sides is not None:
        a, op, b = sides
        da, db = parse_dim_axis(a), parse_dim_axis(b)
        if op != "*" or da is None or db is None or da[0] != db[0]:
            return None
        if not (-rank <= da[1] < rank and -rank <= db[1] < rank) or da[1] % rank == db[1] % rank:
            return None
        return da[0], sorted({da[1] % rank, db[1] % rank})
    name, _, fld = axis.partition(".")
    dims = list(range(rank)) if fld in ("numel", "bytes") else list(range(rank - 1)) if fld == "rows" else []
    return (name, dims) if len(dims) >= 2 else None


def concentrated(shape: list[int], dims: list[int], into: int) -> list[int]:
    """The shape with every factor of ``dims`` moved into dimension ``into`` (the others 1)."""
    new = list(shape)
    total = math.prod(shape[k] for k in dims)
    for k in dims:
        new[k] = 1
    new[into] = total
    return new


def concentrate_moves(ties: dict[str, list[str]], base: Case, name: str, target: list[int]) -> list[tuple[dict, Any]]:
    """One variation that sets the input's changed dimensions (each with the dimensions tied to it) at once."""
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or spec.shape is None or len(spec.shape) != len(target):
        return []
    changed = [k for k, (a, b) in enumerate(zip(spec.shape, target, strict=True)) if a != b]
    moves = [dim_moves(ties, base, name, k) for k in changed]
    if not changed or not all(moves):
        return []
    dims = [d for m in moves for d in m[0]["dims"]]
    if len(dims) != len(set(dims)):  # two of them tied together: they cannot take different sizes
        return []
    first, *rest = zip(changed, moves, strict=True)
    also = [dict(m[0], values=[target[k]]) for k, m in rest]
    return [(dict(first[1][0], also=also) if also else first[1][0], target[first[0]])]


def _shape(case: Case, name: str) -> list[int] | None:
    spec = next((i for i in case.inputs if i.name == name and not i.none and i.tensors is None), None)
    return None if spec is None or not spec.shape else list(spec.shape)


def _bases(ctx, hyp: Hypothesis, lead: Finding, terms: list[Finding], i: int) -> list[tuple[str, str]]:
    pair = (terms[i].minimal_pair if i < len(terms) else None) or lead.minimal_pair
    return [] if pair is None else [("fail", pair.failing), ("pass", pair.passing)]


def factor_needs(ctx, hyp: Hypothesis, lead: Finding, terms: list[Finding]) -> list[FactorNeed]:
    """For each composite quantity the condition names, from its minimal pair's failing and passing case: the
    quantity kept with all its factors in each of its dimensions in turn, predicted as the base.  Met by a
    recorded case on that side with the quantity at the base's value (or the boundary's) held in that
    dimension alone."""
    out: list[FactorNeed] = []
    ran = sorted(c for c, s in ctx.status.items() if s in ("fail", "pass"))
    for i, atom in enumerate(hyp.atoms):
        for side, base_id in _bases(ctx, hyp, lead, terms, i):
            base = ctx.cases[base_id]
            name = atom.axis.partition(".")[0]
            shape = _shape(base, name)
            found = factor_dims(atom.axis, shape) if shape else None
            if shape is None or found is None or math.prod(shape[k] for k in found[1]) < 2:
                continue
            dims = found[1]
            at = {"fail": atom.fails_at, "pass": atom.passes_at}  # the boundary's values, where it has them
            for d in dims:
                target = concentrated(shape, dims, d)
                need = FactorNeed(
                    f"factors-{side}",
                    f"{atom.axis} = {atom_value(ctx, base_id, atom.axis)} kept with every factor in "
                    f"{name}.shape[{d}] ({side}ing side: {target})",
                )
                need.done = [
                    c
                    for c in ran
                    if ctx.status[c] == side
                    and hyp.holds(ctx.hax[c]) == (side == "fail")
                    and ctx.hax[c].get(atom.axis) in (ctx.hax[base_id].get(atom.axis), at[side])
                    and _in_one(_shape(ctx.cases[c], name), dims, d, len(shape))
                ][:1]
                if target == shape:
                    need.done = need.done or ([base_id] if ctx.status.get(base_id) == side else [])
                need.builds = [(base, v, x, side) for v, x in concentrate_moves(ctx.ties, base, name, target)]
                if not need.builds and not need.done:
                    need.untestable = f"no case keeps {atom.axis} with its factors in {name}.shape[{d}]"
                out.append(need)
    return out


def atom_value(ctx, case_id: str, axis: str) -> Any:
    v = ctx.hax[case_id].get(axis)
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _in_one(shape: list[int] | None, dims: list[int], d: int, rank: int) -> bool:
    """Does ``shape`` (of the same rank) hold every factor of ``dims`` in dimension ``d`` (the others 1)?"""
    return shape is not None and len(shape) == rank and all(shape[k] == 1 for k in dims if k != d)
