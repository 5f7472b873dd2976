"""Falsify before exact (references/behavior.md, "Exactness"): the cases a
finding predicts that are built to break it, and its validation.

A finding that passes the closed-world test of settlement.py (no competitor,
boundary pinned, crossed) is still only the nearest member of the enumerated
space.  Before it is called exact, each *requirement* below must be met by a
recorded case whose outcome it predicted:

- **far sides** of each threshold: a value well beyond the last passing one
  and well beyond the last failing one (a factor :data:`FAR` away; "nothing
  lies beyond" where the axis ends, e.g. a size of 1);
- **re-pin under every other value**: for a one-term threshold, its passing
  and failing boundary values again under each value the run has of the mode,
  the dtypes and the inputs' contiguity (a boundary that moves refutes it);
- **another source**: the same derived feature produced another way (a values
  class from another generator; an element count, bytes or an alignment from
  another shape);
- **the seed**: the minimal pair's failing case with :data:`SEEDS` and its
  passing case with one of them (a verdict that flips with the seed makes the
  finding a *necessary* condition only: the values decide too);
- **fresh cases**: :data:`FRESH` cases drawn across the run's values (sizes
  between and beyond), each with a prediction.

Probes are chosen for what they can refute (each requirement names the way
the finding could be wrong), not enumerated: at most one case per requirement
and side.  Probe cases are ordinary planned cases whose description reads
``falsify [KIND]: PREDICATE predicts OUTCOME``, so a later analysis (which
keeps no state) knows what each one was built to break: a probe whose outcome
differs is a :class:`Counterexample`, kept even when the lead it refuted is
gone.  Every recorded case is predicted (an axis a case lacks reads as "the
condition does not hold" and is listed as such in ``not_applicable``).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from ..cases.axes import axes_difference
from ..cases.derived import dim_axis
from ..cases.ids import case_content
from ..cases.relations import (
    element_bytes,
    fill_products,
    open_quantities,
    product_quantities,
    product_sides,
    product_value,
)
from ..schemas import FLOAT_DTYPES, Case, Counterexample, Finding, NextCase, Validation
from .factor_probes import factor_needs
from .flips import dim_moves
from .hypotheses import (
    KIND_RANK,
    MAX_HYPOTHESES,
    Atom,
    Hypothesis,
    Space,
    axis_sources,
    covering_atoms,
    derivation_rank,
    enumerate_hypotheses,
    is_align,
    rank_key,
)
from .measured import LIMIT_STEP, is_measured, limit_sides, predicted_quantities
from .settlement import UNTESTABLE, pinning_pair, settle_probes

TAG = "falsify"
FAR = 4  # a far side is a factor 4 beyond the last value (a recorded one a factor 2 beyond counts)
SEEDS = (1_000_003, 2_000_029)
FRESH = 2
REPIN_AXES = ("mode", "dtype")  # and every input's dtype and contiguity
_ALT_VALUES = (
    {"kind": "uniform", "low": 0.25, "high": 2.0},
    {"kind": "uniform", "low": -2.0, "high": -0.25},
    {"kind": "uniform", "low": -2.0, "high": 2.0},
    {"kind": "normal", "mean": 3.0, "std": 0.5},
    {"kind": "arange"},
    {"kind": "ones"},
    {"kind": "full", "fill": -1.5},
    {"kind": "zeros"},
    {"kind": "randint", "low": 0, "high": 4},
)


def _scaled_values(m: float) -> tuple[dict, ...]:
    """Other generators at the same magnitude (a generator's parameter stands for the values it draws: other
    generators and other draws at that parameter must agree)."""
    return (
        {"kind": "uniform", "low": -m, "high": m},
        {"kind": "uniform", "low": m / 2, "high": m},
        {"kind": "full", "fill": -m},
        {"kind": "normal", "mean": m / 2, "std": m / 2},
    )


@dataclass
class Req:
    kind: str
    text: str
    done: list[str] = field(default_factory=list)
    builds: list[tuple[Case, dict, Any, str]] = field(default_factory=list)  # base, variation, value, predicted
    waived: str | None = None  # why nothing needs building: nothing lies there (settled)
    untestable: str | None = None  # why no case the variations can build meets it (stays open, blocks exact)


# --------------------------------------------------------------------------
# Tags and seeds
# --------------------------------------------------------------------------


def tag(kind: str, predicate: str, predicted: str) -> str:
    return f"{TAG} [{kind}]: {predicate} predicts {predicted}"


def read_tag(case: Case) -> tuple[str, str, str] | None:
    """(kind, predicate, predicted) of a probe case, None for another case."""
    d = case.description or ""
    if not d.startswith(TAG + " [") or " predicts " not in d:
        return None
    head, _, predicted = d.rpartition(" predicts ")
    kind, _, predicate = head[len(TAG) + 2 :].partition("]: ")
    return (kind, predicate, predicted) if predicted in ("fail", "pass") else None


def untagged(doc: dict) -> dict:
    """A case document without a probe's tag (a next case built from a probe is not a probe)."""
    if (doc.get("description") or "").startswith(TAG + " ["):
        doc = dict(doc, description=None)
    return doc


