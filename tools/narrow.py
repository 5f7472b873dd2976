"""narrow_failure: the autopilot beside the manual loop.

Run the pending cases (that is the first step, counted in ``cases_run``; a
call the reference refused is not run again);
analyze the run; append the next cases that split the surviving hypotheses,
pin the leading one's boundary, cross it with the run's other axes, then
try to break it (discriminate, bisect, probe, crossing, falsify; explore when
no hypothesis exists yet) as ordinary stars; run them on the given hosts;
analyze again; repeat until the leading finding is exact (references/
behavior.md: no competitor left, boundary pinned, crossed, every probe built
to break it predicted), or a budget (new cases, seconds, rounds) runs out.  It stops ``nothing_to_try`` only when one hypothesis is left and
nothing can narrow it; ``undecided`` when several survive and no case the
variations can build tells them apart; ``no_hypothesis`` when every axis
of the failing cases was varied once and still nothing separates (a trend
may then be stated).  Every round is planned and recorded like any other
cases, so the evidence shows the path.  An order-dependent case
first gets its probes: the earlier case that poisons it, by delta debugging
over its worker's history (order_search.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .analysis.settlement import run_exact
from .analyze_failures import analyze_failures
from .cases.constraints import Constraints, learn_from_run, valid_call
from .cases.stars import expand_star
from .conditions.predict import parse_conditions
from .errors import ToolError
from .evidence import RunStore, read_json
from .host_modes import runnable_modes
from .order_search import search_order
from .plan_cases import plan_cases
from .run_case_remote import NOT_STARTED_AFTER_DEADLINE, run_case_remote
from .schemas import NarrowRequest, NarrowResponse, NarrowStep, StarSpec

NARROWING = ("discriminate", "bisect", "probe", "crossing", "explore", "falsify")
Progress = Callable[[int, int | None, str], Awaitable[None]]


def _valid_value(star: dict, var: dict, value, constraints: Constraints) -> bool:
    """The case(s) one value of a star's variation makes are valid calls (cases/constraints.py)."""
    if not constraints:
        return True
    one = dict(star, vary=[dict(var, values=[value])], include_base=False)
    try:
        made = expand_star(StarSpec.model_validate(one))
    except (ToolError, ValueError):
        return True  # planning says what is wrong with it
    return all(valid_call(case, constraints) is None for case in made)


def _pick(analysis, budget: int, constraints: Constraints | None = None) -> list[tuple[dict, str, str]]:
    """The stars to append this round (trimmed to the case budget, their values to valid calls: what the
    run's reference refusals taught), with their kind and axis."""
    picked, used = [], 0
    for nxt in analysis.next_cases:
        if nxt.kind not in NARROWING or nxt.star is None or used >= budget:
            continue
        star = dict(nxt.star)
        vary, room = [], budget - used
        for var in star["vary"]:
            if room <= 0:
                break
            values = [v for v in var["values"] if _valid_value(star, var, v, constraints or Constraints())][:room]
            if not values:
                continue
            vary.append(dict(var, values=values))
            room -= len(values)
        star["vary"] = vary
        if not vary:
            continue
        try:
            n = len(expand_star(StarSpec.model_validate(star)))
        except (ToolError, ValueError):
            continue
        used += n
        picked.append((star, nxt.kind, nxt.axis or ""))
    return picked


def pending_to_run(store: RunStore) -> list[str] | None:
    """The pending cases the first round runs: every one (None) but the calls the reference refused - the
    run's reference is fixed, so it would refuse them again (run_case_remote still runs them when asked)."""
    refused = store.read_refusals()
    if not refused:
        return None
    return [c for c in store.pending_case_ids() if c not in refused]


def _done(analysis) -> str | None:
    if analysis.verdict != "diagnosed":
        return "no_failure"
    excluded = set(analysis.consistency.excluded_from_findings)
    if analysis.failures and all(f.case_id in excluded for f in analysis.failures):
        return "consistency"  # every failure is nondeterministic or order-dependent: no axis to narrow
    narrowing = [n for n in analysis.next_cases if n.kind in NARROWING]
    hypotheses = [f for f in analysis.findings if f.kind != "trend"]
    if run_exact(analysis):
        return "exact"  # every cause exact, every failing group accounted for (settlement.py)
    if analysis.conditions and all(a.fate != "surviving" for a in analysis.conditions):
        return "conditions_settled"  # each stated condition refuted or exact: the agent's question answered
    if not narrowing:
        if analysis.competing:
            return "undecided"
        return "nothing_to_try" if hypotheses else "no_hypothesis"
    return None


