"""Findings in words, one renderer for every door: report.md, ``opdebug
analyze`` / ``show`` / ``narrow`` (the MCP answers carry the same Finding
objects and the analysis summary).

For each finding: the predicate (exact or not), its minimal pair with the
planned values where the two cases differ, the boundary in plain names
(passes at / fails at), its statement (alignments and sizes in elements and
bytes), what keeps it from being exact; then the competing hypotheses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..schemas import Counterexample, Finding, MinimalPair
from ..wording import boundary


def pair_text(pair: MinimalPair | None) -> str:
    if pair is None:
        return "-"
    planned = "; ".join(
        f"{k} {pair.passing_planned.get(k, '?')} -> {pair.failing_planned.get(k, '?')}" for k in pair.differs_in
    )
    return f"{pair.passing} passes, {pair.failing} fails" + (f" ({planned})" if planned else "")


def boundary_text(f: Finding) -> str:
    """passes at / fails at of a threshold (or of each threshold term), '' when there is none."""
    if f.kind == "threshold" and f.fails_at is not None:
        return f"{boundary(f.passes_at, f.fails_at)} (failures {f.direction})"
    if f.kind == "conjunction":
        return "; ".join(
            f"{t.axis}: {boundary(t.passes_at, t.fails_at)} (failures {t.direction})"
            for t in f.terms
            if t.kind == "threshold" and t.fails_at is not None
        )
    return ""


def falsification_lines(
    findings: list[Finding], counterexamples: Sequence[Counterexample], bullet: str = "", quote=str
) -> list[str]:
    """What the probes refuted, and "no exact finding" when nothing exact is left."""
    out = []
    if counterexamples and not any(f.exact for f in findings):
        refuted = ", ".join(dict.fromkeys(quote(c.refutes) for c in counterexamples))
        out.append(
            f"{bullet}no exact finding: cases built to break the leads refuted {refuted}"
            + ("; the closest survivor is not exact" if findings else "; nothing in the space survives them")
        )
    for c in counterexamples:
        out.append(
            f"{bullet}counterexample: {c.case_id} {c.observed}s where {quote(c.refutes)} predicted it "
            f"{c.predicted}s" + (f" (probe: {c.probe})" if c.probe else "")
        )
    return out


def finding_lines(
    findings: list[Finding], competing: list[Finding], counterexamples: Sequence[Counterexample] = ()
) -> list[str]:
    """The lines a person reads: each finding, then the competing hypotheses, then what the probes refuted."""
    out: list[str] = []
    for f in findings:
        pair = (
            f" - minimal pair: {f.minimal_pair.passing} passes, {f.minimal_pair.failing} fails"
            if f.minimal_pair
            else ""
        )
        label = f" ({group_label(f)})" if group_label(f) else ""
        out.append(f"finding{label}: {f.predicate}{' (exact)' if f.exact else ''}{pair}")
        bound = boundary_text(f)
        if bound:
            out.append(f"  boundary: {bound}")
        if f.minimal_pair is not None and f.minimal_pair.differs_in:
            out.append(f"  minimal pair, planned: {pair_text(f.minimal_pair)}")
        out += _details(f, "  ", str)
    if competing:
        out.append(
            f"competing ({len(competing)}): "
            + "; ".join(
                f.predicate + (f" [{pair_text(f.minimal_pair)}]" if f.minimal_pair else "") for f in competing[:8]
            )
            + ("; ..." if len(competing) > 8 else "")
        )
    return out + falsification_lines(findings, counterexamples)


def _details(f: Finding, bullet: str, quote) -> list[str]:
    """A finding's terms, statement, restatements and what keeps it from exact, one line each."""
    out = [f"{bullet}term {quote(t.predicate)}: minimal pair {pair_text(t.minimal_pair)}" for t in f.terms]
    if f.statement:
        out.append(f"{bullet}{f.statement}")
    if f.equivalent:
        out.append(f"{bullet}says the same as: {', '.join(quote(e) for e in f.equivalent)}")
    out += _validation(f, bullet)
    return out + [f"{bullet}not exact: {why}" for why in f.why_not_exact]


