"""plan_cases: validate an operator config and its explicit cases, and create
(or grow) the run's evidence directory.

Cases come explicitly (``cases``), from stars (a base case plus one-axis
variations, expanded by cases/stars.py) or from a model's captured calls
(capture/plan.py).  The cases this call added are returned with their axes
(cases/axes.py), the values analysis groups failures by.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import ValidationError

from .capture.workspace import allowed_roots, read_workspace_file
from .cases.axes import case_axes
from .cases.ids import case_content
from .cases.neighbours import multi_axis_warnings
from .cases.stars import expand_star, star_base
from .errors import ToolError
from .evidence import RunStore, few_ids, file_sha256
from .schemas import (
    PLANNED_LIST_LIMIT,
    Case,
    OperatorConfig,
    PlannedCase,
    PlanRequest,
    PlanResponse,
    StarSpec,
    check_grad_inputs,
    grad_output_captures,
)


def default_tolerance_warnings(config, cases: list[Case]) -> list[str]:
    """One warning per floating input dtype whose tolerance comes from the default table."""
    from .runner.precision import TOLERANCE_SOURCE  # stdlib only

    dtypes = sorted({i.dtype for c in cases for i in c.inputs if i.dtype.startswith(("float", "bfloat"))})
    out = []
    for dtype in dtypes:
        atol, rtol, source = config.tolerance.for_dtype(dtype)
        if source == "default":
            out.append(
                f"tolerance: {dtype} has no per_dtype entry and the config gives no atol/rtol: using "
                f"atol {atol:g}, rtol {rtol:g} from {TOLERANCE_SOURCE}"
                + ("" if config.judge == "tolerance" else f" (judge {config.judge!r})")
            )
    return out


def tight_tolerance_warnings(config, cases: list[Case]) -> list[str]:
    """One warning per planned floating dtype whose given atol and rtol are both below its epsilon: a
    correct computation in that dtype then fails from rounding alone (1e-5 on float16, whose spacing
    above 1 is 2**-10); says what torch.testing would use."""
    from .runner.precision import DTYPE_EPS, TOLERANCE_SOURCE, default_tolerance  # stdlib only

    if config.judge == "baseline":
        return []
    dtypes = sorted({i.dtype for c in cases for i in c.inputs if i.dtype in DTYPE_EPS})
    out = []
    for dtype in dtypes:
        atol, rtol, source = config.tolerance.for_dtype(dtype)
        eps = DTYPE_EPS[dtype]
        if source != "default" and atol < eps and rtol < eps:
            d_atol, d_rtol = default_tolerance(dtype)
            out.append(
                f"tolerance: atol {atol:g} and rtol {rtol:g} ({source}) are below {dtype}'s resolution "
                f"(eps {eps:g}): a correct {dtype} computation fails from rounding alone; torch.testing "
                f"would use atol {d_atol:g}, rtol {d_rtol:g} ({TOLERANCE_SOURCE}) - give per_dtype."
                f"{dtype}, or judge 'baseline'"
            )
    return out


# --------------------------------------------------------------------------
# plan_cases
# --------------------------------------------------------------------------


def _check_call_order(config: OperatorConfig, cases: list[Case]) -> None:
    order = config.operator.call.order or []
    problems = []
    for case in cases:
        names = {i.name for i in case.inputs} | set(case.attributes)
        missing = [n for n in order if n not in names]
        if missing:
            problems.append(
                f"case {case.id!r}: {missing} (it has inputs {[i.name for i in case.inputs]} "
                f"and attributes {sorted(case.attributes)})"
            )
    if problems:
        raise ToolError(
            "config.operator.call.order names arguments that some cases do not provide:\n  - "
            + "\n  - ".join(problems),
            code="validation_error",
        )


def _check_default_grad_inputs(config: OperatorConfig, cases: list[Case]) -> None:
    """config.grad_inputs (the default of cases that give none) names inputs of each such case."""
    names = config.grad_inputs or []
    problems = []
    for case in cases:
        if not names or case.grad_inputs is not None:
            continue
        try:
            check_grad_inputs(names, case.inputs, "config.grad_inputs")
        except ValueError as exc:
            problems.append(f"case {case.id!r}: {exc}")
    if problems:
        raise ToolError(
            "config.grad_inputs (the gradients of cases that name none) does not fit some cases; give "
            "those cases their own grad_inputs:\n  - "
            + "\n  - ".join(problems[:5])
            + (f"\n  - and {len(problems) - 5} more" if len(problems) > 5 else ""),
            code="validation_error",
        )


def _check_after(store: RunStore, append: bool, cases: list[Case]) -> None:
    """Probe cases (``after``) name planned cases of the run."""
    if not any(c.after for c in cases):
        return
    from .consistency_runs import check_after

    known = {c.id: c for c in store.read_cases()} if append else {}
    known.update({c.id: c for c in cases})
    problems = check_after(known, cases)
    if problems:
        raise ToolError(
            "cases[].after must name planned cases of this run:\n  - " + "\n  - ".join(problems[:5]),
            code="validation_error",
        )


def _changed_paths(old: Any, new: Any, path: str) -> list[str]:
    """Dotted paths at which two JSON documents differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [p for k in dict.fromkeys([*old, *new]) for p in _changed_paths(old.get(k), new.get(k), f"{path}.{k}")]
    return [] if old == new else [path]


