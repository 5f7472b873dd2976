"""The run's verdict, decided here and nowhere else, and its summary sentence.

- ``diagnosed``: an isolated case crashes or mismatches numerically;
- ``inconclusive``: nothing failed, but planned evidence is missing or a
  combination is unsupported;
- ``passed``: every planned case passed.

(A comparison's ``verdict`` field is the judge's sentence about one output:
runner/judge.py.)
"""

from __future__ import annotations

from collections.abc import Sequence

from ..schemas import Case, CaseFailure, FailureAxis, FailureGroup, Finding, IdenticalPair, RefutedLead
from ..wording import boundary


def run_verdict(failures: list[CaseFailure], missing: list[str], unsupported: list[CaseFailure]) -> str:
    """diagnosed when a case fails; inconclusive when nothing failed but evidence
    is missing or a combination is unsupported; passed otherwise."""
    if failures:
        return "diagnosed"
    if missing or unsupported:
        return "inconclusive"
    return "passed"


def verdict_summary(
    verdict: str,
    cases: list[Case],
    counts: dict[str, int],
    missing: list[str],
    axes: list[FailureAxis],
    findings: list[Finding],
    competing: Sequence[Finding] = (),
) -> str:
    """The verdict in one sentence: the counts, what the failures follow (the
    lead finding, its exactness and minimal pair, its competitors), what is missing."""
    summary = _summary(verdict, cases, counts, missing, axes)
    if verdict == "diagnosed" and findings:
        if not any(a.explains_all for a in axes):  # "share X but so do passing ones" is noise beside a finding
            summary = summary.split("; ", 1)[0].rstrip(".") + (
                f" ({len(missing)} planned case(s) still have no result)" if missing else ""
            )
        summary = summary.rstrip(".") + _findings_summary(findings, list(competing)) + "."
    elif verdict == "diagnosed" and counts["passed"] and not any(a.explains_all for a in axes):
        head = summary.split("; ", 1)[0].rstrip(".")
        tail = f" ({len(missing)} planned case(s) still have no result)" if missing else ""
        summary = (
            head + "; no predicate of the space separates failing from passing cases (no single axis "
            "value, no two together, no few separate causes)" + tail + "."
        )
    return summary


def _summary(
    verdict: str, cases: list[Case], counts: dict[str, int], missing: list[str], axes: list[FailureAxis]
) -> str:
    n = len(cases)
    if verdict == "diagnosed":
        failing = counts["numerical_mismatch"] + counts["crash"]
        text = (
            f"diagnosed: {failing} of {n} cases fail ({counts['numerical_mismatch']} numerical_mismatch, "
            f"{counts['crash']} crash)"
        )
        explaining = [f"{a.axis}={a.value}" for a in axes if a.explains_all]
        if explaining:
            text += f"; the failures follow {explaining[0]}"
            if len(explaining) > 1:
                text += f" (equally: {', '.join(explaining[1:4])})"
        elif not counts["passed"]:
            text += "; no case passes yet, so nothing shows which axis value the failures follow"
        elif axes:
            text += f"; the failing cases share {axes[0].axis}={axes[0].value} but so do passing ones"
        else:
            text += "; no single axis value separates failing from passing cases"
        if missing:
            text += f" ({len(missing)} planned case(s) still have no result)"
        return text + "."
    if verdict == "inconclusive":
        parts = []
        if missing:
            parts.append(
                f"{len(missing)} planned case(s) have no result ({', '.join(missing[:5])}"
                f"{', ...' if len(missing) > 5 else ''})"
            )
        if counts["unsupported"]:
            parts.append(f"{counts['unsupported']} case(s) are unsupported combinations")
        return f"inconclusive: nothing failed, but {' and '.join(parts)}."
    return f"passed: all {n} planned cases pass in isolation."


def _boundary(f: Finding) -> str:
    if f.kind == "threshold" and f.fails_at is not None:
        return boundary(f.passes_at, f.fails_at)
    if f.kind == "conjunction":
        return "; ".join(
            f"{t.axis} {boundary(t.passes_at, t.fails_at)}"
            for t in f.terms
            if t.kind == "threshold" and t.passes_at is not None
        )
    return ""


def _findings_summary(findings: list[Finding], competing: Sequence[Finding] = ()) -> str:
    if len(findings) > 1 or (findings[0].kind != "trend" and (findings[0].status or findings[0].cause)):
        # one finding per failing group: each said on its own with the group it covers, none a competitor
        return "; " + "; ".join(
            _group_label(f) + _one_summary(f, competing if len(findings) == 1 else []) for f in findings
        )
    return "; " + _one_summary(findings[0], competing)


def _one_summary(lead: Finding, competing: Sequence[Finding]) -> str:
    if lead.kind == "trend":
        return f"no exact finding: {lead.statement or lead.predicate}"
    text = f"finding: {lead.predicate}"
    bound = _boundary(lead)
    if lead.exact:
        text += " (exact"
        if bound:
            text += f"; {bound}"
        if lead.minimal_pair is not None:
            text += f"; minimal pair: {lead.minimal_pair.passing!r} passes, {lead.minimal_pair.failing!r} fails"
        text += ")"
    else:
        why = lead.why_not_exact[0] if lead.why_not_exact else "run the next cases"
        text += f" (not exact yet: {why})" if not competing else " (not exact yet: run the next cases)"
    others = [f.predicate for f in list(competing)[:3]]
    if others:
        more = len(competing) - len(others)
        text += f"; competing: {', '.join(others)}" + (f" and {more} more" if more > 0 else "")
    return text


def _group_label(f: Finding) -> str:
    if f.cause is not None:
        return f"{f.status + ' ' if f.status else ''}cause {f.cause} ({len(f.cases)} case(s)): "
    return f"{f.status} ({len(f.cases)} case(s)): " if f.status else ""


def accounted_summary(
    summary: str,
    verdict: str,
    findings: list[Finding],
    causes: int,
    unexplained: list[FailureGroup],
    refuted: list[RefutedLead],
    twins: list[IdenticalPair],
) -> str:
    """The summary with every failing group accounted for: several causes counted, the failing cases no
    finding covers, the leads a later case refuted (naming it), identical cases that disagree."""
    if verdict != "diagnosed":
        return summary
    extra = []
    if twins:
        extra.append(
            f"{len(twins)} pair(s) of cases agree on every axis (seed aside) and disagree - "
            f"{twins[0].failing!r} fails, {twins[0].passing!r} passes: the failure depends on the values "
            "drawn, not only on an axis"
        )
    if causes > 1:
        extra.append(f"{causes} separate causes (each finding covers its own failing cases)")
    for g in unexplained:
        if findings or len(unexplained) > 1 or g.status:
            what = f"{g.count} {g.status} case(s)" if g.status else f"{g.count} failing case(s)"
            extra.append(
                f"no finding for these {what} ({', '.join(g.cases[:3])}{', ...' if g.count > 3 else ''})"
                + (f"; closest: {g.survivors[0]}" if g.survivors else "")
            )
    for r in refuted[:3]:
        extra.append(
            f"refuted lead: {r.predicate}{' (was exact)' if r.was_exact else ''} - contradicted by "
            f"{', '.join(r.refuted_by[:3])}"
        )
    return summary if not extra else summary.rstrip(".") + "; " + "; ".join(extra) + "."
