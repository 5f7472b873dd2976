"""Every tool's request and response models (the MCP server publishes these,
the CLI prints them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from .analysis import ConditionAnswer, Counterexample, Finding
from .base import (
    DOCUMENTED_ONLY,
    MAX_CASES_PER_CALL,
    MAX_NAMES,
    SLUG_PATTERN,
    Dotted,
    Mode,
    ModuleFile,
    ServerPath,
    Slug,
    Status,
    Strict,
)
from .case import CaptureSelection, Case, StarSpec
from .config import OperatorConfig
from .result import CaseResult


def _at_most_16(value: list) -> list:
    if len(value) > 16:
        raise ValueError("at most 16 captures per request")
    return value


class PlanRequest(Strict):
    config: OperatorConfig | None = Field(None, description="new run")
    run_id: Slug | None = Field(None, description="append: the run")
    append: bool = Field(False, description="add to an existing run")
    cases: list[Case] = Field(default_factory=list, max_length=MAX_CASES_PER_CALL, description="explicit cases")
    stars: list[StarSpec] = Field(default_factory=list, max_length=MAX_NAMES, description="base + one-axis variations")
    module_sources: dict[ModuleFile, Annotated[str, Field(max_length=2_000_000)]] = Field(
        default_factory=dict, max_length=MAX_NAMES, description="source of each config.operator.modules file"
    )
    captured_files: dict[Slug, ServerPath] = Field(
        default_factory=dict, max_length=MAX_NAMES, description="name -> torch.save file path on the server's machine"
    )
    captures: Annotated[list[CaptureSelection], AfterValidator(_at_most_16)] = Field(
        default_factory=list, max_length=16, description="calls to replay"
    )

    @model_validator(mode="after")
    def _shape(self) -> PlanRequest:
        if self.append:
            if self.run_id is None and self.config is None:
                raise ValueError("append needs 'run_id' (or 'config' whose run_id names the run)")
        elif self.config is None:
            raise ValueError("a new run needs 'config' (set append=true to add cases to an existing run)")
        if self.config is not None and self.run_id is not None and self.run_id != self.config.run_id:
            raise ValueError(f"'run_id' {self.run_id!r} differs from config.run_id {self.config.run_id!r}")
        if not self.cases and not self.stars and not self.captures:
            raise ValueError("give at least one case in 'cases', one star in 'stars' or one capture in 'captures'")
        if self.config is not None and not self.append:
            missing = [m for m in self.config.operator.modules if m not in self.module_sources]
            if missing:
                raise ValueError(f"config.operator.modules names {missing} but 'module_sources' lacks them")
        return self

    @property
    def target_run_id(self) -> str:
        return self.run_id or self.config.run_id  # type: ignore[union-attr]


class PlannedCase(Strict):
    id: str = Field(description="case id")
    mode: Mode = Field(description="its mode")
    axes: dict[str, str] = Field(
        description="axis -> value, only where this case differs from 'differs_from' "
        "(every axis when differs_from is null); the full case is in "
        "opdebug://runs/{run_id}/case-matrix"
    )
    state: Literal["pending", "passed", "numerical_mismatch", "crash", "unsupported"] = Field(
        "pending", description="pending or its status"
    )
    differs_from: str | None = Field(
        None,
        description="the case 'axes' is given against: the star's base, or the "
        "first case of the call; null: 'axes' lists every axis",
    )


class PlanResponse(Strict):
    run_id: str = Field(description="the run")
    run_dir: str = Field(description="its evidence directory")
    created: bool = Field(description="a new run")
    added: list[str] = Field(description="case ids added")
    cases: list[PlannedCase] = Field(description="The cases this call added, with their axes (the first 50).")
    cases_omitted: int = Field(
        0, description="Added cases left out of 'cases' (see opdebug://runs/{run_id}/case-matrix)."
    )
    case_count: int = Field(0, description="Cases planned in the run, this call's included.")
    recorded_count: int = Field(0, description="Cases of the run that have a result.")
    warnings: list[str] = Field(default_factory=list, description="e.g. cases differing in several axes")


PENDING_LIST_LIMIT = 20
PLANNED_LIST_LIMIT = 50


class RecordResponse(Strict):
    run_id: str = Field(description="the run")
    case_id: str = Field(description="the case")
    status: Status = Field(description="its status")
    recorded_at: datetime = Field(description="when")
    raw_path: str = Field(description="raw evidence, relative to the run directory")
    pending: list[str] = Field(description="The first pending case ids in plan order (at most 20; see pending_count).")
    pending_count: int = Field(0, description="How many planned cases have no result yet.")


class FirstMismatch(Strict):
    """The first element (in row-major order) of a failing output outside the tolerance."""

    output: str = Field(description="the failing output's name")
    index: list[int] | None = Field(None, description="its multi-index (null: not located, e.g. a contract mismatch)")
    candidate: Any = Field(None, description="the candidate's value there")
    reference: Any = Field(None, description="the reference's value there")


class CaseOutcome(Strict):
    """One normalized outcome of run_case_remote, small enough for an agent."""

    case_id: str = Field(description="the case")
    state: Literal["passed", "numerical_mismatch", "crash", "unsupported", "pending"] = Field(
        description="status, or pending (nothing recorded)"
    )
    recorded: bool = Field(description="a result was recorded")
    host: str | None = Field(None, description="host")
    device: str | None = Field(None, description="device")
    summary: str = Field(description="one line for people")
    failed_outputs: list[str] = Field(default_factory=list, description="outputs that failed")
    max_abs: float | None = Field(None, description="largest max_abs")
    mismatch_ratio: float | None = Field(None, description="largest mismatch_ratio")
    signature: str | None = Field(None, description="crash/unsupported signature")
    matched_rule: str | None = Field(None, description="unsupported rule matched")
    error: str | None = Field(None, description="why it stayed pending (harness, reference, connection)")
    raw_path: str | None = Field(None, description="raw evidence, relative to the run directory")
    rerun_case: dict[str, Any] | None = Field(
        None,
        description="this case under a new id for plan_cases(append=true, cases=[rerun_case]): killed from outside",
    )
    first_mismatch: FirstMismatch | None = Field(
        None, description="where the first failing output first differs (numerical_mismatch only)"
    )
    flags: list[str] = Field(
        default_factory=list,
        description="consistency flags (nondeterministic, order_dependent, writes_input, batch_variant)",
    )


class RunResponse(Strict):
    run_id: str = Field(description="the run")
    hosts: list[str] = Field(description="hosts used")
    outcomes: list[CaseOutcome] = Field(description="one per case run")
    recorded: list[str] = Field(description="case ids recorded")
    pending: list[str] = Field(description="The first pending case ids in plan order (at most 20; see pending_count).")
    pending_count: int = Field(0, description="How many planned cases of the run have no result yet.")
    refused: list[str] = Field(default_factory=list, description="already recorded, not re-run")
    skipped: list[str] = Field(
        default_factory=list,
        description="recorded by another call while this one waited for a device or slot: not run twice "
        "(their results are the other call's)",
    )
    rerun_hint: str | None = Field(None, description="what to do next")


# --------------------------------------------------------------------------
# narrow_failure (the autopilot)
# --------------------------------------------------------------------------


# The hosts one call names (inventory names; a longer list is refused before it is read).
Hosts = Annotated[list[Slug] | None, Field(max_length=MAX_NAMES)]


ConditionText = Annotated[str, Field(min_length=1, max_length=2000)]


class NarrowRequest(Strict):
    run_id: Slug = Field(
        description="The run to narrow: its pending cases run first, then the next cases its analysis proposes.",
        json_schema_extra=DOCUMENTED_ONLY,
    )
    hosts: Hosts = Field(default=None, description="Default ['local'].")
    max_cases: Annotated[int, Field(ge=1, le=10000)] = Field(default=40, description="new cases in all")
    max_seconds: Annotated[float, Field(gt=0, le=86400)] = Field(
        default=900.0,
        description="Wall-time budget in seconds: no case starts after it (a round holds the cases "
        "that fit); over MCP the answer comes by then, a case still running is recorded "
        "after it (still_running).",
        json_schema_extra=DOCUMENTED_ONLY,
    )
    max_steps: Annotated[int, Field(ge=1, le=100)] = Field(default=12, description="plan-run-analyze rounds")
    cases_per_step: Annotated[int, Field(ge=1, le=256)] = Field(
        default=8, description="At most this many new cases planned per round.", json_schema_extra=DOCUMENTED_ONLY
    )
    conditions: list[ConditionText] = Field(
        default_factory=list, max_length=16, description="Conditions to probe, as analyze_failures' conditions"
    )


class NarrowStep(Strict):
    index: int = Field(description="1-based round number")
    kinds: list[str] = Field(
        description="the kinds of next cases applied (discriminate, bisect, probe, crossing, "
        "explore; pending: the pending cases run first)"
    )
    axes: list[str] = Field(description="the finding axes they narrowed")
    cases: dict[str, str] = Field(description="new case id -> its state after the run")
    findings: list[str] = Field(description="the findings' predicates after the round (exact ones marked)")
    competing: list[str] = Field(default_factory=list, description="the competing hypotheses after the round")


class NarrowResponse(Strict):
    run_id: str = Field(description="the run")
    stopped: str = Field(
        description="why it stopped: exact, nothing_to_try (one hypothesis, nothing narrows it), "
        "undecided (hypotheses survive, no buildable case splits them), no_hypothesis "
        "(every axis varied once, nothing separates), budget_cases, budget_seconds, "
        "budget_steps, no_progress, no_failure, conditions_settled (every stated condition refuted or exact), "
        "consistency (every failure is nondeterministic "
        "or order-dependent: no axis to narrow)"
    )
    exact: bool = Field(description="every finding is exact")
    findings: list[Finding] = Field(description="the final findings with their minimal pairs")
    steps: list[NarrowStep] = Field(
        description="the rounds taken, each ordinary planned and recorded cases (the "
        "pending cases it ran first are round 1, kind 'pending')"
    )
    cases_run: int = Field(description="cases it ran: the pending ones first, then the new ones")
    seconds: float = Field(description="wall time")
    summary: str = Field(description="the analysis summary after the last round")
    competing: list[Finding] = Field(
        default_factory=list, description="the hypotheses still competing with the leading finding"
    )
    new_cases: int = Field(0, description="new cases it planned and ran (what max_cases bounds)")
    pending_run: int = Field(0, description="pending cases it ran first")
    still_running: list[str] = Field(
        default_factory=list,
        description="cases started before max_seconds and "
        "still running when it answered: each is recorded when it ends (read "
        "opdebug://runs/{run_id}/results, or analyze_failures, later)",
    )
    not_started: list[str] = Field(
        default_factory=list,
        description="cases it was to run that max_seconds kept from starting: still pending, not in cases_run "
        "(run_case_remote or narrow_failure again runs them)",
    )
    # falsification: the probe cases that refuted a lead (kept when nothing survives them)
    counterexamples: list[Counterexample] = Field(
        default_factory=list, description="probe cases whose outcome refuted the lead they were built for"
    )
    conditions: list[ConditionAnswer] = Field(default_factory=list, description="each stated condition's fate")


# --------------------------------------------------------------------------
# Arguments of the tools whose request is not a model above (the MCP server
# publishes each as its input schema)
# --------------------------------------------------------------------------

RunIdArg = Annotated[Slug, Field(pattern=SLUG_PATTERN)]
NameArg = Annotated[Slug, Field(pattern=SLUG_PATTERN)]


class RecordResultArgs(Strict):
    run_id: RunIdArg = Field(description="The run the case is planned in.", json_schema_extra=DOCUMENTED_ONLY)
    result: CaseResult = Field(description="One pending case's result.")


class AnalyzeFailuresArgs(Strict):
    run_id: RunIdArg = Field(
        description="The run to analyze (its recorded results; pending cases are listed as missing).",
        json_schema_extra=DOCUMENTED_ONLY,
    )
    conditions: list[ConditionText] = Field(
        default_factory=list,
        max_length=16,
        description="Conditions to test, true where a case fails: 'x.shape[-1] % 8 != 0' (references/conditions.md)",
    )


MAX_DEVICE_WAIT_S = 600.0  # a call waits at most 10 min for a busy device, with a progress line about once a second


class RunCaseRemoteArgs(Strict):
    run_id: RunIdArg = Field(description="The run whose cases to run.", json_schema_extra=DOCUMENTED_ONLY)
    case_ids: list[NameArg] | None = Field(
        default=None, min_length=1, max_length=MAX_CASES_PER_CALL, description="Omitted: all pending."
    )
    hosts: Hosts = Field(default=None, description="Omitted: ['local'].")
    keep_outputs: bool = Field(
        default=False, description="Keep mismatching outputs: opdebug://runs/{run_id}/outputs/{case_id}."
    )
    device_wait_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_DEVICE_WAIT_S,
        description="Max wait for a busy device, s (default: the host's lease_wait_s, 30).",
    )


class CheckHostArgs(Strict):
    host: NameArg = Field(
        description="An inventory host name ('local' is always there).", json_schema_extra=DOCUMENTED_ONLY
    )


def RunId() -> Any:  # a Field factory, named as the type it stands for
    return Field(
        pattern=SLUG_PATTERN,
        description="The run (its id, as plan_cases created it).",
        json_schema_extra=DOCUMENTED_ONLY,
    )


class ShrinkArgs(Strict):
    run_id: Slug = RunId()
    case_id: Slug = Field(pattern=SLUG_PATTERN, description="A recorded failing case.")
    hosts: Hosts = Field(default=None, description="Default ['local'].")
    max_cases: int = Field(
        default=30,
        ge=1,
        le=200,
        description="At most this many shrink steps (each a planned, recorded case).",
        json_schema_extra=DOCUMENTED_ONLY,
    )
    max_seconds: float = Field(
        default=600.0, gt=0, le=7200, description="Wall-time budget in seconds.", json_schema_extra=DOCUMENTED_ONLY
    )


class ReproArgs(Strict):
    run_id: Slug = RunId()
    case_id: Slug = Field(
        pattern=SLUG_PATTERN,
        description="The recorded case to reproduce (usually a failing one).",
        json_schema_extra=DOCUMENTED_ONLY,
    )
    out_dir: ServerPath | None = Field(default=None, description="Server path; default <run>/artifacts/repro.")


class RegressionArgs(Strict):
    run_id: Slug = RunId()
    out_dir: ServerPath | None = Field(default=None, description="Server path; default <run>/artifacts/regression.")
    case_ids: list[Slug] | None = Field(
        default=None, max_length=MAX_CASES_PER_CALL, description="Default: the failing ones."
    )
    neighbours: bool = Field(default=False, description="Also passing cases one axis from a failure.")


class PicturesArgs(Strict):
    run_id: Slug = RunId()
    case_ids: list[Slug] | None = Field(
        default=None, max_length=MAX_CASES_PER_CALL, description="Default: the mismatching ones."
    )
    outputs: dict[Slug, ServerPath] = Field(
        default_factory=dict,
        max_length=MAX_CASES_PER_CALL,
        description=("Case id -> its reproducer's --save-outputs file (a server path)."),
    )


class VerifyArgs(Strict):
    run_id: Slug = RunId()
    hosts: Hosts = Field(default=None, description="Default ['local'].")
    run_command: bool = Field(default=True, description="Also the config's model command.")
    command_timeout_s: float = Field(
        default=600.0,
        gt=0,
        le=7200,
        description="Seconds the model command may run before it is killed.",
        json_schema_extra=DOCUMENTED_ONLY,
    )
    candidate: Dotted | None = Field(
        default=None, max_length=300, description="The fix under another name (module.attr); default: the config's."
    )
    candidate_sources: dict[ModuleFile, Annotated[str, Field(max_length=2_000_000)]] = Field(
        default_factory=dict, max_length=16, description="NAME.py -> source of the candidate's modules."
    )


# --------------------------------------------------------------------------
# check_host
# --------------------------------------------------------------------------


class EnvScriptCheck(Strict):
    path: str = Field(description="script")
    exit_status: int | None = Field(description="its exit status")
    sourced: bool = Field(description="it sourced cleanly")


class SchedulerNode(Strict):
    name: str = Field(description="node name")
    state: str = Field(description="sinfo state (idle, mixed, allocated, down, drained...)")
    gres: str = Field(description="the GRES it has")
    gres_used: str = Field(description="the GRES in use now")
    cpus: str = Field(description="CPUs allocated/idle/other/total")
    usable: bool = Field(description="takes new jobs (not down, drained, ...)")


class SchedulerCheck(Strict):
    """What a scheduler host's partition offers (read-only: no job is started)."""

    scheduler: str = Field(description="slurm")
    slurm_version: str | None = Field(None, description="sinfo --version")
    partition: str | None = Field(None, description="the partition asked (or the cluster's default)")
    partition_state: str | None = Field(None, description="UP, DOWN, DRAIN, INACTIVE")
    max_time: str | None = Field(None, description="the partition's MaxTime")
    default_time: str | None = Field(None, description="the partition's DefaultTime")
    allow_accounts: str | None = Field(None, description="the partition's AllowAccounts")
    allow_qos: str | None = Field(None, description="the partition's AllowQos")
    gres_requested: str = Field(description="the GRES one slot asks for")
    time_limit: str = Field(description="the --time of each slot's job")
    slots: int = Field(description="slots (jobs at once) the inventory asks for")
    slots_possible: int | None = Field(None, description="slots the usable nodes hold at most, all free")
    nodes: list[SchedulerNode] = Field(default_factory=list, description="the partition's nodes")
    notes: list[str] = Field(default_factory=list, description="what fits but deserves a look")


