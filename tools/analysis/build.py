"""build_analysis: the analysis of a run from its cases and results.

One pass per stage, each a plain function over what the previous stages
made, so a new stage (an integration-boundary diff, a picture) is one more
call in :func:`build_analysis` or one entry in :data:`EXTRA_STAGES`.

:func:`diagnose_run` works on the cases and results it is given and reads
nothing else, so a filter in front of it (cases flagged nondeterministic,
say) is one line in :func:`build_analysis`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cases.axes import axes_difference, case_axes, own_labels
from ..cases.constraints import Constraints, learn_from_run
from ..cases.derived import case_distance_axes, structured_axes
from ..cases.ids import case_content
from ..cases.memo import once
from ..conditions.grammar import cuts
from ..schemas import (
    MODES,
    Analysis,
    Case,
    CaseResult,
    Counterexample,
    FailureGroup,
    Finding,
    HypothesisSpace,
    IdenticalPair,
    NextCase,
    now_utc,
)
from .causes import MAX_PAIRS, Group, closest, failure_groups, identical_pairs
from .consistency import amend_summary, annotate_failures, consistency_report, evidence_for_findings
from .context import Context, dim_ties, tie_aliases, unusable_modes
from .crossing import crossing_cases
from .findings import hypothesis_finding, term_findings
from .hypotheses import CAP_TEXT, Hypothesis, enumerate_hypotheses, hypothesis_axes
from .integration_diff import integration_diff
from .leads import refuted_leads
from .measured import measured_quantities
from .narrowing import narrowing
from .outputs import annotate_outputs
from .pairs import pair_index
from .probes import counterexamples, falsified_note, falsifying, seed_pair_cases, validate
from .proposal import Proposal
from .reasons import FAILING, case_failure, failure_axes, integration_hint
from .settlement import competitor_note, necessary_only, settle
from .space import necessary_atom, read_absent_dims, widen
from .splitting import splitting
from .stated import stated_conditions
from .suggestions import next_cases
from .trend import trend_finding, trend_helps
from .verdict import accounted_summary, run_verdict, verdict_summary

# Extra stages: fn(analysis, config, cases, results) -> Analysis (or None to keep it).
EXTRA_STAGES: list[Callable[..., Any]] = []
MAX_COMPETING_SHOWN = 24
MAX_CASES_LISTED = 16


@dataclass
class Diagnosis:
    findings: list[Finding]
    next_cases: list[NextCase]
    competing: list[Finding] = field(default_factory=list)
    space: HypothesisSpace | None = None
    counterexamples: list[Counterexample] = field(default_factory=list)  # probes that refuted a lead
    causes: int = 0  # separate causes among the findings
    unexplained: list[FailureGroup] = field(default_factory=list)
    twins: list[tuple[str, str]] = field(default_factory=list)  # (passing, failing) identical on every axis
    hax: dict[str, dict] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    context: Any = None  # the run-level Context (stated conditions' probes are built on it)
    probes: list[tuple[Proposal, NextCase]] = field(default_factory=list)  # the leads' probes, as proposed


def diagnose(
    cases: list[Case],
    results: dict[str, CaseResult],
    missing: list[str],
    labels: dict[str, dict[str, str]] | None = None,
) -> tuple[list[Finding], list]:
    """Findings (the leading hypothesis, exactness set) and next cases of a run."""
    d = diagnose_run(cases, results, missing, labels)
    return d.findings, d.next_cases


def _content(case: Case) -> str:
    return case_content(case.model_dump(mode="json"))


class _Planned:
    """The planned cases, found by their seed and labels (case_axes, already at hand); a next case's content is
    compared only with those of the planned cases that read the same (equal contents have equal labels), each
    planned case's content computed the first time it is compared."""

    def __init__(self, cases: list[Case]):
        self.cases = cases
        self.by_labels: dict[tuple, list[Case]] | None = None

    def has(self, case: Case, content: str) -> bool:
        """Is a case of ``content`` (``case``'s) planned?"""
        if self.by_labels is None:
            self.by_labels = {}
            for c in self.cases:
                self.by_labels.setdefault(_label_key(c, own_labels(c)), []).append(c)
        same = self.by_labels.get(_label_key(case, case_axes(case)), ())
        return any(once(c, "content", functools.partial(_content, c)) == content for c in same)


