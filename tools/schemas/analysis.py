"""The analysis of a run: per-case failures, failure axes, findings with
minimal pairs, next cases, the integration diff, the verdict."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from .base import Status, Strict
from .consistency import ConsistencyReport

# --------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------


class CaseFailure(Strict):
    case_id: str = Field(description="the case")
    status: Status = Field(description="its status")
    signature: str | None = Field(None, description="crash/mismatch signature")
    reason: str | None = Field(None, description="what failed")
    axes: dict[str, str] = Field(description="the case's axis values")
    failing_outputs: list[str] = Field(
        default_factory=list, description="the outputs that failed (forward outputs, grad.<input>)"
    )
    flags: list[str] = Field(default_factory=list, description="consistency flags: not evidence of an axis")


class FailureAxis(Strict):
    axis: str = Field(description="axis name")
    value: str = Field(description="axis value")
    failing: int = Field(description="failing cases with it")
    total_with_value: int = Field(description="cases with it")
    explains_all: bool = Field(description="every failure has it and no pass does")


class MinimalPair(Strict):
    """The closest passing and failing cases that differ only in one variation axis."""

    passing: str = Field(description="id of the passing case")
    failing: str = Field(description="id of the failing case")
    passing_value: Any = Field(description="the finding's axis value in the passing case")
    failing_value: Any = Field(description="the finding's axis value in the failing case")
    differs_in: list[str] = Field(
        description="the variation axes in which the two cases differ (one, or a shape and its strides)"
    )
    passing_planned: dict[str, str] = Field(
        default_factory=dict,
        description="the passing case's planned values (case-matrix axes) where the two "
        "differ, e.g. {'x.offset': '8'} or {'x.shape': '16x192'}",
    )
    failing_planned: dict[str, str] = Field(
        default_factory=dict, description="the failing case's planned values where the two differ"
    )


class Term(Strict):
    """One term of a conjunction finding (``dtype == float16 and x.shape[-1] > 1024``)."""

    axis: str = Field(description="the term's axis")
    kind: Literal["value", "set", "threshold", "class", "relation"] = Field(description="as a finding's kind")
    predicate: str = Field(description="the term as text, e.g. 'x.shape[-1] > 1024'")
    source: str = Field(description="the variation axis that moves it")
    failing_values: list[Any] = Field(description="its axis values in failing cases")
    passing_values: list[Any] = Field(description="its axis values in passing cases where the other term holds")
    direction: Literal["above", "below"] | None = Field(default=None, description="threshold: failures above or below")
    passes_at: float | None = Field(
        default=None,
        description="threshold: the recorded value nearest the boundary on the passing side (the other term holding)",
    )
    fails_at: float | None = Field(
        default=None, description="threshold: the recorded value nearest the boundary on the failing side"
    )
    minimal_pair: MinimalPair | None = Field(
        default=None, description="a passing and a failing case, the other term holding in both, differing only there"
    )


class Counterexample(Strict):
    """A recorded case whose outcome a finding predicted wrongly (a probe built to break it did)."""

    case_id: str = Field(description="the case")
    refutes: str = Field(description="the predicate it refutes")
    predicted: Literal["fail", "pass"] = Field(description="what the predicate said")
    observed: Literal["fail", "pass"] = Field(description="what the case did")
    probe: str | None = Field(default=None, description="the probe it was built as (far side, re-pin, seed...)")


class ConditionAnswer(Strict):
    """A condition the agent stated (references/conditions.md), tested against the recorded cases:
    true predicts a failure (numerical_mismatch or crash), false a pass; unsupported and pending
    cases are not counted."""

    condition: str = Field(description="the condition, in its canonical text")
    fate: Literal["refuted", "surviving", "exact"] = Field(
        description="refuted: a recorded case contradicts it; surviving: none does (yet); exact: settled"
    )
    agree: list[str] = Field(default_factory=list, description="recorded cases it predicts (the first ones)")
    agree_count: int = Field(0, description="all of them")
    contradict: list[str] = Field(default_factory=list, description="recorded cases it predicts wrongly")
    contradict_count: int = Field(0, description="all of them")
    undefined: list[str] = Field(
        default_factory=list, description="recorded cases lacking a name it reads (a dimension beyond the rank)"
    )
    undefined_count: int = Field(0, description="all of them")
    counterexamples: list[Counterexample] = Field(
        default_factory=list, description="contradicting cases: what it predicted, what they did"
    )
    text: str = Field(description="the answer in words, with the counterexamples' values")
    validation: Validation | None = Field(default=None, description="the cases built to break it")
    told_apart: list[str] = Field(default_factory=list, description="competitors a recorded case told apart")
    not_told_apart: list[str] = Field(default_factory=list, description="competitors not told apart yet")
    why_not_exact: list[str] = Field(default_factory=list, description="what keeps it from exact")


class Validation(Strict):
    """The falsification of a finding: cases built to break it and whether each prediction held."""

    probes_run: int = Field(description="recorded probe cases (planned to break the finding)")
    probes_held: int = Field(description="of them, the ones whose outcome the finding predicted")
    probe_ids: list[str] = Field(default_factory=list, description="the probe cases")
    recorded: int = Field(description="recorded cases the finding predicts (all of them: fail or pass)")
    held: list[str] = Field(default_factory=list, description="the probes done, in words")
    open: list[str] = Field(default_factory=list, description="the probes still to run, in words")
    not_applicable: list[str] = Field(
        default_factory=list, description="how the finding reads in cases that lack its axis (another rank, no input)"
    )
    value_dependent: list[str] = Field(
        default_factory=list, description="cases identical but for the seed that disagree: the values decide too"
    )
    text: str = Field(description="e.g. 'predicted 14/14 probes'")


class Finding(Strict):
    """A predicate over one axis that separates every failing case from every passing one."""

    axis: str = Field(description="the axis, e.g. 'x.shape[-1]', 'x.numel', 'x.contiguity', 'attr.approximate'")
    kind: Literal["value", "set", "threshold", "class", "relation", "conjunction", "trend"] = Field(
        description="value (axis == v), set (axis in {...}), threshold (ordered axis above/below a bound), "
        "class (a true/false axis such as x.zero_size), relation (two axes compared: "
        "x.shape[0] > x.shape[-1], x.dtype != y.dtype), conjunction (two terms, see terms), trend (no "
        "clean boundary: the error grows with an ordered axis; never exact)"
    )
    predicate: str = Field(description="the finding as text, e.g. 'x.shape[-1] > 2048'")
    source: str = Field(description="the variation axis that moves this axis (x.shape, x.strides, dtype, attr.NAME)")
    failing_values: list[Any] = Field(description="the axis values seen in failing cases")
    passing_values: list[Any] = Field(description="the axis values seen in passing cases")
    direction: Literal["above", "below"] | None = Field(
        default=None, description="threshold only: failures lie above (or below) the bound"
    )
    largest_passing: float | None = Field(default=None, description="threshold above: the largest passing value")
    smallest_failing: float | None = Field(default=None, description="threshold above: the smallest failing value")
    smallest_passing: float | None = Field(default=None, description="threshold below: the smallest passing value")
    largest_failing: float | None = Field(default=None, description="threshold below: the largest failing value")
    exact: bool = Field(
        description="the boundary is exact (no value left between passing and failing) or every "
        "informative value of the axis is tried, and a minimal pair shows it"
    )
    minimal_pair: MinimalPair | None = Field(
        default=None, description="the evidence: a passing and a failing case differing only there"
    )
    failing: int = Field(description="failing cases (all of them satisfy the predicate)")
    passing: int = Field(description="passing cases (none satisfies it)")
    failing_outputs: list[str] = Field(
        default_factory=list, description="the outputs that fail in the cases it covers (e.g. only grad.weight)"
    )
    passing_outputs: list[str] = Field(
        default_factory=list, description="the outputs compared in those cases that pass in every one of them"
    )
    passes_at: float | None = Field(
        default=None,
        description="threshold: the recorded value nearest the boundary on the passing side, whatever the direction",
    )
    fails_at: float | None = Field(
        default=None,
        description="threshold: the recorded value nearest the boundary on the failing side, whatever the direction",
    )
    terms: list[Term] = Field(
        default_factory=list, description="conjunction: its two terms, each with its boundary and minimal pair"
    )
    statement: str | None = Field(
        default=None,
        description="the finding in plain words (alignments and sizes in elements and in bytes; a trend's metric)",
    )
    why_not_exact: list[str] = Field(
        default_factory=list,
        description="what is still open: competing hypotheses, an unpinned boundary, distractors not crossed",
    )
    equivalent: list[str] = Field(
        default_factory=list,
        description="predicates that say the same on every case the run can build (tied dimensions, aliases)",
    )
    status: str | None = Field(
        default=None,
        description="set when the failures of one status are explained on their own (crash vs numerical_mismatch)",
    )
    metric: str | None = Field(default=None, description="trend: the error metric that grows (max_rel, max_abs)")
    correlation: float | None = Field(default=None, description="trend: rank correlation of the metric with the axis")
    # several causes and value-dependent failures (analysis/causes.py): which failing cases a finding covers
    cause: int | None = Field(
        default=None,
        description="one of several separate causes: its number (1, 2...); "
        "None when one finding covers every failing case of its group",
    )
    cases: list[str] = Field(
        default_factory=list,
        description="the failing cases it covers (the first 16; on a group's leading finding, not on its competitors)",
    )
    # falsification (probes built to break the finding; references/behavior.md "Exactness")
    validation: Validation | None = Field(
        default=None, description="the probes run against it and how many predictions held; exact needs all held"
    )
    counterexamples: list[Counterexample] = Field(
        default_factory=list, description="probe cases that refuted earlier leads"
    )
    necessary_only: bool = Field(
        default=False,
        description="every failing case satisfies it, but cases equal but "
        "for the seed disagree: a necessary condition only",
    )


class NextCase(Strict):
    reason: str = Field(description="what it would settle")
    base_case: str = Field(description="case to vary")
    change: dict[str, Any] = Field(description="axis changes to plan")
    kind: Literal["bisect", "probe", "discriminate", "crossing", "explore", "missing", "falsify"] | None = Field(
        default=None, description="what it does to the findings"
    )
    axis: str | None = Field(default=None, description="the finding axis it narrows or tests")
    star: dict[str, Any] | None = Field(default=None, description="append as is: stars=[star]")
    if_fails: str | None = Field(default=None, description="what a failure tells")
    if_passes: str | None = Field(default=None, description="what a pass tells")
    refutes_if_fails: list[str] = Field(
        default_factory=list, description="the hypotheses a failure of its case(s) rules out"
    )
    refutes_if_passes: list[str] = Field(
        default_factory=list, description="the hypotheses a pass of its case(s) rules out"
    )


class BoundaryFeature(Strict):
    """One thing a failing captured call has that no passing planned case has."""

    axis: str = Field(
        description="e.g. x.dtype, x.strides_class, x.offset, x.layout, x.values_class, dtypes_mixed, attr.eps"
    )
    value: str = Field(description="the captured call's value on that axis")
    passing_values: list[str] = Field(
        default_factory=list, description="the values the passing planned cases have there"
    )


class BridgeCase(Strict):
    """A planned case between a passing planned case and the failing captured call (one axis)."""

    axis: str = Field(description="the boundary axis this case crosses")
    base_case: str = Field(description="the passing planned case it starts from")
    star: dict[str, Any] = Field(description="a StarSpec (include_base false) ready for plan_cases append=true 'stars'")


class IntegrationDiff(Strict):
    """Captured calls vs planned cases at the integration boundary."""

    direction: Literal["captured_fails", "planned_fails"] = Field(
        description="captured_fails: captured calls fail and planned cases pass; planned_fails: the reverse"
    )
    failing_case: str = Field(description="the failing case the features belong to")
    closest_passing: str | None = Field(None, description="the passing case of the other kind closest to it")
    features: list[BoundaryFeature] = Field(
        description="what the failing case has that no passing case of the other kind has"
    )
    bridges: list[BridgeCase] = Field(default_factory=list, description="planned cases that cross one feature each")


class OutputSummary(Strict):
    """One output (a forward output or a gradient grad.<input>) over the run's compared cases."""

    output: str = Field(description="the output's name, e.g. 'out', 'grad.weight'")
    compared: int = Field(description="recorded cases that compared it")
    failing: int = Field(description="of them, the cases where it failed")
    failing_cases: list[str] = Field(default_factory=list, description="the first failing case ids")
    failing_dtypes: list[str] = Field(default_factory=list, description="its dtypes in the failing cases")
    passing_dtypes: list[str] = Field(default_factory=list, description="its dtypes in the passing cases")
    worst_case: str | None = Field(None, description="the failing (else compared) case with the largest max_abs")
    max_abs: float | None = Field(None, description="max_abs in the worst case")
    max_rel: float | None = Field(None, description="max_rel in the worst case")
    mismatch_ratio: float | None = Field(None, description="mismatch_ratio in the worst case")
    verdict: str | None = Field(None, description="the judge's sentence in the worst case")


