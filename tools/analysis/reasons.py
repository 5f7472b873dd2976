"""Per-case reasons and the axis=value failure axes.

The reasons (what failed in one case, in words) and ``failure_axes`` (every
axis=value all failing cases share, ``explains_all`` when no passing case has
it) are the analysis as it has always been; findings (findings.py) generalise
them to predicates; the run's verdict is verdict.py.
"""

from __future__ import annotations

from ..cases.axes import case_axes
from ..render.describe import describe_comparison
from ..schemas import Case, CaseFailure, CaseResult, Comparison, FailureAxis

FAILING = ("numerical_mismatch", "crash")
UNSET = "unset"  # the axis value of an attribute or input a case does not have
SOURCE_QUOTE_CHARS = 600


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


def case_failure(case: Case, result: CaseResult, axes: dict[str, str] | None = None) -> CaseFailure:
    signature: str | None
    if result.status == "numerical_mismatch":
        signature, reason = mismatch_signature(result), mismatch_reason(result)
    else:
        signature, reason = result.error.signature if result.error else None, error_reason(result)
    return CaseFailure(
        case_id=case.id,
        status=result.status,
        signature=signature,
        reason=reason,
        axes=axes if axes is not None else case_axes(case),
    )


def failure_axes(
    cases: list[Case], results: dict[str, CaseResult], labels: dict[str, dict[str, str]] | None = None
) -> list[FailureAxis]:
    """Every axis=value shared by all failing cases and not by every case of
    the run, with how many cases have it and whether it explains all (no
    passing case has it).  Most explanatory first; of two axis values that
    pick out exactly the same cases only the first (most general) is kept."""
    axes = labels if labels is not None else {c.id: case_axes(c) for c in cases}
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
        found.append(
            FailureAxis(
                axis=key,
                value=value,
                failing=len(failing),
                total_with_value=len(with_value),
                # with no passing case there is no contrast: nothing is explained yet
                explains_all=bool(passing) and not any(p in with_value for p in passing),
            )
        )
    order = {f.axis: i for i, f in enumerate(found)}
    return sorted(found, key=lambda f: (not f.explains_all, f.total_with_value, order[f.axis]))


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