def _label_key(case: Case, labels: dict[str, str]) -> tuple:
    return (case.seed, *labels.items())


def _statuses(cases: list[Case], results: dict[str, CaseResult]) -> dict[str, str]:
    status = {}
    for c in cases:
        r = results.get(c.id)
        if r is not None:
            status[c.id] = "fail" if r.status in FAILING else "pass" if r.status == "passed" else "unsupported"
    return status


@dataclass
class _Run:
    """What every failing group's diagnosis shares: the ran cases' axes, ties and unusable modes."""

    by_id: dict[str, Case]
    status: dict[str, str]
    axes: dict[str, dict]
    hax: dict[str, dict]
    dist: dict[str, dict]
    failing: list[str]
    passing: list[str]
    ties: dict[str, list[str]]
    aliases: dict[str, str]
    no_modes: set[str]
    cpu_only: bool
    planned: _Planned
    twins: list[tuple[str, str]] = field(default_factory=list)  # identical cases that disagree
    constraints: Constraints | None = None  # what the reference's refusals taught a valid call is
    proposed: set[str] = field(default_factory=set)  # next cases' contents: one group never repeats another's


def _prepare(
    cases: list[Case], results: dict[str, CaseResult], labels: dict[str, dict[str, str]] | None, modes: set[str] | None
) -> _Run:
    labels = labels or {c.id: case_axes(c) for c in cases}
    status = _statuses(cases, results)
    ran = [c for c in cases if status.get(c.id) in ("fail", "pass")]
    axes = {c.id: structured_axes(c, labels[c.id]) for c in ran}
    hax = {c.id: hypothesis_axes(c, labels[c.id], axes[c.id]) for c in ran}
    dist = {c.id: case_distance_axes(c, labels[c.id]) for c in ran}
    ties = dim_ties(ran or cases)  # dimensions equal in every case that ran (a refused case says nothing)
    aliases = tie_aliases(ties, [i.name for i in cases[0].inputs] if cases else [])
    for spec in cases[0].inputs if cases else []:  # a vector's element count is its one dimension
        if all(
            any(i.name == spec.name and not i.none and i.shape is not None and len(i.shape) == 1 for i in c.inputs)
            for c in (ran or cases)
        ):
            last = f"{spec.name}.shape[-1]"
            aliases[f"{spec.name}.numel"] = aliases.get(last, last)
    no_modes, cpu_only = unusable_modes(cases, results, status)
    if modes is not None:  # what no host of the call can run, whatever the recorded results say
        no_modes |= set(MODES) - set(modes)
    return _Run(
        {c.id: c for c in cases},
        status,
        axes,
        hax,
        dist,
        sorted(c.id for c in ran if status[c.id] == "fail"),
        sorted(c.id for c in ran if status[c.id] == "pass"),
        ties,
        aliases,
        no_modes,
        cpu_only,
        _Planned(cases),
        identical_pairs(dist, status, {c.id: c for c in ran}),
    )


