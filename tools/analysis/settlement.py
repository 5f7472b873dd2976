"""The settlement: the one place where a finding is called exact (references/behavior.md, "Exactness").

Every other module reads ``Finding.exact`` (built ``False``) and hands its evidence here; nothing else sets
it (tests/test_architecture.py scans tools/ and mcp_server/ for it).  The rule, in principles:

(a) **unrivalled**: no competing condition survives - every other member of the space was ruled out by a
    recorded case (and the space was not capped), and no reading as separate causes fits as well;
(b) **pinned**: a threshold's bracket is within its quantity's resolution - an integer 1 apart, an alignment a
    factor 2 apart, a size in bytes one element apart, a float within a factor 2 - where a gap that another
    term of the condition already excludes is settled; and pinned by *two cases that differ in that quantity
    alone* (same rank, dtype, layout and everything else: a pair across ranks pins nothing) - a probe
    requirement (probes.py, ``pin``) builds that pair when the recorded cases lack it;
(c) **crossed**: every value another planned axis takes in a passing case was also seen failing with it;
(d) **not falsified**: every case built to break it (probes.py: far sides, re-pinned, another member of its
    class or another draw of its generator, the properties it does not name moved far both ways, other
    seeds, fresh cases) was run and predicted; a requirement no buildable case can meet stays *open*
    ("untestable with these variations: ...") and blocks exact - it is never listed as held;
(e) **structural**: an outcome that flips with the seed makes it a necessary condition only.

The run-level answer (``narrow_failure``'s ``exact`` and its ``stopped="exact"``) is :func:`run_exact`.
"""

from __future__ import annotations

import json
from typing import Any

from ..cases.derived import parse_dim_axis
from ..cases.relations import element_bytes, product_sides
from ..conditions.grammar import expression, literal
from ..schemas import Finding, Validation
from ..wording import boundary, num
from .hypotheses import CAP_TEXT, Atom, Hypothesis, is_align

UNTESTABLE = "untestable with these variations"


def _integer(v: Any) -> bool:
    return isinstance(v, int) or (isinstance(v, float) and v.is_integer())


def pinned(t: Finding, dtypes: dict[str, list[str]], others: tuple[Atom, ...] = ()) -> bool:
    """Is a threshold's bracket within its axis' resolution (see (b) above)?  ``others``: the condition's
    other terms; an integer gap every value of which one of them excludes is settled."""
    p, q = t.passes_at, t.fails_at
    if p is None or q is None:
        return False
    lo, hi = min(p, q), max(p, q)
    if is_align(t.axis):
        return hi == 2 * lo
    if t.axis.endswith(".bytes"):
        name = t.axis.rsplit(".", 1)[0]
        sizes = [element_bytes(d) or 1 for d in dtypes.get(name, [])] or [1]
        return hi - lo <= max(sizes)
    values = [v for v in (*t.failing_values, *t.passing_values, p, q) if v is not None]
    if all(_integer(v) for v in values) and not t.axis.endswith(".magnitude"):
        return hi - lo <= 1 or gap_excluded(t.axis, int(lo), int(hi), others)
    return lo > 0 and hi / lo <= 2.0


MAX_GAP = 4096


def gap_excluded(axis: str, lo: int, hi: int, others: tuple[Atom, ...]) -> bool:
    """Does another term of the condition exclude every integer strictly between lo and hi (a term over the
    same quantity: "passes at 7, fails at 9" with ``% 8 != 0`` beside it leaves nothing to pin)?"""
    same = [a for a in others if a.axis == axis or (is_align(a.axis) and _align_of(a.axis) == axis)]
    if not same or hi - lo - 1 > MAX_GAP:
        return False
    for v in range(lo + 1, hi):
        if all(a.holds(v if a.axis == axis else _pow2(v)) for a in same):
            return False
    return True


def _align_of(axis: str) -> str | None:
    """The quantity an alignment axis measures (``x.last_align`` -> ``x.shape[-1]``), None when unknown."""
    if axis.endswith(".last_align"):
        return axis[: -len(".last_align")] + ".shape[-1]"
    if ".align[" in axis:
        name, _, idx = axis.partition(".align[")
        return f"{name}.shape[{idx}"
    return None


def _pow2(v: int) -> int | None:
    return (v & -v) if v else None