def _duplicates(ids: list[str]) -> list[str]:
    seen, dupes = set(), []
    for i in ids:
        if i in seen and i not in dupes:
            dupes.append(i)
        seen.add(i)
    return dupes


def _modules_to_store(store: RunStore, config: OperatorConfig, sources: dict[str, str]) -> dict[str, str]:
    """The user module sources still to store under artifacts/modules/, after
    checking them all: each must be listed in config.operator.modules; the
    same content as a stored module is a no-op; other content is refused
    (evidence is never overwritten)."""
    unlisted = sorted(set(sources) - set(config.operator.modules))
    if unlisted:
        raise ToolError(
            f"module_sources has {unlisted}, which config.operator.modules does not list "
            f"(modules: {config.operator.modules})",
            code="validation_error",
        )
    todo = {}
    for name, source in sorted(sources.items()):
        existing = store.path("artifacts", "modules", name)
        if existing.is_file():
            if existing.read_text(encoding="utf-8") != source:
                raise ToolError(
                    f"module {name!r} is already stored in run {store.run_id!r} with other "
                    "content; evidence is never overwritten - plan a new run to change it",
                    code="module_changed",
                )
            continue
        todo[name] = source
    return todo


MAX_CAPTURED_BYTES = 1 << 30


def _captured_to_store(store: RunStore, files: dict[str, str], cases: list[Case]) -> dict[str, bytes]:
    """The captured tensor files still to copy into artifacts/captured/, read
    completely (before the run is created, so a failed read leaves nothing
    behind) after checking them all: each file lies in the workspace, is a
    regular file of at most 1 GiB, and is read within a time limit
    (capture/workspace.py); the same bytes as a stored capture are a no-op,
    other bytes are refused (evidence is never overwritten); every captured
    input of the new cases names a capture given here or already stored.  The
    server never loads them (no torch here): the runner does, and refuses a
    shape or dtype that differs from the case."""
    todo: dict[str, bytes] = {}
    roots = allowed_roots(store.root)
    for name, given in sorted(files.items()):
        data = read_workspace_file(given, f"captured_files.{name}", roots, limit=MAX_CAPTURED_BYTES)
        existing = store.path("artifacts", "captured", name)
        if existing.is_file():
            if file_sha256(existing) != hashlib.sha256(data).hexdigest():
                raise ToolError(
                    f"captured tensor {name!r} is already stored in run {store.run_id!r} with other "
                    "content; evidence is never overwritten - give it another name",
                    code="captured_changed",
                )
            continue
        todo[name] = data
    for case in cases:
        for spec in case.inputs:
            for member in spec.members():
                values = member.values.for_dtype(member.dtype)
                ref = values.captured if values.kind == "captured" else None
                if ref and ref not in files and not store.path("artifacts", "captured", ref).is_file():
                    raise ToolError(
                        f"case {case.id!r} input {spec.name!r} replays captured tensor {ref!r}, which "
                        "is neither in 'captured_files' nor stored in the run",
                        code="validation_error",
                    )
        for ref in grad_output_captures(case.grad_output):
            if ref not in files and not store.path("artifacts", "captured", ref).is_file():
                raise ToolError(
                    f"case {case.id!r} grad_output replays captured tensor {ref!r}, which is neither in "
                    "'captured_files' nor stored in the run",
                    code="validation_error",
                )
    return todo


