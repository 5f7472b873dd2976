"""Narrowing the leading finding: its boundary bisected (an ordered axis between its passing and failing
values: powers of two first; an alignment in powers of two only) and its untried categorical or relation
values probed - the ``bisect`` and ``probe`` proposals.
"""

from __future__ import annotations

import math

from ..cases.derived import CONTIGUITY, DTYPE_BITS
from ..cases.relations import REL_VALUES, element_bytes
from ..schemas import FLOAT_DTYPES, MODES, Case, Finding
from ..wording import boundary, num
from .context import Context
from .hypotheses import ALIGN_RESOLUTION, is_align
from .moves import moves, strides_for
from .proposal import Proposal, ProposedCase, build_case, by_base, informative

MAX_BISECT_VALUES = 3


def _pow2_between(lo: float, hi: float) -> list[float]:
    """Powers of two strictly between lo and hi (1, 2, 4... for lo < 1)."""
    k = math.floor(math.log2(lo)) + 1 if lo > 0 else 0
    out = []
    while 2.0**k < hi:
        if 2.0**k > lo:
            out.append(2.0**k)
        k += 1
    return out


def _spread(values: list, n: int) -> list:
    if len(values) <= n:
        return values
    idx = sorted({round(i * (len(values) - 1) / (n - 1)) for i in range(n)})
    return [values[i] for i in idx]


