"""Consistency checks: what a case asks for, what its result
carries, and what the analysis reports.

- asked for: ``BatchInvariance`` (config or case ``batch_invariance``);
  ``repeats`` / ``repeats_passing`` / ``after`` / ``operator.writes`` are
  plain fields of the config, the case and the operator;
- carried by a result (``CaseResult.consistency``): the repeated runs, the
  run alone on a fresh worker, the earlier cases a probe ran first, the inputs
  the candidate wrote, the batch slice; and the flags they raise;
- reported by the analysis (``Analysis.consistency``): the flagged cases, the
  earlier cases that poison an order-dependent one, the bias warnings.

Flags: ``nondeterministic`` (the same inputs gave different results),
``order_dependent`` (fails after other cases on a warm worker, passes alone),
``order_suspect`` (fails like an order-dependent case, not run alone),
``writes_input`` (an input changed that is not declared written),
``batch_variant`` (a slice of the batch gives other results than the same rows
of the full batch).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from .base import MAX_NAMES, FiniteFloat, Ident, NonNegFinite, Slug, Status, Strict, drop_titles

Flag = Literal["nondeterministic", "order_dependent", "order_suspect", "writes_input", "batch_variant"]


class BatchInvariance(Strict):
    """Run the candidate on a slice of the batch too; the slice of the full result must equal it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=drop_titles)  # schema budget

    input: Ident = Field(description="the batched input; the other inputs are passed whole")
    dim: int = Field(0, description="the batch dimension of that input and of every output that has it")
    start: Annotated[int, Field(ge=0)] = Field(0, description="first row of the slice")
    length: Annotated[int, Field(ge=1)] = Field(1, description="rows in the slice")
    exact: bool = Field(True, description="bit for bit (true) or within the judge's tolerance (false)")
    check: bool = Field(False, description="a difference fails the case (numerical_mismatch), not only flags it")
    also: list[Ident] = Field(
        default_factory=list,
        max_length=MAX_NAMES,
        description="other inputs sliced the same way where their size "
        "along dim is the batch's (add(x, y): also ['y'])",
    )


# --------------------------------------------------------------------------
# Result evidence (CaseResult.consistency)
# --------------------------------------------------------------------------


class RepeatRuns(Strict):
    """The case run again on the same worker with the same inputs; outputs compared bit for bit."""

    runs: Annotated[int, Field(ge=1)] = Field(description="runs in all, the first included")
    distinct: Annotated[int, Field(ge=1)] = Field(description="distinct results (output bytes) among them")
    statuses: list[Status] = Field(description="each run's status, in order")
    passed_runs: list[int] = Field(description="0-based indices of the runs that passed the judge")
    max_diff: NonNegFinite | None = Field(None, description="largest |difference| between two runs' outputs")
    differing_outputs: list[str] = Field(default_factory=list, description="outputs whose bytes differ between runs")
    worst_run: int = Field(0, description="the run whose status and comparisons the result carries")


class AloneRun(Strict):
    """The case run again alone: a new worker process on the same device, nothing run before it."""

    status: Status = Field(description="its status alone")
    summary: str = Field("", description="what it gave alone, in words")
    history: list[str] = Field(
        default_factory=list,
        description="the cases the warm worker ran before the first run (run_id/case_id for another run), oldest first",
    )
    history_total: int = Field(0, description="how many cases it ran before (the list keeps the latest)")


class AfterRun(Strict):
    """A probe: the planned cases of ``case.after`` ran first, in order, on a fresh worker."""

    cases: list[Slug] = Field(description="the earlier cases, as run")
    statuses: list[str] = Field(description="each earlier case's status in this replay (or 'pending: ...')")


class InputWrite(Strict):
    """An input whose values changed during the candidate call."""

    input: str = Field(description="input name (x, or x[1] for a list member)")
    changed: Annotated[int, Field(ge=0)] | None = Field(description="elements changed (null: only its checksum said)")
    numel: Annotated[int, Field(ge=0)] = Field(description="elements of the input")
    declared: bool = Field(description="declared written (operator.writes or in-place by name)")
    outside_view: bool = Field(False, description="the change lies in the storage outside the input's view")