def planned_cases(
    store: RunStore, only: list[Case] | None = None, against: dict[str, Case | None] | None = None
) -> list[PlannedCase]:
    """The run's cases (or ``only`` these) with their axes and state, read from disk.
    ``against``: case id -> the case its axes are given against (only the axes
    that differ are listed; None or absent: every axis)."""
    results = store.read_result_docs()
    out = []
    for case in store.read_cases() if only is None else only:
        result = results.get(case.id)
        axes = case_axes(case)
        other = (against or {}).get(case.id)
        if other is not None:
            theirs = case_axes(other)
            # an axis the other case has and this one lacks is implied by one it has (x.none, x.len)
            axes = {k: v for k, v in axes.items() if theirs.get(k) != v}
        out.append(
            PlannedCase(
                id=case.id,
                mode=case.mode,
                axes=axes,
                state=result["status"] if result else "pending",
                differs_from=other.id if other is not None else None,
            )
        )
    return out


def _references(cases: list[Case], star_bases: dict[str, Case]) -> dict[str, Case | None]:
    """What each added case is shown against: its star's base (the base itself:
    nothing), else the first case of the call (which is shown whole)."""
    first = cases[0] if cases else None
    refs: dict[str, Case | None] = {}
    for case in cases:
        if case.id in star_bases:
            base = star_bases[case.id]
            refs[case.id] = None if base.id == case.id else base
        else:
            refs[case.id] = None if first is None or case.id == first.id else first
    return refs


def _resolve_star_bases(store: RunStore, req: PlanRequest) -> list[StarSpec]:
    """Stars whose base is what it says: a base given as an id is the planned
    case of that id (never added again); a base body under a planned id must
    equal the planned case, else it is refused by name."""
    planned = {c.id: c for c in store.read_cases()} if (req.append and store.exists()) else {}
    out = []
    for i, star in enumerate(req.stars):
        if isinstance(star.base, str):
            if star.base not in planned:
                raise ToolError(
                    f"stars[{i}].base names case {star.base!r}, which is not planned in run "
                    f"{req.target_run_id!r}; give the base case's body, or a planned id when appending",
                    code="unknown_case",
                )
            out.append(star.model_copy(update={"base": planned[star.base], "include_base": False}))
            continue
        known = planned.get(star.base.id)
        if known is not None:
            old, new = known.model_dump(mode="json"), star.base.model_dump(mode="json")
            if case_content(old) != case_content(new):
                changed = _changed_paths(old, new, "base")
                raise ToolError(
                    f"stars[{i}].base reuses the planned case id {star.base.id!r} with a different body "
                    f"(changed: {', '.join(changed[:8])}); a base must be the planned case: give only its "
                    "id, its exact body, or a new id",
                    code="base_mismatch",
                )
        out.append(star)
    return out


def plan_cases(request: dict | PlanRequest, *, root=None) -> PlanResponse:
    """Validate the request and create the run (or append to it).

    A new run is refused when the run id exists.  ``append=true`` adds new
    cases to an existing run and never touches what is recorded; re-used case
    ids are refused.  Returns the cases this call added with their axes, and
    counts for the whole run.
    """
    req = _validated(request)
    store = RunStore(root, req.target_run_id)
    stars = _resolve_star_bases(store, req) if req.stars else []
    new_cases, star_bases, captured_paths = _requested_cases(store, req, stars, root)
    if req.append:
        config = _config_to_append(store, req, stars, new_cases)
    else:
        config = _config_of_new_run(store, req, new_cases)
    modules = _modules_to_store(store, config, req.module_sources)
    captured = _captured_to_store(store, captured_paths, new_cases)
    if req.append:
        store.append_cases(new_cases)
    else:
        store.create(config, new_cases)
    for name, source in modules.items():
        store.write_artifact(f"modules/{name}", source)
    for name, data in captured.items():
        store.write_artifact(f"captured/{name}", data)
    return _planned(store, not req.append, new_cases, star_bases, config)


def _validated(request: dict | PlanRequest) -> PlanRequest:
    if isinstance(request, PlanRequest):
        return request
    try:
        return PlanRequest.model_validate(request)
    except ValidationError as exc:
        raise ToolError.from_validation(exc, "plan request") from None