def bisect_values(f: Finding, integer: bool) -> list:
    """Values inside the bracket of a threshold finding, the most useful first:
    powers of two strictly inside; then the value next to the passing side
    (is the boundary exactly there?) and the middle.  An alignment moves in
    powers of two only (its bracket is pinned at a factor 2); one whose
    passing side is only 0 is probed up to ALIGN_RESOLUTION."""
    p, q = f.passes_at, f.fails_at
    if q is None:
        return []
    if p is None:
        if is_align(f.axis) and f.direction == "below" and q < ALIGN_RESOLUTION:
            return [ALIGN_RESOLUTION] + [int(v) for v in _spread(_pow2_between(q, ALIGN_RESOLUTION), 2)]
        return []
    lo, hi = min(p, q), max(p, q)
    if is_align(f.axis):
        return [int(v) for v in _spread(_pow2_between(lo, hi), MAX_BISECT_VALUES)]
    if integer:
        if hi - lo <= 1:
            return []
        pw = [int(v) for v in _pow2_between(lo, hi)]
        if pw:
            return _spread(pw, MAX_BISECT_VALUES)
        near = int(p) + 1 if f.direction == "above" else int(p) - 1
        inner = [int(lo) + (int(hi) - int(lo)) * k // 4 for k in (1, 2, 3)]
        return sorted(dict.fromkeys(v for v in [near, *inner] if lo < v < hi), key=lambda v: abs(v - p))
    if lo <= 0 or hi / lo <= 2.0:
        return [] if lo > 0 or hi <= 0 else [min(1.0, hi / 2)]
    powers = _pow2_between(lo, hi)
    return _spread(powers, MAX_BISECT_VALUES) if powers else [math.sqrt(lo * hi)]


def _domain(ctx: Context, f: Finding, base: Case) -> list:
    """Every value a categorical axis can take that a case can be built with (None: unknown)."""
    axis = f.axis
    if "~" in axis:
        return ["=", "!="] if axis.split("~", 1)[0].endswith(".dtype") else list(REL_VALUES)
    if axis.endswith(".sign"):
        return ["nonnegative", "nonpositive", "mixed"]
    return []


def probe_values(ctx: Context, f: Finding, base: Case) -> list:
    """Untried values of a categorical axis worth trying, the closest first."""
    seen = set(f.failing_values) | set(f.passing_values)
    axis = f.axis
    if "~" in axis or axis.endswith(".sign"):
        return [v for v in _domain(ctx, f, base) if v not in seen]
    if axis == "mode":
        return [m for m in MODES if m not in seen and m not in ctx.no_modes]
    if axis == "dtype" or axis.endswith(".dtype"):
        if not all(v in FLOAT_DTYPES for v in f.failing_values):
            return []
        widths = {DTYPE_BITS[v] for v in f.failing_values}
        same = [d for d in FLOAT_DTYPES if d not in seen and DTYPE_BITS[d] in widths]
        if same:
            return same
        wider = [
            d
            for d in FLOAT_DTYPES
            if d not in seen
            and DTYPE_BITS[d] > max(widths)
            and not any(DTYPE_BITS[p] > max(widths) for p in f.passing_values if p in DTYPE_BITS)
        ]
        return wider[:1]
    if axis.endswith(".contiguity"):
        name = axis.rsplit(".", 1)[0]
        spec = next((i for i in base.inputs if i.name == name), None)
        if spec is None or spec.shape is None or spec.none:
            return []
        return [k for k in CONTIGUITY if k not in seen and strides_for(spec.shape, k) is not None]
    if axis.startswith("attr."):
        vals = f.failing_values + f.passing_values
        if all(v in ("true", "false") for v in vals):
            return [v for v in ("true", "false") if v not in seen]
        if f.kind in ("value", "set") and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            return sorted({n for v in f.failing_values for n in (v - 1, v + 1) if n >= 0 and n not in seen})
    return []


def bases(ctx: Context, f: Finding) -> list[Case]:
    """The cases to move from: the minimal pair's passing then failing case,
    else the passing case nearest the boundary and the first failing case (ties by id)."""
    if f.minimal_pair is not None:
        return [ctx.cases[f.minimal_pair.passing], ctx.cases[f.minimal_pair.failing]]
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    failing = sorted(c for c, s in ctx.status.items() if s == "fail")
    if f.kind == "threshold" and f.passes_at is not None:
        passing = [
            c for c in passing if ctx.axes[c].get(f.axis, ctx.hax.get(c, {}).get(f.axis)) == f.passes_at
        ] or passing
    return [ctx.cases[c] for c in passing[:1] + failing[:1]]


def narrowing(ctx: Context, f: Finding, hyp: str | None = None) -> list[ProposedCase]:
    """The informative candidates that narrow one finding or term (bisect or probe)."""
    out: list[ProposedCase] = []
    for base in bases(ctx, f)[:1]:
        if f.kind == "threshold":
            integer = all(isinstance(v, int) for v in f.failing_values + f.passing_values)
            targets = bisect_values(f, integer)
            if f.axis.endswith(".bytes"):  # a size in bytes moves by whole elements of the base's dtype
                targets = _whole_elements(base, f, targets)
        elif f.kind in ("value", "set", "relation"):
            targets = probe_values(ctx, f, base)
        else:
            targets = []
        for target in targets:
            best = None
            for var, value in moves(ctx, base, f.axis, target):
                cand = build_case(ctx, base, var, value, f.axis)
                # an untried categorical value is always worth its case; inside a bracket, when it can move it
                if cand is None or (f.kind == "threshold" and not informative(cand, f, hyp)):
                    continue
                got = cand.hax.get(f.axis, cand.axes.get(f.axis))
                miss = (
                    abs(got - target)
                    if f.kind == "threshold" and isinstance(got, (int, float)) and isinstance(target, (int, float))
                    else 0
                )  # the move that lands on the value first
                score = (
                    miss,
                    len(var.get("dims") or [1]) if var["axis"] == "dim" else 5,
                    1 if var.get("also") else 0,
                    _others_named(ctx, f, var),
                )
                if best is None or score < best[0]:
                    best = (score, cand)
            if best is not None:
                ctx.seen_contents.add(best[1].content)
                out.append(best[1])
    return out


def _whole_elements(base: Case, f: Finding, targets: list) -> list:

    name = f.axis[: -len(".bytes")]
    spec = next((i for i in base.inputs if i.name == name), None)
    size = element_bytes(spec.dtype) if spec is not None and spec.shape is not None else None
    if not size or f.passes_at is None or f.fails_at is None:
        return targets
    lo, hi = sorted((f.passes_at, f.fails_at))
    step = [f.passes_at + size if f.direction == "above" else f.passes_at - size]
    out = [math.ceil(t / size) * size for t in step + list(targets)]
    return [int(t) if float(t).is_integer() else t for t in dict.fromkeys(out) if lo < t < hi]


def _others_named(ctx: Context, f: Finding, var: dict) -> int:
    """How many other live findings a move touches (fewer is a cleaner step)."""
    touched = set(var.get("dims") or [])
    return sum(1 for g in ctx.findings if g.axis != f.axis and g.axis in touched)


def _values_text(cands: list[ProposedCase], axis: str) -> str:
    return ", ".join(num(c.axes.get(axis, c.hax.get(axis))) for c in cands)


def narrowing_proposals(
    ctx: Context, lead: Finding, narrow: dict[str, list[ProposedCase]], lead_hyp: str | None = None
) -> list[Proposal]:
    """The leading finding and each of its terms narrowed: a threshold bisected, a categorical axis probed
    (one proposal per base)."""
    out: list[Proposal] = []
    done: set[str] = set()
    for f in [lead, *[t for t in ctx.terms.get(lead_hyp or "", []) if t is not lead]]:
        if f.axis in done:  # a band's second end: its cases are in the first's (narrow is by quantity)
            continue
        done.add(f.axis)
        for group in by_base(narrow.get(f.axis) or []):
            shown = _values_text(group, f.axis)
            if f.kind == "threshold":
                why = (
                    f"{f.predicate} is not pinned yet ({boundary(f.passes_at, f.fails_at)}): bisect {f.axis} at {shown}"
                )
                out.append(
                    Proposal(
                        "bisect",
                        f.axis,
                        group,
                        why=why,
                        if_fails=f"each failing value moves the boundary of {f.axis} toward the passing side",
                        if_passes=f"each passing value moves the boundary of {f.axis} toward the failing side",
                    )
                )
            else:
                out.append(
                    Proposal(
                        "probe",
                        f.axis,
                        group,
                        why=f"{f.predicate}: try the untried value(s) {shown} of the same axis",
                        if_fails=f"the failure covers those {f.axis} values too",
                        if_passes=f"the failure is limited to {f.failing_values}",
                    )
                )
    return out
