"""What a statistic of the values against a dtype's limit must survive before it is exact (measured.py
names such statistics): its boundary pinned just either side of the limit by values built to land there, and -
where the condition names no dtype - the same values in each other floating dtype must fail too (a limit that
holds for one dtype's arithmetic only is refuted there)."""

from __future__ import annotations

from ..schemas import FLOAT_DTYPES, Finding
from ..wording import num
from .context import Context
from .hypotheses import Hypothesis
from .measured import LIMIT_STEP, limit_sides, predicted_quantities
from .moves import moves
from .requirements import Req, is_number, others_hold


def measured_requirements(ctx: Context, hyp: Hypothesis, lead: Finding) -> list[Req]:
    """The limit pinned from both sides, then the same values in other floating dtypes."""
    if lead.minimal_pair is None:
        return []
    out = []
    ran = [c for c, s in sorted(ctx.status.items()) if s in ("fail", "pass")]
    for atom in hyp.atoms:
        lim = limit_sides(atom.axis)
        if lim is None or atom.kind != "class":
            continue
        stat, bound = lim
        for side, base_id, lo, hi in (
            ("fail", lead.minimal_pair.failing, bound, bound * (1 + 2 * LIMIT_STEP)),
            ("pass", lead.minimal_pair.passing, bound * (1 - 2 * LIMIT_STEP), bound),
        ):
            req = Req(f"limit-{side}", f"{stat} just {'above' if side == 'fail' else 'below'} {num(bound)}")
            req.done = [
                c
                for c in ran
                if ctx.status[c] == side
                and is_number(v := ctx.hax[c].get(stat))
                and lo <= v <= hi
                and others_hold(hyp, atom, ctx.hax[c])
            ][:1]
            base = ctx.cases[base_id]
            req.builds = [(base, v, x, side) for v, x in moves(ctx, base, atom.axis, side == "fail")]
            out.append(req)
    if out:
        out += _dtype_requirements(ctx, hyp, lead, ran)
    return out


def _dtype_requirements(ctx: Context, hyp: Hypothesis, lead: Finding, ran: list[str]) -> list[Req]:
    """Naming no dtype, the condition claims the same values fail in every floating dtype."""
    named = {a.axis for a in hyp.atoms}
    if any(a == "dtype" or a.endswith(".dtype") for a in named) or lead.minimal_pair is None:
        return []
    stats = {sides[0] for a in named if (sides := limit_sides(a))}  # from a failing case whose values are known
    known = [c for c in ran if ctx.status[c] == "fail" and stats <= set(predicted_quantities(ctx.cases[c]))]
    base = ctx.cases[(known or [lead.minimal_pair.failing])[0]]
    single = len([i for i in base.inputs if not i.none]) == 1
    out = []
    for spec in [i for i in base.inputs if not i.none and i.dtype in FLOAT_DTYPES][:1]:
        for d in [d for d in FLOAT_DTYPES[:3] if d != spec.dtype]:
            axis = "dtype" if single else f"{spec.name}.dtype"
            req = Req("limit-dtype", f"the same values in {d}: {hyp.text} names no dtype")
            req.done = [
                c for c in ran if ctx.status[c] == "fail" and ctx.hax[c].get(axis) == d and hyp.holds(ctx.hax[c])
            ][:1]
            req.builds = [(base, v, x, "fail") for v, x in moves(ctx, base, axis, d)]
            out.append(req)
    return out
