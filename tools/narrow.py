"""narrow_failure: the autopilot beside the manual loop.

Run the pending cases (that is the first step, counted in ``cases_run``);
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
cases, so the evidence shows the path.  An order-dependent case (issue 21)
first gets its probes: the earlier case that poisons it, by delta debugging
over its worker's history (order_search.py).
"""

from __future__ import annotations

import time
from typing import Awaitable, Callable

from .analyze_failures import analyze_failures
from .errors import ToolError
from .cases.stars import expand_star
from .plan_cases import plan_cases
from .run_case_remote import run_case_remote
from .order_search import search_order
from .schemas import NarrowRequest, NarrowResponse, NarrowStep, StarSpec

NARROWING = ("discriminate", "bisect", "probe", "crossing", "explore", "falsify")
Progress = Callable[[int, int, str], Awaitable[None]]


def _pick(analysis, budget: int) -> list[tuple[dict, str, str]]:
    """The stars to append this round (trimmed to the case budget), with their kind and axis."""
    picked, used = [], 0
    for nxt in analysis.next_cases:
        if nxt.kind not in NARROWING or nxt.star is None or used >= budget:
            continue
        star = dict(nxt.star)
        vary, room = [], budget - used
        for var in star["vary"]:
            if room <= 0:
                break
            values = var["values"][:room]
            vary.append(dict(var, values=values))
            room -= len(values)
        star["vary"] = vary
        try:
            n = len(expand_star(StarSpec.model_validate(star)))
        except (ToolError, ValueError):
            continue
        used += n
        picked.append((star, nxt.kind, nxt.axis or ""))
    return picked


def _done(analysis) -> str | None:
    if analysis.verdict != "diagnosed":
        return "no_failure"
    excluded = set(analysis.consistency.excluded_from_findings)
    if analysis.failures and all(f.case_id in excluded for f in analysis.failures):
        return "consistency"  # every failure is nondeterministic or order-dependent: no axis to narrow
    narrowing = [n for n in analysis.next_cases if n.kind in NARROWING]
    hypotheses = [f for f in analysis.findings if f.kind != "trend"]
    if hypotheses and all(f.exact for f in hypotheses) and not analysis.competing:
        return "exact"
    if not narrowing:
        if analysis.competing:
            return "undecided"
        return "nothing_to_try" if hypotheses else "no_hypothesis"
    return None


async def narrow_failure(request: dict | NarrowRequest, *, root=None, inventory=None,
                         progress: Progress | None = None, on_news=None) -> NarrowResponse:
    """``on_news(line)``: about once a second while a device held elsewhere is awaited
    (within what is left of max_seconds)."""
    req = request if isinstance(request, NarrowRequest) else NarrowRequest.model_validate(request)
    t0 = time.monotonic()

    def left() -> dict:  # a device held elsewhere is awaited within what is left of the budget
        return {"lease_wait_s": max(0.0, req.max_seconds - (time.monotonic() - t0)), "on_news": on_news}

    steps: list[NarrowStep] = []
    new_cases = 0
    first = await run_case_remote(req.run_id, root=root, hosts=req.hosts, inventory=inventory,
                                  **left())  # pending first
    analysis = analyze_failures(req.run_id, root=root)
    cases_run = len(first.outcomes)
    if first.outcomes:  # the pending cases it ran are the first step
        steps.append(NarrowStep(
            index=1, kinds=["pending"], axes=[], cases={o.case_id: o.state for o in first.outcomes},
            findings=[f.predicate + (" (exact)" if f.exact else "") for f in analysis.findings],
            competing=[f.predicate for f in analysis.competing]))
    stopped = None
    searched: set[str] = set()  # order-dependent cases whose poisoning earlier case was looked for
    while stopped is None:
        order = await search_order(req.run_id, analysis, root=root, hosts=req.hosts, inventory=inventory,
                                   budget=req.max_cases - new_cases, done=searched)  # order_search.py
        if order.cases_run:
            new_cases += order.cases_run
            cases_run += order.cases_run
            analysis = analyze_failures(req.run_id, root=root)
            steps.append(NarrowStep(index=len(steps) + 1, kinds=["order"], axes=sorted(order.probes),
                                    cases={c: s for p in order.probes.values() for c, s in p.items()},
                                    findings=[f.predicate + (" (exact)" if f.exact else "") for f in analysis.findings],
                                    competing=[f.predicate for f in analysis.competing]))
        stopped = _done(analysis)
        if stopped:
            break
        if sum(1 for s in steps if s.kinds != ["pending"]) >= req.max_steps:
            stopped = "budget_steps"
            break
        if new_cases >= req.max_cases:
            stopped = "budget_cases"
            break
        if time.monotonic() - t0 >= req.max_seconds:  # checked between rounds: a round runs to its end
            stopped = "budget_seconds"
            break
        picked = _pick(analysis, min(req.cases_per_step, req.max_cases - new_cases))
        added: list[str] = []
        for star, _, _ in picked:
            try:
                resp = plan_cases({"run_id": req.run_id, "append": True, "stars": [star]}, root=root)
            except ToolError:
                continue  # e.g. a derived id already planned under another body: try the next
            added.extend(resp.added)
        if not added:
            stopped = "no_progress"
            break
        new_cases += len(added)
        cases_run += len(added)
        run = await run_case_remote(req.run_id, case_ids=added, root=root, hosts=req.hosts, inventory=inventory,
                                    **left())
        analysis = analyze_failures(req.run_id, root=root)
        states = {o.case_id: o.state for o in run.outcomes}
        steps.append(NarrowStep(
            index=len(steps) + 1, kinds=sorted({k for _, k, _ in picked}),
            axes=sorted({a for _, _, a in picked if a}), cases={cid: states.get(cid, "pending") for cid in added},
            findings=[f.predicate + (" (exact)" if f.exact else "") for f in analysis.findings],
            competing=[f.predicate for f in analysis.competing]))
        if progress is not None:
            await progress(len(steps), req.max_steps, f"round {len(steps)}: {len(added)} case(s)")
        if not run.recorded:
            stopped = "no_progress"
    return NarrowResponse(run_id=req.run_id, stopped=stopped, exact=bool(analysis.findings) and all(
        f.exact for f in analysis.findings), findings=analysis.findings, steps=steps, cases_run=cases_run,
        seconds=round(time.monotonic() - t0, 3), summary=analysis.summary, competing=analysis.competing,
        new_cases=new_cases, pending_run=len(first.outcomes), counterexamples=analysis.counterexamples)
