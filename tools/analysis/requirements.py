"""The requirements a finding must meet before it is exact (references/behavior.md, "Exactness"), as data:
each :class:`Req` names one way the finding could be wrong, the recorded cases that already met it and the
cases that would (``builds``: base, variation, value, the outcome it predicts).  probes.py turns the open ones
into proposals; settlement.py decides what they mean.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ..cases.derived import dim_axis
from ..cases.relations import element_bytes
from ..schemas import Case, Finding
from ..wording import num
from .context import Context
from .hypotheses import Atom, Hypothesis, axis_sources, is_align
from .moves import moves
from .settlement import pinning_pair
from .space import dim_like
from .tags import case_body, read_tag

FAR = 4  # a far side is a factor 4 beyond the last value (a recorded one a factor 2 beyond counts)

SEEDS = (1_000_003, 2_000_029)

FRESH = 2

REPIN_AXES = ("mode", "dtype")  # and every input's dtype and contiguity


@dataclass
class Req:
    kind: str
    text: str
    done: list[str] = field(default_factory=list)
    builds: list[tuple[Case, dict, Any, str]] = field(default_factory=list)  # base, variation, value, predicted
    waived: str | None = None  # why nothing needs building: nothing lies there (settled)
    untestable: str | None = None  # why no case the variations can build meets it (stays open, blocks exact)


def is_number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _floor_of(axis: str) -> float:
    """The smallest value an ordered axis takes (a size 1, an offset or attribute anything)."""
    if axis.endswith(("numel", "bytes", ".rank")) or ".shape[" in axis or is_align(axis) or axis.endswith(".rows"):
        return 1
    return 0 if axis.endswith((".offset", ".magnitude")) else float("-inf")


def _far(atom: Atom, side: str) -> tuple[float | None, Any]:
    """(a target value on a far side, the test a recorded value must pass), target None: nothing lies there."""
    up = (atom.direction == "above") == (side == "fail")
    ref = atom.fails_at if side == "fail" else atom.passes_at
    if ref is None:  # no recorded value on that side to move away from
        return None, (lambda v: False)
    integer = isinstance(ref, int) or (isinstance(ref, float) and ref.is_integer())
    # an integer that is no alignment lands off every power of two (a far value 4x a multiple of 16 is one too,
    # and would hide a modulus); an alignment moves in powers of two
    odd = 3 if integer and not is_align(atom.axis) else 0
    if up:
        high = ref * FAR + odd if ref > 0 else ref + FAR
        return (int(high) if integer else high), (lambda v: v >= (ref * 2 if ref > 0 else ref + 2))
    low = ref / FAR if ref > 0 else ref - FAR
    low = (int(low) - (1 if odd and int(low) > 2 else 0)) if integer else low
    bound = ref / 2 if ref > 0 else ref - 2
    target: float | None = low
    if low < _floor_of(atom.axis) or low == ref:
        target = _floor_of(atom.axis) if _floor_of(atom.axis) < ref and _floor_of(atom.axis) <= bound else None
    return target, (lambda v: v <= bound)


def others_hold(hyp: Hypothesis, atom: Atom, hax: dict) -> bool:
    return all(b.holds(hax.get(b.axis)) for b in hyp.atoms if b is not atom)


def is_probe(case: Case) -> bool:
    """A case built to break a condition (the tool's ``falsify [..]`` or a stated condition's ``stated [..]``):
    its outcome was predicted before it ran."""
    return (case.description or "").startswith(PROBE_PREFIXES)


PROBE_PREFIXES = ("falsify [", "stated [")


def side_values(ctx: Context, hyp: Hypothesis, atom: Atom, side: str) -> set:
    """The values of ``atom``'s quantity on one side among the cases the condition was read from (not built to
    break it): the values a set of recorded values ("only these fail") would name as well."""
    return {
        v
        for c, s in ctx.status.items()
        if s == side
        and is_number(v := ctx.hax[c].get(atom.axis))
        and not is_probe(ctx.cases[c])
        and others_hold(hyp, atom, ctx.hax[c])
    }


def far_requirements(ctx: Context, hyp: Hypothesis, terms: list[Finding]) -> list[Req]:
    """Each threshold's two far sides, each met by a value of its own: a threshold claims every value on a side
    behaves alike, which the side's recorded values alone do not show (``x.shape[-1] < 49`` read from failing
    16 and 48 is also ``x.shape[-1] in {16, 48}``), so a far side is met by a case whose value no case the
    condition was read from has there (a probe's, or one of another lead)."""
    out = []
    for atom, term in zip(hyp.atoms, terms, strict=True):  # terms: term_findings of this hypothesis, one per atom
        if atom.kind != "threshold" or atom.passes_at is None or term.minimal_pair is None:
            continue
        for side, base_id in (("pass", term.minimal_pair.passing), ("fail", term.minimal_pair.failing)):
            target, test = _far(atom, side)
            last = atom.passes_at if side == "pass" else atom.fails_at
            req = Req(f"far-{side}", f"far {side}ing side of {atom.axis} (beyond {num(last)})")
            if side == "fail" and any(b is not atom and b.axis == atom.axis for b in hyp.atoms):
                req.waived = "a band: its failing side ends at its other end (probed between its failing values)"
                out.append(req)
                continue
            recorded = side_values(ctx, hyp, atom, side)
            req.done = [
                c
                for c, s in sorted(ctx.status.items())
                if s == side
                and is_number(v := ctx.hax[c].get(atom.axis))
                and test(v)
                and v not in recorded
                and others_hold(hyp, atom, ctx.hax[c])
            ]
            first = target
            target = _unrecorded(atom, target, recorded, (atom.direction == "above") == (side == "fail"))
            base = ctx.cases[base_id]
            req.builds = (
                [(base, v, x, side) for v, x in moves(ctx, base, atom.axis, target)] if target is not None else []
            )
            if not req.builds and target != first and any(test(v) for v in recorded):
                # every value beyond that a case can be built with was recorded on that side: nothing is left
                req.waived = f"every value beyond {num(last)} a case can have was recorded {side}ing"
            elif target is None:
                req.waived = f"nothing lies beyond {num(last)} that the recorded cases do not have"
            out.append(req)
    return out


MAX_STEPS = 64


def _unrecorded(atom: Atom, target: float | None, recorded: set, up: bool) -> float | None:
    """``target`` moved further out (an alignment by powers of two, an integer by one, a float by a quarter)
    until no recorded value of that side has it; None when the axis ends first."""
    floor = _floor_of(atom.axis)
    for _ in range(MAX_STEPS):
        if target is None or target not in recorded:
            return target
        if is_align(atom.axis):
            target = target * 2 if up else target // 2
        elif isinstance(target, int):
            target = target + 1 if up else target - 1
        else:
            target = target * 1.25 if up and target > 0 else target / 1.25 if target > 0 else target - 1
        target = None if target < floor else target
    return None


MAX_INSIDE = 1  # the widest gaps between a side's recorded values probed


def inside_requirements(ctx: Context, hyp: Hypothesis, terms: list[Finding]) -> list[Req]:
    """A threshold claims every value on its failing side fails, not only the values recorded failing: a value
    strictly between two consecutive recorded failing values (the :data:`MAX_INSIDE` widest gaps, from the
    boundary out) must fail too - ``x.shape[-1] < 49`` read from failing 16 and 48 is refuted at 32 where the
    cause is ``x.shape[-1] in {16, 48}``.  Met by any failing case inside the gap; built from a failing case at
    one of its ends, an odd middle first (off every power of two, as a far side is), then the middle."""
    out = []
    seen: set[str] = set()  # a band's two ends share one failing side
    for atom, term in zip(hyp.atoms, terms, strict=True):
        pair = term.minimal_pair
        if atom.kind != "threshold" or atom.passes_at is None or atom.fails_at is None or pair is None:
            continue
        if "~" in atom.axis or atom.axis in seen:
            continue
        seen.add(atom.axis)
        values: list[float] = sorted(side_values(ctx, hyp, atom, "fail") | {atom.fails_at})
        gaps = [(lo, hi) for lo, hi in zip(values, values[1:], strict=False) if _inside(atom.axis, lo, hi)]
        gaps.sort(key=lambda g: (-(g[1] / g[0] if g[0] > 0 else g[1] - g[0]), g))
        for lo, hi in sorted(gaps[:MAX_INSIDE]):
            req = Req("inside-fail", f"{atom.axis} between its failing values {num(lo)} and {num(hi)}")
            req.done = [
                c
                for c, s in sorted(ctx.status.items())
                if s == "fail"
                and is_number(v := ctx.hax[c].get(atom.axis))
                and lo < v < hi
                and others_hold(hyp, atom, ctx.hax[c])
            ][:1]
            ends = [c for c, s in sorted(ctx.status.items()) if s == "fail" and ctx.hax[c].get(atom.axis) in (lo, hi)]
            ends.sort(key=lambda c: (c != pair.failing, is_probe(ctx.cases[c]), c))
            for base_id in ends[:2]:
                base = ctx.cases[base_id]
                for target in _inside(atom.axis, lo, hi):
                    req.builds += [(base, v, x, "fail") for v, x in moves(ctx, base, atom.axis, target)]
            if not req.builds and not req.done:
                req.untestable = f"no failing case can be moved between {num(lo)} and {num(hi)}"
            out.append(req)
    return out


def _inside(axis: str, lo: float, hi: float) -> list:
    """Values strictly between two recorded values worth a probe ([] when nothing lies between): an alignment
    the power of two in the middle; an integer an odd middle, then the middle; a float the geometric middle."""
    if is_align(axis):
        k = int(lo).bit_length() - 1 if lo >= 1 else 0
        powers = [2**j for j in range(k + 1, max(k + 1, int(hi).bit_length())) if lo < 2**j < hi]
        return powers[len(powers) // 2 : len(powers) // 2 + 1]
    if float(lo).is_integer() and float(hi).is_integer():
        a, b = int(lo), int(hi)
        mid = (a + b) // 2
        return [v for v in dict.fromkeys((mid | 1, mid)) if a < v < b]
    if lo > 0:
        return [(lo * hi) ** 0.5]
    return [(lo + hi) / 2]


def pin_requirements(ctx: Context, hyp: Hypothesis) -> list[Req]:
    """Each threshold's boundary pinned by two cases that differ in that quantity alone (settlement.py (b)):
    when the recorded bracket's two sides differ in more (a rank, a layout, another dimension), the failing
    side moved to the passing value and the passing side to the failing one, nothing else changed."""

    out = []
    for atom in hyp.atoms:
        if atom.kind != "threshold" or atom.passes_at is None or "~" in atom.axis:
            continue
        sources = axis_sources(atom.axis)
        req = Req(
            "pin",
            f"{atom.axis} pinned at {num(atom.passes_at)} / {num(atom.fails_at)} by two cases that differ in it alone",
        )
        req.done = pinning_pair(ctx, atom.axis, sources, atom.passes_at, atom.fails_at)
        if req.done:
            out.append(req)
            continue
        ran = sorted(c for c, s in ctx.status.items() if s in ("fail", "pass"))
        for side, at, to in (("fail", atom.fails_at, atom.passes_at), ("pass", atom.passes_at, atom.fails_at)):
            for c in [c for c in ran if ctx.status[c] == side and ctx.hax[c].get(atom.axis) == at][:2]:
                predicted = "pass" if side == "fail" else "fail"
                req.builds += [(ctx.cases[c], v, x, predicted) for v, x in moves(ctx, ctx.cases[c], atom.axis, to)]
        out.append(req)
    return out


def far_sizes(size: int) -> list[tuple[str, list[int]]]:
    """("down", [1, a quarter, a half]) and ("up", [FAR times and one more]) of a size, each without the size
    itself or a size below 1; a direction with nothing left is left out."""
    out = []
    for kind, targets in (("down", [1, size // 4, size // 2]), ("up", [size * FAR + 1])):
        kept = [t for t in dict.fromkeys(targets) if 0 < t != size]
        if kept:
            out.append((kind, kept))
    return out


def unnamed_requirements(ctx: Context, hyp: Hypothesis, lead: Finding) -> list[Req]:
    """A condition that names no size of an input claims its sizes do not matter: from the minimal pair's
    failing case each dimension moved far down (to 1, the smallest call a shrink would reach, else a quarter)
    and far up (4x) must still fail - tried before exact, not after."""

    if lead.minimal_pair is None:
        return []
    named = {s for a in hyp.atoms for s in axis_sources(a.axis)}
    base = ctx.cases[lead.minimal_pair.failing]
    out = []
    for spec in base.inputs:
        if spec.none or not spec.shape or spec.tensors is not None or f"{spec.name}.shape" in named:
            continue
        for i, size in enumerate(spec.shape):
            axis = dim_axis(spec.name, i, len(spec.shape))
            tied = {t.partition(".shape[")[0] + ".shape" for t in ctx.ties.get(axis, [])}
            if tied & named:
                continue
            for kind, targets in far_sizes(size):
                req = Req(
                    f"unnamed-{kind}",
                    f"{axis} moved far {kind} (to {targets[0]}): {hyp.text} names no size of {spec.name}",
                )
                req.done = [  # a failing case at that size where the condition holds (a probe's, or planned)
                    c
                    for c, st in sorted(ctx.status.items())
                    if st == "fail" and ctx.hax[c].get(axis) in targets and hyp.holds(ctx.hax[c])
                ][:1]
                req.builds = [(base, v, x, "fail") for t in targets for v, x in moves(ctx, base, axis, t)]
                out.append(req)
    return out


def _repin_axes(ctx: Context, hyp: Hypothesis) -> list[str]:
    sources = set(hyp.sources())
    keys = sorted({k for c in ctx.hax.values() for k in c})
    axes = [k for k in keys if k in REPIN_AXES or k.endswith((".dtype", ".contiguity"))]
    out = []
    for k in axes:
        src = (
            "dtype"
            if k == "dtype" or k.endswith(".dtype")
            else k
            if k == "mode"
            else k.replace(".contiguity", ".strides")
        )
        if src in sources or (
            src == "dtype" and any(a.axis.endswith(".bytes") or "_bytes" in a.axis for a in hyp.atoms)
        ):
            continue
        out.append(k)
    return out


def _in_elements(base: Case, axis: str, value: Any) -> tuple[str, Any]:
    """A size in bytes as the element count of the base's dtype that makes it (the axis unchanged otherwise)."""
    if not axis.endswith(".bytes") or not is_number(value):
        return axis, value
    name = axis[: -len(".bytes")]
    spec = next((i for i in base.inputs if i.name == name and not i.none), None)
    width = (element_bytes(spec.dtype) or 1) if spec is not None else 1
    return (f"{name}.numel", int(value // width)) if value % width == 0 else (axis, value)


def repin_requirements(ctx: Context, hyp: Hypothesis, lead: Finding) -> list[Req]:
    if len(hyp.atoms) != 1 or hyp.atoms[0].kind != "threshold" or lead.minimal_pair is None:
        return []
    atom = hyp.atoms[0]
    out = []
    ran = [c for c, s in sorted(ctx.status.items()) if s in ("fail", "pass")]
    for b in _repin_axes(ctx, hyp):
        values = sorted({ctx.hax[c].get(b) for c in ran if ctx.hax[c].get(b) is not None}, key=str)
        if len(values) < 2:
            continue
        for u in values:
            for side, at, pair_id in (
                ("pass", atom.passes_at, lead.minimal_pair.passing),
                ("fail", atom.fails_at, lead.minimal_pair.failing),
            ):
                req = Req(f"repin-{side}", f"{atom.axis} = {num(at)} ({side}) again under {b} = {num(u)}")
                at_boundary = sorted(c for c in ran if ctx.status[c] == side and ctx.hax[c].get(atom.axis) == at)
                req.done = [c for c in at_boundary if ctx.hax[c].get(b) == u]
                # from a case at the boundary value (the minimal pair's own when it is there): only b moves
                for base_id in sorted(at_boundary, key=lambda c: (c != pair_id, c))[:2]:
                    base = ctx.cases[base_id]
                    req.builds += [(base, v, x, side) for v, x in moves(ctx, base, b, u)]
                if not req.builds and not req.done:  # else a case already at b = u, moved to the boundary value
                    for base_id in [c for c in ran if ctx.hax[c].get(b) == u][:2]:
                        base = ctx.cases[base_id]
                        axis, to = _in_elements(base, atom.axis, at)
                        req.builds += [(base, v, x, side) for v, x in moves(ctx, base, axis, to)]
                if not req.builds and not req.done:
                    req.untestable = f"no case at {atom.axis} = {num(at)} can be moved to {b} = {num(u)}"
                out.append(req)
    return out


MAX_MIRRORS = 4


def _planned_like(k: str) -> bool:
    return (
        k in ("mode", "dtype")
        or k.endswith((".dtype", ".offset"))
        or (k.startswith("attr.") and k.count(".") == 1)
        or dim_like(k)
    )


def mirror_requirements(ctx: Context, hyp: Hypothesis, lead: Finding) -> list[Req]:
    """The crossing's mirror: the minimal pair's passing case with each value
    of another axis that only failing cases have - the finding predicts pass
    (a dtype finding that is really a size in bytes of that dtype fails there)."""

    if len(hyp.atoms) != 1 or lead.minimal_pair is None:
        return []
    sources = set(hyp.sources())
    ran = sorted(c for c, s in ctx.status.items() if s in ("fail", "pass"))
    out: list[Req] = []
    cols: dict[str, tuple[set, set]] = {}  # axis -> (values in failing cases, values in passing cases)
    for c in ran:
        for k, v in ctx.hax[c].items():
            if _planned_like(k):
                cols.setdefault(k, (set(), set()))[ctx.status[c] == "pass"].add(v)
    for k in sorted(cols):
        tied = {t.partition(".shape[")[0] + ".shape" for t in ctx.ties.get(k, [])}  # moves a named input's dimension
        if (set(axis_sources(k)) | tied) & sources or len(out) >= MAX_MIRRORS:
            continue
        only = sorted(cols[k][0] - cols[k][1] - {None}, key=str)
        if not only:
            continue
        v = only[0]
        req = Req("mirror", f"{k} = {num(v)} (so far only in failing cases) where {hyp.text} predicts pass")
        req.done = [c for c in ran if ctx.hax[c].get(k) == v and not hyp.holds(ctx.hax[c])]
        # from the minimal pair's passing case, else another passing case (a tied dimension moves a named one:
        # a smaller case may still predict pass there)
        bases = [lead.minimal_pair.passing] + [c for c in ran if ctx.status[c] == "pass"][:MAX_MIRRORS]
        for b in dict.fromkeys(bases):
            req.builds += [(ctx.cases[b], var, x, "pass") for var, x in moves(ctx, ctx.cases[b], k, v)]
        out.append(req)
    return out


def cross_requirements(ctx: Context, hyp: Hypothesis, terms: list[Finding]) -> list[Req]:
    """A conjunction's threshold re-pinned where its other term does not hold:
    under each other value of that term's axis the run has, the threshold's far
    failing value must pass (a boundary that moves with the other axis - an
    alignment in elements that is one in bytes - fails there)."""
    if len(hyp.atoms) != 2:
        return []
    out = []
    ran = [c for c, s in sorted(ctx.status.items()) if s in ("fail", "pass")]
    for atom, term in zip(hyp.atoms, terms, strict=True):  # terms: term_findings of this hypothesis, one per atom
        other = next(b for b in hyp.atoms if b is not atom)
        if atom.kind != "threshold" or other.kind == "threshold" or term.minimal_pair is None:
            continue
        target, test = _far(atom, "fail")
        if target is None:
            continue
        for u in sorted({ctx.hax[c].get(other.axis) for c in ran} - {None}, key=str):
            if other.holds(u):
                continue
            req = Req(
                "repin-other",
                f"{atom.axis} at {num(target)} (its far failing side) under "
                f"{other.axis} = {num(u)}, where the conjunction predicts pass",
            )
            req.done = [
                c
                for c in ran
                if ctx.hax[c].get(other.axis) == u
                and is_number(ctx.hax[c].get(atom.axis))
                and test(ctx.hax[c][atom.axis])
            ]
            base = ctx.cases[term.minimal_pair.failing]
            for var, value in moves(ctx, base, other.axis, u)[:1]:
                for var2, value2 in moves(ctx, base, atom.axis, target)[:2]:
                    req.builds.append((base, dict(var, also=[dict(var2, values=[value2])]), value, "pass"))
            out.append(req)
    return out


def seed_requirements(ctx: Context, lead: Finding) -> list[Req]:
    if lead.minimal_pair is None:
        return []
    out = []
    for side, base_id, n in (("fail", lead.minimal_pair.failing, len(SEEDS)), ("pass", lead.minimal_pair.passing, 1)):
        base = ctx.cases[base_id]
        body, dist = case_body(base), ctx.dist[base_id]  # the same call has the same planned axes: compared first
        req = Req(f"seed-{side}", f"{base_id} with {n} other seed(s)")
        req.done = [
            c
            for c, s in sorted(ctx.status.items())
            if c != base_id and s in ("fail", "pass") and ctx.dist.get(c) == dist and case_body(ctx.cases[c]) == body
        ][:n]
        if len(req.done) < n:
            req.builds = [(base, {"axis": "seed"}, s, side) for s in SEEDS[:n]]
        out.append(req)
    return out


def fresh_requirement(ctx: Context, hyp: Hypothesis) -> Req:
    """FRESH cases drawn across the run's values: a ran case with one or two of
    its dimensions, its mode, dtype or attributes set to values other cases have
    (sizes halved and doubled too), and another seed."""
    req = Req("fresh", f"{FRESH} fresh cases across the run's values")
    req.done = [
        c
        for c, s in sorted(ctx.status.items())
        if s in ("fail", "pass") and "fresh" in (read_tag(ctx.cases[c]) or ("",))[0].split(",")
    ][:FRESH]
    ran = sorted(c for c, s in sorted(ctx.status.items()) if s in ("fail", "pass"))
    rng = random.Random(hashlib.sha256(json.dumps(ran).encode()).hexdigest())
    if len(req.done) >= FRESH:
        return req
    values: dict[str, set] = {}
    for c in ran:
        for k, v in ctx.hax[c].items():
            if v is not None and (
                k in ("mode", "dtype")
                or (k.startswith("attr.") and k.count(".") == 1)
                or k.endswith(".dtype")
                or dim_like(k)
            ):
                values.setdefault(k, set()).add(v)
    axes = sorted(values)
    for _ in range(8 * FRESH):
        base = ctx.cases[rng.choice(ran)]
        picks = rng.sample(axes, min(2, len(axes)))
        changes = []
        for k in picks:
            seen = sorted(values[k], key=str)
            if ".shape[" in k:
                seen += [v * 2 for v in seen if is_number(v)] + [v // 2 for v in seen if is_number(v) and v > 1]
            if seen:
                changes.append((k, rng.choice(seen)))
        req.builds.append((base, {"fresh": changes, "seed": rng.randrange(2**31)}, None, ""))
    return req


def cause_requirements(ctx: Context, hyp: Hypothesis, lead: Finding, others: list) -> list[Req]:
    """Several causes: this cause's failing case given each other cause's condition too.  Read as
    separate causes, the cases say "either fails", so both together fail; one property that each cause
    only restates part of (the sum of two sizes odd, read as "the first odd" or "the second odd") passes
    there, and the probe refutes both."""
    if lead.minimal_pair is None:
        return []
    out = []
    for atom, cases in others:
        target = next((ctx.hax[c].get(atom.axis) for c in cases if ctx.hax.get(c, {}).get(atom.axis) is not None), None)
        req = Req("causes", f"{hyp.text} together with the other cause {atom.text}: both hold, it predicts fail")
        req.done = [c for c in sorted(ctx.hax) if hyp.holds(ctx.hax[c]) and atom.holds(ctx.hax[c].get(atom.axis))]
        if target is None:
            req.untestable = f"no recorded value of {atom.axis} to move to"
        else:
            base = ctx.cases[lead.minimal_pair.failing]
            req.builds = [(base, v, x, "fail") for v, x in moves(ctx, base, atom.axis, target)]
            if not req.builds and not req.done:
                req.untestable = f"no case of {hyp.text} can be moved to {atom.text}"
        out.append(req)
    return out


def needed(r: Req) -> int:
    return len(SEEDS) if r.kind == "seed-fail" else FRESH if r.kind in ("fresh", "pin") else 1


def is_open(r: Req) -> bool:
    return r.waived is None and r.untestable is None and len(r.done) < needed(r)


def untestable(r: Req) -> bool:
    """A requirement no buildable case meets: open, never held."""
    return r.waived is None and r.untestable is not None and len(r.done) < needed(r)