# several causes, failing groups without a finding, refuted leads, identical cases that disagree
class FailureGroup(Strict):
    """Failing cases no finding covers (one failing status, or what several causes leave)."""

    status: str | None = Field(description="their status (crash, numerical_mismatch), None for several")
    count: int = Field(description="how many")
    cases: list[str] = Field(description="the first 16 ids")
    survivors: list[str] = Field(
        default_factory=list,
        description="the predicates that came closest: each holds on every one of them and on the passing cases named",
    )


class RefutedLead(Strict):
    """A finding of an earlier analysis that a case recorded since contradicts."""

    predicate: str = Field(description="the earlier finding")
    was_exact: bool = Field(description="it was called exact")
    refuted_by: list[str] = Field(
        description="the cases that contradict it (a passing case where it holds, or a "
        "failing case of its group where it does not), the first 5"
    )
    since: datetime | None = Field(default=None, description="when the analysis that had it ran")


class IdenticalPair(Strict):
    """Two recorded cases that agree on every axis (their seeds aside) and disagree on the outcome."""

    passing: str = Field(description="the passing case")
    failing: str = Field(description="the failing case")


class HypothesisSpace(Strict):
    """The hypothesis space of one analysis (references/behavior.md)."""

    axes: int = Field(description="axes (labelled, derived, relations) the predicates range over")
    consistent: int = Field(description="hypotheses consistent with every recorded case (before the cap)")
    conjunctions: bool = Field(description="conjunctions of two were enumerated (no single predicate separates)")
    capped: bool = Field(description="the cap cut the space: no finding can be exact")
    cap: str = Field(description="the caps, in words")


