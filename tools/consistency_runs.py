"""The server's side of the consistency checks, for run_case_remote.

- **Sampled passing cases**: with ``config.repeats_passing = N`` the run's
  first planned case and N-1 others (a stable sample by the hash of their id)
  are repeated even when they pass (the wire case's ``repeat_passing``).
- **Alone vs after**: a failing case that ran after other cases on a warm
  worker is run again alone - ``fresh_worker`` on the wire: the supervisor
  starts a new worker process on the same device, nothing run before it.  One
  such run per failing signature (and output dtypes) per run, so a run of many
  failures of one kind pays one worker start.  A case that was already the
  first on its worker ran alone: that is said, at no cost.  Passing alone
  makes it ``order_dependent``; the result names the cases the warm worker ran
  before it.  Not for timeouts, kills from outside (they have their own
  ``rerun_case``), nondeterministic cases, random operators or probes.
- **Probes** (``case.after``): the named planned cases run first, in order,
  on a fresh worker, then the case; what ran is in its result
  (``consistency.after``) and each earlier answer in its raw evidence.  The
  autopilot's order search plans such cases (tools/order_search.py).

Nothing here is recorded on its own: the extra answers go into the one result
of their case and its raw evidence.
"""

from __future__ import annotations

import hashlib
import json

from .analysis.consistency import failure_group
from .evidence import RunStore
from .remote.envelopes import CaseDone, MalformedEnvelope, error_doc, read_case_done
from .remote.errors import LOST_ERRORS
from .runner.phases import killed_from_outside, timed_out  # stdlib only: the runner's one kill decision
from .schemas import AfterRun, AloneRun, Case, CaseResult, ConsistencyEvidence, OperatorConfig

FAILING = ("numerical_mismatch", "crash")


def repeat_passing_ids(config: OperatorConfig, planned: list[str], todo: list[str]) -> set[str]:
    """The cases of ``todo`` repeated even when they pass: the run's first planned case
    and ``repeats_passing - 1`` others, a stable sample (the lowest sha1 of their ids)."""
    n = config.repeats_passing
    if n <= 0 or config.repeats <= 0 or not todo:
        return set()
    chosen = {planned[0]} if planned and planned[0] in todo else set()
    rest = sorted((c for c in todo if c not in chosen), key=lambda c: hashlib.sha1(c.encode()).hexdigest())
    return chosen | set(rest[: max(0, n - len(chosen))])


def wire_case(case: Case, *, repeat_passing: bool = False, fresh: bool = False, repeats: int | None = None) -> dict:
    """The case as the runner gets it, with the wire-only directives (never planned)."""
    doc = case.model_dump(mode="json")
    if repeat_passing:
        doc["repeat_passing"] = True
    if fresh:
        doc["fresh_worker"] = True
    if repeats is not None:
        doc["repeats"] = repeats
    return doc


# A slot's answer, parsed once where it comes back (remote/envelopes.py): a malformed one
# is carried on as its error and records nothing.
Answer = CaseDone | MalformedEnvelope


def wire_text(event: dict) -> str:
    """An answer as raw evidence: one line of JSON, the kept outputs left out (stored apart)."""
    return json.dumps({k: v for k, v in event.items() if k != "outputs_b64"}, separators=(",", ":")) + "\n"


def _result(answer: Answer) -> CaseResult | None:
    """The result of an answer that has one (the checks below add their findings to it)."""
    return answer.result if isinstance(answer, CaseDone) else None


def history_of(done: CaseDone, run_id: str) -> tuple[list[str], int]:
    """The cases the worker ran before this one: ids of this run bare, others as run_id/case_id."""
    prefix = f"{run_id}/"
    entries = [h[len(prefix) :] if h.startswith(prefix) else h for h in done.worker_history]
    return entries, done.worker_history_total or len(entries)


def _consistency(result: CaseResult) -> ConsistencyEvidence:
    """The result's consistency evidence, made when it has none (assigned, so a dump of what
    was set keeps it)."""
    if result.consistency is None:
        result.consistency = ConsistencyEvidence(flags=[])
    return result.consistency


def outcome_text(result: CaseResult) -> str:
    """The flags of a result in words, for the one-line outcome summary ('' when none)."""
    c = result.consistency
    if c is None:
        return ""
    parts = []
    rep = c.repeats
    if "nondeterministic" in c.flags and rep is not None:
        parts.append(
            f"nondeterministic: {rep.distinct} distinct results in {rep.runs} runs (passed: {rep.passed_runs})"
        )
    alone = c.alone
    if "order_dependent" in c.flags and alone is not None:
        parts.append(
            f"order-dependent: passes alone on a fresh worker; fails after {alone.history_total} "
            f"case(s) on the warm worker (latest {alone.history[-3:]})"
        )
    for w in c.inputs_written:
        if not w.declared:
            parts.append(f"writes its input {w.input} ({w.changed} elements)")
    b = c.batch
    if "batch_variant" in c.flags and b is not None:
        parts.append(
            f"batch-variant: {b.differing} element(s) of rows [{b.start}, {b.start + b.length}) differ run alone"
        )
    return "; ".join(parts)