def diagnose_run(
    cases: list[Case],
    results: dict[str, CaseResult],
    missing: list[str],
    labels: dict[str, dict[str, str]] | None = None,
    modes: set[str] | None = None,
    constraints: Constraints | None = None,
) -> Diagnosis:
    """Every failing group (analysis/causes.py) diagnosed: its hypotheses, the leading one settled (exact or
    why not, after the probes built to break it: probes.py), its competitors and next cases; a group without
    one is reported with its closest survivors.  ``modes``: the modes the hosts can run (None: as the
    recorded results say)."""
    run = _prepare(cases, results, labels, modes)
    run.constraints = constraints
    filled = read_absent_dims(run.hax)  # every case predicts: x.shape[1] of a rank-2 case is its last dimension
    # a pass equal but for the seed (or its id, which seeds it) to a failure refutes no structure: the values decide
    conflicts = dict(run.twins)  # passing case -> the failing case it equals (causes.identical_pairs)
    refuted = counterexamples(run.by_id, run.status)  # probes whose outcome their lead did not predict
    passing = [c for c in run.passing if c not in conflicts]
    kinds = {c: results[c].status for c in run.failing}
    space = None
    if run.failing and passing:  # the open space, when no atom of the first one separates the cases
        space, run.hax = widen(
            enumerate_hypotheses(run.hax, run.failing, passing, run.aliases),
            run.hax,
            run.by_id,
            run.failing,
            passing,
            run.aliases,
            _measured(run, results),
        )
    groups = failure_groups(run.hax, run.failing, passing, kinds, run.aliases, space) if run.failing else []
    parts = [
        _diagnose_group(run, g, passing, results, missing if i == 0 else [], filled, conflicts, refuted)
        for i, g in enumerate(groups)
    ]
    if not parts:
        return Diagnosis(
            [],
            _diagnose_group(run, None, passing, results, missing, filled, conflicts, refuted).next_cases,
            [],
            None,
            refuted,
        )
    d = Diagnosis(
        [f for p in parts for f in p.findings],
        _interleave([p.next_cases for p in parts]),
        [f for p in parts for f in p.competing][:MAX_COMPETING_SHOWN],
        parts[0].space,
        refuted,
    )
    d.causes = sum(1 for g in groups if g.cause is not None and g.space is not None and g.space.hypotheses)
    d.unexplained = [u for p in parts for u in p.unexplained]
    d.twins, d.hax, d.status = run.twins, run.hax, run.status
    d.probes = [x for p in parts for x in p.probes]
    d.context = _run_context(run)
    return d


def _measured(run: _Run, results: dict[str, CaseResult]) -> dict[str, dict]:
    """The statistics of the values actually built, of the inputs whose value specs differ between the cases
    that ran: where every case draws its values alike, a statistic differs by chance alone and says nothing."""
    keys = {k for c in run.hax for k in run.dist[c] if k.endswith(".values")}
    varied = {k[: -len(".values")] for k in keys if len({run.dist[c].get(k) for c in run.hax}) > 1}
    if not varied:
        return {}
    out = {}
    for c in run.hax:
        stats = measured_quantities(results.get(c))
        out[c] = {k: v for k, v in stats.items() if k.partition(".values.")[0] in varied}
    return out


def _run_context(run: _Run, status: dict[str, str] | None = None) -> Context:
    """The run as one proposals' context (every recorded case; ``status``: a group's view of it, else each
    case's own), the calls the reference refused kept out of every proposal."""
    return Context(
        cases=run.by_id,
        axes=run.axes,
        dist=run.dist,
        status=run.status if status is None else status,
        planned=run.planned,
        findings=[],
        ties=run.ties,
        no_modes=run.no_modes,
        cpu_only=run.cpu_only,
        hax=run.hax,
        seen_contents=run.proposed,
        constraints=run.constraints,
    )


def _interleave(lists: list[list[NextCase]]) -> list[NextCase]:
    """Each group's next cases in turn (a budget narrows every cause), the planned-but-missing ones last."""
    out: list[NextCase] = []
    heads = [[n for n in li if n.kind != "missing"] for li in lists]
    for i in range(max((len(h) for h in heads), default=0)):
        out.extend(h[i] for h in heads if i < len(h))
    return out + [n for li in lists for n in li if n.kind == "missing"]


def _group_status(run: _Run, group: Group | None, passing: list[str]) -> dict[str, str]:
    if group is None:
        return {c: ("other" if s == "pass" and c not in passing else s) for c, s in run.status.items()}
    inside, kept = set(group.cases), set(passing)
    return {
        c: ("fail" if c in inside else "pass" if c in kept else "other" if s in ("fail", "pass") else s)
        for c, s in run.status.items()
    }


