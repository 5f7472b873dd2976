"""Shrink a failing case to the smallest case that still fails the same way.

"The same way" is the same status and, for a crash or an unsupported
combination, the same error signature; for a numerical mismatch, the same
failed outputs.  Every step is an ordinary case, planned with plan_cases
(append) under a new id ``<start>.shrink-<n>`` and run with run_case_remote on
the given hosts, so the evidence shows the path; a step that fails another way
(an invalid call that crashes with another signature, a pass) is rejected and
shrinking goes on from the smallest case so far.  Steps, in order:

0. fewer gradients (a case with grad_inputs): only the inputs whose
   gradient fails (a backward crash: each gradient alone);
1. contiguous: drop explicit strides and storage offsets (all inputs, then
   one input at a time) - kept only if the failure does not need them;
2. fewer special values: drop them all, then halve each one's count;
3. lower rank: drop an input's leading dimension while it still fails;
4. fewer elements: for every dimension bisect toward the smallest failing size.

Sizes the inputs share stay equal: dimensions of equal size in different
inputs (a matmul's a [b, m, k] and b [b, k, n]: the batch and k; an RMSNorm's
x [rows, hidden] and weight [hidden]) move together, in rank reductions too.
A step keeps each input's dimension order (a transposed input stays
transposed), and its ``change`` says every change it makes (shapes, strides,
offsets, specials).  A step that fails the same way but whose call the
reference refuses (another error than the candidate's) is not a valid call of
the operator: it is recorded and not taken (``rejected``).  What the run's
refusals teach (cases/constraints.py: a channel count divisible by the groups,
a size two inputs share) is learned before the first step and again after each
refused one; a step that breaks it is not run (``skipped_invalid``), and a
bisection moves through valid sizes only (a multiple of the groups).

A budget of cases and of seconds bounds the work; what was found so far is
returned when it runs out.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from ..cases.constraints import Constraints, learn_from_run, properties, valid_call
from ..cases.ids import fit_id
from ..errors import ToolError
from ..evidence import RunStore, unknown_cases
from ..plan_cases import plan_cases
from ..run_case_remote import run_case_remote
from ..schemas import Case, CaseOutcome, ShrinkResponse, ShrinkStep, contiguous_strides
from .common import case_seed

Progress = Callable[[int, int, str], Awaitable[None]]
VALID_SEARCH = 256  # sizes looked at on each side of a bisection's middle for a valid call


def failure_key(state: str, signature: str | None, failed_outputs: list[str]) -> str:
    if state == "numerical_mismatch":
        return f"numerical_mismatch on {sorted(failed_outputs)}"
    if state in ("crash", "unsupported"):
        return f"{state}: {signature}"
    return state


def total_numel(doc: dict) -> int:
    return sum(math.prod(i["shape"]) for i in doc["inputs"])


def _restride(spec: dict, shape: list[int], dropped: list[int] | None = None) -> list[int] | None:
    """Strides for a new shape that keep the old dimension order (a transposed
    input stays transposed), the ``dropped`` dimensions (indices) left out;
    None when the input was contiguous."""
    old = spec.get("strides")
    if old is None:
        return None
    old = [st for i, st in enumerate(old) if i not in (dropped or [])]
    if len(shape) != len(old):
        return None
    order = sorted(range(len(old)), key=lambda a: (old[a], -a))  # innermost first
    strides = [0] * len(shape)
    acc = 1
    for axis in order:
        strides[axis] = acc
        acc *= max(shape[axis], 1)
    return strides


def _fit_specials(spec: dict) -> None:
    numel = math.prod(spec["shape"])
    kept = []
    for special in spec["values"].get("specials") or []:
        if special.get("positions") is not None:
            pos = [
                p
                for p in special["positions"]
                if len(p) == len(spec["shape"]) and all(i < s for i, s in zip(p, spec["shape"], strict=True))
            ]
            if pos:
                kept.append(dict(special, positions=pos))
        elif numel:
            kept.append(dict(special, count=min(special["count"], numel)))
    spec["values"]["specials"] = kept


def with_shape(doc: dict, changes: dict[str, list[int]], dropped: dict[str, list[int]] | None = None) -> dict:
    new = copy.deepcopy(doc)
    for spec in new["inputs"]:
        if spec["name"] in changes:
            shape = changes[spec["name"]]
            spec["strides"] = _restride(spec, shape, (dropped or {}).get(spec["name"]))
            spec["shape"] = shape
            _fit_specials(spec)
    return new


def _tensors(doc: dict) -> list[dict]:
    return [s for s in doc["inputs"] if s.get("shape") is not None and not s.get("none")]


def dim_groups(doc: dict) -> list[list[tuple[str, int]]]:
    """Dimensions that move together, as (input, index) lists, largest size first: sizes above 1 that
    are equal in different inputs are one group (a size two inputs share stays equal), each other
    dimension its own.  A coincidence only makes a group move together: never an invalid call."""
    specs = _tensors(doc)
    parent = {(s["name"], i): (s["name"], i) for s in specs for i in range(len(s["shape"]))}

    def find(node):
        while parent[node] != node:
            node = parent[node]
        return node

    by_size: dict[int, list[tuple[str, int]]] = {}
    for s in specs:
        for i, size in enumerate(s["shape"]):
            if size > 1:
                by_size.setdefault(size, []).append((s["name"], i))
    for members in by_size.values():
        for node in members[1:]:
            if any(node[0] != other[0] for other in members):
                parent[find(node)] = find(members[0])
    groups: dict = {}
    for s in specs:
        for i, size in enumerate(s["shape"]):
            if size > 1:
                groups.setdefault(find((s["name"], i)), []).append((s["name"], i))
    sizes = {
        g: next(sz for s in specs for i, sz in enumerate(s["shape"]) if (s["name"], i) == g[0])
        for g in map(tuple, groups.values())
    }
    return [list(g) for g in sorted(sizes, key=lambda g: -sizes[g])]


def _set_group(doc: dict, group: list[tuple[str, int]], size: int) -> dict:
    changes: dict[str, list[int]] = {}
    for spec in _tensors(doc):
        for name, i in group:
            if spec["name"] == name:
                changes.setdefault(name, list(spec["shape"]))[i] = size
    return with_shape(doc, changes)


def _group_size(doc: dict, group: list[tuple[str, int]]) -> int | None:
    for spec in _tensors(doc):
        for name, i in group:
            if spec["name"] == name and i < len(spec["shape"]):
                return spec["shape"][i]
    return None


def _drop_group(doc: dict, group: list[tuple[str, int]]) -> dict:
    """Every dimension of ``group`` dropped from its input (a rank reduction of each)."""
    dropped: dict[str, list[int]] = {}
    for name, i in group:
        dropped.setdefault(name, []).append(i)
    changes = {
        s["name"]: [sz for i, sz in enumerate(s["shape"]) if i not in dropped[s["name"]]]
        for s in _tensors(doc)
        if s["name"] in dropped
    }
    return with_shape(doc, changes, dropped)


def _layout_text(spec: dict) -> str:
    strides = spec.get("strides")
    text = "contiguous" if strides is None or strides == contiguous_strides(spec["shape"]) else f"strides {strides}"
    return text + (f", offset {spec['storage_offset']}" if spec.get("storage_offset") else "")


def changes_text(old: dict, new: dict) -> str:
    """Every difference between two cases' inputs, input by input: ``a shape [32, 128, 64] -> [128, 64],
    strides [8192, 1, 128] -> [1, 128]; b ...`` (a rank reduction that changes the layout says so); ""
    when only grad_inputs changed (the step's own text says how)."""
    parts = []
    before = {s["name"]: s for s in old["inputs"]}
    for spec in new["inputs"]:
        was = before.get(spec["name"])
        if was is None:
            continue
        diff = []
        if was.get("shape") != spec.get("shape"):
            diff.append(f"shape {was.get('shape')} -> {spec.get('shape')}")
        if was.get("shape") is not None and spec.get("shape") is not None and _layout_text(was) != _layout_text(spec):
            diff.append(f"{_layout_text(was)} -> {_layout_text(spec)}")
        if ((was.get("values") or {}).get("specials") or []) != ((spec.get("values") or {}).get("specials") or []):
            diff.append(f"specials {_specials_text(was)} -> {_specials_text(spec)}")
        if diff:
            parts.append(f"{spec['name']} " + ", ".join(diff))
    return "; ".join(parts)


def _specials_text(spec: dict) -> str:
    found = (spec.get("values") or {}).get("specials") or []
    return (
        "["
        + ", ".join(
            f"{x['value']} x{x['count']}" if x.get("count") is not None else f"{x['value']} at {x['positions']}"
            for x in found
        )
        + "]"
    )


class _Shrinker:
    def __init__(
        self,
        store: RunStore,
        start: Case,
        target: str,
        *,
        root,
        hosts,
        inventory,
        max_cases: int,
        max_seconds: float,
        progress: Progress | None,
    ):
        self.store, self.root, self.hosts, self.inventory = store, root, hosts, inventory
        self.start = start
        self.target = target
        self.best = start.model_dump(mode="json")
        self.best["seed"] = case_seed(self.best)  # every step draws from the start case's seed
        self.best_id = start.id
        self.max_cases, self.max_seconds = max_cases, max_seconds
        self.progress = progress
        self.steps: list[ShrinkStep] = []
        self.t0 = time.monotonic()
        self.stopped = "done"
        planned = {c.id for c in store.read_cases()}
        self.n = sum(1 for c in planned if c.startswith(f"{start.id}.shrink-"))
        self.planned = planned
        self.tried: set[str] = set()
        self.grad_defaults = list(store.read_config().grad_inputs or [])
        self.failed_outputs: list[str] = []
        self.start_reference_error: str | None = None
        self.constraints = self.learn()
        self.skipped = 0  # steps not run: calls the run's refusals say the reference refuses

    def learn(self) -> Constraints:
        """What the run's refusals teach a valid call is (cases/constraints.py); a relation the start case
        itself breaks is the failure being shrunk, not a constraint on its steps."""
        learned = learn_from_run(self.store.read_cases(), self.store.read_results(), self.store.read_refusals())
        start = properties(self.start)
        learned.learned = [c for c in learned.learned if c.holds(start) is not False]
        return learned

    def out_of_budget(self) -> bool:
        if len(self.steps) >= self.max_cases:
            self.stopped = "case_budget"
            return True
        if time.monotonic() - self.t0 >= self.max_seconds:
            self.stopped = "time_budget"
            return True
        return False

    def _content(self, doc: dict) -> str:
        import json

        return json.dumps({k: v for k, v in doc.items() if k not in ("id", "description")}, sort_keys=True)

    async def attempt(self, doc: dict, change: str) -> bool:
        """Plan and run one step; True (and it becomes the best) when it fails the same way."""
        if self.out_of_budget():
            return False
        content = self._content(doc)
        if content in self.tried or content == self._content(self.best):
            return False
        if valid_call(doc, self.constraints) is not None:
            self.tried.add(content)
            self.skipped += 1
            return False
        doc = copy.deepcopy(doc)
        while True:
            self.n += 1
            case_id = fit_id(f"{self.start.id}.shrink-{self.n}")
            if case_id not in self.planned:
                break
        doc["id"] = case_id
        diff = changes_text(self.best, doc)
        change = f"{change}: {diff}" if diff else change
        doc["description"] = f"shrink step {self.n} from {self.start.id!r} (best so far {self.best_id!r}): {change}"
        try:
            Case.model_validate(doc)
        except ValidationError:
            return False  # an impossible case (e.g. specials outside the shape): not worth a run
        self.tried.add(content)
        plan_cases({"run_id": self.store.run_id, "append": True, "cases": [doc]}, root=self.root)
        self.planned.add(case_id)
        if self.progress is not None:
            await self.progress(len(self.steps), self.max_cases, f"{case_id}: {change}")
        response = await run_case_remote(
            self.store.run_id,
            case_ids=[case_id],
            hosts=self.hosts,
            root=self.root,
            inventory=self.inventory,  # a device held elsewhere: within the budget
            lease_wait_s=max(0.0, self.max_seconds - (time.monotonic() - self.t0)),
        )
        outcome: CaseOutcome | None = response.outcomes[0] if response.outcomes else None
        state = outcome.state if outcome else "pending"
        same = (
            outcome is not None
            and outcome.recorded
            and failure_key(outcome.state, outcome.signature, outcome.failed_outputs) == self.target
        )
        rejected = self.invalid_call(case_id) if same else None
        if rejected or (outcome is not None and not outcome.recorded):  # perhaps a refusal: learn from it
            self.constraints = self.learn()
        self.steps.append(
            ShrinkStep(
                case_id=case_id,
                change=change,
                numel=total_numel(doc),
                state=state,
                same_failure=same,
                rejected=rejected,
            )
        )
        if same and not rejected:
            self.best, self.best_id = doc, case_id
        return same and not rejected

    def invalid_call(self, case_id: str) -> str | None:
        """Why a step that fails the same way is not a valid call: the reference refuses it (and did not
        refuse the start case) - the kernel's own check fired before the shapes were validated."""
        result = self.store.read_results().get(case_id)
        refused = result.error.reference_error if result is not None and result.error else None
        if not refused or refused == self.start_reference_error:
            return None
        return f"not a valid call: the reference refuses it ({refused})"

    async def run(self) -> None:
        await self.gradients()
        await self.contiguous()
        await self.specials()
        await self.lower_rank()
        await self.fewer_elements()

    async def gradients(self) -> None:
        """Only the gradients that fail: a mismatch in grad.weight alone keeps grad_inputs ['weight'];
        a crash in the backward tries each gradient alone."""
        names = self.best.get("grad_inputs")
        if names is None:
            names = self.grad_defaults
        if not names or len(names) < 2:
            return
        failed = {o[len("grad.") :].split("[", 1)[0] for o in self.failed_outputs if o.startswith("grad.")}
        if self.target.startswith("numerical_mismatch"):
            keep = [n for n in names if n in failed]
            if keep and len(keep) < len(names):
                doc = dict(copy.deepcopy(self.best), grad_inputs=keep)
                await self.attempt(doc, f"only the failing gradients: grad_inputs {keep}")
            return
        if self.target.startswith("crash: backward: "):
            for name in names:
                if await self.attempt(
                    dict(copy.deepcopy(self.best), grad_inputs=[name]), f"one gradient: grad_inputs [{name!r}]"
                ):
                    return

    async def contiguous(self) -> None:
        strided = [
            s["name"]
            for s in self.best["inputs"]
            if s.get("strides") is not None
            and s["strides"] != contiguous_strides(s["shape"])
            or s.get("storage_offset")
        ]
        if not strided:
            return
        doc = copy.deepcopy(self.best)
        for spec in doc["inputs"]:
            spec["strides"], spec["storage_offset"] = None, 0
        if await self.attempt(doc, "every input contiguous, offset 0") or len(strided) == 1:
            return
        for name in strided:
            doc = copy.deepcopy(self.best)
            for spec in doc["inputs"]:
                if spec["name"] == name:
                    spec["strides"], spec["storage_offset"] = None, 0
            await self.attempt(doc, f"{name} contiguous, offset 0")

    async def specials(self) -> None:
        if not any(s["values"].get("specials") for s in self.best["inputs"]):
            return
        doc = copy.deepcopy(self.best)
        for spec in doc["inputs"]:
            spec["values"]["specials"] = []
        if await self.attempt(doc, "no special values"):
            return
        for spec_i, spec in enumerate(self.best["inputs"]):
            for j, special in enumerate(spec["values"].get("specials") or []):
                while True:
                    current = self.best["inputs"][spec_i]["values"]["specials"]
                    if j >= len(current):
                        break
                    special = current[j]
                    doc = copy.deepcopy(self.best)
                    target = doc["inputs"][spec_i]["values"]["specials"]
                    if special.get("positions") is not None and len(special["positions"]) > 1:
                        target[j]["positions"] = special["positions"][: len(special["positions"]) // 2]
                        what = len(target[j]["positions"])
                    elif special.get("count") is not None and special["count"] > 1:
                        target[j]["count"] = special["count"] // 2
                        what = target[j]["count"]
                    else:
                        break
                    if not await self.attempt(doc, f"{spec['name']}: {what} special {special['value']} value(s)"):
                        break

    async def lower_rank(self) -> None:
        """Drop an input's leading dimension, and the leading dimensions of the inputs that share its size
        (a batch); a size shared with an inner dimension of another input (a matmul's k) is not dropped."""
        for name in [s["name"] for s in _tensors(self.best)]:
            while not self.out_of_budget():
                spec = next(s for s in _tensors(self.best) if s["name"] == name)
                if len(spec["shape"]) < 2:
                    break
                group = next((g for g in dim_groups(self.best) if (name, 0) in g), [(name, 0)])
                if any(i != 0 for _, i in group) or any(
                    len(s["shape"]) < 2 for s in _tensors(self.best) for n, _ in group if s["name"] == n
                ):
                    break  # shared with an inner dimension, or some input's only dimension
                if not await self.attempt(
                    _drop_group(self.best, group),
                    f"{name}'s leading dimension ({spec['shape'][0]}) dropped"
                    + (" with the inputs sharing it" if len(group) > 1 else ""),
                ):
                    break

    async def fewer_elements(self) -> None:
        for group in dim_groups(self.best):
            size = _group_size(self.best, group)
            if size is None or size <= 1:
                continue
            lo, hi = 1, size  # hi fails; the smallest failing size is in [lo, hi]
            names = ", ".join(f"{n}[{i}]" for n, i in group)
            while lo < hi and not self.out_of_budget():
                mid = self.valid_size(group, lo, hi)
                if mid is None:
                    break  # no valid call between: hi is the smallest valid failing size
                if await self.attempt(_set_group(self.best, group, mid), f"{names}: {hi} -> {mid}"):
                    hi = mid
                else:
                    lo = mid + 1

    def valid_size(self, group: list[tuple[str, int]], lo: int, hi: int) -> int | None:
        """The size in [lo, hi) nearest the middle whose call is valid (a channel count stays a multiple of
        the groups once a refusal taught it), None when none within VALID_SEARCH of the middle is."""
        mid = (lo + hi) // 2
        if not self.constraints:
            return mid
        for d in range(min(hi - lo, VALID_SEARCH)):
            for size in (mid - d, mid + d):
                if lo <= size < hi and valid_call(_set_group(self.best, group, size), self.constraints) is None:
                    return size
        return None


async def shrink_case(
    run_id: str,
    case_id: str,
    *,
    hosts: list[str] | None = None,
    root=None,
    inventory=None,
    max_cases: int = 30,
    max_seconds: float = 600.0,
    progress: Progress | None = None,
) -> ShrinkResponse:
    """Find the smallest case that fails like ``case_id`` (which must be recorded as failing)."""
    if max_cases < 1:
        raise ToolError("max_cases must be at least 1", code="validation_error")
    store = RunStore(root, run_id)
    store.require()
    cases = {c.id: c for c in store.read_cases()}
    if case_id not in cases:
        raise unknown_cases(run_id, [case_id], cases)
    result = store.read_results().get(case_id)
    if result is None or result.status == "passed":
        raise ToolError(
            f"case {case_id!r} is {'not recorded' if result is None else 'passed'}: shrink starts from a "
            "recorded failing case (run it first)",
            code="not_failing",
        )
    target = failure_key(
        result.status,
        result.error.signature if result.error else None,
        [c.output for c in result.comparisons if not c.passed],
    )
    shrinker = _Shrinker(
        store,
        cases[case_id],
        target,
        root=root,
        hosts=hosts,
        inventory=inventory,
        max_cases=max_cases,
        max_seconds=max_seconds,
        progress=progress,
    )
    shrinker.failed_outputs = [c.output for c in result.comparisons if not c.passed]
    shrinker.start_reference_error = result.error.reference_error if result.error else None
    await shrinker.run()
    best = shrinker.best
    return ShrinkResponse(
        run_id=store.run_id,
        start_case=case_id,
        smallest_case=shrinker.best_id,
        start_numel=total_numel(cases[case_id].model_dump(mode="json")),
        smallest_numel=total_numel(best),
        smallest_shapes={i["name"]: i["shape"] for i in best["inputs"]},
        cases_run=len(shrinker.steps),
        seconds=round(time.monotonic() - shrinker.t0, 3),
        stopped=shrinker.stopped,
        signature=target,
        steps=shrinker.steps,
        skipped_invalid=shrinker.skipped,
        constraints=shrinker.constraints.sentences(),
    )
