"""build_analysis: the analysis of a run from its cases and results.

One pass per stage, each a plain function over what the previous stages
made, so a new stage (an integration-boundary diff, a picture) is one more
call in :func:`build_analysis` or one entry in :data:`EXTRA_STAGES`.

:func:`diagnose_run` works on the cases and results it is given and reads
nothing else, so a filter in front of it (cases flagged nondeterministic,
say) is one line in :func:`build_analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..cases.axes import axes_difference, case_axes
from ..cases.derived import case_distance_axes, structured_axes
from ..cases.ids import case_content
from ..schemas import Analysis, Case, CaseResult, Counterexample, Finding, HypothesisSpace, NextCase, now_utc
from .consistency import amend_summary, annotate_failures, consistency_report, evidence_for_findings
from .exactness import competitor_note, settle
from .findings import hypothesis_finding, term_findings
from .hypotheses import CAP_TEXT, Hypothesis, enumerate_hypotheses, hypothesis_axes
from .integration_diff import integration_diff
from .outputs import annotate_outputs
from .pairs import pair_index
from .probes import (counterexamples, falsified_note, necessary_atom, necessary_note, read_absent_dims,
                     seed_conflicts, validate, widen)
from .reasons import FAILING, case_failure, failure_axes, integration_hint
from .suggestions import (Context, crossing_candidates, dim_ties, falsifying, narrowing, next_cases, seed_probing,
                          splitting, tie_aliases, unusable_modes)
from .trend import trend_finding
from .verdict import run_verdict, verdict_summary

# Extra stages: fn(analysis, config, cases, results) -> Analysis (or None to keep it).
EXTRA_STAGES: list[Callable[..., Any]] = []
MAX_COMPETING_SHOWN = 24


@dataclass
class Diagnosis:
    findings: list[Finding]
    next_cases: list[NextCase]
    competing: list[Finding] = field(default_factory=list)
    space: HypothesisSpace | None = None
    counterexamples: list[Counterexample] = field(default_factory=list)  # probes that refuted a lead


def diagnose(cases: list[Case], results: dict[str, CaseResult], missing: list[str],
             labels: dict[str, dict[str, str]] | None = None) -> tuple[list[Finding], list]:
    """Findings (the leading hypothesis, exactness set) and next cases of a run."""
    d = diagnose_run(cases, results, missing, labels)
    return d.findings, d.next_cases


class _Planned:
    """The planned cases' contents, computed the first time a next case is checked against them."""

    def __init__(self, cases: list[Case]):
        self.cases, self.contents = cases, None

    def __contains__(self, content: str) -> bool:
        if self.contents is None:
            self.contents = {case_content(c.model_dump(mode="json")) for c in self.cases}
        return content in self.contents


def _statuses(cases: list[Case], results: dict[str, CaseResult]) -> dict[str, str]:
    status = {}
    for c in cases:
        r = results.get(c.id)
        if r is not None:
            status[c.id] = "fail" if r.status in FAILING else "pass" if r.status == "passed" else "unsupported"
    return status