def _pair_context(run: _Run, status: dict[str, str], failing: list[str]):
    """The minimal-pair index over the group's statuses and the failing cases' dtypes per input."""
    tied: dict[str, set[str]] = {}
    for dim, others in run.ties.items():
        tied.setdefault(dim.split(".shape[", 1)[0], set()).update(o.split(".shape[", 1)[0] for o in others)
    index = pair_index(run.dist, run.axes, status, tied)
    dtype_sets: dict[str, set[str]] = {}
    for c in failing:
        for spec in run.by_id[c].inputs:
            for j, m in enumerate(spec.members()):
                dtype_sets.setdefault(spec.name if spec.tensors is None else f"{spec.name}[{j}]", set()).add(m.dtype)
    return index, {k: sorted(v) for k, v in dtype_sets.items()}


def _without_hypothesis(
    run: _Run,
    group: Group | None,
    ctx,
    passing: list[str],
    results: dict[str, CaseResult],
    missing: list[str],
    conflicts: dict[str, str],
    refuted: list[Counterexample],
) -> Diagnosis:
    """A group no hypothesis separates: a necessary condition when the values decide (a pass equal but for
    the seed), else a trend where one can help, else the group is reported unexplained with its closest
    survivors; the minimal pair re-run with other seeds comes first."""
    failing = group.cases if group is not None else []
    flips = {p: q for p, q in conflicts.items() if q in set(failing)}
    if group is not None and flips:
        nec = necessary_atom(run.hax, failing, [*passing, *flips])
        if nec is not None:  # value-dependent: the condition every failing case has, never exact
            index, dtypes = _pair_context(run, ctx.status, failing)
            f = hypothesis_finding(
                Hypothesis((nec,)), run.hax, run.dist, failing, [*passing, *flips], index, axes_difference, dtypes
            )
            necessary_only(f, flips, sum(1 for c in [*passing, *flips] if nec.holds(run.hax[c].get(nec.axis))))
            f.status, f.cause, f.cases = group.status, group.cause, failing[:MAX_CASES_LISTED]
            return Diagnosis([f], next_cases(ctx, None, {}, missing), [], None, refuted)
    trend = None
    if (
        group is not None
        and group.cause is None
        and not flips
        and group.status != "crash"
        and trend_helps(results, failing)
    ):  # a crash has no error to grow
        trend = trend_finding(run.hax, run.dist, results, failing, passing) if failing and passing else None
    if trend is not None and group is not None:  # a trend is only sought for a group
        trend.status, trend.cases = group.status, failing[:MAX_CASES_LISTED]
    nxt = next_cases(ctx, None, {}, missing)
    d = Diagnosis(
        [trend] if trend else [],
        ([p.next_case() for p in seed_pair_cases(ctx)] if group is not None else []) + nxt,
        [],
        None,
        refuted,
    )
    if group is not None and trend is None:
        d.unexplained = [
            FailureGroup(
                status=group.status,
                count=len(failing),
                cases=failing[:MAX_CASES_LISTED],
                survivors=closest(run.hax, failing, passing),
            )
        ]
    return d


