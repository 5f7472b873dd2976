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

A comparison of two sizes (``x.shape[0] >= x.shape[1]``) is a class: it is probed through other members of
the class - both sizes scaled up by :data:`FAR`, and both divided by their common divisor - which keep the
comparison and must keep the outcome (a ``rows > 64`` failure read as ``x.shape[0] >= x.shape[1]`` does not).

The same principle for one size: a condition naming ``x.shape[0]`` claims the input's *other* dimensions do
not matter, so each of them is moved far down and up from the minimal pair's failing case *and* from its
passing case (probes.unnamed_requirements moves an input the condition does not name at all):
``x.shape[0] > 2`` standing for ``x.shape[0] * x.shape[1] > 16`` fails to predict ``x.shape[1]`` moved down to 1.

The rank is a property too: where the run has an input at several ranks and the condition names its
dimensions, a dimension of 1 is inserted in front, and right before the last, from both cases of the minimal
pair (the elements unchanged); a condition read from the front (``x.shape[1] * x.shape[-1]``) standing for one
read from the end (``x.shape[-2] * x.shape[-1]``) fails to predict one of them.

An integer attribute the condition does not name is moved too, from both cases, to the smallest and the largest
value the run has of it (or 4x where it has one): ``x.shape[1] > 4`` standing for ``x.shape[1] // attr.groups > 2``
fails to predict more groups.

A conjunction of thresholds is probed at its corner: every term at its failing boundary value at once, from the
minimal pair's failing case; ``x.shape[0] > 4 and x.align[1] > 2`` standing for ``x.shape[0] * x.shape[1] > 32``
passes at ``[5, 4, ...]``.

The requirements are ``Req``s (requirements.py), listed by probes.requirements.
"""

from __future__ import annotations

import math
from typing import Any

from ..cases.derived import dim_axis, parse_dim_axis
from ..cases.relations import product_sides, relation_sides
from ..schemas import Case, Finding
from .flips import dim_moves
from .hypotheses import Hypothesis, axis_sources
from .moves import moves
from .requirements import FAR, Req, far_sizes


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


def factor_needs(ctx, hyp: Hypothesis, lead: Finding, terms: list[Finding]) -> list[Req]:
    """Every requirement of this module (see its docstring)."""
    return (
        composite_needs(ctx, hyp, lead, terms)
        + relation_needs(ctx, hyp, lead, terms)
        + ratio_needs(ctx, hyp, lead, terms)
        + unnamed_dim_needs(ctx, hyp, lead)
        + rank_needs(ctx, hyp, lead)
        + corner_needs(ctx, hyp, lead)
        + attribute_needs(ctx, hyp, lead)
    )


def composite_needs(ctx, hyp: Hypothesis, lead: Finding, terms: list[Finding]) -> list[Req]:
    """For each composite quantity the condition names, from its minimal pair's failing and passing case: the
    quantity kept with all its factors in each of its dimensions in turn, predicted as the base.  Met by a
    recorded case on that side with the quantity at the base's value (or the boundary's) held in that
    dimension alone."""
    out: list[Req] = []
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
                need = Req(
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


def named_dims(hyp: Hypothesis, name: str, rank: int) -> set[int] | None:
    """The dimensions of input ``name`` (of that rank) the condition names one by one - a size, a product or
    ratio of sizes, a comparison of two, an alignment of one; None when it names a quantity of the whole shape
    (an element count, bytes, rows, strides)."""
    out: set[int] = set()
    for atom in hyp.atoms:
        if f"{name}.shape" not in axis_sources(atom.axis):
            continue
        sides = product_sides(atom.axis) or relation_sides(atom.axis)
        parts = [sides[0], sides[-1]] if sides else [atom.axis]
        for part in parts:
            dim = parse_dim_axis(part)
            fld = part.partition(".")[2]
            if dim is not None and dim[0] == name and -rank <= dim[1] < rank:
                out.add(dim[1] % rank)
            elif part == f"{name}.last_align":
                out.add(rank - 1)
            elif fld.startswith("align[") and part.startswith(name + "."):
                out.add(int(fld[len("align[") : -1]) % rank)
            elif part.startswith(name + ".") and not part.startswith("attr."):
                return None
    return out


def unnamed_dim_needs(ctx, hyp: Hypothesis, lead: Finding) -> list[Req]:
    """Each dimension the condition does not name, of an input whose other dimensions it names, moved far down
    and up from the minimal pair's failing case (it still fails) and passing case (it still passes); those of
    an input it does not name at all are probes.unnamed_requirements'."""
    if lead.minimal_pair is None:
        return []
    named = {s for a in hyp.atoms for s in axis_sources(a.axis)}
    out: list[Req] = []
    for side, base_id in (("fail", lead.minimal_pair.failing), ("pass", lead.minimal_pair.passing)):
        base = ctx.cases[base_id]
        for spec in base.inputs:
            if spec.none or not spec.shape or spec.tensors is not None:
                continue
            whole = f"{spec.name}.shape" in named
            own = named_dims(hyp, spec.name, len(spec.shape)) if whole else set()
            if own is None or not whole:  # an input it does not name at all: probes.unnamed_requirements
                continue
            for i in range(len(spec.shape)):
                if i not in own:
                    out += _far_dim(ctx, hyp, base, side, spec.name, i, named)
    return out


