"""The runner protocol's envelopes, as the server reads them.

The runner (tools/runner/, stdlib + torch) builds these as plain JSON; this
module is their contract on the server side, validated where they are read
(``case_done`` once per answer, as it comes back from a slot, by run_case_remote
and consistency_runs, which then pass the CaseDone on; the supervisor client for
the deadlines in ``hello``).  A case_done's ``result`` is parsed into the
``CaseResult`` the server records, once: nothing downstream reads it as a dict.  A malformed envelope is reported as such -
the case stays pending - never read with silent defaults.  The runner never
imports this module.  See references/runner-protocol.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from ..schemas import CaseResult, FiniteFloat, NonNegFinite, Strict, format_validation_error

# The harness_error type of a case the supervisor answered without trying a worker
# start: its bound of consecutive start failures was reached (the slot is retired).
WORKER_RESTART_LIMIT = "WorkerRestartLimit"

# The phase of phases.PHASES a harness failure happened in (the table's names, and no others).
HarnessWhere = Literal[
    "health_check",
    "worker_start",
    "resolve",
    "inputs",
    "compile",
    "candidate",
    "backward",
    "reference",
    "baseline",
    "judge",
    "consistency",
]

# What a harness failure in each phase means for people ("the case stays pending" is said by the caller).
HARNESS_WHERE_TEXT: dict[str, str] = {
    "health_check": "the device's health check failed",
    "worker_start": "the worker could not start",
    "resolve": "the user modules or the callables could not be loaded, or the call's arguments do not fit "
    "them (operator.call, input names)",
    "inputs": "the inputs could not be built",
    "compile": "the harness failed while compiling or capturing the candidate",
    "candidate": "the harness failed while running the candidate",
    "backward": "the upstream gradient could not be built",
    "reference": "the reference failed",
    "baseline": "the same-precision baseline failed",
    "judge": "the comparison failed",
    "consistency": "the harness failed while running the consistency checks",
}


class HarnessError(Strict):
    """A failure of the harness, not of the operator: the case stays pending."""

    where: HarnessWhere = Field(description="the phase that failed")
    type: str = Field(description="exception type (WorkerStartError, Timeout, WorkerDied, ...)")
    message: str = Field(description="what went wrong")
    traceback: str = Field("", description="tail of the traceback or the worker's stderr")


class CaseDone(Strict):
    """The supervisor's one answer to a ``run``: a result, or a harness error."""

    event: Literal["case_done"] = Field(description="envelope kind")
    request_id: str | None = Field(description="the run request's id")
    case_id: str | None = Field(description="the case's id")
    outcome: Literal["result", "harness_error"] = Field(description="a result, or a harness error (pending)")
    result: CaseResult | None = Field(None, description="the result, parsed once here (no source/recorded_at yet)")
    baseline_side: dict[str, Any] | None = Field(
        None, description="a baseline host's answer: its stage-1 numbers per output (tools/runner/baseline_side.py)"
    )
    harness_error: HarnessError | None = Field(None, description="why nothing can be recorded")
    input_metadata: dict[str, Any] | None = Field(None, description="how the inputs were built")
    stdout: str = Field("", description="tail of the worker's stdout during the case")
    stderr: str = Field("", description="tail of the worker's stderr during the case")
    traceback: str = Field("", description="tail of the traceback, if any")
    started_at: FiniteFloat = Field(description="epoch seconds")
    finished_at: FiniteFloat = Field(description="epoch seconds")
    worker_pid: int | None = Field(None, description="the worker that ran the case")
    worker_restarted: bool = Field(False, description="that worker replaced a dead or unhealthy one")
    worker_lost: bool = Field(False, description="the worker died or was killed during the case")
    worker_exit: int | None = Field(None, description="its exit status, when it died")
    outputs_b64: str | None = Field(None, description="keep_outputs: both outputs of a mismatch, torch.save, base64")
    outputs_note: str | None = Field(None, description="keep_outputs: why the outputs were not kept")
    worker_replaced_after: str | None = Field(
        None, description="the case left the worker unusable (a closed fd): replaced before the next case"
    )
    worker_history: list[str] = Field(
        default_factory=list, description="the cases that worker ran before this one (run_id/case_id), oldest first"
    )
    worker_history_total: int = Field(0, ge=0, description="how many (the list keeps the latest)")

    @model_validator(mode="after")
    def _outcome_has_its_body(self) -> CaseDone:
        if self.outcome == "result" and self.result is None:
            raise ValueError("outcome 'result' needs 'result'")
        if self.outcome == "harness_error" and self.harness_error is None:
            raise ValueError("outcome 'harness_error' needs 'harness_error'")
        return self


def error_doc(result: CaseResult | None) -> dict[str, Any] | None:
    """A result's error as the runner wrote it, for the runner's stdlib decisions on it
    (phases.timed_out, phases.killed_from_outside); None without one."""
    if result is None or result.error is None:
        return None
    return result.error.model_dump(exclude_none=True)


class SupervisorDeadlines(Strict):
    """The supervisor's own clocks before a case's candidate phase begins (sent in ``hello``)."""

    worker_start_timeout_s: NonNegFinite = Field(description="a worker's start: torch import, device open")
    health_check_timeout_s: NonNegFinite = Field(description="the device check before a case")
    harness_timeout_s: NonNegFinite = Field(description="loading user modules and building inputs")
    max_worker_start_failures: int = Field(ge=1, description="consecutive start failures before giving up")

    def started_within_s(self) -> float:
        """The longest the supervisor may take, in bounds, from a ``run`` to the case's ``compile`` or
        ``candidate`` phase (or to a ``case_done`` that comes without it): a health check, a worker
        (re)start, then the harness phase."""
        return self.health_check_timeout_s + self.worker_start_timeout_s + self.harness_timeout_s


class MalformedEnvelope(ValueError):
    """A runner envelope that does not match its contract (the message names the fields)."""


def parse_case_done(event: Any) -> CaseDone:
    """The validated ``case_done``; raises MalformedEnvelope naming what is wrong."""
    try:
        return CaseDone.model_validate(event)
    except ValidationError as exc:
        raise MalformedEnvelope(
            "malformed case_done envelope from the supervisor: " + format_validation_error(exc)
        ) from None


def parse_deadlines(hello: dict) -> SupervisorDeadlines | None:
    """The deadlines a ``hello`` announces (None when it announces none: an older
    runner); raises MalformedEnvelope when they are malformed."""
    raw = hello.get("deadlines")
    if raw is None:
        return None
    try:
        return SupervisorDeadlines.model_validate(raw)
    except ValidationError as exc:
        raise MalformedEnvelope(
            "malformed deadlines in the supervisor's hello: " + format_validation_error(exc)
        ) from None


def read_case_done(event: Any) -> CaseDone | MalformedEnvelope:
    """``parse_case_done`` for a caller that carries the answer on either way: a malformed
    envelope is an answer too (its case stays pending, the error says why)."""
    try:
        return parse_case_done(event)
    except MalformedEnvelope as exc:
        return exc