def _diagnose_group(
    run: _Run,
    group: Group | None,
    passing: list[str],
    results: dict[str, CaseResult],
    missing: list[str],
    filled: list,
    conflicts: dict[str, str],
    refuted: list[Counterexample],
) -> Diagnosis:
    status = _group_status(run, group, passing)
    failing = group.cases if group is not None else []
    ctx = _run_context(run, status)
    if group is None or group.space is None or not group.space.hypotheses:
        return _without_hypothesis(run, group, ctx, passing, results, missing, conflicts, refuted)
    space = group.space
    index, dtypes = _pair_context(run, status, failing)
    findings = [
        hypothesis_finding(h, run.hax, run.dist, failing, list(passing), index, axes_difference, dtypes)
        for h in space.hypotheses
    ]
    ctx.findings, ctx.hyps = findings, space.hypotheses
    ctx.terms = {h.text: term_findings(f) for h, f in zip(space.hypotheses, findings, strict=True)}
    cut = cuts(run.by_id[c] for c in failing + passing)  # what the grammar's bounds left out, said with the caps
    summary = HypothesisSpace(
        axes=space.axes,
        consistent=space.consistent,
        conjunctions=space.conjunctions,
        capped=space.capped,
        cap=CAP_TEXT + (f"; the grammar left out: {', '.join(cut)}" if cut else ""),
    )
    lead, lead_hyp = findings[0], space.hypotheses[0]
    terms = ctx.terms[lead_hyp.text]
    splits = splitting(ctx)  # first: a case that splits hypotheses is a split, whatever else it narrows
    narrow: dict[str, list] = {}
    for t in terms:  # a band's two ends narrow one quantity
        narrow.setdefault(t.axis, []).extend(narrowing(ctx, t, lead_hyp.text))
    cross = crossing_cases(ctx, lead, lead_hyp.sources())
    settle(lead, terms, lead_hyp, space.hypotheses, space.capped, narrow, cross, dtypes, group.alternative)
    # falsify before exact (probes.py): a lead exact in the closed world gets the cases built to break it
    # (the checks are listed once the closed-world test holds: before, the lead is still being narrowed)
    flips = {p: q for p, q in conflicts.items() if q in set(failing)}
    reqs, probes = (
        falsifying(ctx, lead, lead_hyp, terms, propose=not flips, others=group.others) if lead.exact else ([], [])
    )
    validate(ctx, lead, lead_hyp, reqs, filled, flips)
    lead.counterexamples = [c for c in refuted if c.refutes != lead_hyp.text]
    for f in findings[1:]:
        competitor_note(f, lead)
    for f in findings:
        f.status, f.cause = group.status, group.cause
    lead.cases = failing[:MAX_CASES_LISTED]  # the competitors cover the same cases: listed once
    nxt = next_cases(ctx, lead, narrow, missing, splits=splits, cross=cross, lead_hyp=lead_hyp.text)
    at = next((i for i, n in enumerate(nxt) if n.kind == "missing"), len(nxt))
    probe_nexts = [p.next_case() for p in probes]
    nxt[at:at] = probe_nexts
    d = Diagnosis([lead], nxt, findings[1 : 1 + MAX_COMPETING_SHOWN], summary, refuted)
    d.probes = list(zip(probes, probe_nexts, strict=True))
    return d


def _stated_stage(analysis: Analysis, conditions, cases, results, labels, diagnosis: Diagnosis, modes) -> None:
    """The stated conditions answered and settled (stated.py); the cases built to break them come first."""
    ctx = diagnosis.context or _run_context(_prepare(cases, results, labels, modes))
    tool = [p for p, _ in diagnosis.probes]
    analysis.conditions, probes = stated_conditions(
        conditions, cases, results, labels, ctx, analysis.findings, diagnosis.competing, tool
    )
    moved = [n for _, n in diagnosis.probes]  # every probe, the leads' too, ranked together: first
    analysis.next_cases = [p.next_case() for p in probes] + [n for n in analysis.next_cases if n not in moved]


def _recorded(cases: list[Case], results: dict[str, CaseResult], labels: dict[str, dict[str, str]]):
    """What was recorded: the counts by status (and missing), the missing case ids, the failures and the
    unsupported cases (each with its axes), the crashes grouped by signature."""
    counts = {s: 0 for s in ("passed", "numerical_mismatch", "crash", "unsupported")}
    for r in results.values():
        counts[r.status] += 1
    missing = [c.id for c in cases if c.id not in results]
    counts["missing"] = len(missing)
    failures = [
        case_failure(c, results[c.id], labels[c.id])
        for c in cases
        if c.id in results and results[c.id].status in FAILING
    ]
    unsupported = [
        case_failure(c, results[c.id], labels[c.id])
        for c in cases
        if c.id in results and results[c.id].status == "unsupported"
    ]
    crash_groups: dict[str, list[str]] = {}
    for f in failures:
        if f.status == "crash":
            crash_groups.setdefault(f.signature or "unknown", []).append(f.case_id)
    return counts, missing, failures, unsupported, crash_groups