class HostCheck(Strict):
    host: str = Field(description="inventory name")
    transport: str = Field(description="host kind")
    address: str | None = Field(None, description="how it is reached")
    ok: bool = Field(description="can run cases")
    python: str | None = Field(None, description="version")
    python_executable: str | None = Field(None, description="path")
    torch: str | None = Field(None, description="version")
    torch_npu: str | None = Field(None, description="version")
    cann: str | None = Field(None, description="version")
    cann_home: str | None = Field(None, description="install path")
    device_kind: str = Field(description="cpu, cuda or npu")
    devices: list[int] = Field(description="devices the slots use")
    device_count: int | None = Field(None, description="devices torch sees")
    visibility: dict[str, str] = Field(default_factory=dict, description="device visibility variables")
    work_dir: str = Field(description="remote work directory")
    work_dir_writable: bool | None = Field(None, description="writable")
    free_disk_bytes: Annotated[int, Field(ge=0)] | None = Field(None, description="free space there")
    env_scripts: list[EnvScriptCheck] = Field(default_factory=list, description="each environment script")
    missing: list[str] = Field(default_factory=list, description="what is missing, by name")
    errors: list[str] = Field(default_factory=list, description="probe errors")
    elapsed_s: float = Field(description="probe time")
    scheduler: SchedulerCheck | None = Field(None, description="a scheduler host: what its partition offers")