def _body(case: Case) -> str:
    doc = case.model_dump(mode="json")
    doc.pop("seed", None)
    return case_content(doc)


def read_absent_dims(hax: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """Every recorded case predicts: ``x.shape[i]`` (counted from the front)
    is the last dimension of a case of rank i+1, where it is named
    ``x.shape[-1]``.  Filled in place where another
    case has the axis; returns (case, axis) filled.  (Alignments are left: a
    rank-i+1 case's last alignment moves with its last dimension.)"""
    keys = {k for k in set().union(*hax.values()) if _dim_like(k) and not k.endswith("[-1]")}
    filled = []
    for k in sorted(keys):
        name, _, idx = k[:-1].partition(".shape[")
        last = f"{name}.shape[-1]"
        for cid, a in hax.items():
            if k not in a and a.get(f"{name}.rank") == int(idx) + 1 and last in a:
                a[k] = a[last]
                filled.append((cid, k))
    return filled


def read_case(hax: dict[str, Any], case: Case, axes: set[str]) -> dict[str, Any]:
    """One new case's axes as the recorded ones read: the open-space quantities
    and each ``x.shape[i]`` of ``axes`` that is its last dimension."""
    out = {**hax, **open_quantities(case)}
    if any(product_sides(k) is not None for k in axes):
        out.update(product_quantities(case))
        out.update({k: v for k in axes if k not in out and (v := product_value(case, k)) is not None})
    if any(is_measured(k) for k in axes):  # the statistics its value specs decide (the rest: once it ran)
        out.update(predicted_quantities(case))
    for k in axes:
        if k not in out and _dim_like(k) and not k.endswith("[-1]"):
            name, _, idx = k[:-1].partition(".shape[")
            if out.get(f"{name}.rank") == int(idx) + 1:
                out[k] = out.get(f"{name}.shape[-1]")
    return out


def widen(
    space,
    hax: dict,
    cases: dict[str, Case],
    failing: list[str],
    passing: list[str],
    aliases: dict,
    measured: dict[str, dict] | None = None,
):
    """The open space: when no atom of the first space separates the cases,
    its quantities (relations.open_quantities) too; their atoms compete with
    the first space's conjunctions.  Then, when none of those separates either, the products and ratios
    (relations.product_quantities) and the statistics of the values actually built (``measured``, by case:
    measured.measured_quantities): tried before a conjunction.  ``x.rows`` that equals a product on every
    case is named as the product from the start.  Returns (space, the axes it was built on)."""

    if space.hypotheses and not space.conjunctions:
        return space, hax
    prods = {c: product_quantities(cases[c]) for c in hax}
    fill_products(cases, prods)  # a product named at one rank is read at every rank
    # the values actually built join only where the planned space says nothing (a random draw's statistic
    # separates few cases by chance: it never competes with a planned axis)
    drawn = (measured or {}) if not space.hypotheses else {}
    prods = {c: {**p, **drawn.get(c, {})} for c, p in prods.items()}
    wide = {c: {**a, **open_quantities(cases[c])} for c, a in hax.items()}
    renamed = restated_products({c: {**a, **prods[c]} for c, a in wide.items()})
    if renamed:  # only the products the rows restate join the open space
        wide = {c: {**a, **{p: prods[c][p] for p in renamed.values()}} for c, a in wide.items()}
    alt = enumerate_hypotheses(wide, failing, passing, {**aliases, **renamed})
    if not alt.hypotheses or alt.conjunctions:
        wide = {c: {**a, **prods[c]} for c, a in wide.items()}
        alt = enumerate_hypotheses(wide, failing, passing, {**aliases, **renamed})
        if not alt.hypotheses or alt.conjunctions:
            # nothing else separates: the conjunctions with a statistic of the values actually built against a
            # dtype's limit (``dtype == float16 and x.values.sumsq[-1] > float16.max``; a cut through random
            # draws separates few cases by chance, a limit does not), else the first space
            stats = [h for h in alt.hypotheses if any(limit_sides(a.axis) for a in h.atoms)]
            if space.hypotheses or not stats:
                return space, hax
            return Space(stats, alt.axes, len(stats), True, alt.capped), wide
    both = sorted(alt.hypotheses + space.hypotheses, key=rank_key)
    return Space(
        both[:MAX_HYPOTHESES],
        alt.axes,
        alt.consistent + space.consistent,
        space.conjunctions,
        alt.capped or space.capped or len(both) > MAX_HYPOTHESES,
    ), wide


def _dim_like(k: str) -> bool:
    """One dimension of an input (``x.shape[1]``): no relation, product or ratio of it."""
    return ".shape[" in k and "~" not in k and product_sides(k) is None


def restated_products(wide: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``x.rows`` -> the product it equals on every case (the leading two of a rank-3 input): named as
    the product, the rows kept among its equivalents."""
    out: dict[str, str] = {}
    cases = list(wide.values())
    prods = sorted(k for k in set().union(*cases) if (product_sides(k) or ("", "", ""))[1] == "*")
    for p in prods:
        rows = p.partition(".")[0] + ".rows"
        if rows not in out and all(a.get(p) is not None and a.get(p) == a.get(rows) for a in cases):
            out[rows] = p
    return out


# --------------------------------------------------------------------------
# Requirements
# --------------------------------------------------------------------------


def _num(v: Any) -> bool:
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


def _others_hold(hyp: Hypothesis, atom: Atom, hax: dict) -> bool:
    return all(b.holds(hax.get(b.axis)) for b in hyp.atoms if b is not atom)


def far_requirements(ctx, hyp: Hypothesis, terms: list[Finding], moves) -> list[Req]:
    out = []
    for atom, term in zip(hyp.atoms, terms, strict=True):  # terms: term_findings of this hypothesis, one per atom
        if atom.kind != "threshold" or atom.passes_at is None or term.minimal_pair is None:
            continue
        for side, base_id in (("pass", term.minimal_pair.passing), ("fail", term.minimal_pair.failing)):
            target, test = _far(atom, side)
            last = atom.passes_at if side == "pass" else atom.fails_at
            req = Req(f"far-{side}", f"far {side}ing side of {atom.axis} (beyond {_fmt(last)})")
            req.done = [
                c
                for c, s in sorted(ctx.status.items())
                if s == side
                and _num(ctx.hax[c].get(atom.axis))
                and test(ctx.hax[c][atom.axis])
                and _others_hold(hyp, atom, ctx.hax[c])
            ]
            if target is None:
                req.waived = f"nothing lies beyond {_fmt(last)}"
            else:
                base = ctx.cases[base_id]
                req.builds = [(base, v, x, side) for v, x in moves(ctx, base, atom.axis, target)]
            out.append(req)
    return out


def pin_requirements(ctx, hyp: Hypothesis, moves) -> list[Req]:
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
            f"{atom.axis} pinned at {_fmt(atom.passes_at)} / {_fmt(atom.fails_at)} by two cases that "
            f"differ in it alone",
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


def unnamed_requirements(ctx, hyp: Hypothesis, lead: Finding, moves) -> list[Req]:
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
            for kind, targets in (("down", [1, size // 4, size // 2]), ("up", [size * FAR + 1])):
                targets = [t for t in dict.fromkeys(targets) if 0 < t != size]
                if not targets:
                    continue
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


def _repin_axes(ctx, hyp: Hypothesis) -> list[str]:
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
    if not axis.endswith(".bytes") or not _num(value):
        return axis, value
    name = axis[: -len(".bytes")]
    spec = next((i for i in base.inputs if i.name == name and not i.none), None)
    width = (element_bytes(spec.dtype) or 1) if spec is not None else 1
    return (f"{name}.numel", int(value // width)) if value % width == 0 else (axis, value)


def repin_requirements(ctx, hyp: Hypothesis, lead: Finding, moves) -> list[Req]:
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
                req = Req(f"repin-{side}", f"{atom.axis} = {_fmt(at)} ({side}) again under {b} = {u}")
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
                    req.untestable = f"no case at {atom.axis} = {_fmt(at)} can be moved to {b} = {u}"
                out.append(req)
    return out


MAX_MIRRORS = 4


def _planned_like(k: str) -> bool:
    return (
        k in ("mode", "dtype")
        or k.endswith((".dtype", ".offset"))
        or (k.startswith("attr.") and k.count(".") == 1)
        or _dim_like(k)
    )


def mirror_requirements(ctx, hyp: Hypothesis, lead: Finding, moves) -> list[Req]:
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
        req = Req("mirror", f"{k} = {_fmt(v)} (so far only in failing cases) where {hyp.text} predicts pass")
        req.done = [c for c in ran if ctx.hax[c].get(k) == v and not hyp.holds(ctx.hax[c])]
        # from the minimal pair's passing case, else another passing case (a tied dimension moves a named one:
        # a smaller case may still predict pass there)
        bases = [lead.minimal_pair.passing] + [c for c in ran if ctx.status[c] == "pass"][:MAX_MIRRORS]
        for b in dict.fromkeys(bases):
            req.builds += [(ctx.cases[b], var, x, "pass") for var, x in moves(ctx, ctx.cases[b], k, v)]
        out.append(req)
    return out


def _fmt(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _values_of(case: Case, name: str) -> str | None:
    spec = next((i for i in case.inputs if i.name == name), None)
    if spec is None or spec.none or spec.tensors is not None:
        return None
    return json.dumps(spec.values.model_dump(mode="json", exclude_none=True), sort_keys=True)


def source_requirements(ctx, hyp: Hypothesis, terms: list[Finding]) -> list[Req]:
    """The same feature produced another way: a values class from another
    generator, a count, size or alignment from another shape (for each term,
    the others holding)."""
    out = []
    for atom, term in zip(hyp.atoms, terms, strict=True):  # terms: term_findings of this hypothesis, one per atom
        req = _source(ctx, hyp, atom, term)
        if req is not None:
            out.append(req)
    return out


def _source(ctx, hyp: Hypothesis, atom: Atom, term: Finding) -> Req | None:
    axis = atom.axis
    name, _, fld = axis.partition(".")
    if term.minimal_pair is None or "~" in axis:
        return None
    fail_id = term.minimal_pair.failing
    base = ctx.cases[fail_id]
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or spec.none or spec.tensors is not None or spec.values.kind == "captured":
        return None
    want = ctx.hax[fail_id].get(axis)
    failing = [c for c, s in sorted(ctx.status.items()) if s == "fail" and ctx.hax[c].get(axis) == want]
    if fld in ("sign", "all_zero", "has_zero", "zero_rows", "constant", "magnitude"):
        mine = _values_of(base, name)
        req = Req("source", f"{axis} = {_fmt(want)} from another value generator than {spec.values.kind}")
        req.done = [c for c in failing if _values_of(ctx.cases[c], name) != mine]
        specials = [s.model_dump(mode="json", exclude_none=True) for s in spec.values.specials]
        pool = _scaled_values(want) if fld == "magnitude" and _num(want) and want > 0 else _ALT_VALUES
        alts = [dict(v, specials=specials) if specials else v for v in pool]
        req.builds = [
            (base, {"axis": "values", "input": name}, v, "fail") for v in alts if json.dumps(v, sort_keys=True) != mine
        ]
        return req
    if fld in ("numel", "bytes", "rows", "last_align") or fld.startswith("align[") or fld.startswith("stride["):
        req = Req("source", f"{axis} = {_fmt(want)} from another shape than {spec.shape}")
        req.done = [c for c in failing if next(i for i in ctx.cases[c].inputs if i.name == name).shape != spec.shape]
        req.builds = [(base, var, value, "fail") for var, value in reshapes(ctx, base, name, axis)]
        if not req.builds and not req.done:
            req.untestable = f"no other shape of {name} keeps {axis} = {_fmt(want)}"
        return req
    return None


def cross_requirements(ctx, hyp: Hypothesis, terms: list[Finding], moves) -> list[Req]:
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
                f"{atom.axis} at {_fmt(target)} (its far failing side) under "
                f"{other.axis} = {u}, where the conjunction predicts pass",
            )
            req.done = [
                c
                for c in ran
                if ctx.hax[c].get(other.axis) == u and _num(ctx.hax[c].get(atom.axis)) and test(ctx.hax[c][atom.axis])
            ]
            base = ctx.cases[term.minimal_pair.failing]
            for var, value in moves(ctx, base, other.axis, u)[:1]:
                for var2, value2 in moves(ctx, base, atom.axis, target)[:2]:
                    req.builds.append((base, dict(var, also=[dict(var2, values=[value2])]), value, "pass"))
            out.append(req)
    return out


def reshapes(ctx, base: Case, name: str, axis: str) -> list[tuple[dict, Any]]:
    """Two dimensions changed at once (a factor 2 moved from one to another), or
    the last dimension grown by twice its alignment (the same alignment)."""

    spec = next(i for i in base.inputs if i.name == name)
    shape: list[int] = spec.shape or []  # a None or tuple input has no dimension to move
    out: list[tuple[dict, Any]] = []
    if axis.endswith("last_align") and shape and shape[-1] > 0:
        a = shape[-1] & -shape[-1]
        out += [(v, shape[-1] + 2 * a) for v in dim_moves(ctx.ties, base, name, len(shape) - 1)]
        return out
    keep_last = axis.endswith((".rows",)) or ".stride[" in axis
    for i in range(len(shape)):
        for j in range(len(shape)):
            if i == j or shape[i] % 2 or (keep_last and len(shape) - 1 in (i, j)):
                continue
            for vi in dim_moves(ctx.ties, base, name, i):
                for vj in dim_moves(ctx.ties, base, name, j):
                    if set(vi["dims"]) & set(vj["dims"]):
                        continue
                    out.append((dict(vi, also=[dict(vj, values=[shape[j] * 2])]), shape[i] // 2))
    if not keep_last:  # no factor 2 to move: two dimensions swapped (the same count, another shape)
        for i in range(len(shape)):
            for j in range(i + 1, len(shape)):
                if shape[i] == shape[j]:
                    continue
                for vi in dim_moves(ctx.ties, base, name, i):
                    for vj in dim_moves(ctx.ties, base, name, j):
                        if not set(vi["dims"]) & set(vj["dims"]):
                            out.append((dict(vi, also=[dict(vj, values=[shape[i]])]), shape[j]))
    return out[:4]


def seed_requirements(ctx, lead: Finding) -> list[Req]:
    if lead.minimal_pair is None:
        return []
    out = []
    for side, base_id, n in (("fail", lead.minimal_pair.failing, len(SEEDS)), ("pass", lead.minimal_pair.passing, 1)):
        base = ctx.cases[base_id]
        body, dist = _body(base), ctx.dist[base_id]  # the same call has the same planned axes: compared first
        req = Req(f"seed-{side}", f"{base_id} with {n} other seed(s)")
        req.done = [
            c
            for c, s in sorted(ctx.status.items())
            if c != base_id and s in ("fail", "pass") and ctx.dist.get(c) == dist and _body(ctx.cases[c]) == body
        ][:n]
        if len(req.done) < n:
            req.builds = [(base, {"axis": "seed"}, s, side) for s in SEEDS[:n]]
        out.append(req)
    return out


def fresh_requirement(ctx, hyp: Hypothesis) -> Req:
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
                or _dim_like(k)
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
                seen += [v * 2 for v in seen if _num(v)] + [v // 2 for v in seen if _num(v) and v > 1]
            if seen:
                changes.append((k, rng.choice(seen)))
        req.builds.append((base, {"fresh": changes, "seed": rng.randrange(2**31)}, None, ""))
    return req


def cause_requirements(ctx, hyp: Hypothesis, lead: Finding, others: list, moves) -> list[Req]:
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


def measured_requirements(ctx, hyp: Hypothesis, lead: Finding, moves) -> list[Req]:
    """A statistic of the values against a dtype's limit (measured.py): its boundary pinned just either side
    of the limit by values built to land there, and - naming no dtype - the same values in each other floating
    dtype must fail too (a limit that holds for one dtype's arithmetic only is refuted there)."""
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
            req = Req(f"limit-{side}", f"{stat} just {'above' if side == 'fail' else 'below'} {_fmt(bound)}")
            req.done = [
                c
                for c in ran
                if ctx.status[c] == side
                and _num(ctx.hax[c].get(stat))
                and lo <= ctx.hax[c][stat] <= hi
                and _others_hold(hyp, atom, ctx.hax[c])
            ][:1]
            base = ctx.cases[base_id]
            req.builds = [(base, v, x, side) for v, x in moves(ctx, base, atom.axis, side == "fail")]
            out.append(req)
    named = {a.axis for a in hyp.atoms}
    if out and not any(a == "dtype" or a.endswith(".dtype") for a in named):
        stats = {sides[0] for a in named if (sides := limit_sides(a))}  # from a failing case whose values are known
        known = [c for c in ran if ctx.status[c] == "fail" and stats <= set(predicted_quantities(ctx.cases[c]))]
        base = ctx.cases[(known or [lead.minimal_pair.failing])[0]]
        single = len([i for i in base.inputs if not i.none]) == 1
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


def requirements(
    ctx, hyp: Hypothesis, lead: Finding, terms: list[Finding], moves, others: list | None = None
) -> list[Req]:
    return (
        pin_requirements(ctx, hyp, moves)
        + unnamed_requirements(ctx, hyp, lead, moves)
        + far_requirements(ctx, hyp, terms, moves)
        + repin_requirements(ctx, hyp, lead, moves)
        + cross_requirements(ctx, hyp, terms, moves)
        + mirror_requirements(ctx, hyp, lead, moves)
        + source_requirements(ctx, hyp, terms)
        + [Req(**vars(n)) for n in factor_needs(ctx, hyp, lead, terms, moves)]  # a composite's factors moved
        + cause_requirements(ctx, hyp, lead, others or [], moves)
        + measured_requirements(ctx, hyp, lead, moves)
        + seed_requirements(ctx, lead)
        + [fresh_requirement(ctx, hyp)]
    )


def _need(r: Req) -> int:
    return len(SEEDS) if r.kind == "seed-fail" else FRESH if r.kind in ("fresh", "pin") else 1


def is_open(r: Req) -> bool:
    return r.waived is None and r.untestable is None and len(r.done) < _need(r)


def untestable(r: Req) -> bool:
    """A requirement no buildable case meets: open, never held."""
    return r.waived is None and r.untestable is not None and len(r.done) < _need(r)


# --------------------------------------------------------------------------
# Validation and counterexamples
# --------------------------------------------------------------------------


def counterexamples(cases: dict[str, Case], status: dict[str, str]) -> list[Counterexample]:
    out = []
    for cid in sorted(status):
        t = read_tag(cases[cid])
        if t is None or status[cid] not in ("fail", "pass") or t[2] == status[cid]:
            continue
        out.append(Counterexample(case_id=cid, refutes=t[1], predicted=t[2], observed=status[cid], probe=t[0]))
    return out


def not_applicable(ctx, hyp: Hypothesis, filled: list[tuple[str, str]]) -> list[str]:
    out = []
    ran = [c for c, s in sorted(ctx.status.items()) if s in ("fail", "pass")]
    for a in hyp.atoms:
        absent = sorted(c for c in ran if ctx.hax[c].get(a.axis) is None)
        if absent:
            out.append(
                f"{a.axis} does not exist in {len(absent)} case(s) (e.g. {absent[0]}): read as "
                f"{'holding' if a.holds(None) else 'not holding'}, predicted "
                f"{'fail' if a.holds(None) else 'pass'}, held"
            )
        read = sorted(c for c, k in filled if k == a.axis)
        if read:
            out.append(
                f"{a.axis} read as the last dimension in {len(read)} case(s) of rank "
                f"{a.axis.split('[')[-1][:-1]}+1 (e.g. {read[0]})"
            )
    return out


def validate(ctx, lead: Finding, hyp: Hypothesis, reqs: list[Req], filled: list, conflicts: dict[str, str]) -> None:
    """Set the lead's validation; exact only when every requirement held."""
    ran_ids = sorted(c for c, s in ctx.status.items() if s in ("fail", "pass"))
    probe_ids = [c for c in ran_ids if read_tag(ctx.cases[c])]  # every one predicted: the lead fits each case
    held = [
        f"{r.text}: {', '.join(r.done[:3])}" + (" ..." if len(r.done) > 3 else "")
        for r in reqs
        if r.done and not untestable(r)
    ]
    held += [f"{r.text}: {r.waived}" for r in reqs if r.waived and not r.done]
    blocked = [f"{r.text} ({r.untestable})" for r in reqs if untestable(r)]
    opened = [r.text for r in reqs if is_open(r)]
    ran = len(ran_ids)
    flips = [f"{p} passes where {f} fails with the same call but another seed" for p, f in sorted(conflicts.items())]
    met = sum(1 for r in reqs if not is_open(r) and not untestable(r))
    text = (
        f"predicted {len(probe_ids)}/{len(probe_ids)} probes built to break it and {ran}/{ran} recorded cases; "
        f"{met}/{len(reqs)} checks met"
    )
    if opened:
        text += f", {len(opened)} to run"
    if blocked:
        text += f", {len(blocked)} {UNTESTABLE}"
    if not reqs:
        text = (
            f"predicted {ran}/{ran} recorded cases (the cases built to break it come once it is pinned, "
            f"crossed and unrivalled)"
        )
    lead.validation = Validation(
        probes_run=len(probe_ids),
        probes_held=len(probe_ids),
        probe_ids=probe_ids,
        recorded=ran,
        held=held,
        open=opened + [f"{UNTESTABLE}: {b}" for b in blocked],
        not_applicable=not_applicable(ctx, hyp, filled),
        value_dependent=flips,
        text=text,
    )
    settle_probes(lead, opened, blocked, flips)


# --------------------------------------------------------------------------
# The probe cases as next cases
# --------------------------------------------------------------------------


def _fresh_candidate(ctx, hyp: Hypothesis, base: Case, spec: dict, make, moves):
    changes = []
    for k, target in spec["fresh"]:
        options = moves(ctx, base, k, target)
        if options:
            changes.append(options[0])
    changes.append(({"axis": "seed"}, spec["seed"]))
    (var0, val0), rest = changes[0], changes[1:]
    var = dict(var0, also=[dict(v, values=[x]) for v, x in rest]) if rest else var0
    return make(ctx, base, var, val0, "fresh")


def probe_cases(ctx, lead: Finding, hyp: Hypothesis, reqs: list[Req], make, moves, build_next) -> list[NextCase]:
    """The candidates of every open requirement, tagged with the prediction: one
    next case (kind falsify) per base and predicted outcome."""
    groups: dict[tuple[str, str], list] = {}
    for r in reqs:
        if not is_open(r):
            continue
        chosen = 0
        for base, var, value, built in r.builds:
            if chosen >= _need(r) - len(r.done):
                break
            predicted: str | None = built
            if r.kind == "fresh":
                cand = _fresh_candidate(ctx, hyp, base, var, make, moves)
                predicted = None if cand is None else cand.preds.get(hyp.text)
            else:
                cand = make(ctx, base, var, value, lead.axis)
            if cand is None or predicted is None or cand.preds.get(hyp.text) != predicted:
                continue  # a probe lands where the finding says what it says (a far side: beyond the bracket)
            ctx.seen_contents.add(cand.content)
            groups.setdefault((cand.base.id, predicted), []).append((r, cand))
            chosen += 1
        if not chosen and r.waived is None and r.kind.startswith("unnamed") and r.builds:
            r.waived = "every such case changes what the condition names (the size is not separable from it)"
        elif not chosen and r.waived is None:
            r.untestable = r.untestable or "no case the variations can build reaches it"
    out = []
    for (base_id, predicted), items in sorted(groups.items()):
        kinds = ",".join(dict.fromkeys(r.kind for r, _ in items))
        cands = [c for _, c in items]
        tagged = cands[0].base.model_copy(update={"description": tag(kinds, hyp.text, predicted)})
        for c in cands:
            c.base = tagged
        texts = "; ".join(dict.fromkeys(r.text for r, _ in items))
        out.append(
            build_next(
                "falsify",
                lead.axis,
                cands,
                reason=f"{lead.predicate} would be exact; these case(s) of {base_id!r} are built to break it "
                f"({texts}): it predicts {predicted}",
                if_fails="held" if predicted == "fail" else f"refutes {lead.predicate} (a counterexample)",
                if_passes="held" if predicted == "pass" else f"refutes {lead.predicate} (a counterexample)",
            )
        )
    return out


# --------------------------------------------------------------------------
# Value-dependent failures: the seed without a lead, necessary conditions
# --------------------------------------------------------------------------

STRUCTURAL = "the outcome is structural"


def seed_pair_cases(ctx, make, build_next) -> list[NextCase]:
    """No hypothesis separates the cases: before calling it a trend, re-run the
    closest failing and passing cases with other seeds (each predicts its own
    outcome if the outcome is a property of the call, not of the values drawn)."""

    ran = {c: s for c, s in sorted(ctx.status.items()) if s in ("fail", "pass")}
    failing = sorted(c for c, s in ran.items() if s == "fail")
    passing = sorted(c for c, s in ran.items() if s == "pass")
    if not failing or not passing or any((t := read_tag(ctx.cases[c])) is not None and t[0] == "seed" for c in ran):
        return []
    f, p = min(
        ((f, p) for f in failing[:50] for p in passing[:50]),
        key=lambda fp: (len(axes_difference(ctx.dist[fp[0]], ctx.dist[fp[1]])), fp),
    )
    out = []
    for cid in (f, p):
        base = ctx.cases[cid].model_copy(update={"description": tag("seed", STRUCTURAL, ran[cid])})
        cands = [c for s in SEEDS if (c := make(ctx, base, {"axis": "seed"}, s, "seed")) is not None]
        for c in cands:
            ctx.seen_contents.add(c.content)
        if cands:
            out.append(
                build_next(
                    "falsify",
                    None,
                    cands,
                    reason=f"no hypothesis separates the cases: is the outcome of {cid!r} a property of "
                    f"the call or of the values drawn? the same call with other seeds",
                    if_fails="held" if ran[cid] == "fail" else "the values decide (value-dependent)",
                    if_passes="held" if ran[cid] == "pass" else "the values decide (value-dependent)",
                )
            )
    return out


def necessary_atom(hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str]) -> Atom | None:
    """The tightest condition every failing case has (the one fewest passing
    cases share), simplest first: what a value-dependent failure needs."""

    keys = sorted({k for c in failing for k in hax[c]})
    best = None
    for k in keys:
        if k.endswith(OPEN_SKIP):
            continue
        fvals = [hax[c].get(k) for c in failing]
        pvals = [hax[c].get(k) for c in passing]
        for atom, mask in covering_atoms(k, fvals, pvals):
            n = bin(mask).count("1")
            if n == len(passing):
                continue
            key = (n, KIND_RANK[atom.kind], derivation_rank(atom.axis), atom.text)
            if best is None or key < best[0]:
                best = (key, atom)
    return None if best is None else best[1]


OPEN_SKIP = (".shape", ".strides", ".values", ".none", ".offset_nonzero")


def falsified_note(findings: list[Finding], refuted: list[Counterexample]) -> str:
    """The verdict's sentence when probes refuted leads and nothing exact is left ('' otherwise)."""
    if not refuted or any(f.exact for f in findings):
        return ""
    leads = ", ".join(dict.fromkeys(c.refutes for c in refuted))
    hyps = [f for f in findings if f.kind != "trend"]
    edge = (
        "the closest survivor is not exact"
        if hyps
        else "nothing in the enumerated space survives them: the cause is a property it lacks"
    )
    return (
        f" No exact finding: cases built to break the leads refuted {leads} ({len(refuted)} counterexample(s)); {edge}."
    )
