"""Crossing the leading finding with the run's other axes: its failing case with the values that pass
elsewhere on every other axis, all at once (one case) - the ``crossing`` proposal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..cases.stars import restride
from ..schemas import FLOAT_DTYPES, Case, Finding
from .context import Context
from .hypotheses import axis_sources, covering_atoms
from .moves import raw_value, strides_for, tied_shape_moves, variation_for
from .proposal import Proposal, ProposedCase, build_case, change_text

MAX_CROSSINGS = 4


def _distractor_value(ctx: Context, key: str, cid: str) -> Any:
    """What a distractor axis reads as for crossing: a strides pattern by its
    contiguity class (it must fit another shape), the others as planned."""
    if key.endswith(".strides"):
        return ctx.axes[cid].get(key[: -len(".strides")] + ".contiguity")
    return ctx.dist[cid].get(key)


def _excluded_keys(ctx: Context, sources: list[str]) -> set[str]:
    """The hypothesis' sources and what moves with them (the shapes of inputs tied to a source's)."""
    excluded = set(sources)
    for key in list(excluded):
        if key.endswith(".shape"):
            name = key[: -len(".shape")]
            excluded |= {
                t.split(".shape[", 1)[0] + ".shape"
                for d, tied in ctx.ties.items()
                if d.startswith(name + ".shape[")
                for t in tied
            }
    if "dtype" in excluded:
        excluded.add("layout")
    return excluded


def uncrossed(ctx: Context, sources: list[str]) -> list[tuple[str, Any, str]]:
    """(planned axis, value, the passing case it comes from) that would cross
    the hypothesis with the run's other axes.  Every atom of the space over an
    axis outside the hypothesis' sources that holds on every failing case and
    not on some passing case (``x.offset <= 0``, ``x.shape[-1] >= 64``,
    ``dtype == float32``) is a term the failure might need as well: the case
    that refutes it is a failing case moved to the planned value of a passing
    case where the term does not hold.  None left: the finding held across the
    run's other axes."""

    excluded = _excluded_keys(ctx, sources)
    failing = sorted(c for c, s in ctx.status.items() if s == "fail")
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    keys = sorted({k for c in failing + passing for k in ctx.hax[c]})
    out: list[tuple[str, Any, str]] = []
    seen: set[tuple[str, Any]] = set()
    for axis in keys:
        movers = [k for k in axis_sources(axis)]
        if set(movers) & excluded or any(m == "layout" and ctx.cpu_only for m in movers):
            continue
        fvals = [ctx.hax[c].get(axis) for c in failing]
        pvals = [ctx.hax[c].get(axis) for c in passing]
        for _atom, mask in covering_atoms(axis, fvals, pvals):
            if mask == (1 << len(passing)) - 1:
                continue  # holds on every recorded case: the run never varied it
            p = next(c for i, c in enumerate(passing) if not mask >> i & 1)  # the first passing case without it
            for key in movers:
                if key not in ctx.dist[p]:
                    continue
                value = _distractor_value(ctx, key, p)
                if value is not None and (key, value) not in seen:
                    seen.add((key, value))
                    out.append((key, value, p))
    return out


def _crossing_move(ctx: Context, base: Case, key: str, value: Any, cid: str) -> list[tuple[dict, Any]] | None:
    """The change(s) that set a distractor axis of ``base`` to ``value``: one,
    or a shape and the strides that keep the input's layout class."""
    var = variation_for(key)
    if var is None:
        return None
    if key.endswith(".shape"):
        spec = next((i for i in base.inputs if i.name == var["input"]), None)
        raw = raw_value(ctx.cases[cid], key)
        if spec is None or spec.shape is None or spec.none or raw is None:
            return None
        if spec.is_contiguous() or len(raw) != len(spec.shape):
            return [(var, raw)] + tied_shape_moves(ctx, base, var["input"], raw) if spec.is_contiguous() else None
        strides = restride(spec.shape, spec.strides, raw)
        return (
            [(var, raw)]
            + ([({"axis": "strides", "input": var["input"]}, strides)] if strides else [])
            + tied_shape_moves(ctx, base, var["input"], raw)
        )
    one = _crossing_one(ctx, base, key, value, cid, var)
    return None if one is None else [one]


