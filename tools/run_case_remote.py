"""run_case_remote: execute planned cases on inventory hosts and record them.

Loads the run's config and matrix, picks the named cases (or every pending
one; a recorded case is refused, never re-run), spreads them over the slots
of the chosen hosts (``local`` by default) through the pool, and for each
finished case writes ``raw-results/<case>/`` (the worker's answer, stdout,
stderr, traceback) and ``input-metadata/<case>.json`` and records the result
through ``record_result``.  A harness/reference failure or a lost connection
records nothing: the case stays pending and its outcome says why.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import Timeout as FileLockTimeout

from .baseline_host import BASELINE_RAW, baseline_sides
from .cases.ids import rerun_id
from .consistency_runs import AloneRuns, Answer, outcome_text, repeat_passing_ids, run_after, wire_case, wire_text
from .errors import ToolError
from .evidence import ARTIFACTS_DIR, RunStore, few_ids, schedule_manifest_flush, unknown_cases
from .record_result import record_result
from .remote import pool
from .remote.envelopes import (
    HARNESS_WHERE_TEXT,
    WORKER_RESTART_LIMIT,
    CaseDone,
    MalformedEnvelope,
    error_doc,
    read_case_done,
)
from .remote.errors import WorkerCannotStart
from .remote.inventory import as_inventory
from .remote.slot import RunFiles, SlotSpec, slot_specs
from .render.describe import describe_comparison
from .runner.phases import killed_from_outside  # stdlib only: the runner's one kill decision
from .schemas import (
    PENDING_LIST_LIMIT,
    Case,
    CaseOutcome,
    CaseResult,
    Comparison,
    FirstMismatch,
    InputValues,
    OperatorConfig,
    ResultSource,
    RunResponse,
)

Progress = Callable[[int, int, CaseOutcome], Awaitable[None]]


@dataclass(frozen=True)
class Candidate:
    """Another candidate in place of the config's, for one call (verify_fix after a fix under
    another name): its module-qualified name, and the directory of the module files it is
    imported from (the run's own modules included), each named in ``modules``."""

    name: str
    modules_dir: Path
    modules: list[str]


KEEP_OUTPUTS_MAX_BYTES = 8 << 20  # both outputs of one failing case, as torch.save writes them


def list_slot_specs(hosts: list[str] | None, inventory=None) -> list[SlotSpec]:
    """The slot specs (host, device) the chosen hosts lend - nothing is started or
    acquired here (inventory names only; default ``local``)."""
    return slot_specs(as_inventory(inventory).resolve(hosts))


async def run_case_remote(
    run_id: str,
    *,
    case_ids: list[str] | None = None,
    hosts: list[str] | None = None,
    root=None,
    inventory=None,
    progress: Progress | None = None,
    on_start: Callable[[str], Awaitable[None]] | None = None,
    keep_outputs: bool = False,
    lease_wait_s: float | None = None,
    device_wait_s: float | None = None,
    deadline: float | None = None,
    on_news: Callable[[str], Awaitable[None]] | None = None,
    candidate: Candidate | None = None,
) -> RunResponse:
    """``progress(done, total, outcome)`` after each case; ``on_start(case_id)``
    when a case goes to a slot (a progress bar shows the cases in flight);
    ``keep_outputs``: the candidate and reference outputs of a mismatching case
    are kept as ``raw-results/<case>/outputs.pt`` (torch.save, at most
    KEEP_OUTPUTS_MAX_BYTES), read as JSON through kept_outputs.py and drawn by render_pictures; ``lease_wait_s``: the most a slot waits for a
    device held elsewhere (default the host's lease_wait_s; a call with a budget of its
    own passes what is left of it); ``device_wait_s``: the wait the caller asked for, in place of
    the host's lease_wait_s (still cut to ``lease_wait_s``); ``deadline`` (time.monotonic()):
    no case starts after it - those left stay pending, said so; ``on_news(text)`` for progress that is not a finished
    case (about once a second of such a wait, a scheduler job waiting in the queue, a lost
    slot started again); ``candidate``: run another candidate in place of the config's
    (the recorded config is unchanged)."""
    store = RunStore(root, run_id)
    store.require()
    chosen = _choose_cases(store, case_ids)
    specs = list_slot_specs(hosts, inventory)
    host_names = list(dict.fromkeys(s.host.name for s in specs))
    if not chosen.todo:
        return _answer(store, host_names, [], chosen.refused, chosen.order)
    config = store.read_config()
    run = _run_files(
        store,
        config,
        keep_outputs=keep_outputs,
        lease_wait_s=lease_wait_s,
        device_wait_s=device_wait_s,
        on_news=on_news,
        candidate=candidate,
    )
    call = _CallRun(
        store,
        RunStore(root, run_id, lock_timeout_s=0),
        config,
        chosen,
        progress=progress,
        on_start=on_start,
        deadline=deadline,
    )
    todo = await call.baseline_pass(run, inventory)
    queue_report = await call.pool_run(specs, todo, run)
    await call.report_left(queue_report, host_names)
    call.sync_manifest()
    return _answer(
        store,
        host_names,
        [call.outcomes[c] for c in chosen.order if c in call.outcomes],
        call.refused,
        chosen.order,
        skipped=call.skipped,
    )


@dataclass
class _Chosen:
    """The call's cases: those to run, those refused (recorded already), and the order of its answer."""

    cases: dict[str, Case]
    todo: list[str]
    refused: list[str]
    order: list[str]


def _choose_cases(store: RunStore, case_ids: list[str] | None) -> _Chosen:
    """The named cases (every pending one when none are named); an unknown id is an error,
    a recorded one is refused, never re-run."""
    cases = store.cases_by_id()  # shared while the matrix is unchanged (not rebuilt per call): read only
    recorded = store.recorded_ids()
    if case_ids is None:
        todo = [c for c in cases if c not in recorded]
        return _Chosen(cases, todo, [], list(todo))
    unknown = [c for c in case_ids if c not in cases]
    if unknown:
        raise unknown_cases(store.run_id, unknown, cases)
    wanted = list(dict.fromkeys(case_ids))
    return _Chosen(cases, [c for c in wanted if c not in recorded], [c for c in wanted if c in recorded], wanted)


def _run_files(
    store: RunStore,
    config: OperatorConfig,
    *,
    keep_outputs: bool,
    lease_wait_s: float | None,
    device_wait_s: float | None,
    on_news: Callable[[str], Awaitable[None]] | None,
    candidate: Candidate | None = None,
) -> RunFiles:
    """What every slot of the call is sent: the config, the run's modules and captured inputs,
    and how long a slot may wait for a device held elsewhere."""
    modules_dir = store.dir / ARTIFACTS_DIR / "modules"  # constant names: nothing to resolve
    captured_dir = store.dir / ARTIFACTS_DIR / "captured"
    wire_config = config.model_dump(mode="json")
    if keep_outputs:  # read by the runner only, never stored: the planned config is unchanged
        wire_config["keep_outputs_max_bytes"] = KEEP_OUTPUTS_MAX_BYTES
    shipped = modules_dir if config.operator.modules and modules_dir.is_dir() else None
    if candidate is not None:  # sent, never stored: the planned config is unchanged
        wire_config["operator"] = dict(wire_config["operator"], candidate=candidate.name, modules=candidate.modules)
        shipped = candidate.modules_dir if candidate.modules else None
    return RunFiles(
        run_id=store.run_id,
        config=wire_config,
        modules_dir=shipped,
        captured_dir=captured_dir if captured_dir.is_dir() else None,
        lease_wait_s=lease_wait_s,
        news=on_news,
        device_wait_s=device_wait_s,
    )


class _CallRun:
    """The cases of one call on the pool's slots: each run (with its consistency runs), its
    answer recorded, its outcome reported; no case starts after ``deadline``."""

    def __init__(
        self,
        store: RunStore,
        writer: RunStore,
        config: OperatorConfig,
        chosen: _Chosen,
        *,
        progress: Progress | None,
        on_start: Callable[[str], Awaitable[None]] | None,
        deadline: float | None,
    ):
        self.store, self.chosen, self.cases = store, chosen, chosen.cases
        self.writer = writer  # records inline unless another writer holds the run (lock_timeout_s=0)
        self.config = config
        self.progress, self.on_start, self.deadline = progress, on_start, deadline
        self.outcomes: dict[str, CaseOutcome] = {}
        self.refused = list(chosen.refused)  # and those another call recorded while this one ran them
        self.skipped: list[str] = []  # recorded by another call before their turn here: not run
        self.total = len(chosen.todo)
        # consistency checks (consistency_runs.py)
        self.repeat_passing = repeat_passing_ids(self.config, list(self.cases), chosen.todo)
        self.alone = AloneRuns(store, self.config)
        self.sides: dict[str, dict] = {}
        self.side_raw: dict[str, str] = {}
        self.recording: list[asyncio.Future] = []  # every case's recording, awaited (errors raised) before the answer

    async def report(self, outcome: CaseOutcome) -> None:
        self.outcomes[outcome.case_id] = outcome
        if self.progress is not None:
            await self.progress(len(self.outcomes), self.total, outcome)

    async def baseline_pass(self, run: RunFiles, inventory) -> list[str]:
        """Pass 1, with a baseline host (baseline_host.py): the baseline on its host's device;
        the cases it could not give a baseline stay pending. The cases left to run."""
        todo = self.chosen.todo
        if not self.config.baseline_host:
            return todo
        self.sides, side_errors, self.side_raw = await baseline_sides(self.config, self.cases, todo, run, inventory)
        for case_id in [c for c in todo if c in side_errors]:
            await self.report(_pending(case_id, side_errors[case_id]))
        return [c for c in todo if c in self.sides]

    async def pool_run(self, specs: list[SlotSpec], todo: list[str], run: RunFiles) -> pool.QueueReport:
        """The cases over the slots; every answer that came back is recorded, also when the call
        is cancelled or fails."""
        try:
            queue_report = await pool.run_queue(
                specs, todo, run, lambda slot, case_id: self.run_one(slot, case_id, run)
            )
        except BaseException:
            if self.recording:  # cancelled or failed: the answers that came back are still recorded
                await asyncio.gather(*self.recording, return_exceptions=True)
            raise
        if self.recording:
            await asyncio.gather(*self.recording)
        return queue_report

    async def run_one(self, slot, case_id: str, run: RunFiles) -> None:
        """One case on ``slot`` (the pool's callback)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            await self.report(_pending(case_id, NOT_STARTED_AFTER_DEADLINE))
            return
        if case_id in _recorded_ids(self.store):  # re-read at its turn (reads only what the index gained)
            self.skipped.append(case_id)  # another call recorded it while this one waited: not run twice
            return
        case = self.cases[case_id]
        if self.on_start is not None:
            await self.on_start(case_id)
        answer, extra_raw = await self._answer_of(slot, case, run)
        # recorded once the slot has been sent its next case: a slot never waits for the client's
        # file work, and slots answering at once do not queue behind each other's recording
        self.recording.append(asyncio.ensure_future(self.record(slot.host, slot.device, case, answer, extra_raw)))
        gave_up = _worker_gave_up(answer)
        if gave_up is not None:  # the slot is retired; the cases left wait for another slot or stay pending
            raise WorkerCannotStart(gave_up)

    async def _answer_of(self, slot, case: Case, run: RunFiles) -> tuple[Answer, dict[str, str]]:
        """The slot's answer for ``case``, parsed once, with the consistency runs it asks for
        (their findings in its result) and their raw answers."""
        if case.after:  # a probe: the named cases first, on a fresh worker
            return await run_after(slot, run, case, self.cases, self.config.default_timeout_s)
        timeout_s = case.timeout_s or self.config.default_timeout_s
        payload = wire_case(case, repeat_passing=case.id in self.repeat_passing)
        if case.id in self.sides:  # the baseline host's numbers for this case (case.baseline_side, read by the runner)
            payload["baseline_side"] = self.sides[case.id]
        answer = read_case_done(await slot.run_case(run, payload, timeout_s))
        if isinstance(answer, CaseDone) and self.alone.wanted(case, answer):
            # failed after other cases: once more alone, on a fresh worker
            return answer, await self.alone.run(slot, run, payload, answer, timeout_s)
        return answer, {}

    async def record(self, host: str, device: str, case: Case, answer: Answer, extra_raw: dict[str, str]) -> None:
        # A millisecond or two of file work: done in the loop when the run's lock is free (a
        # thread hand-off costs more than that on a busy host), in a thread when another writer holds it.
        extra = dict(extra_raw, **({BASELINE_RAW: self.side_raw[case.id]} if case.id in self.side_raw else {}))
        try:
            outcome = _record_event(self.writer, host, device, case.id, answer, extra)
        except FileLockTimeout:
            outcome = await asyncio.to_thread(_record_event, self.store, host, device, case.id, answer, extra)
        if outcome is None:  # recorded by another call while this one ran it
            self.refused.append(case.id)
            return
        outcome.rerun_case = _rerun_case(case, answer)
        await self.report(outcome)

    async def report_left(self, queue_report: pool.QueueReport, host_names: list[str]) -> None:
        """The cases the pool did not finish stay pending, each saying why; no slot at all is an error."""
        for case_id, why in queue_report.lost.items():
            await self.report(_pending(case_id, f"connection lost mid-case, nothing recorded: {why}"))
        if not queue_report.not_started:
            return
        why = "no slot was left to run it"
        if queue_report.slot_errors:
            why += ": " + "; ".join(f"{k}: {v}" for k, v in queue_report.slot_errors.items())
        if not queue_report.slots_used and not self.outcomes:  # each slot's own reason (a busy device names its holder)
            reasons = "; ".join(f"{k}: {v}" for k, v in queue_report.slot_errors.items()) or why
            raise ToolError(
                f"no slot could start on {host_names}: {reasons}",
                code="no_slot",
                details={"slot_errors": queue_report.slot_errors},
            )
        for case_id in queue_report.not_started:
            await self.report(_pending(case_id, why))

    def sync_manifest(self) -> None:
        """The manifest's recorded_count: at most once per MANIFEST_LAG_S, and never waiting for the lock."""
        if self.outcomes and not self.writer.sync_manifest(lazy=True):
            schedule_manifest_flush()


def _answer(
    store: RunStore,
    host_names: list[str],
    ordered: list[CaseOutcome],
    refused: list[str],
    order: list[str],
    *,
    skipped: list[str] | None = None,
) -> RunResponse:
    """The call's answer: each case's outcome in the call's order, and what to do next."""
    refused = [c for c in order if c in refused]
    skipped = [c for c in order if c in (skipped or [])]
    still = [o.case_id for o in ordered if not o.recorded]
    hint = None
    if still:
        hint = (
            f"{len(still)} case(s) stayed pending (nothing recorded): {few_ids(still)}; fix the cause named in each "
            f"outcome's error, then run run_case_remote again for run {store.run_id!r} (pending cases are picked up)."
        )
    elif refused:
        hint = _refused_hint(refused)
    if skipped:
        hint = ((hint + " ") if hint else "") + _skipped_hint(store.run_id, skipped)
    external = [o for o in ordered if o.rerun_case]
    if external:
        hint = ((hint + " ") if hint else "") + (
            f"killed from outside the harness (signal, not the case timeout): {[o.case_id for o in external]}; "
            "to run one again under a new id, call plan_cases with {\"run_id\": \"" + store.run_id + "\", "
            "\"append\": true, \"cases\": [<that outcome's rerun_case>]}, then run_case_remote."
        )
    return RunResponse(
        run_id=store.run_id,
        hosts=host_names,
        outcomes=ordered,
        recorded=[o.case_id for o in ordered if o.recorded],
        pending=store.pending_case_ids(limit=PENDING_LIST_LIMIT),
        pending_count=store.pending_count(),
        refused=refused,
        skipped=skipped,
        rerun_hint=hint,
    )


NOT_STARTED_AFTER_DEADLINE = "not started: the call's time budget (max_seconds) ran out before its turn"


def _rerun_case(case: Case, answer: Answer) -> dict | None:
    """The case under a fresh id when its crash is a signal the harness did not send."""
    if not isinstance(answer, CaseDone) or answer.result is None:
        return None
    if answer.result.status != "crash" or not killed_from_outside(error_doc(answer.result)):
        return None
    return dict(case.model_dump(mode="json", exclude_none=True), id=rerun_id(case.id))


def _refused_hint(refused: list[str]) -> str | None:
    if not refused:
        return None
    return (
        f"already recorded, not re-run: {refused}; a recorded case is never overwritten - plan a new case id "
        "(plan_cases with append=true) to run it again"
    )


# harness_error types that are the harness's own fault in the reference's phase, not a refusal of the call
HARNESS_FAULTS = ("Timeout", "WorkerDied", "WorkerStartError", WORKER_RESTART_LIMIT)


def _skipped_hint(run_id: str, skipped: list[str]) -> str:
    return (
        f"{len(skipped)} case(s) recorded by another call while this one waited for its turn, skipped (not run "
        f"twice): {few_ids(skipped)}; their results: opdebug://runs/{run_id}/results"
    )


def _pending(case_id: str, error: str, *, host=None, device=None) -> CaseOutcome:
    return CaseOutcome(
        case_id=case_id,
        state="pending",
        recorded=False,
        host=host,
        device=device,
        summary=f"pending: {error.splitlines()[0][:300]}",
        error=error[:4000],
    )


def _recorded_ids(store: RunStore) -> set[str]:
    return store.recorded_ids()


def _worker_gave_up(answer: Answer) -> str | None:
    """The supervisor's message when it stopped starting workers (its restart bound), else None."""
    if not isinstance(answer, CaseDone):
        return None
    err = answer.harness_error
    return err.message if err is not None and err.type == WORKER_RESTART_LIMIT else None


def _record_event(
    store: RunStore, host: str, device: str, case_id: str, answer: Answer, extra_raw: dict | None = None
) -> CaseOutcome | None:
    """Record one supervisor answer (parsed once where it came back: ``read_case_done``)
    through ``store`` (in the event loop, or in a thread when another writer holds the
    run's lock); None when another call recorded the case first.  A malformed answer
    records nothing and says what is wrong with it."""
    if isinstance(answer, MalformedEnvelope):
        return _pending(case_id, f"{answer}; nothing recorded, the case stays pending", host=host, device=device)
    done = answer
    if done.outcome != "result":
        err = done.harness_error
        assert err is not None  # CaseDone's validator
        if err.where == "reference" and err.type not in HARNESS_FAULTS:  # the reference refused the call
            store.note_refusal(case_id, f"{err.type}: {err.message}")
        return _pending(
            case_id,
            f"{HARNESS_WHERE_TEXT[err.where]} ({err.type}: {err.message}); nothing recorded, the case stays pending",
            host=host,
            device=device,
        )
    assert done.result is not None  # CaseDone's validator
    source = ResultSource(kind="run_case_remote", tool="run_case_remote", host=host, device=device)
    update: dict = {"source": source}
    measured = measured_values(done.input_metadata or {}) if done.result.values is None else {}
    if measured:  # a worker that died kept its inputs' measurement
        update["values"] = {name: InputValues.model_validate(v) for name, v in measured.items()}
    result = done.result.model_copy(update=update)  # parsed once (envelopes.py): no second validation
    kept = done.outputs_b64  # keep_outputs: stored as outputs.pt, not inside worker-result.json
    # the supervisor's answer, its result with what the consistency runs added to it (consistency_runs.py;
    # the source is in result.json only), one line (indenting it took the pure-Python encoder: 0.15 ms)
    raw_files: dict[str, str | bytes] = {
        "worker-result.json": wire_text(done.model_dump(mode="json", exclude_unset=True))
    }
    for name, text in (("stdout.txt", done.stdout), ("stderr.txt", done.stderr), ("traceback.txt", done.traceback)):
        if text:  # an empty one says nothing worker-result.json does not say
            raw_files[name] = text
    if kept:
        raw_files["outputs.pt"] = base64.b64decode(kept)
    raw_files.update(extra_raw or {})  # the baseline host's answer, the consistency checks' further answers
    try:
        response = record_result(
            store.run_id,
            result,
            raw_files=raw_files,
            input_metadata=done.input_metadata,
            source_kind="run_case_remote",
            lazy_manifest=True,
            pending=False,
            store=store,
        )
    except ToolError as exc:
        if exc.code == "already_recorded":
            return None
        return _pending(case_id, f"not recorded: {exc.message}", host=host, device=device)
    except FileLockTimeout:  # an OSError too: the caller waits for the lock in a thread (lock_timeout_s=0)
        raise
    except OSError as exc:  # a full disk outside the atomic writes: this case stays pending, the others keep theirs
        return _pending(
            case_id,
            f"not recorded: writing the evidence failed: {exc.strerror or exc} "
            f"({errno.errorcode.get(exc.errno or 0, 'OSError')}"
            f"{', ' + str(exc.filename) if exc.filename else ''})",
            host=host,
            device=device,
        )
    return _outcome(case_id, result, host, device, response.raw_path)


def measured_values(input_metadata: dict) -> dict:
    """name -> the values actually built, from the input metadata's ``measured`` (list members too)."""
    out = {}
    for entry in input_metadata.get("inputs") or []:
        for member in entry.get("members") or [entry]:
            if isinstance(member.get("measured"), dict):
                out[member["name"]] = member["measured"]
    return out


def _outcome(case_id: str, result: CaseResult, host: str, device: str, raw_path: str) -> CaseOutcome:
    status, comparisons, error = result.status, result.comparisons, result.error
    failed = [c.output for c in comparisons if not c.passed]
    max_abs = max((c.max_abs for c in comparisons if c.max_abs is not None), default=None)
    ratio = max((c.mismatch_ratio for c in comparisons), default=None)
    judged = [c.verdict for c in comparisons if c.verdict and c.judge not in (None, "tolerance")]
    if status == "passed":
        summary = f"passed ({len(comparisons)} output(s); max_abs={_fmt(max_abs)})"
        if judged:
            summary += f": {judged[0]}"
    elif status == "numerical_mismatch":
        summary = "numerical mismatch - " + "; ".join(
            describe_comparison(c, brief=True) for c in comparisons if not c.passed
        )
    elif status == "crash":
        summary = f"crash: {error.signature if error else None}"
    else:
        summary = f"unsupported: {(error.message if error else '')[:200]}" + (
            f" (rule {error.matched_rule!r})" if error and error.matched_rule else ""
        )
    flagged = outcome_text(result)
    if flagged:
        summary = f"{summary} [{flagged}]"
    return CaseOutcome(
        case_id=case_id,
        state=status,
        recorded=True,
        host=host,
        device=device,
        summary=summary[:1000],
        failed_outputs=failed,
        max_abs=max_abs,
        mismatch_ratio=ratio,
        signature=error.signature if error else None,
        matched_rule=error.matched_rule if error else None,
        raw_path=raw_path,
        first_mismatch=first_mismatch(comparisons) if status == "numerical_mismatch" else None,
        flags=list(result.consistency.flags) if result.consistency else [],
    )


def first_mismatch(comparisons: list[Comparison]) -> FirstMismatch | None:
    """Where the first failing output first leaves the tolerance (its first
    mismatching element; the worst one when the runner located only that)."""
    for c in comparisons:
        if c.passed:
            continue
        if c.first_mismatch_index is not None:
            return FirstMismatch(
                output=c.output, index=c.first_mismatch_index, candidate=c.first_candidate, reference=c.first_reference
            )
        if c.worst_index is not None:
            return FirstMismatch(
                output=c.output, index=c.worst_index, candidate=c.worst_candidate, reference=c.worst_reference
            )
        return FirstMismatch(output=c.output)
    return None


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"