class Analysis(Strict):
    schema_version: Literal[1] = Field(1, description="contract version")
    run_id: str = Field(description="the run")
    verdict: Literal["diagnosed", "inconclusive", "passed"] = Field(description="diagnosed, inconclusive or passed")
    summary: str = Field(description="the finding in words")
    status_counts: dict[str, int] = Field(description="cases per status")
    planned: int = Field(description="planned cases")
    recorded: int = Field(description="recorded cases")
    missing: list[str] = Field(description="pending case ids")
    failures: list[CaseFailure] = Field(description="mismatches and crashes")
    unsupported: list[CaseFailure] = Field(description="unsupported, not failures")
    crash_groups: dict[str, list[str]] = Field(description="signature -> case ids")
    failure_axes: list[FailureAxis] = Field(description="axis values the failures share")
    integration_hint: str | None = Field(None, description="when every isolated case passes")
    next_cases: list[NextCase] = Field(default_factory=list, description="cases that would settle it")
    findings: list[Finding] = Field(default_factory=list, description="one-axis predicates with minimal pairs")
    integration_diff: list[IntegrationDiff] = Field(
        default_factory=list, description="captured calls vs planned cases: what differs at the integration boundary"
    )
    analyzed_at: datetime = Field(description="when")
    outputs: list[OutputSummary] = Field(
        default_factory=list, description="per output (forward outputs and gradients): where it fails"
    )
    competing: list[Finding] = Field(
        default_factory=list,
        description="the other hypotheses that separate the "
        "recorded cases as well as the leading finding "
        "(each with its minimal pair); none is exact",
    )
    hypotheses: HypothesisSpace | None = Field(
        default=None, description="how many hypotheses were enumerated and whether the space was capped"
    )
    consistency: ConsistencyReport = Field(
        default_factory=ConsistencyReport, description="repeats, order, inputs written, batch, bias (issue 21)"
    )
    # Capped lists (tools/answers.py): which lists this answer cut and where the whole answer is
    truncated: dict[str, int] = Field(
        default_factory=dict,
        description="lists cut to their first 20 items in this "
        "answer: JSON path -> full length (empty: nothing was cut)",
    )
    full_answer: str | None = Field(None, description="when a list was cut: the resource holding the whole answer")
    # several causes and every failing group accounted for (analysis/causes.py, analysis/leads.py)
    causes: int = Field(
        default=0,
        description="separate causes among the findings (2 or more: each finding with "
        "its 'cause' number covers its own failing cases)",
    )
    unexplained: list[FailureGroup] = Field(
        default_factory=list, description="failing cases no finding covers, by group, with the closest survivors"
    )
    refuted: list[RefutedLead] = Field(
        default_factory=list, description="earlier findings a recorded case contradicts, with that case"
    )
    identical_disagree: list[IdenticalPair] = Field(
        default_factory=list,
        description="cases identical on every axis (seed aside) with different outcomes: "
        "the failure depends on the values drawn (the first 8 pairs)",
    )
    # falsification: probe cases that refuted a lead, kept even when nothing survives them
    counterexamples: list[Counterexample] = Field(
        default_factory=list, description="probe cases whose outcome refuted the lead they were built for"
    )
    conditions: list[ConditionAnswer] = Field(
        default_factory=list, description="the conditions stated in this call, each tested (in their order)"
    )
    valid_calls: list[str] = Field(
        default_factory=list, description="what the reference's refusals taught a valid call is; no next case breaks it"
    )