def _validation(f: Finding, bullet: str) -> list[str]:
    """The probes built to break a finding: how many held, which, how it reads where its axis is absent."""
    v = f.validation
    if v is None:
        return []
    out = [
        f"{bullet}validation: {v.text}"
        + (
            f" (probes: {', '.join(v.probe_ids[:6])}" + (" ..." if len(v.probe_ids) > 6 else "") + ")"
            if v.probe_ids
            else ""
        )
    ]
    out += [f"{bullet}reads: {n}" for n in v.not_applicable]
    if f.necessary_only:
        out.append(f"{bullet}necessary only: {v.value_dependent[0] if v.value_dependent else 'the values decide'}")
    return out


def findings_section(
    findings: list[Finding], competing: list[Finding], space, counterexamples: Sequence[Counterexample] = ()
) -> list[str]:
    """The report.md section: a table of the findings and one of the competitors."""
    from .markdown import table

    if not findings and not counterexamples:
        return []
    out = [
        "## Findings",
        "",
        "Hypotheses that separate every failing case from every passing one (references/behavior.md: "
        "exact means every competitor ruled out by a recorded case, the boundary pinned, the run's other axes "
        "crossed, and every case built to break it - far sides, re-pinned under the other values, another "
        "source, other seeds, fresh cases - predicted).",
        "",
    ]
    rows = []
    for f in findings:
        rows.append(
            [
                (f"{group_label(f)}: " if group_label(f) else "") + f"`{f.predicate}`",
                "yes" if f.exact else "no",
                boundary_text(f) or "-",
                pair_text(f.minimal_pair),
                ", ".join(f.minimal_pair.differs_in) if f.minimal_pair else "-",
            ]
        )
    out += [table(["finding", "exact", "boundary", "minimal pair (planned values)", "differs in"], rows), ""]
    for f in findings:
        out += _details(f, "- ", lambda text: f"`{text}`")
    out.append("")
    if counterexamples:
        out += falsification_lines(findings, counterexamples, "- ", lambda text: f"`{text}`") + [""]
    if competing:
        out += [
            "### Competing hypotheses",
            "",
            "Each separates the recorded cases as well as the finding; the next cases tell them apart.",
            "",
            table(
                ["hypothesis", "boundary", "minimal pair (planned values)"],
                [[f"`{c.predicate}`", boundary_text(c) or "-", pair_text(c.minimal_pair)] for c in competing],
            ),
            "",
        ]
    if space is not None:
        out += [
            f"Hypothesis space: {space.axes} axes, {space.consistent} consistent hypothesis(es)"
            + (", conjunctions of two" if space.conjunctions else "")
            + (" - **capped**: no finding can be exact" if space.capped else "")
            + f" ({space.cap}).",
            "",
        ]
    return out


def group_label(f: Finding) -> str:
    """Which failing group a finding explains: ``cause 1`` of several, or its status; '' for all of them."""
    if f.cause is not None:
        return f"cause {f.cause}"
    return f.status or ""


def accounting_lines(a: Any, bullet: str = "- ") -> list[str]:
    """Every failing group accounted for: the separate causes, the failing cases no finding covers, the leads
    a later case refuted (naming it), the cases identical on every axis that disagree."""
    out = []
    if a.causes > 1:
        out.append(
            f"{bullet}{a.causes} separate causes, each finding covering its own failing cases: "
            + "; ".join(
                f"cause {f.cause}: {f.predicate} ({len(f.cases)} case(s), e.g. {', '.join(f.cases[:2])})"
                for f in a.findings
                if f.cause is not None
            )
        )
    for g in a.unexplained:
        what = f"{g.count} {g.status} case(s)" if g.status else f"{g.count} failing case(s)"
        out.append(
            f"{bullet}no finding for these {what}: {', '.join(g.cases[:4])}{', ...' if g.count > 4 else ''}"
            + (f"; closest: {'; '.join(g.survivors)}" if g.survivors else "")
        )
    for r in a.refuted:
        out.append(
            f"{bullet}refuted lead: {r.predicate}{' (was exact)' if r.was_exact else ''} - contradicted by "
            f"{', '.join(r.refuted_by)}"
        )
    if a.identical_disagree:
        p = a.identical_disagree[0]
        out.append(
            f"{bullet}{len(a.identical_disagree)} pair(s) of cases agree on every axis (seed aside) and "
            f"disagree, e.g. {p.failing} fails and {p.passing} passes: the failure depends on the values drawn"
        )
    return out