# --------------------------------------------------------------------------
# The artefact tools
# --------------------------------------------------------------------------


class ReproExport(Strict):
    run_id: str = Field(description="The run the reproducer was exported from.")
    case_id: str = Field(description="The case it reproduces.")
    script: str = Field(description="Path of the standalone script (stdlib + torch; torch_npu on npu).")
    files: list[str] = Field(description="Every file written or reused beside the script.")
    device: str = Field(description="Device kind the script runs the candidate on by default.")
    recorded_status: str = Field(description="Status of the recorded result the script reproduces.")
    command: str = Field(description="How to run it.")


class RegressionExport(Strict):
    run_id: str = Field(description="The run the test was exported from.")
    test_file: str = Field(description="Path of the pytest file for the operator's repository.")
    failing_cases: list[str] = Field(description="Failing cases the test expects to pass once fixed.")
    neighbour_cases: list[str] = Field(description="Passing neighbours included to guard against regressions.")
    files: list[str] = Field(description="Every file written or reused beside the test.")
    command: str = Field(description="How to run it.")
    # Capped lists (tools/answers.py): which lists this answer cut and where the whole answer is
    truncated: dict[str, int] = Field(
        default_factory=dict,
        description="lists cut to their first 20 items in this "
        "answer: JSON path -> full length (empty: nothing was cut)",
    )
    full_answer: str | None = Field(None, description="when a list was cut: the resource holding the whole answer")


