"""Which output fails: an axis of its own.

A case compares several outputs - the forward outputs (``out``, ``y``...) and,
with gradients, one ``grad.<input>`` per differentiated input.  This stage
runs after the others (findings, failure axes, verdict) and adds, without
changing them:

- ``failing_outputs`` on every failure (the outputs that failed in that case)
  and on every finding (the outputs that fail in the mismatching cases it
  covers), with ``passing_outputs`` (the outputs compared there that pass in
  every one of them) - "only grad.weight; out and grad.x pass";
- ``Analysis.outputs``: per output over the run, how many recorded cases
  compared it and how many failed, its dtypes on each side, and the worst
  case's metrics and verdict (report.md's per-output table);
- when outputs fail in different cases (grad.weight in one set of cases, out
  in another), each such output's own leading finding (the analysis run again
  with "this output failed" as the case's failure), so the summary can say
  which output follows which axis;
- one sentence at the end of the summary naming the failing outputs.

Pure: reads the cases, results and the analysis; the diagnosis function is
passed in (build.py's ``diagnose``), so nothing here imports it back.
"""

from __future__ import annotations

from collections.abc import Callable

from ..schemas import Analysis, Case, CaseResult, Comparison, OutputSummary

MAX_LISTED = 10
MAX_OUTPUT_FINDINGS = 8  # outputs analysed on their own, at most


def failing_outputs(result: CaseResult) -> list[str]:
    return [c.output for c in result.comparisons if not c.passed]


def _worst(items: list[tuple[str, Comparison]]) -> tuple[str, Comparison] | None:
    if not items:
        return None
    return max(
        items,
        key=lambda item: (
            item[1].contract_mismatch is not None,
            item[1].mismatch_ratio,
            item[1].max_abs or 0.0,
            item[0],
        ),
    )


def output_summaries(cases: list[Case], results: dict[str, CaseResult]) -> list[OutputSummary]:
    """Per output name, in the order outputs first appear."""
    seen: dict[str, list[tuple[str, Comparison]]] = {}
    for case in cases:
        result = results.get(case.id)
        if result is None:
            continue
        for comp in result.comparisons:
            seen.setdefault(comp.output, []).append((case.id, comp))
    out = []
    for name, items in seen.items():
        failing = [(cid, c) for cid, c in items if not c.passed]
        worst = _worst(failing) or _worst(items)
        assert worst is not None
        cid, comp = worst
        out.append(
            OutputSummary(
                output=name,
                compared=len(items),
                failing=len(failing),
                failing_cases=[c for c, _ in failing][:MAX_LISTED],
                failing_dtypes=sorted({c.actual_dtype for _, c in failing if c.actual_dtype}),
                passing_dtypes=sorted({c.actual_dtype for _, c in items if c.passed and c.actual_dtype}),
                worst_case=cid,
                max_abs=comp.max_abs,
                max_rel=comp.max_rel,
                mismatch_ratio=comp.mismatch_ratio,
                verdict=comp.verdict or comp.contract_mismatch,
            )
        )
    return out


def _per_output_results(results: dict[str, CaseResult], output: str) -> dict[str, CaseResult]:
    """The run as if ``output`` alone decided each case: failed where it failed, passed where it
    was compared and passed; cases that did not compare it are left out."""
    view = {}
    for cid, result in results.items():
        comp = next((c for c in result.comparisons if c.output == output), None)
        if comp is None:
            continue
        status = "passed" if comp.passed else "numerical_mismatch"
        view[cid] = result.model_copy(update={"status": status, "comparisons": [comp], "error": None})
    return view


def annotate_outputs(
    analysis: Analysis, cases: list[Case], results: dict[str, CaseResult], diagnose: Callable | None = None
) -> Analysis:
    """The analysis with failing outputs on failures and findings, per-output summaries, and a
    sentence in the summary (in place; returned)."""
    by_case = {cid: failing_outputs(r) for cid, r in results.items() if r.status == "numerical_mismatch"}
    compared = {
        cid: [c.output for c in r.comparisons] for cid, r in results.items() if r.status == "numerical_mismatch"
    }
    for failure in analysis.failures:
        failure.failing_outputs = by_case.get(failure.case_id, [])
    planned = {c.id for c in cases}
    mismatching = [cid for cid in by_case if cid in planned]
    fail_union = sorted({o for cid in mismatching for o in by_case[cid]})
    common = set.intersection(*(set(compared[cid]) for cid in mismatching)) if mismatching else set()
    never_failing = sorted(common - set(fail_union))
    for finding in analysis.findings:  # a finding covers every failing case
        finding.failing_outputs = fail_union
        finding.passing_outputs = never_failing
    analysis.outputs = output_summaries(cases, results)
    if not fail_union or len(analysis.outputs) < 2:
        return analysis
    text = f" Failing output{'s' if len(fail_union) > 1 else ''}: {', '.join(fail_union)}"
    if never_failing:
        text += f" ({', '.join(never_failing)} pass in every failing case)"
    per_output = _per_output_findings(analysis, cases, results, fail_union, mismatching, by_case, diagnose)
    if per_output:
        text += "; by output: " + "; ".join(f"{o} fails where {p}" for o, p in per_output)
    analysis.summary = analysis.summary.rstrip() + text + "."
    return analysis


def _per_output_findings(analysis, cases, results, fail_union, mismatching, by_case, diagnose) -> list:
    """(output, its leading predicate) for outputs that do not fail in every mismatching case."""
    if diagnose is None or len(fail_union) < 2:
        return []
    partial = [o for o in fail_union if any(o not in by_case[cid] for cid in mismatching)]
    found = []
    for output in partial[:MAX_OUTPUT_FINDINGS]:
        view = _per_output_results(results, output)
        findings, _ = diagnose([c for c in cases if c.id in view], view, [])
        if findings:
            found.append((output, findings[0].predicate + (" (exact)" if findings[0].exact else "")))
    return found