def _requested_cases(store: RunStore, req: PlanRequest, stars: list, root):
    """(the request's cases, its stars' and captures' included; each star case's base; captured file paths)."""
    new_cases = list(req.cases)
    star_bases: dict[str, Case] = {}  # a star's case -> its base (what its answer is shown against)
    planned = (
        {c.id: case_content(c.model_dump(mode="json")) for c in store.read_cases()}
        if stars and req.append and store.exists()
        else None
    )
    for i, star in enumerate(stars):
        try:
            expanded = expand_star(star, planned)
        except ToolError as exc:
            raise ToolError(f"stars[{i}]: {exc.message}", code=exc.code) from None
        new_cases.extend(expanded)
        star_bases.update({c.id: star_base(star) for c in expanded})
    captured_paths = dict(req.captured_files)
    if req.captures:  # the model's real calls (capture/plan.py), checked before anything is planned
        from .capture.plan import plan_from_captures

        from_captures = plan_from_captures(req.captures, root)
        new_cases.extend(from_captures.cases)
        captured_paths.update({name: str(path) for name, path in from_captures.files.items()})
    if not new_cases:
        raise ToolError(
            "the request plans no case: every star variation value gives back its base case and "
            "include_base is false; give values that differ from the base (or include the base)",
            code="validation_error",
        )
    dupes = _duplicates([c.id for c in new_cases])
    if dupes:
        raise ToolError(
            f"duplicate case ids in the request: {few_ids(dupes)}; every case id must be unique "
            "(a star's base case counts too unless include_base is false)",
            code="duplicate_case",
        )
    return new_cases, star_bases, captured_paths


def _config_to_append(store: RunStore, req: PlanRequest, stars: list, new_cases: list[Case]):
    """The run's config, once the new cases are checked to fit it and to be new."""
    store.require()
    config = store.read_config()
    if req.config is not None and req.config.model_dump(mode="json") != config.model_dump(mode="json"):
        changed = _changed_paths(config.model_dump(mode="json"), req.config.model_dump(mode="json"), "config")
        raise ToolError(
            f"config differs from the one run {store.run_id!r} was planned with (changed: "
            f"{', '.join(changed)}); the operator, reference and tolerances are fixed before any "
            "result - omit 'config' when appending, or plan a new run",
            code="config_changed",
        )
    clash = sorted(store.planned_ids() & {c.id for c in new_cases})
    if clash:
        bases = sorted({star_base(s).id for s in stars if s.include_base} & set(clash))
        hint = (
            (
                f"; {bases} are star bases: to add only the variations around a planned case, set "
                "include_base false in its star"
            )
            if bases
            else ""
        )
        raise ToolError(
            f"case ids already planned in run {store.run_id!r}: {few_ids(clash)}; planned cases are "
            f"never replaced - give the new cases new ids{hint}",
            code="duplicate_case",
        )
    _check_call_order(config, new_cases)
    _check_default_grad_inputs(config, new_cases)
    _check_after(store, True, new_cases)
    return config


def _config_of_new_run(store: RunStore, req: PlanRequest, new_cases: list[Case]):
    """The request's config, once the cases are checked and the run id found free."""
    config = req.config
    assert config is not None
    _check_call_order(config, new_cases)
    _check_default_grad_inputs(config, new_cases)
    _check_after(store, False, new_cases)
    if store.exists() or (store.dir.exists() and any(store.dir.iterdir())):
        raise ToolError(
            f"run {store.run_id!r} already exists at {store.dir}; a run is never overwritten - "
            "choose another run_id or append cases to it (append=true)",
            code="run_exists",
        )
    return config


def _planned(store: RunStore, created: bool, new_cases: list[Case], star_bases: dict[str, Case], config):
    """The answer: the cases added (the first PLANNED_LIST_LIMIT listed), the run's counts, and warnings."""
    all_cases = store.read_cases()
    return PlanResponse(
        run_id=store.run_id,
        run_dir=str(store.dir),
        created=created,
        added=[c.id for c in new_cases],
        cases=planned_cases(
            store, only=new_cases[:PLANNED_LIST_LIMIT], against=_references(new_cases[:PLANNED_LIST_LIMIT], star_bases)
        ),
        cases_omitted=max(0, len(new_cases) - PLANNED_LIST_LIMIT),
        case_count=len(all_cases),
        recorded_count=len(store.recorded_ids()),
        warnings=(
            multi_axis_warnings(all_cases, star_bases=star_bases, only={c.id for c in new_cases})
            + default_tolerance_warnings(config, all_cases)
            + tight_tolerance_warnings(config, all_cases)
        ),
    )