class AloneRuns:
    """The alone-runs of one run_case_remote call (at most one per failure group per run)."""

    def __init__(self, store: RunStore, config: OperatorConfig):
        self.store, self.config = store, config
        self.tested: set[str] | None = None  # read from the run's results when first needed

    def _load(self) -> set[str]:
        if self.tested is None:
            self.tested = set()
            for doc in self.store.read_result_docs().values():
                alone = (doc.get("consistency") or {}).get("alone")
                if alone and alone.get("history_total"):
                    self.tested.add(failure_group(doc))
        return self.tested

    def wanted(self, case: Case, answer: Answer) -> bool:
        """Whether this answer asks for a run alone (and it is the first of its group); notes it."""
        result = _result(answer)
        if (
            result is None
            or not isinstance(answer, CaseDone)
            or result.status not in FAILING
            or case.after
            or self.config.operator.random
            or (case.repeats if case.repeats is not None else self.config.repeats) == 0
        ):
            return False  # repeats 0: no re-run of a failing case at all, alone or not
        if result.consistency is not None and "nondeterministic" in result.consistency.flags:
            return False
        error = error_doc(result)
        if result.status == "crash" and (timed_out(error) or killed_from_outside(error)):
            return False  # a hang costs its timeout again; a kill from outside has its own rerun_case
        history, total = history_of(answer, self.store.run_id)
        if total:  # what ran before it (an order_suspect, when another case of its kind passes alone)
            c = _consistency(result)
            c.history, c.history_total = history, total
        if not total:  # it was the first case on a fresh worker: it ran alone already
            _consistency(result).alone = AloneRun(
                status=result.status, history=[], history_total=0, summary="it was the first case on a fresh worker"
            )
            return False
        group = failure_group(result.model_dump(mode="json"))
        tested = self._load()
        if group in tested:
            return False
        tested.add(group)
        return True

    async def run(self, slot, run, payload: dict, done: CaseDone, timeout_s: float) -> dict[str, str]:
        """Run the case again (``payload``: what the first run was sent) alone on a fresh worker of
        ``slot``; the evidence goes into ``done``'s result, the answer alone into the raw files returned."""
        result = _result(done)
        assert result is not None  # wanted() asks for a run alone only after a result
        try:
            alone_event = await slot.run_case(run, dict(payload, fresh_worker=True, repeats=0), timeout_s)
        except LOST_ERRORS as exc:  # the first answer stands; the slot is gone for the next case
            c = _consistency(result)
            c.notes = [*c.notes, f"the run alone was lost ({type(exc).__name__}: {exc})"[:300]]
            return {}
        raw = {"alone-result.json": wire_text(alone_event)}
        alone = _result(read_case_done(alone_event))
        history, total = history_of(done, self.store.run_id)
        if alone is None:  # a harness error alone: nothing to conclude
            return raw
        c = _consistency(result)
        c.alone = AloneRun(status=alone.status, history=history, history_total=total, summary=_alone_summary(alone))
        if alone.status == "passed" and "order_dependent" not in c.flags:
            c.flags = [*c.flags, "order_dependent"]
        return raw


def _alone_summary(result: CaseResult) -> str:
    if result.status == "passed":
        return "passed alone on a fresh worker"
    if result.status == "crash":
        return f"crash alone too: {result.error.signature if result.error else None}"
    failed = [c.output for c in result.comparisons if not c.passed]
    return f"{result.status} alone too ({', '.join(failed)})"


async def run_after(
    slot, run, case: Case, cases: dict[str, Case], default_timeout_s: float
) -> tuple[Answer, dict[str, str]]:
    """A probe: ``case.after`` first, in order, on a fresh worker, then ``case`` (no repeats)."""
    statuses, raw = [], {}
    for i, pid in enumerate(case.after):
        pre = cases[pid]
        ev = await slot.run_case(run, wire_case(pre, fresh=i == 0), pre.timeout_s or default_timeout_s)
        raw[f"after-{i}-{pid}.json"] = wire_text(ev)
        done = read_case_done(ev)
        res = _result(done)
        if not isinstance(done, CaseDone) or res is None:
            statuses.append("pending: harness error")
        elif done.worker_lost:
            statuses.append(f"{res.status} (the worker died: what ran before is lost)")
        else:
            statuses.append(res.status)
    answer = read_case_done(
        await slot.run_case(run, wire_case(case, fresh=not case.after, repeats=0), case.timeout_s or default_timeout_s)
    )
    result = _result(answer)
    if result is not None:
        _consistency(result).after = AfterRun(cases=list(case.after), statuses=statuses)
    return answer, raw


def check_after(known: dict[str, Case], cases: list[Case]) -> list[str]:
    """Problems with the ``after`` of new cases (``known``: every planned case and the new
    ones by id): unknown ids, the case itself, probes of probes."""
    problems = []
    for c in cases:
        if not c.after:
            continue
        unknown = [a for a in c.after if a not in known]
        if unknown:
            problems.append(f"case {c.id!r}: after names cases that are not planned: {unknown}")
        if c.id in c.after:
            problems.append(f"case {c.id!r}: after names the case itself")
        nested = [a for a in c.after if a in known and known[a].after]
        if nested:
            problems.append(f"case {c.id!r}: after names probe cases {nested} (their own after would not run)")
    return problems
