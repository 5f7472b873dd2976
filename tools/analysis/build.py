"""build_analysis: the analysis of a run from its cases and results.

One pass per stage, each a plain function over what the previous stages
made, so a new stage (an integration-boundary diff, a picture) is one more
call in :func:`build_analysis` or one entry in :data:`EXTRA_STAGES`.
"""

from __future__ import annotations

from typing import Any, Callable

from ..cases.axes import axes_difference, case_axes
from ..cases.derived import case_distance_axes, structured_axes
from ..cases.ids import case_content
from ..schemas import Analysis, Case, CaseResult, Finding, now_utc
from .consistency import amend_summary, annotate_failures, consistency_report, evidence_for_findings
from .findings import minimal_pairs, rank_findings, separating_findings
from .integration_diff import integration_diff
from .reasons import FAILING, case_failure, failure_axes, integration_hint
from .suggestions import Context, dim_ties, narrowing, next_cases, unusable_modes
from .verdict import run_verdict, verdict_summary

# Extra stages: fn(analysis, config, cases, results) -> Analysis (or None to keep it).
EXTRA_STAGES: list[Callable[..., Any]] = []


def diagnose(cases: list[Case], results: dict[str, CaseResult], missing: list[str],
             labels: dict[str, dict[str, str]] | None = None) -> tuple[list[Finding], list]:
    """Findings (ranked, exactness set) and next cases of a run."""
    labels = labels or {c.id: case_axes(c) for c in cases}
    by_id = {c.id: c for c in cases}
    status = {}
    for c in cases:
        r = results.get(c.id)
        if r is not None:
            status[c.id] = "fail" if r.status in FAILING else "pass" if r.status == "passed" else "unsupported"
    ran = [c for c in cases if status.get(c.id) in ("fail", "pass")]
    axes = {c.id: structured_axes(c, labels[c.id]) for c in ran}
    dist = {c.id: case_distance_axes(c, labels[c.id]) for c in ran}
    failing = sorted(c.id for c in ran if status[c.id] == "fail")
    passing = sorted(c.id for c in ran if status[c.id] == "pass")
    findings = separating_findings(axes, failing, passing)
    minimal_pairs(findings, axes, dist, failing, passing, axes_difference)
    no_modes, cpu_only = unusable_modes(cases, results, status)
    ctx = Context(cases=by_id, axes=axes, dist=dist, status=status,
                  planned={case_content(c.model_dump(mode="json")) for c in cases}, findings=findings,
                  ties=dim_ties(cases), no_modes=no_modes, cpu_only=cpu_only)
    narrow = {f.axis: narrowing(ctx, f) for f in findings}
    for f in findings:
        f.exact = f.minimal_pair is not None and not narrow[f.axis]
        if f.exact and f.kind == "set" and f.axis.endswith(".contiguity") and len(f.passing_values) == 1:
            f.predicate = f"{f.axis} != {f.passing_values[0]}"  # every other layout it can have fails
    ranked = rank_findings(findings)
    return ranked, next_cases(ctx, ranked, narrow, results, missing)


def build_analysis(run_id: str, config, cases: list[Case], results: dict[str, CaseResult],
                   labels: dict[str, dict[str, str]] | None = None) -> Analysis:
    """The analysis of a run; ``labels`` are the cases' axes (``case_axes``) when already at hand."""
    planned_ids = {c.id for c in cases}
    results = {cid: r for cid, r in results.items() if cid in planned_ids}
    labels = labels if labels is not None else {c.id: case_axes(c) for c in cases}
    counts = {s: 0 for s in ("passed", "numerical_mismatch", "crash", "unsupported")}
    for r in results.values():
        counts[r.status] += 1
    missing = [c.id for c in cases if c.id not in results]
    counts["missing"] = len(missing)

    failures = [case_failure(c, results[c.id], labels[c.id]) for c in cases
                if c.id in results and results[c.id].status in FAILING]
    unsupported = [case_failure(c, results[c.id], labels[c.id]) for c in cases
                   if c.id in results and results[c.id].status == "unsupported"]
    crash_groups: dict[str, list[str]] = {}
    for f in failures:
        if f.status == "crash":
            crash_groups.setdefault(f.signature or "unknown", []).append(f.case_id)

    verdict = run_verdict(failures, missing, unsupported)
    # consistency checks (issue 21): nondeterministic and order-dependent cases are evidence of their own kind
    report = consistency_report(cases, results)
    annotate_failures(failures, report)
    ev_cases, ev_results = evidence_for_findings(cases, results, report)
    axes = failure_axes(ev_cases, ev_results, labels)
    findings, suggested = diagnose(ev_cases, ev_results, missing, labels)
    summary = verdict_summary(verdict, cases, counts, missing, axes, findings)
    summary = amend_summary(summary, verdict, counts, len(cases), report,
                            sum(1 for r in ev_results.values() if r.status in FAILING))
    hint = integration_hint(config.source_model_failure) if (
        verdict == "passed" and config.source_model_failure) else None
    analysis = Analysis(
        run_id=run_id,
        verdict=verdict,
        summary=summary,
        status_counts=counts,
        planned=len(cases),
        recorded=len(results),
        missing=missing,
        failures=failures,
        unsupported=unsupported,
        crash_groups=crash_groups,
        failure_axes=axes,
        integration_hint=hint,
        next_cases=suggested,
        findings=findings,
        # the model's captured calls vs the planned cases (issue 14): self-contained, pure
        integration_diff=integration_diff(cases, results),
        analyzed_at=now_utc(),
        consistency=report,
    )
    for stage in EXTRA_STAGES:
        analysis = stage(analysis, config, cases, results) or analysis
    return analysis