def _closed_world(
    lead: Finding, terms: list[Finding], hyp: Hypothesis, hyps: list[Hypothesis], capped: bool, narrow, cross, dtypes
) -> list[str]:
    why: list[str] = []
    others = [h.text for h in hyps[1:]]
    if others:
        shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        why.append(f"{len(others)} competing hypothesis(es) separate the recorded cases as well: {shown}")
    if capped:
        why.append(f"the hypothesis space was capped ({CAP_TEXT}): not every competitor was enumerated")
    for i, t in enumerate(terms):
        rest = tuple(a for j, a in enumerate(hyp.atoms) if j != i) if len(hyp.atoms) == len(terms) else ()
        if t.minimal_pair is None:
            why.append(f"no minimal pair for {t.predicate} yet: no passing and failing case differ only in {t.source}")
        if t.kind == "threshold" and not pinned(t, dtypes or {}, rest):
            why.append(
                f"the boundary of {t.axis} is not pinned: {boundary(t.passes_at, t.fails_at)}"
                + ("" if narrow.get(t.axis) else f" ({UNTESTABLE}: no case they can build lies between)")
            )
        elif narrow.get(t.axis) and t.kind != "threshold":
            values = ", ".join(num(c.hax.get(t.axis, c.axes.get(t.axis))) for c in narrow[t.axis])
            why.append(f"untried values of {t.axis}: {values}")
    if cross:
        changes = "; ".join(
            json.dumps(
                {c.var["axis"]: c.value, **{a["axis"]: a["values"][0] for a in c.var.get("also") or []}}, default=str
            )
            for c in cross
        )
        why.append(f"not crossed yet with the run's other axes ({changes})")
    return why


def settle(
    lead: Finding,
    terms: list[Finding],
    hyp: Hypothesis,
    hyps: list[Hypothesis],
    capped: bool,
    narrow: dict,
    cross: list,
    dtypes: dict[str, list[str]] | None = None,
    alternative: list[str] | None = None,
) -> None:
    """The closed world (a)-(c): ``exact`` and ``why_not_exact`` of the leading finding before its probes."""
    why = _closed_world(lead, terms, hyp, hyps, capped, narrow, cross, dtypes or {})
    if alternative:  # an OR of pure atoms reads the cases as well: the AND is not settled
        why.append(f"the failing cases read as well as {len(alternative)} separate causes: " + "; ".join(alternative))
    lead.exact = not why
    lead.why_not_exact = why
    if lead.exact and lead.kind == "set" and len(lead.passing_values) == 1:
        lead.predicate = f"{expression(lead.axis)} != {literal(lead.axis, lead.passing_values[0])}"  # every other value it can have fails


def settle_probes(lead: Finding, opened: list[str], untestable: list[str], flips: list[str]) -> None:
    """(d) and (e): after the cases built to break it - the seed deciding makes it necessary only; a probe
    still to run, or a requirement no buildable case meets, keeps it from exact."""
    if flips:
        lead.necessary_only = True
        lead.exact = False
        lead.why_not_exact.insert(
            0,
            f"the outcome flips with the seed ({flips[0]}): the values decide too; "
            f"{lead.predicate} is a necessary condition only (every failing case has it)",
        )
        return
    if opened and lead.exact:
        lead.exact = False
        lead.why_not_exact.append(
            f"not falsified yet: {len(opened)} probe(s) built to break it still to run "
            f"({'; '.join(opened[:3])}{' ...' if len(opened) > 3 else ''})"
        )
    if untestable and lead.exact:
        lead.exact = False
        lead.why_not_exact.append(
            f"{UNTESTABLE}: " + "; ".join(untestable[:3]) + (" ..." if len(untestable) > 3 else "")
        )


def competitor_note(f: Finding, lead: Finding) -> None:
    f.exact = False
    f.why_not_exact = [
        f"competes with the leading finding {lead.predicate}: the recorded cases do not tell them apart yet"
    ]


def necessary_only(f: Finding, conflicts: dict[str, str], inside: int) -> None:
    """A value-dependent failure's condition (every failing case has it; the seed flips the outcome within it):
    necessary only, never exact."""
    f.necessary_only, f.exact = True, False
    p, q = sorted(conflicts.items())[0]
    f.why_not_exact = [
        f"the outcome flips with the seed ({p} passes, {q} fails: the same call, other values): "
        f"{f.predicate} is a necessary condition only (every failing case has it; {inside} passing "
        f"case(s) have it too) - within it, the values decide"
    ]
    f.statement = f"fails only where {f.predicate}; within it, the values drawn decide"
    flips = [f"{a} passes where {b} fails with the same call but another seed" for a, b in sorted(conflicts.items())]
    f.validation = Validation(
        probes_run=0,
        probes_held=0,
        recorded=f.failing + f.passing,
        value_dependent=flips,
        text=f"necessary only: {len(flips)} call(s) pass and fail with other seeds",
    )


def run_exact(analysis) -> bool:
    """The run-level answer: every failure accounted for by exact findings - no trend (a trend is never exact),
    no competitor, no unexplained group.  ``narrow_failure`` stops "exact" on it and answers it."""
    findings = list(analysis.findings)
    return bool(findings) and all(f.exact for f in findings) and not analysis.competing and not analysis.unexplained