def _crossing_one(ctx: Context, base: Case, key: str, value: Any, cid: str, var: dict) -> tuple[dict, Any] | None:
    if key.endswith(".strides"):
        name = key[: -len(".strides")]
        spec = next((i for i in base.inputs if i.name == name), None)
        if spec is None or spec.shape is None or spec.none:
            return None
        other = next((i for i in ctx.cases[cid].inputs if i.name == name), None)
        strides = None
        if value != "contiguous":
            strides = strides_for(spec.shape, value)
            if strides is None and other is not None and other.shape and len(other.shape) == len(spec.shape):
                strides = restride(other.shape, other.strides, spec.shape)
            if strides is None:
                return None
        return var, strides
    raw = raw_value(ctx.cases[cid], key)
    if key == "dtype":
        dtypes = {i.dtype for i in ctx.cases[cid].inputs if i.dtype in FLOAT_DTYPES}
        if len(dtypes) != 1:
            return None
        raw = dtypes.pop()
    if raw is None and not key.endswith(".strides"):
        return None
    return var, raw


def crossing_cases(ctx: Context, f: Finding, sources: list[str]) -> list[ProposedCase]:
    """The leading finding's failing case with every distractor value that
    passes elsewhere and never failed, all at once (one case, up to four
    axes); one case per axis where the combination cannot be built."""
    if f.minimal_pair is None:
        return []
    base = ctx.cases[f.minimal_pair.failing]
    # a value the failing case already has is no change (bytes move with the shape and the dtype: the one
    # that differs is the crossing)
    todo = [t for t in uncrossed(ctx, sources) if _distractor_value(ctx, t[0], base.id) != t[1]]
    if not todo:
        return []
    firsts: dict[str, tuple[str, Any, str]] = {}
    for key, value, cid in todo:
        firsts.setdefault(key, (key, value, cid))

    def has(cand: ProposedCase, items) -> bool:  # a strides pattern that does not fit the shape is no crossing
        return all(
            cand.axes.get(k[: -len(".strides")] + ".contiguity") == v for k, v, _ in items if k.endswith(".strides")
        )

    def combined(changes: list[tuple[dict, Any]]) -> ProposedCase | None:
        (var0, val0), rest = changes[0], changes[1:]
        var = dict(var0, also=[dict(v, values=[x]) for v, x in rest]) if rest else var0
        return build_case(ctx, base, var, val0, f.axis)

    built = [(k, v, c, m) for k, v, c in firsts.values() if (m := _crossing_move(ctx, base, k, v, c)) is not None]
    out: list[ProposedCase] = []
    if len(built) > 1:
        chosen = built[:MAX_CROSSINGS]
        changes = [ch for *_, m in chosen for ch in m]
        cand = combined(changes[:5]) if len(changes) <= 5 else None
        if cand is not None and has(cand, [b[:3] for b in chosen]):
            ctx.seen_contents.add(cand.content)
            return [cand]
    for key, value, cid, move in built[:MAX_CROSSINGS]:
        cand = combined(move)
        if cand is not None and has(cand, [(key, value, cid)]):
            ctx.seen_contents.add(cand.content)
            out.append(cand)
    return out


def crossing_proposal(lead: Finding, cross: Sequence[ProposedCase]) -> list[Proposal]:
    """The crossing cases as one proposal (none when there is nothing to cross)."""
    if not cross:
        return []
    changes = "; ".join(change_text(c) for c in cross)
    return [
        Proposal(
            "crossing",
            lead.axis,
            list(cross),
            why=(
                f"{lead.predicate}: check that it holds across the run's other axes - the failing case "
                f"{cross[0].base.id!r} with the values that pass elsewhere ({changes})"
            ),
            if_fails=f"the failure follows {lead.predicate} whatever the other axes",
            if_passes=f"the failure needs the other axis value too: an interaction (refutes {lead.predicate})",
        )
    ]