class ShrinkStep(Strict):
    case_id: str = Field(description="The planned and recorded case of this step.")
    change: str = Field(description="What this step changed from the smallest failing case so far.")
    numel: int = Field(description="Total input elements of the step's case.")
    state: str = Field(description="Its recorded status (or pending).")
    same_failure: bool = Field(description="Whether it fails the same way as the start case.")
    rejected: str | None = Field(
        None,
        description="Why a step that fails the same way is not taken: not a valid call (the reference refuses it).",
    )


class ShrinkResponse(Strict):
    run_id: str = Field(description="The run the steps were planned and recorded in.")
    start_case: str = Field(description="The failing case shrinking started from.")
    smallest_case: str = Field(description="The smallest case found that fails the same way.")
    start_numel: int = Field(description="Total input elements of the start case.")
    smallest_numel: int = Field(description="Total input elements of the smallest case.")
    smallest_shapes: dict[str, list[int]] = Field(description="Input shapes of the smallest case.")
    cases_run: int = Field(description="Cases planned and run by this shrink.")
    seconds: float = Field(description="Wall time the shrink took.")
    stopped: Literal["done", "case_budget", "time_budget"] = Field(description="Why shrinking stopped.")
    signature: str = Field(description="The failure kept: status and signature or failed outputs.")
    steps: list[ShrinkStep] = Field(description="Every case tried, in order.")
    skipped_invalid: int = Field(0, description="Steps not run: calls the run's reference refusals rule out.")
    constraints: list[str] = Field(
        default_factory=list, description="What a valid call is, as learned from the run's reference refusals."
    )