def diagnose_run(cases: list[Case], results: dict[str, CaseResult], missing: list[str],
                 labels: dict[str, dict[str, str]] | None = None) -> Diagnosis:
    """Every hypothesis consistent with the given cases, the leading one
    settled (exact or why not), its competitors, and the next cases."""
    labels = labels or {c.id: case_axes(c) for c in cases}
    by_id = {c.id: c for c in cases}
    status = _statuses(cases, results)
    ran = [c for c in cases if status.get(c.id) in ("fail", "pass")]
    axes = {c.id: structured_axes(c, labels[c.id]) for c in ran}
    hax = {c.id: hypothesis_axes(c, labels[c.id], axes[c.id]) for c in ran}
    dist = {c.id: case_distance_axes(c, labels[c.id]) for c in ran}
    failing = sorted(c.id for c in ran if status[c.id] == "fail")
    passing = sorted(c.id for c in ran if status[c.id] == "pass")
    ties = dim_ties(ran or cases)  # dimensions equal in every case that ran (a refused case says nothing)
    aliases = tie_aliases(ties, [i.name for i in cases[0].inputs] if cases else [])
    for spec in (cases[0].inputs if cases else []):  # a vector's element count is its one dimension
        if all(any(i.name == spec.name and not i.none and i.shape is not None and len(i.shape) == 1
                   for i in c.inputs) for c in (ran or cases)):
            last = f"{spec.name}.shape[-1]"
            aliases[f"{spec.name}.numel"] = aliases.get(last, last)
    no_modes, cpu_only = unusable_modes(cases, results, status)
    planned = _Planned(cases)

    filled = read_absent_dims(hax)  # every case predicts: x.shape[1] of a rank-2 case is its last dimension
    conflicts = seed_conflicts(by_id, status)  # a pass equal but for the seed to a failure refutes no structure
    refuted = counterexamples(by_id, status)  # probes whose outcome their lead did not predict
    for c in conflicts:
        status[c] = "other"
    passing = [c for c in passing if c not in conflicts]
    space, hax = widen(enumerate_hypotheses(hax, failing, passing, aliases), hax, by_id, failing, passing, aliases)
    group_status: str | None = None
    kinds = sorted({results[c].status for c in failing})
    if not space.hypotheses and len(kinds) > 1:  # each failing status on its own
        for kind in kinds:
            sub = [c for c in failing if results[c].status == kind]
            sub_space = enumerate_hypotheses(hax, sub, passing, aliases)
            if sub_space.hypotheses:
                space, group_status, failing = sub_space, kind, sub
                status = {c: ("fail" if c in sub else s if s != "fail" else "other") for c, s in status.items()}
                break
    tied: dict[str, set[str]] = {}
    for dim, others in ties.items():
        tied.setdefault(dim.split(".shape[", 1)[0], set()).update(o.split(".shape[", 1)[0] for o in others)
    index = pair_index(dist, axes, status, tied)
    dtypes = {}
    for c in failing:
        for spec in by_id[c].inputs:
            for j, m in enumerate(spec.members()):
                name = spec.name if spec.tensors is None else f"{spec.name}[{j}]"
                dtypes.setdefault(name, set()).add(m.dtype)
    dtypes = {k: sorted(v) for k, v in dtypes.items()}
    findings = [hypothesis_finding(h, hax, dist, failing, passing, index, axes_difference, dtypes)
                for h in space.hypotheses]
    ctx = Context(cases=by_id, axes=axes, dist=dist, status=status, planned=planned, findings=findings,
                  ties=ties, no_modes=no_modes, cpu_only=cpu_only, hyps=space.hypotheses, hax=hax,
                  terms={h.text: term_findings(f) for h, f in zip(space.hypotheses, findings)})
    summary = HypothesisSpace(axes=space.axes, consistent=space.consistent, conjunctions=space.conjunctions,
                              capped=space.capped, cap=CAP_TEXT)
    if not findings:
        nec = necessary_atom(hax, failing, [*passing, *conflicts]) if conflicts else None
        if nec is not None:  # value-dependent: the condition every failing case has, never exact
            f = hypothesis_finding(Hypothesis((nec,)), hax, dist, failing, [*passing, *conflicts], index,
                                   axes_difference, dtypes)
            necessary_note(f, conflicts, sum(1 for c in [*passing, *conflicts] if nec.holds(hax[c].get(nec.axis))))
            return Diagnosis([f], next_cases(ctx, None, {}, results, missing), [], summary, refuted)
        trend = trend_finding(hax, dist, results, failing, passing) if failing and passing else None
        nxt = next_cases(ctx, None, {}, results, missing)
        return Diagnosis([trend] if trend else [], seed_probing(ctx) + nxt, [], summary, refuted)
    lead, lead_hyp = findings[0], space.hypotheses[0]
    terms = ctx.terms[lead_hyp.text]
    splits = splitting(ctx)  # first: a case that splits hypotheses is a split, whatever else it narrows
    narrow = {t.axis: narrowing(ctx, t, lead_hyp.text) for t in terms}
    cross = crossing_candidates(ctx, lead, lead_hyp.sources())
    settle(lead, terms, space.hypotheses, space.capped, narrow, cross, dtypes)
    # falsify before exact (probes.py): a lead exact in the closed world gets the cases built to break it
    # (the checks are listed once the closed-world test holds: before, the lead is still being narrowed)
    reqs, probes = falsifying(ctx, lead, lead_hyp, terms, propose=not conflicts) if lead.exact else ([], [])
    validate(ctx, lead, lead_hyp, reqs, filled, conflicts)
    lead.counterexamples = [c for c in refuted if c.refutes != lead_hyp.text]
    for f in findings[1:]:
        competitor_note(f, lead)
    for f in findings:
        f.status = group_status
    nxt = next_cases(ctx, lead, narrow, results, missing, splits=splits, cross=cross, lead_hyp=lead_hyp.text)
    at = next((i for i, n in enumerate(nxt) if n.kind == "missing"), len(nxt))
    nxt[at:at] = probes
    return Diagnosis([lead], nxt, findings[1:1 + MAX_COMPETING_SHOWN], summary, refuted)


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
    diagnosis = diagnose_run(ev_cases, ev_results, missing, labels)
    findings = diagnosis.findings
    summary = verdict_summary(verdict, cases, counts, missing, axes, findings, competing=diagnosis.competing)
    summary = amend_summary(summary, verdict, counts, len(cases), report,
                            sum(1 for r in ev_results.values() if r.status in FAILING))
    summary += falsified_note(findings, diagnosis.counterexamples)
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
        next_cases=diagnosis.next_cases,
        findings=findings,
        # the model's captured calls vs the planned cases (issue 14): self-contained, pure
        integration_diff=integration_diff(cases, results),
        analyzed_at=now_utc(),
        competing=diagnosis.competing,
        hypotheses=diagnosis.space,
        consistency=report,
        counterexamples=diagnosis.counterexamples,
    )
    # which output fails (a gradient is an output): failures, findings, per-output summaries
    analysis = annotate_outputs(analysis, ev_cases, ev_results, diagnose)
    for stage in EXTRA_STAGES:
        analysis = stage(analysis, config, cases, results) or analysis
    return analysis
