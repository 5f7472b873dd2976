"""analyze_failures: turn the recorded evidence of a run into a verdict.

Everything is read from the evidence directory (so a run recorded by other
processes analyzes the same).  Semantics:

- ``diagnosed``: an isolated case crashes or mismatches numerically;
- ``inconclusive``: nothing failed, but planned evidence is missing or a
  combination is unsupported;
- ``passed``: every planned case passed (with a source model failure given,
  the failure is then likely at the integration boundary: say so).

Writes analysis.json, report.md and reproduction.md and sets the manifest
status (diagnosed -> failed, inconclusive -> inconclusive, passed -> passed).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from .describe import describe_comparison
from .errors import ToolError
from .evidence import ANALYSIS, REPORT, REPRODUCTION, RunStore
from .integration_diff import integration_diff  # captured calls vs planned cases (issue 14)
from .plan_cases import apply_variation, axes_difference, case_axes, case_content, distance_axes
from .report import render_report, render_reproduction
from .schemas import (
    FLOAT_DTYPES,
    MODES,
    Analysis,
    Case,
    CaseFailure,
    CaseResult,
    Comparison,
    FailureAxis,
    NextCase,
    StarVariation,
    contiguous_strides,
    now_utc,
)

MANIFEST_STATUS = {"diagnosed": "failed", "inconclusive": "inconclusive", "passed": "passed"}
FAILING = ("numerical_mismatch", "crash")
MAX_CROSSINGS = 4
UNSET = "unset"  # the axis value of an attribute or input a case does not have
MAX_MISSING_SUGGESTIONS = 20
SOURCE_QUOTE_CHARS = 600


# --------------------------------------------------------------------------
# Per-case reasons
# --------------------------------------------------------------------------


def worst_comparison(result: CaseResult) -> Comparison | None:
    failed = [c for c in result.comparisons if not c.passed]
    if not failed:
        return None
    return max(failed, key=lambda c: (c.contract_mismatch is not None, c.mismatch_ratio, c.max_abs or 0.0))


def mismatch_reason(result: CaseResult) -> str:
    worst = worst_comparison(result)
    if worst is None:
        return "no failed comparison recorded"
    failed = [c.output for c in result.comparisons if not c.passed]
    text = describe_comparison(worst)
    if len(failed) > 1:
        text += f"; failed outputs: {failed}"
    return text


def mismatch_signature(result: CaseResult) -> str:
    failed = [c for c in result.comparisons if not c.passed]
    kind = "contract_mismatch" if any(c.contract_mismatch for c in failed) else "numerical_mismatch"
    return f"{kind}: {','.join(c.output for c in failed)}"


def error_reason(result: CaseResult) -> str:
    err = result.error
    assert err is not None
    text = f"{err.type}: {err.message.strip().splitlines()[0] if err.message.strip() else ''}".rstrip(": ")
    if err.signal:
        text += f" (signal {err.signal})"
    elif err.exit_code is not None:
        text += f" (exit code {err.exit_code})"
    if err.matched_rule:
        text += f" [matched unsupported rule: {err.matched_rule}]"
    return text[:1000]


def case_failure(case: Case, result: CaseResult) -> CaseFailure:
    if result.status == "numerical_mismatch":
        signature, reason = mismatch_signature(result), mismatch_reason(result)
    else:
        signature, reason = result.error.signature if result.error else None, error_reason(result)
    return CaseFailure(case_id=case.id, status=result.status, signature=signature, reason=reason,
                       axes=case_axes(case))


# --------------------------------------------------------------------------
# Failure axes
# --------------------------------------------------------------------------


def failure_axes(cases: list[Case], results: dict[str, CaseResult]) -> list[FailureAxis]:
    """Every axis=value shared by all failing cases and not by every case of
    the run, with how many cases have it and whether it explains all (no
    passing case has it).  Most explanatory first; of two axis values that
    pick out exactly the same cases only the first (most general) is kept."""
    axes = {c.id: case_axes(c) for c in cases}
    # An attribute (or optional input) that some cases leave out is "unset" there:
    # the failure may follow the operator's default.
    keys = list(dict.fromkeys(k for a in axes.values() for k in a))
    axes = {cid: {k: a.get(k, UNSET) for k in keys} for cid, a in axes.items()}
    failing = [c.id for c in cases if c.id in results and results[c.id].status in FAILING]
    passing = [c.id for c in cases if c.id in results and results[c.id].status == "passed"]
    if not failing:
        return []
    first = axes[failing[0]]
    found: list[FailureAxis] = []
    seen_sets: set[frozenset[str]] = set()
    for key, value in first.items():
        if key == "dtype" and value == "mixed":
            continue  # not a dtype: the per-input NAME.dtype axes say which input differs
        if any(axes[f].get(key) != value for f in failing):
            continue
        with_value = frozenset(cid for cid, a in axes.items() if a.get(key) == value)
        if len(with_value) == len(cases) or with_value in seen_sets:
            continue
        seen_sets.add(with_value)
        found.append(FailureAxis(
            axis=key, value=value, failing=len(failing), total_with_value=len(with_value),
            # with no passing case there is no contrast: nothing is explained yet
            explains_all=bool(passing) and not any(p in with_value for p in passing),
        ))
    order = {f.axis: i for i, f in enumerate(found)}
    return sorted(found, key=lambda f: (not f.explains_all, f.total_with_value, order[f.axis]))


# --------------------------------------------------------------------------
# Next cases
# --------------------------------------------------------------------------


def _variation_for(axis_key: str) -> dict[str, Any] | None:
    if axis_key == "mode":
        return {"axis": "mode"}
    if axis_key == "dtype":
        return {"axis": "dtype"}
    if axis_key.startswith("attr."):
        return {"axis": "attribute", "name": axis_key[len("attr."):]}
    name, _, field = axis_key.partition(".")
    mapping = {"dtype": "dtype", "shape": "shape", "strides": "strides", "offset": "storage_offset",
               "layout": "layout", "values": "values"}
    if field in mapping:
        return {"axis": mapping[field], "input": name}
    return None


def _neighbour_values(case: Case, axis_key: str) -> list[Any]:
    """Concrete values next to the case's value on one axis."""
    if axis_key == "mode":
        return [m for m in MODES if m != case.mode]
    if axis_key == "dtype":
        if all(i.dtype in FLOAT_DTYPES for i in case.inputs):
            return [d for d in FLOAT_DTYPES if d not in {i.dtype for i in case.inputs}]
        return []
    if axis_key.startswith("attr."):
        value = case.attributes.get(axis_key[len("attr."):])
        return [not value] if isinstance(value, bool) else []
    name, _, field = axis_key.partition(".")
    spec = next((i for i in case.inputs if i.name == name), None)
    if spec is None or spec.shape is None:  # a tensor list or a None input: no neighbours proposed here
        return []
    if field == "dtype":
        return [d for d in FLOAT_DTYPES if d != spec.dtype] if spec.dtype in FLOAT_DTYPES else []
    if field == "strides":
        if not spec.is_contiguous():
            return [None]
        if len(spec.shape) >= 2:
            return [contiguous_strides(spec.shape[:-1] + [spec.shape[-1] + 1])]
        return [[2]] if len(spec.shape) == 1 else []
    if field == "offset":
        return [0] if spec.storage_offset else [1]
    if field == "layout":
        return ["ND"] if spec.layout != "ND" else []
    if field == "shape":
        if not spec.shape:
            return []
        last = spec.shape[-1]
        return [spec.shape[:-1] + [last + 1]] + ([spec.shape[:-1] + [last // 2]] if last >= 2 else [])
    if field == "values":
        if spec.values.specials:
            return [spec.values.model_dump(mode="json") | {"specials": []}]
        return []
    return []


def _unplanned_values(case: Case, axis_key: str, planned: set[str]) -> tuple[dict, list[Any]] | None:
    var_doc = _variation_for(axis_key)
    if var_doc is None:
        return None
    values = []
    for value in _neighbour_values(case, axis_key):
        doc = _varied(case, var_doc, value)
        if doc is not None and case_content(doc) not in planned:
            values.append(value)
    return (var_doc, values) if values else None


def _varied(case: Case, var_doc: dict, value: Any) -> dict | None:
    """The case with one axis set to ``value`` (a case JSON dict), or None when
    that variation does not make a valid case."""
    try:
        var = StarVariation.model_validate(var_doc | {"values": [value]})
        doc = apply_variation(case, var, value)
        Case.model_validate(doc)
    except (ValueError, ValidationError):
        return None
    return doc


def _raw_value(case: Case, axis_key: str) -> Any:
    """The case's own value on one variation axis (what apply_variation takes)."""
    if axis_key == "mode":
        return case.mode
    if axis_key.startswith("attr."):
        return case.attributes.get(axis_key[len("attr."):])
    name, _, field = axis_key.partition(".")
    spec = next((i for i in case.inputs if i.name == name), None)
    if spec is None:
        return None
    if field == "values":
        return spec.values.model_dump(mode="json")
    return {"offset": spec.storage_offset}.get(field, getattr(spec, field, None))


def _crossings(fa: FailureAxis, failing: list[Case], passing: list[Case], planned: set[str],
               closeness) -> list[NextCase]:
    """The failure is cornered on one axis value: does it hold across the
    other axes the run varied?  Apply each other axis value that passed
    elsewhere to the failing case (e.g. bfloat16 in compile mode, bfloat16
    strided).  A failure that survives every crossing follows that axis alone."""
    with_value = [c for c in failing if case_axes(c).get(fa.axis) == fa.value]
    if not with_value or not passing:
        return []
    base = min(with_value, key=closeness)
    base_axes = case_axes(base)
    out: list[NextCase] = []
    seen: set[str] = set()
    for other in passing:
        for key, value in case_axes(other).items():
            if key in (fa.axis, "dtype") or key.endswith(".dtype") or base_axes.get(key) in (None, value):
                continue
            var_doc = _variation_for(key)
            raw = _raw_value(other, key)
            doc = _varied(base, var_doc, raw) if var_doc is not None else None
            if doc is None:
                continue
            content = case_content(doc)
            if content in planned or content in seen:
                continue
            seen.add(content)
            out.append(NextCase(
                reason=(f"check that the {fa.axis}={fa.value} failure holds with {key}={value} (which passes "
                        f"elsewhere): if it still fails, the failure follows {fa.axis} alone"),
                base_case=base.id,
                change=var_doc | {"values": [raw]},
            ))
            if len(out) >= MAX_CROSSINGS:
                return out
    return out


def next_cases(cases: list[Case], results: dict[str, CaseResult], missing: list[str],
               axes: list[FailureAxis]) -> list[NextCase]:
    """Cases that would settle the question.  Each ``change`` is a star
    variation (axis, input/name, values) to apply to ``base_case``."""
    out: list[NextCase] = []
    planned = {case_content(c.model_dump(mode="json")) for c in cases}
    by_id = {c.id: c for c in cases}
    failing = [c for c in cases if c.id in results and results[c.id].status in FAILING]

    passing = [c for c in cases if c.id in results and results[c.id].status == "passed"]

    passing_axes = [distance_axes(p) for p in passing]

    def closeness(case: Case) -> int:
        # How near the case is to a passing one: a failing case one axis away
        # from a passing case is the best base to vary.
        own = distance_axes(case)
        return min((len(axes_difference(own, p)) for p in passing_axes), default=0)

    leading = [a for a in axes if a.explains_all] or axes
    for fa in leading[:3]:
        with_value = [c for c in failing if case_axes(c).get(fa.axis) == fa.value]
        if not with_value:
            continue
        base = min(with_value, key=closeness)
        found = _unplanned_values(base, fa.axis, planned)
        if found is None:
            continue
        var_doc, values = found
        out.append(NextCase(
            reason=(f"failures follow {fa.axis}={fa.value} ({fa.failing} failing of {fa.total_with_value} cases "
                    f"with it{', no passing case has it' if fa.explains_all else ''}); run {base.id!r} with the "
                    f"neighbouring {fa.axis} values not yet planned to see where the failure starts and stops"),
            base_case=base.id,
            change=var_doc | {"values": values},
        ))
    if leading and leading[0].explains_all:
        out.extend(_crossings(leading[0], failing, passing, planned, closeness))
    if failing and not axes:
        base = failing[0]
        for key in ["mode", "dtype"] + [f"{i.name}.strides" for i in base.inputs]:
            found = _unplanned_values(base, key, planned)
            if found is None:
                continue
            var_doc, values = found
            why = ("no axis value separates the failing cases from the passing ones yet" if passing
                   else "no case passes yet, so nothing shows which axis the failure follows")
            out.append(NextCase(
                reason=f"{why}; vary {key} of {base.id!r} one value at a time to find where it passes",
                base_case=base.id,
                change=var_doc | {"values": values},
            ))
    for cid in missing[:MAX_MISSING_SUGGESTIONS]:
        if cid in by_id:
            out.append(NextCase(reason=f"planned case {cid!r} has no result: run it (or record its result)",
                                base_case=cid, change={}))
    return out


# --------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------


def integration_hint(source_failure: str) -> str:
    quote = source_failure.strip()
    if len(quote) > SOURCE_QUOTE_CHARS:
        quote = quote[:SOURCE_QUOTE_CHARS] + " ..."
    return (
        "Every isolated case passes, yet the model failed: the failure is likely at the integration "
        "boundary, not in the operator as called here. Check what the model really feeds it (the "
        "layouts/formats, strides, storage offsets and dtypes of the captured inputs, which may not be "
        "covered by this matrix), the operations right before and after it, and graph capture or "
        f"compilation of the surrounding model. Source failure: {quote}"
    )


def _summary(verdict: str, cases: list[Case], counts: dict[str, int], missing: list[str],
             axes: list[FailureAxis]) -> str:
    n = len(cases)
    if verdict == "diagnosed":
        failing = counts["numerical_mismatch"] + counts["crash"]
        text = (f"diagnosed: {failing} of {n} cases fail ({counts['numerical_mismatch']} numerical_mismatch, "
                f"{counts['crash']} crash)")
        explaining = [f"{a.axis}={a.value}" for a in axes if a.explains_all]
        if explaining:
            text += f"; the failures follow {explaining[0]}"
            if len(explaining) > 1:
                text += f" (equally: {', '.join(explaining[1:4])})"
        elif not counts["passed"]:
            text += "; no case passes yet, so nothing shows which axis value the failures follow"
        elif axes:
            text += f"; the failing cases share {axes[0].axis}={axes[0].value} but so do passing ones"
        else:
            text += "; no single axis value separates failing from passing cases"
        if missing:
            text += f" ({len(missing)} planned case(s) still have no result)"
        return text + "."
    if verdict == "inconclusive":
        parts = []
        if missing:
            parts.append(f"{len(missing)} planned case(s) have no result ({', '.join(missing[:5])}"
                         f"{', ...' if len(missing) > 5 else ''})")
        if counts["unsupported"]:
            parts.append(f"{counts['unsupported']} case(s) are unsupported combinations")
        return f"inconclusive: nothing failed, but {' and '.join(parts)}."
    return f"passed: all {n} planned cases pass in isolation."


def build_analysis(run_id: str, config, cases: list[Case], results: dict[str, CaseResult]) -> Analysis:
    planned_ids = {c.id for c in cases}
    results = {cid: r for cid, r in results.items() if cid in planned_ids}
    counts = {s: 0 for s in ("passed", "numerical_mismatch", "crash", "unsupported")}
    for r in results.values():
        counts[r.status] += 1
    missing = [c.id for c in cases if c.id not in results]
    counts["missing"] = len(missing)

    failures = [case_failure(c, results[c.id]) for c in cases
                if c.id in results and results[c.id].status in FAILING]
    unsupported = [case_failure(c, results[c.id]) for c in cases
                   if c.id in results and results[c.id].status == "unsupported"]
    crash_groups: dict[str, list[str]] = {}
    for f in failures:
        if f.status == "crash":
            crash_groups.setdefault(f.signature or "unknown", []).append(f.case_id)

    if failures:
        verdict = "diagnosed"
    elif missing or unsupported:
        verdict = "inconclusive"
    else:
        verdict = "passed"
    axes = failure_axes(cases, results)
    hint = integration_hint(config.source_model_failure) if (
        verdict == "passed" and config.source_model_failure) else None
    return Analysis(
        run_id=run_id,
        verdict=verdict,
        summary=_summary(verdict, cases, counts, missing, axes),
        status_counts=counts,
        planned=len(cases),
        recorded=len(results),
        missing=missing,
        failures=failures,
        unsupported=unsupported,
        crash_groups=crash_groups,
        failure_axes=axes,
        integration_hint=hint,
        next_cases=next_cases(cases, results, missing, axes),
        # the model's captured calls vs the planned cases (issue 14): self-contained, pure
        integration_diff=integration_diff(cases, results),
        analyzed_at=now_utc(),
    )


def analyze_failures(run_id: str, *, root=None) -> Analysis:
    """Analyze the run from its evidence on disk; write analysis.json,
    report.md and reproduction.md; set the manifest status."""
    store = RunStore(root, run_id)
    store.require()
    try:
        config = store.read_config()
        cases = store.read_cases()
        results = store.read_results()
    except (ValidationError, json.JSONDecodeError, KeyError) as exc:
        raise ToolError(f"the evidence of run {store.run_id!r} is unreadable: {exc}", code="corrupt_evidence") from None
    analysis = build_analysis(store.run_id, config, cases, results)
    files = {
        ANALYSIS: json.dumps(analysis.model_dump(mode="json"), indent=2) + "\n",
        REPORT: render_report(analysis, config, cases, results, run_dir=str(store.dir)),
        REPRODUCTION: render_reproduction(analysis, config, cases, results, run_dir=str(store.dir)),
    }
    store.write_outputs(files, MANIFEST_STATUS[analysis.verdict])
    return analysis