class PicturesResponse(Strict):
    run_id: str = Field(description="The run the pictures are of.")
    pictures: list[str] = Field(description="PNG paths relative to the run directory.")
    skipped: list[str] = Field(description="Failing outputs without a picture, with the reason.")
    available: bool = Field(description="False when matplotlib is missing (pip install '.[pictures]').")
    outputs_from: dict[str, str] = Field(
        default_factory=dict, description="Case id -> where its outputs came from (kept, saved, recomputed)."
    )


class VerifyResponse(Strict):
    run_id: str = Field(description="The run verified.")
    verify_index: int = Field(description="n of artifacts/verify/<n>.json, the evidence written.")
    rerun: dict[str, str] = Field(description="Failing case id -> the new case id planned for it.")
    states: dict[str, str] = Field(description="New case id -> its recorded status (or pending).")
    still_failing: list[str] = Field(description="Original case ids whose rerun did not pass.")
    model_command: dict[str, Any] | None = Field(
        description="The model command's argv, host, exit status and output tail; None when the config names none."
    )
    conclusion: str = Field(description="'fixed in isolation', 'fixed in the model', or what still fails.")
    evidence: str = Field(description="Path of the verify evidence file relative to the run directory.")
    candidate: str | None = Field(None, description="The candidate the failing cases ran again with.")
