"""order_search: which earlier case poisons an order-dependent case.

A case flagged ``order_dependent`` failed after other cases on a warm worker
and passed alone on a fresh one.  Its result names the cases that worker ran
before it (the history).  This search finds the smallest part of that history
that makes it fail again by delta debugging (Zeller's ddmin) over it: each
test is a **probe**, an ordinary planned and recorded case - the same case
under a new id with ``after: [...]`` - that run_case_remote runs on a fresh
worker after exactly those cases, in their original order.  So the evidence
is reproducible: anyone can run the probe again.

The first probe replays the whole history; if that passes, the failure does
not come back by replay (it depended on something else: another run's cases,
a nondeterministic state) and the search stops for that case.  The analysis
then reads the probes (analysis/consistency.py): the failing probe with the
fewest earlier cases names them (``poisoned_by``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cases.ids import fit_id
from .errors import ToolError
from .evidence import RunStore
from .plan_cases import plan_cases
from .run_case_remote import run_case_remote
from .schemas import Case

FAILING = ("numerical_mismatch", "crash")


@dataclass
class OrderSearch:
    """What one search did: the probes it ran (id -> state) per order-dependent case."""

    probes: dict[str, dict[str, str]] = field(default_factory=dict)
    minimal: dict[str, list[str]] = field(default_factory=dict)
    cases_run: int = 0


def _split(items: list[str], n: int) -> list[list[str]]:
    size, rest = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < rest else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


async def search_order(
    run_id: str, analysis, *, root=None, hosts=None, inventory=None, budget: int = 16, done: set[str] | None = None
) -> OrderSearch:
    """Probe every order-dependent case of ``analysis`` not in ``done`` (it is added) within ``budget``
    new cases; returns the probes run and the minimal earlier cases found."""
    done = done if done is not None else set()
    store = RunStore(root, run_id)
    search = OrderSearch()
    targets = [f for f in analysis.consistency.flagged if f.flag == "order_dependent" and f.case_id not in done]
    if not targets:
        return search
    cases = {c.id: c for c in store.read_cases()}
    results = store.read_results()
    for flagged in targets:
        done.add(flagged.case_id)
        target = cases.get(flagged.case_id)
        if target is None:
            continue
        history = [
            h
            for h in dict.fromkeys(flagged.history)
            if "/" not in h and h in cases and h != target.id and not cases[h].after
        ]
        if not history:
            continue
        known = {tuple(c.after): c.id for c in cases.values() if c.after and _same_case(c, target)}
        probes = search.probes.setdefault(target.id, {})

        # this iteration's target, known and probes bound as defaults: test is awaited within it
        async def test(
            subsets: list[list[str]],
            target: Case = target,
            known: dict[tuple, str] = known,
            probes: dict[str, str] = probes,
        ) -> dict[tuple, bool]:
            """Whether the target fails after each subset (planned and run as probes where new)."""
            new: list[dict] = []
            for sub in subsets:
                key = tuple(sub)
                if key in known or any(c["after"] == sub for c in new):
                    continue
                new.append(_probe(target, sub, set(cases)))
            room = budget - search.cases_run
            new = new[: max(0, room)]
            if new:
                plan_cases({"run_id": run_id, "append": True, "cases": new}, root=root)
                search.cases_run += len(new)
                for doc in new:
                    known[tuple(doc["after"])] = doc["id"]
                    cases[doc["id"]] = target.model_copy(update={"id": doc["id"], "after": doc["after"]})
                run = await run_case_remote(
                    run_id, case_ids=[d["id"] for d in new], root=root, hosts=hosts, inventory=inventory
                )
                for o in run.outcomes:
                    probes[o.case_id] = o.state
                results.update(store.read_results())
            out = {}
            for sub in subsets:
                pid = known.get(tuple(sub))
                r = results.get(pid) if pid else None
                if r is not None:
                    out[tuple(sub)] = r.status in FAILING
            return out

        try:
            replay = await test([history])
            if not replay.get(tuple(history)):
                continue  # the whole history does not bring the failure back: nothing to narrow
            search.minimal[target.id] = await _ddmin(history, test)
        except ToolError:
            continue
    return search


async def _ddmin(items: list[str], test) -> list[str]:
    """Zeller's ddmin: a 1-minimal sublist (order kept) after which the target still fails
    (the smallest one known when the budget runs out first)."""
    current, n = list(items), 2
    while len(current) >= 2:
        chunks = _split(current, n)
        got = await test(chunks)
        if any(tuple(c) not in got for c in chunks):  # the case budget ran out: the smallest known so far
            return _first_failing(chunks, got) or current
        failing = _first_failing(chunks, got)
        if failing is not None:
            current, n = failing, 2
            continue
        if n > 2:
            complements = [[x for x in current if x not in chunk] for chunk in chunks]
            got = await test(complements)
            if any(tuple(c) not in got for c in complements):
                return current
            failing = _first_failing(complements, got)
            if failing is not None:
                current, n = failing, max(n - 1, 2)
                continue
        if n >= len(current):
            break
        n = min(2 * n, len(current))
    return current


def _first_failing(subsets: list[list[str]], got: dict[tuple, bool]) -> list[str] | None:
    fails = [s for s in subsets if got.get(tuple(s))]
    return min(fails, key=len) if fails else None


def _same_case(probe: Case, target: Case) -> bool:
    a = probe.model_dump(mode="json", exclude={"id", "after", "description", "repeats"})
    b = target.model_dump(mode="json", exclude={"id", "after", "description", "repeats"})
    return a == b


def _probe(target: Case, after: list[str], taken: set[str]) -> dict:
    """The target under a new id, run after ``after`` on a fresh worker."""
    base = fit_id(f"{target.id}.after-{'_'.join(after)}")
    pid, k = base, 1
    while pid in taken:
        k += 1
        pid = fit_id(f"{base}-{k}")
    taken.add(pid)
    doc = target.model_dump(mode="json", exclude_none=True)
    doc.update(
        id=pid,
        after=list(after),
        description=f"order probe: {target.id} run after {', '.join(after)} on a fresh worker",
    )
    doc.pop("repeats", None)
    return doc