PACE_SAMPLE = 200  # the most recent recorded cases whose wall time seeds the pace


def slowest_recorded_case_s(store: RunStore) -> float:
    """The longest wall time (the supervisor's started_at to finished_at) of the run's most
    recently recorded cases that ran on a host; 0 when none did."""
    slowest = 0.0
    for case_id in list(store.read_result_docs())[-PACE_SAMPLE:]:
        try:
            done = read_json(store.raw_dir(case_id) / "worker-result.json")
            slowest = max(slowest, float(done["finished_at"]) - float(done["started_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return slowest


class _Runs:
    """The execution side of one narrow_failure: every run of cases within its deadline
    (no case starts after max_seconds; a device held elsewhere is awaited within what is
    left), one progress notification per case, and a round trimmed to the cases that fit
    in the time left at the slowest pace seen so far.  ``detach``: a case still running at
    the deadline is not waited for - it goes on, and is recorded, after the answer."""

    def __init__(self, req: NarrowRequest, root, inventory, progress: Progress | None, on_news, detach: bool) -> None:
        self.req, self.root, self.inventory, self.detach = req, root, inventory, detach
        self.progress, self.on_news = progress, on_news
        self.t0 = time.monotonic()
        self.deadline = self.t0 + req.max_seconds
        self.done = 0  # cases answered, each one progress step
        self.started: list[str] = []
        self.answered: dict[str, str] = {}  # case id -> its state
        self.asked: list[str] = []  # every case a run was asked for, in order
        self.kept_out: list[str] = []  # cases the deadline kept from starting (left pending, never run)
        self.answering = True  # False once the call answered: no more progress for it
        # the slowest pace seen: wall seconds per case of a round (its analysis included), at
        # first the slowest recorded case of the run (a compile-mode case may take many seconds)
        self.per_case_s = slowest_recorded_case_s(RunStore(root, req.run_id))
        self.modes = runnable_modes(req.hosts, inventory)  # no next case in a mode none of these hosts can run

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def fits(self, wanted: int) -> int:
        """How many of ``wanted`` new cases fit in the time left."""
        if self.per_case_s <= 0:
            return wanted if self.left() > 0 else 0
        return max(0, min(wanted, int(self.left() / self.per_case_s)))

    def still_running(self) -> list[str]:
        return [c for c in self.started if c not in self.answered]

    def not_started(self) -> list[str]:
        """The cases asked for that never started: kept out by the deadline, or not reached when it answered."""
        return [c for c in dict.fromkeys(self.asked) if c not in self.started and self._not_run(c)]

    def _not_run(self, case_id: str) -> bool:
        return case_id in self.kept_out or case_id not in self.answered

    def cut(self) -> bool:
        """The deadline stopped a run: a case still running, or one it kept from starting."""
        return bool(self.still_running() or self.not_started())

    def ran(self, case_ids: list[str] | None = None) -> list[str]:
        """The cases it started or answered (a case the deadline kept from starting is not one), in order."""
        ran = [c for c in dict.fromkeys(self.started + list(self.answered)) if c not in self.kept_out]
        return ran if case_ids is None else [c for c in ran if c in case_ids]

    def states(self, case_ids: list[str]) -> dict[str, str]:
        """Each case's state: as answered, else running (past the deadline) or pending."""
        return {c: self.answered.get(c, "running" if c in self.started else "pending") for c in case_ids}

    async def run(self, case_ids: list[str] | None = None):
        """run_case_remote on the pending cases (or ``case_ids``) and the analysis after it;
        the response is None when the deadline came first (``detach``: the run goes on)."""
        task = asyncio.ensure_future(self._run(case_ids))
        if not self.detach:
            return await task
        done, _ = await asyncio.wait({task}, timeout=self.left() + ANSWER_GRACE_S)
        if done:
            return task.result()
        _LATE_RUNS[task] = self  # kept until it ends (its cases are recorded then)
        task.add_done_callback(_forget_late_run)
        self.answering = False
        return None, analyze_failures(self.req.run_id, root=self.root, modes=self.modes, conditions=self.req.conditions)

    async def _run(self, case_ids: list[str] | None):
        started = time.monotonic()
        self.asked.extend(case_ids if case_ids is not None else RunStore(self.root, self.req.run_id).pending_case_ids())
        response = await run_case_remote(
            self.req.run_id,
            case_ids=case_ids,
            root=self.root,
            hosts=self.req.hosts,
            inventory=self.inventory,
            progress=self._answered,
            on_news=self.say,
            on_start=self._started,
            lease_wait_s=self.left(),
            deadline=self.deadline,
        )
        analysis = analyze_failures(self.req.run_id, root=self.root, modes=self.modes, conditions=self.req.conditions)
        if response.outcomes:
            self.per_case_s = max(self.per_case_s, (time.monotonic() - started) / len(response.outcomes))
        return response, analysis

    async def _started(self, case_id: str) -> None:
        self.started.append(case_id)

    async def _answered(self, _done: int, _total: int, outcome) -> None:
        self.answered[outcome.case_id] = outcome.state
        if outcome.error == NOT_STARTED_AFTER_DEADLINE:
            self.kept_out.append(outcome.case_id)
            return  # not a case it ran: no progress step
        self.done += 1
        if self.progress is not None and self.answering:
            await self.progress(self.done, None, f"{outcome.case_id}: {outcome.state} - {outcome.summary}")

    async def say(self, line: str) -> None:
        if self.on_news is not None and self.answering:
            await self.on_news(line)


ANSWER_GRACE_S = 2.0  # the answer comes at most this long after max_seconds
_LATE_RUNS: dict[asyncio.Future, _Runs] = {}


def late_runs() -> list[LateRun]:
    """The runs still going on after narrow_failure answered (``detach``), with the cases
    each still has running: what a server that stops hands over (tools/handover.py)."""
    return [
        LateRun(task, runs.root, runs.req.run_id, runs.req.hosts, runs.inventory, runs.still_running())
        for task, runs in _LATE_RUNS.items()
        if not task.done()
    ]


@dataclass(frozen=True)
class LateRun:
    task: asyncio.Future
    root: Any
    run_id: str
    hosts: list[str] | None
    inventory: Any
    running: list[str]


def _forget_late_run(task: asyncio.Future) -> None:
    _LATE_RUNS.pop(task, None)
    if not task.cancelled():
        task.exception()  # retrieved: a late run's failure leaves its cases pending, as any run's does


def _step(index: int, kinds: list[str], axes: list[str], cases: dict, analysis) -> NarrowStep:
    """One round of the narrowing, with the findings and competing leads after it."""
    return NarrowStep(
        index=index,
        kinds=kinds,
        axes=axes,
        cases=cases,
        findings=[f.predicate + (" (exact)" if f.exact else "") for f in analysis.findings],
        competing=[f.predicate for f in analysis.competing],
    )


def _budget_spent(req: NarrowRequest, steps: list[NarrowStep], new_cases: int) -> str | None:
    """Why no further round may start within the step and case budgets, or None."""
    if sum(1 for s in steps if s.kinds != ["pending"]) >= req.max_steps:
        return "budget_steps"
    if new_cases >= req.max_cases:
        return "budget_cases"
    return None


def _append_picked(req: NarrowRequest, root, picked) -> list[str]:
    """Plan the picked cases into the run; the ids it added."""
    added: list[str] = []
    for star, _, _ in picked:
        try:
            resp = plan_cases({"run_id": req.run_id, "append": True, "stars": [star]}, root=root)
        except ToolError:
            continue  # e.g. a derived id already planned under another body: try the next
        added.extend(resp.added)
    return added


async def _order_round(req: NarrowRequest, runs: _Runs, analysis, budget: int, searched: set[str], index: int):
    """Look for the earlier case that poisons an order-dependent one: (cases run, its step or None, analysis)."""
    order = await search_order(
        req.run_id, analysis, root=runs.root, hosts=req.hosts, inventory=runs.inventory, budget=budget, done=searched
    )  # order_search.py
    if not order.cases_run:
        return 0, None, analysis
    analysis = analyze_failures(req.run_id, root=runs.root, modes=runs.modes, conditions=req.conditions)
    cases = {c: s for p in order.probes.values() for c, s in p.items()}
    return order.cases_run, _step(index, ["order"], sorted(order.probes), cases, analysis), analysis


async def narrow_failure(
    request: dict | NarrowRequest,
    *,
    root=None,
    inventory=None,
    progress: Progress | None = None,
    on_news=None,
    detach: bool = False,
) -> NarrowResponse:
    """``progress(done, None, text)`` after each case it runs; ``on_news(line)`` after each
    round, and about once a second while a device held elsewhere is awaited (within what is
    left of max_seconds).  ``detach`` (a server, whose clients time out): answer by
    max_seconds, and leave a case still running then to finish and be recorded after the
    answer (``still_running``); else wait for it."""
    req = request if isinstance(request, NarrowRequest) else NarrowRequest.model_validate(request)
    parse_conditions(req.conditions)  # a text that is no condition is refused before anything runs
    runs = _Runs(req, root, inventory, progress, on_news, detach)
    steps: list[NarrowStep] = []
    new_cases = 0
    first, analysis = await runs.run(pending_to_run(RunStore(root, req.run_id)))  # pending first
    ran_first = runs.ran()
    cases_run = len(ran_first)
    if ran_first:  # the pending cases it ran are the first step
        steps.append(_step(1, ["pending"], [], runs.states(ran_first), analysis))
    stopped = "budget_seconds" if first is None or runs.cut() else None  # the deadline came in the first round
    searched: set[str] = set()  # order-dependent cases whose poisoning earlier case was looked for
    while stopped is None and first is not None:
        budget = req.max_cases - new_cases
        ran, order_step, analysis = await _order_round(req, runs, analysis, budget, searched, len(steps) + 1)
        new_cases += ran
        cases_run += ran
        if order_step is not None:
            steps.append(order_step)
        stopped = _done(analysis) or _budget_spent(req, steps, new_cases)
        if stopped:
            break
        room = runs.fits(min(req.cases_per_step, req.max_cases - new_cases))
        if room <= 0:  # no case would start in time (run_case_remote starts none after the deadline either)
            stopped = "budget_seconds"
            break
        store = RunStore(root, req.run_id)
        picked = _pick(analysis, room, learn_from_run(store.read_cases(), store.read_results(), store.read_refusals()))
        added = _append_picked(req, root, picked)
        if not added:
            stopped = "no_progress"
            break
        new_cases += len(added)
        run, analysis = await runs.run(added)
        cases_run += len(runs.ran(added))  # not those the deadline kept from starting
        kinds, axes = sorted({k for _, k, _ in picked}), sorted({a for _, _, a in picked if a})
        steps.append(_step(len(steps) + 1, kinds, axes, runs.states(added), analysis))
        await runs.say(
            f"round {len(steps)}: {len(added)} case(s); findings: {', '.join(steps[-1].findings[:3]) or 'none yet'}"
        )
        if run is None or runs.cut():
            stopped = "budget_seconds"  # the deadline: a case still running, or one it kept from starting
        elif not run.recorded:
            stopped = "no_progress"
    return _response(req, runs, analysis, stopped, steps, cases_run, new_cases, len(ran_first))


def _response(req, runs: _Runs, analysis, stopped, steps, cases_run: int, new_cases: int, pending_run: int):
    """The answer of narrow_failure from where its rounds stopped."""
    return NarrowResponse(
        run_id=req.run_id,
        stopped=stopped,
        exact=run_exact(analysis),
        findings=analysis.findings,
        steps=steps,
        cases_run=cases_run,
        seconds=round(time.monotonic() - runs.t0, 3),
        summary=analysis.summary,
        competing=analysis.competing,
        new_cases=new_cases,
        pending_run=pending_run,
        counterexamples=analysis.counterexamples,
        still_running=runs.still_running(),
        not_started=runs.not_started(),
        conditions=analysis.conditions,
    )