def _far_dim(ctx, hyp: Hypothesis, base: Case, side: str, name: str, i: int, named: set) -> list[Req]:
    shape = next(s.shape for s in base.inputs if s.name == name) or []
    axis = dim_axis(name, i, len(shape))
    tied = {t.partition(".shape[")[0] + ".shape" for t in ctx.ties.get(axis, [])}
    if tied & named:
        return []
    size, out = shape[i], []
    for kind, targets in far_sizes(size):
        need = Req(
            f"unnamed-{kind}",
            f"{axis} moved far {kind} (to {targets[0]}) from a {side}ing case: {hyp.text} names it not",
        )
        need.done = [
            c
            for c, st in sorted(ctx.status.items())
            if st == side and ctx.hax[c].get(axis) in targets and kept(ctx, hyp, base.id, c)
        ][:1]
        need.builds = [(base, v, x, side) for t in targets for v, x in moves(ctx, base, axis, t)]
        out.append(need)
    return out


def relation_needs(ctx, hyp: Hypothesis, lead: Finding, terms: list[Finding]) -> list[Req]:
    """Each comparison of two dimensions of one input, from its minimal pair's failing and passing case: both
    sizes scaled far up (x FAR) and down (over their common divisor): the comparison kept, predicted as the
    base."""
    out: list[Req] = []
    for i, atom in enumerate(hyp.atoms):
        sides = relation_sides(atom.axis)
        da, db = (parse_dim_axis(x) for x in sides) if sides else (None, None)
        if da is None or db is None or da[0] != db[0]:
            continue
        for side, base_id in _bases(ctx, hyp, lead, terms, i):
            base = ctx.cases[base_id]
            shape = _shape(base, da[0])
            if shape is None or not all(-len(shape) <= d[1] < len(shape) for d in (da, db)):
                continue
            ia, ib = da[1] % len(shape), db[1] % len(shape)
            a, b = shape[ia], shape[ib]
            g = math.gcd(a, b)
            for kind, (na, nb) in (("up", (a * FAR, b * FAR)), ("down", (a // g, b // g) if g > 1 else (a, b))):
                target = list(shape)
                target[ia], target[ib] = na, nb
                if target == shape:
                    continue
                need = Req(
                    f"class-{side}",
                    f"{atom.axis} kept with both sizes scaled {kind} ({side}ing side: {target}): another member "
                    f"of its class",
                )
                need.done = [
                    c for c in sorted(ctx.status) if ctx.status[c] == side and _shape(ctx.cases[c], da[0]) == target
                ][:1]
                need.builds = [(base, v, x, side) for v, x in concentrate_moves(ctx.ties, base, da[0], target)]
                if not need.builds and not need.done:
                    need.untestable = f"no case keeps {atom.axis} with {da[0]}'s sizes scaled {kind}"
                out.append(need)
    return out


def scaled_together(size: int, k: int) -> list[tuple[str, int, int]]:
    """(direction, size, attribute) of a size and an integer attribute scaled together: by 2, and by 1/2 where
    both are even (their ratio kept)."""
    return [("up", size * 2, k * 2)] + ([("down", size // 2, k // 2)] if size % 2 == k % 2 == 0 else [])


def with_attribute(var: dict, key: str, value: int) -> dict:
    """A variation that also sets attribute ``key`` to ``value``."""
    return dict(var, also=[*(var.get("also") or []), {"axis": "attribute", "name": key, "values": [value]}])


def ratio_needs(ctx, hyp: Hypothesis, lead: Finding, terms: list[Finding]) -> list[Req]:
    """Each ratio of a dimension and an integer attribute (``x.shape[1] // attr.groups``), from its minimal
    pair's failing and passing case: the size and the attribute scaled together by 2 and, where both are even,
    by 1/2 - the ratio kept, predicted as the base (``x.shape[1] // attr.groups > 8`` standing for
    ``x.shape[1] > 16`` under one group count fails to predict both doubled).  Met by a recorded case on that
    side with both at those values, the rest of the shape as the base's."""
    out: list[Req] = []
    for i, atom in enumerate(hyp.atoms):
        sides = product_sides(atom.axis)
        dim = parse_dim_axis(sides[0]) if sides is not None and sides[1] == "//" else None
        if sides is None or dim is None or not sides[2].startswith("attr."):
            continue
        key = sides[2][len("attr.") :]
        for side, base_id in _bases(ctx, hyp, lead, terms, i):
            base = ctx.cases[base_id]
            shape, k = _shape(base, dim[0]), base.attributes.get(key)
            if shape is None or not -len(shape) <= dim[1] < len(shape) or not isinstance(k, int) or k < 1:
                continue
            d, size = dim[1] % len(shape), shape[dim[1] % len(shape)]
            for kind, to, k_to in scaled_together(size, k):
                target = list(shape)
                target[d] = to
                need = Req(
                    f"class-{side}",
                    f"{atom.axis} kept with {sides[0]} and {sides[2]} scaled {kind} together ({side}ing side: "
                    f"{sides[0]} = {to}, {sides[2]} = {k_to}): another member of its class",
                )
                need.done = [
                    c
                    for c in sorted(ctx.status)
                    if ctx.status[c] == side
                    and _shape(ctx.cases[c], dim[0]) == target
                    and ctx.cases[c].attributes.get(key) == k_to
                ][:1]
                for var, value in moves(ctx, base, sides[0], to)[:1]:
                    need.builds.append((base, with_attribute(var, key, k_to), value, side))
                if not need.builds and not need.done:
                    need.untestable = f"no case scales {sides[0]} and {sides[2]} together"
                out.append(need)
    return out


def rank_needs(ctx, hyp: Hypothesis, lead: Finding) -> list[Req]:
    """A dimension of 1 inserted in front and before the last of each input whose dimensions (or a quantity of
    its whole shape: the rows) the condition names, where the run has that input at two ranks or more; predicted as the base (a move that changes what
    the condition reads is waived by probes.probe_cases: the rank is not separable from it)."""
    if lead.minimal_pair is None:
        return []
    out: list[Req] = []
    for side, base_id in (("fail", lead.minimal_pair.failing), ("pass", lead.minimal_pair.passing)):
        base = ctx.cases[base_id]
        for spec in base.inputs:
            if spec.none or not spec.shape or spec.tensors is not None or spec.strides is not None:
                continue
            ranks = {len(s) for c in ctx.status if (s := _shape(ctx.cases[c], spec.name)) is not None}
            if len(ranks) < 2 or named_dims(hyp, spec.name, len(spec.shape)) == set():  # None: the whole shape
                continue
            shape = list(spec.shape)
            for where, target in (("in front", [1, *shape]), ("before the last", [*shape[:-1], 1, shape[-1]])):
                need = Req(
                    "unnamed-rank",
                    f"{spec.name} at rank {len(target)}: a dimension of 1 {where} ({side}ing side: {target}); "
                    f"{hyp.text} names no rank",
                )
                need.done = [
                    c for c in sorted(ctx.status) if ctx.status[c] == side and _shape(ctx.cases[c], spec.name) == target
                ][:1]
                need.builds = [(base, {"axis": "shape", "input": spec.name}, target, side)]
                out.append(need)
    return out


def corner_needs(ctx, hyp: Hypothesis, lead: Finding) -> list[Req]:
    """A conjunction of two thresholds or more at its corner (see the module docstring): one case, predicted
    fail, built from the minimal pair's failing case with every term moved to its failing boundary value."""
    terms = [a for a in hyp.atoms if a.kind == "threshold" and a.fails_at is not None]
    if len(hyp.atoms) < 2 or len({a.axis for a in terms}) < 2 or lead.minimal_pair is None:  # a band: no corner
        return []
    base_id = lead.minimal_pair.failing
    base = ctx.cases[base_id]
    at = ", ".join(f"{a.axis} = {atom_value_text(a.fails_at)}" for a in terms)
    need = Req("corner", f"every term of {hyp.text} at its failing boundary at once ({at})")
    corner = [_smallest(a.axis, a.fails_at) for a in terms]
    need.done = [
        c for c in sorted(ctx.status) if ctx.status[c] == "fail" and all(ctx.hax[c].get(k) == v for k, v in corner)
    ][:1]
    parts = []
    for a, (axis, value) in zip(terms, corner, strict=True):
        if ctx.hax[base_id].get(axis) == value:
            continue
        options = moves(ctx, base, axis, value)
        if not options:
            if not need.done:
                need.untestable = f"no case sets {a.axis} to {atom_value_text(a.fails_at)} with the other terms"
            return [need]
        parts.append(options[0])
    if parts:
        need.builds = [(base, *_compose(parts), "fail")]
    return [need]


def _smallest(axis: str, value: Any) -> tuple[str, Any]:
    """The corner's axis and value: an alignment at its smallest member (the size equal to it: 4 for
    ``x.align[1] = 4``, where 12 has that alignment too), any other quantity as it is."""
    name, _, fld = axis.partition(".")
    if fld == "last_align":
        return f"{name}.shape[-1]", value
    if fld.startswith("align[") and fld.endswith("]"):
        return f"{name}.shape[{fld[len('align[') : -1]}]", value
    return axis, value


def atom_value_text(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _compose(parts: list[tuple[dict, Any]]) -> tuple[dict, Any]:
    """Several moves as one variation: the first, with the others (and what each moves with) as ``also``."""
    (v0, x0), rest = parts[0], parts[1:]
    also = list(v0.get("also") or [])
    for v, x in rest:
        also.append(dict({k: w for k, w in v.items() if k != "also"}, values=[x]))
        also += list(v.get("also") or [])
    return (dict(v0, also=also) if also else v0), x0


def attribute_needs(ctx, hyp: Hypothesis, lead: Finding) -> list[Req]:
    """Each integer attribute the condition does not name, from the minimal pair's failing and passing case,
    moved down to the smallest value the run has of it and up to the largest (4x where it has no larger one):
    the prediction holds there."""
    if lead.minimal_pair is None:
        return []
    named = {s for a in hyp.atoms for s in axis_sources(a.axis)} | {a.axis for a in hyp.atoms}
    ran = sorted(c for c, st in ctx.status.items() if st in ("fail", "pass"))
    out: list[Req] = []
    for side, base_id in (("fail", lead.minimal_pair.failing), ("pass", lead.minimal_pair.passing)):
        base = ctx.cases[base_id]
        for key, value in sorted(base.attributes.items()):
            axis = f"attr.{key}"
            if not isinstance(value, int) or isinstance(value, bool) or any(n.startswith(axis) for n in named):
                continue
            seen = sorted({v for c in ran if isinstance(v := ctx.cases[c].attributes.get(key), int)})
            low = min(seen, default=value)
            high = max(seen, default=value) if max(seen, default=value) > value else value * FAR
            for kind, target in (("down", low), ("up", high)):
                if target == value:
                    continue
                need = Req(
                    f"unnamed-{kind}",
                    f"{axis} moved {kind} to {target} from a {side}ing case: {hyp.text} does not name it",
                )
                need.done = [
                    c
                    for c in ran
                    if ctx.status[c] == side
                    and ctx.cases[c].attributes.get(key) == target
                    and kept(ctx, hyp, base_id, c)
                ][:1]
                need.builds = [(base, v, x, side) for v, x in moves(ctx, base, axis, target)]
                out.append(need)
    return out


def kept(ctx, hyp: Hypothesis, base_id: str, c: str) -> bool:
    """Does recorded case ``c`` keep every quantity the condition names at the base's value (so that it moved
    only what the condition does not name, from the boundary, not from anywhere on that side)?"""
    return all(ctx.hax[c].get(a.axis) == ctx.hax[base_id].get(a.axis) for a in hyp.atoms)