def settle_stated(
    answer,
    *,
    met: list[str],
    opened: list[str],
    untestable: list[str],
    apart: list[str],
    alike: list[str],
    restating: list[str],
    probe_ids: list[str],
) -> None:
    """A stated condition's fate by the same rule as the tool's own findings: refuted by a recorded case
    (predict.py), else exact only when every case built to break it ran and held, no requirement is
    untestable, it predicts every recorded case (none undefined), and every competitor a buildable case can
    tell apart from it was told apart; else surviving, with what is open."""
    if answer.fate == "refuted":
        return
    why = []
    if opened:
        why.append(f"not falsified yet: {len(opened)} case(s) built to break it still to run ({'; '.join(opened[:3])})")
    if untestable:
        why.append(f"{UNTESTABLE}: " + "; ".join(untestable[:3]))
    if alike:
        why.append("not told apart yet from " + ", ".join(alike[:4]))
    if answer.undefined_count:
        why.append(f"undefined on {answer.undefined_count} recorded case(s): it does not predict them")
    if not answer.agree_count:
        why.append("it predicts no recorded case")
    answer.fate = "surviving" if why else "exact"
    answer.why_not_exact = why
    answer.told_apart = apart
    answer.not_told_apart = alike
    answer.validation = Validation(
        probes_run=len(probe_ids),
        probes_held=len(probe_ids),
        probe_ids=probe_ids[:50],
        recorded=answer.agree_count + answer.contradict_count,
        held=met,
        open=opened + [f"{UNTESTABLE}: {u}" for u in untestable],
        not_applicable=[f"restates {r} on every case built" for r in restating],
        text=f"predicted {answer.agree_count} recorded case(s) and {len(probe_ids)} probe(s) built to break it; "
        f"{len(met)} check(s) met, {len(opened)} to run, {len(untestable)} {UNTESTABLE}",
    )


MAX_PIN_SCAN = 64  # cases each side scanned for a pinning pair


def differ_alone(ctx, p: str, q: str, axis: str, sources: list[str]) -> bool:
    """Do two recorded cases differ in ``axis``'s quantity alone (principle (b))?  Their planned axes differ
    only in its sources (a shape with its strides, a tied input's shape moving with it), and every input
    keeps its rank and layout class: a pair across ranks pins nothing."""
    allowed = set(sources)
    for src in sources:
        if src.endswith(".shape"):
            name = src[: -len(".shape")]
            allowed.add(name + ".strides")
            for dim, others in ctx.ties.items():
                if dim.startswith(name + ".shape["):
                    allowed.update(o.partition(".shape[")[0] + ".shape" for o in others)
                    allowed.update(o.partition(".shape[")[0] + ".strides" for o in others)
    a, b = ctx.dist[p], ctx.dist[q]
    if any(a.get(k) != b.get(k) for k in set(a) | set(b) if k not in allowed):
        return False
    ha, hb = ctx.hax[p], ctx.hax[q]
    kept = [k for k in set(ha) | set(hb) if k.endswith((".rank", ".contiguity", ".layout")) and k != axis]
    if not all(ha.get(k) == hb.get(k) for k in kept):
        return False
    prod = product_sides(axis)
    if prod is not None:  # a product or ratio: only its own dimensions of the input differ
        return _only_dims_differ(ctx, p, q, [d for d in (prod[0], prod[2]) if parse_dim_axis(d) is not None])
    dim = parse_dim_axis(axis)
    if dim is None:
        return True
    sa, sb = (next((i.shape for i in ctx.cases[c].inputs if i.name == dim[0]), None) for c in (p, q))
    if sa is None or sb is None or len(sa) != len(sb):  # one dimension: the input's other dimensions kept
        return False
    return sum(x != y for x, y in zip(sa, sb, strict=True)) <= 1


def _only_dims_differ(ctx, p: str, q: str, dims: list[str]) -> bool:
    """Do the two cases' shapes of the dimensions' input differ in those dimensions alone (same rank)?"""
    parsed = [d for d in (parse_dim_axis(x) for x in dims) if d is not None]
    if not parsed:
        return False
    name = parsed[0][0]
    sa, sb = (next((i.shape for i in ctx.cases[c].inputs if i.name == name), None) for c in (p, q))
    if sa is None or sb is None or len(sa) != len(sb):
        return False
    keep = {d[1] % len(sa) for d in parsed if -len(sa) <= d[1] < len(sa)}
    return all(x == y for k, (x, y) in enumerate(zip(sa, sb, strict=True)) if k not in keep)


def pinning_pair(ctx, axis: str, sources: list[str], passes_at, fails_at) -> list[str]:
    """A passing case at ``passes_at`` and a failing one at ``fails_at`` that differ in that quantity alone
    ([] when the recorded cases have none)."""
    ran = sorted(c for c, s in ctx.status.items() if s in ("fail", "pass"))
    ps = [c for c in ran if ctx.status[c] == "pass" and ctx.hax[c].get(axis) == passes_at][:MAX_PIN_SCAN]
    fs = [c for c in ran if ctx.status[c] == "fail" and ctx.hax[c].get(axis) == fails_at][:MAX_PIN_SCAN]
    return next(([p, q] for p in ps for q in fs if differ_alone(ctx, p, q, axis, sources)), [])