def build_analysis(
    run_id: str,
    config,
    cases: list[Case],
    results: dict[str, CaseResult],
    labels: dict[str, dict[str, str]] | None = None,
    *,
    previous: Analysis | None = None,
    modes: set[str] | None = None,
    refusals: dict[str, str] | None = None,
    conditions: list[str] | None = None,
) -> Analysis:
    """The analysis of a run; ``labels`` are the cases' axes (``case_axes``) when already at hand;
    ``previous``: the run's last analysis (its findings that a case now refutes are reported); ``modes``: the
    modes the hosts can run (next cases propose no other); ``refusals``: the calls the reference refused
    (``RunStore.read_refusals``): what a valid call is, learned from them, no next case breaks."""
    planned_ids = {c.id for c in cases}
    results = {cid: r for cid, r in results.items() if cid in planned_ids}
    labels = labels if labels is not None else {c.id: case_axes(c) for c in cases}
    counts, missing, failures, unsupported, crash_groups = _recorded(cases, results, labels)

    verdict = run_verdict(failures, missing, unsupported)
    # consistency checks: nondeterministic and order-dependent cases are evidence of their own kind
    report = consistency_report(cases, results)
    annotate_failures(failures, report)
    ev_cases, ev_results = evidence_for_findings(cases, results, report)
    axes = failure_axes(ev_cases, ev_results, labels)
    constraints = learn_from_run(cases, results, refusals)  # every next case is a valid call
    diagnosis = diagnose_run(ev_cases, ev_results, missing, labels, modes, constraints)
    findings = diagnosis.findings
    refuted = refuted_leads(
        previous,
        findings,
        diagnosis.competing,
        diagnosis.hax,
        diagnosis.status,
        {c: r.status for c, r in ev_results.items()},
    )
    twins = [IdenticalPair(passing=p, failing=q) for p, q in diagnosis.twins[:MAX_PAIRS]]
    summary = verdict_summary(verdict, cases, counts, missing, axes, findings, competing=diagnosis.competing)
    summary = accounted_summary(summary, verdict, findings, diagnosis.causes, diagnosis.unexplained, refuted, twins)
    summary = amend_summary(
        summary, verdict, counts, len(cases), report, sum(1 for r in ev_results.values() if r.status in FAILING)
    )
    summary += falsified_note(findings, diagnosis.counterexamples)
    hint = (
        integration_hint(config.source_model_failure) if (verdict == "passed" and config.source_model_failure) else None
    )
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
        # the model's captured calls vs the planned cases: self-contained, pure
        integration_diff=integration_diff(cases, results),
        analyzed_at=now_utc(),
        competing=diagnosis.competing,
        hypotheses=diagnosis.space,
        consistency=report,
        causes=diagnosis.causes,
        unexplained=diagnosis.unexplained,
        refuted=refuted,
        identical_disagree=twins,
        counterexamples=diagnosis.counterexamples,
        valid_calls=constraints.sentences(),
    )
    if conditions:  # the agent's conditions: answered on the recorded cases, then through the settlement
        _stated_stage(analysis, conditions, ev_cases, ev_results, labels, diagnosis, modes)
    # which output fails (a gradient is an output): failures, findings, per-output summaries
    analysis = annotate_outputs(analysis, ev_cases, ev_results, diagnose)
    for stage in EXTRA_STAGES:
        analysis = stage(analysis, config, cases, results) or analysis
    return analysis