class BatchSlice(Strict):
    """The candidate on a slice of the batch against the same rows of the full run."""

    input: str = Field(description="the sliced input")
    dim: int = Field(description="the batch dimension")
    start: int = Field(description="first row")
    length: int = Field(description="rows")
    exact: bool = Field(description="compared bit for bit (else within the judge's tolerance)")
    equal: bool = Field(description="every compared output agrees")
    outputs: list[str] = Field(default_factory=list, description="outputs compared (those with the batch dimension)")
    sliced: list[str] = Field(default_factory=list, description="the inputs sliced")
    differing: Annotated[int, Field(ge=0)] = Field(0, description="elements that differ")
    max_diff: NonNegFinite | None = Field(None, description="largest |difference|")
    note: str | None = Field(None, description="why nothing could be compared, when so")


class ConsistencyEvidence(Strict):
    """What the consistency checks found for one case; flags name what it is."""

    flags: list[Flag] = Field(default_factory=list, description="what the checks found")
    repeats: RepeatRuns | None = Field(None, description="the repeated runs (failing cases; sampled passing ones)")
    alone: AloneRun | None = Field(None, description="the run alone on a fresh worker (failing cases)")
    after: AfterRun | None = Field(None, description="a probe case: what ran before it")
    inputs_written: list[InputWrite] = Field(default_factory=list, description="inputs the candidate changed")
    batch: BatchSlice | None = Field(None, description="batch invariance (when asked for)")
    history: list[str] = Field(
        default_factory=list,
        description="a failing case: the cases its warm worker ran before it (run_id/case_id for another run)",
    )
    history_total: int = Field(0, description="how many (the list keeps the latest)")
    notes: list[str] = Field(default_factory=list, description="checks that could not be made, and why")


# --------------------------------------------------------------------------
# Analysis (Analysis.consistency)
# --------------------------------------------------------------------------


class FlaggedCase(Strict):
    """One case the consistency checks flagged, with its spread."""

    case_id: str = Field(description="the case")
    flag: Flag = Field(description="what it is")
    status: Status = Field(description="its recorded status")
    detail: str = Field(description="the evidence in words")
    history: list[str] = Field(default_factory=list, description="order: the cases run before it on the warm worker")
    poisoned_by: list[str] | None = Field(
        None,
        description="order: the smallest set of earlier cases after which it "
        "fails on a fresh worker (from probe cases)",
    )
    probes: dict[str, str] = Field(default_factory=dict, description="order: probe case id -> its status")


class BiasWarning(Strict):
    """Errors that lean one way: within the judge, but not rounding to nearest."""

    output: str = Field(description="the output")
    dtype: str = Field(description="its dtype")
    kind: Literal["sign", "magnitude"] = Field(
        description="sign: d = cand - ref mostly of one sign; magnitude: |cand| mostly below (or above) |ref|"
    )
    direction: Literal["negative", "positive", "toward_zero", "away_from_zero"] = Field(description="which way")
    share: FiniteFloat = Field(description="(#one way - #the other) / #nonzero errors, of the strongest case")
    baseline_share: FiniteFloat | None = Field(None, description="the same for the baseline, when judged by one")
    cases: list[str] = Field(description="cases that show it")
    message: str = Field(description="the warning in words")


class ConsistencyReport(Strict):
    """The consistency checks over the run: flagged cases (kept out of findings), bias warnings."""

    flagged: list[FlaggedCase] = Field(
        default_factory=list,
        description="cases flagged, kept out of the findings' evidence unless written/batch evidence",
    )
    excluded_from_findings: list[str] = Field(default_factory=list, description="case ids left out of the findings")
    probes: list[str] = Field(default_factory=list, description="probe cases (case.after), never findings evidence")
    repeated: int = Field(0, description="cases that were repeated")
    alone: int = Field(0, description="cases that were run alone on a fresh worker")
    bias: list[BiasWarning] = Field(default_factory=list, description="errors that lean one way")
    summary: str | None = Field(None, description="the checks in one sentence (also in the verdict's summary)")
    stats: dict[str, Any] = Field(default_factory=dict, description="counts per flag")
