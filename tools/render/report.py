"""Rendering of report.md (the verdict for a person) and reproduction.md (how
to re-run each failing case) from an analysis and the run's evidence."""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path

from ..cases.axes import case_axes
from ..cases.ids import rerun_id
from ..cases.memo import once
from ..runner.routing import level_for
from ..schemas import Analysis, Case, CaseFailure, CaseResult, OperatorConfig
from .consistency import consistency_section
from .findings import accounting_lines, findings_section
from .markdown import fenced, one_line, table
from .outputs import outputs_section
from .sections import artifact_sections, latest_verify_line


def tolerance_line(config: OperatorConfig) -> str:
    """The judge and the tolerances, as fixed before any result."""
    tol = config.tolerance
    text = (
        f"- judge: {config.judge}"
        + (f" (baseline `{config.operator.baseline}`)" if config.operator.baseline else "")
        + "; tolerance: "
    )
    text += f"atol {tol.atol:g}, rtol {tol.rtol:g}" if tol.atol is not None else "torch.testing's per-dtype defaults"
    text += "".join(f"; {d}: atol {t.atol:g}, rtol {t.rtol:g}" for d, t in tol.per_dtype.items())
    return text + (standard_line(config) if config.judge != "tolerance" else "")


def standard_line(config: OperatorConfig) -> str:
    """The baseline judge's msprobe standard and level, as configured (each case's verdict says what applied)."""
    level = (
        config.judge_level
        if config.judge_level != "auto"
        else "auto ({}: {})".format(*level_for("auto", config.operator.model_dump()))
    )
    standard = config.standard if config.standard != "auto" else "auto (msprobe 26.2's routing by output dtype)"
    text = f"\n- msprobe standard: {standard}; level: {level}"
    for name, per in config.output_judges.items():
        text += f"; output `{name}`: " + ", ".join(f"{k} {v}" for k, v in per.model_dump().items() if v)
    if config.baseline_host:
        text += f"; baseline on host `{config.baseline_host}`"
    return text


def judged_text(result: CaseResult) -> str:
    """A passing case's verdicts (the judge and its ratios), e.g. " - out: baseline judge: within ..."."""
    verdicts = [f"{c.output}: {c.verdict}" for c in result.comparisons if c.verdict and c.judge != "tolerance"]
    return (" - " + "; ".join(verdicts))[:600] if verdicts else ""


def _axes_text(axes: dict[str, str], keep: set[str] | None = None) -> str:
    items = [(k, v) for k, v in axes.items() if keep is None or k in keep]
    return ", ".join(f"{k}={v}" for k, v in items)


def _varying_axes(all_axes: list[dict[str, str]]) -> set[str]:
    keys = {k for a in all_axes for k in a}
    return {k for k in keys if len({a.get(k) for a in all_axes}) > 1}


def _failure_rows(items: list[CaseFailure], varying: set[str]) -> list[list[object]]:
    return [[f"`{f.case_id}`", f.status, _axes_text(f.axes, varying) or "-", f.reason or ""] for f in items]


def render_report(
    analysis: Analysis,
    config: OperatorConfig,
    cases: list[Case],
    results: dict[str, CaseResult],
    *,
    run_dir: str,
    labels: dict[str, dict[str, str]] | None = None,
) -> str:
    """report.md; ``labels`` are the cases' axes (cases/axes.py ``case_axes``) when already at hand."""
    labels = labels if labels is not None else {c.id: case_axes(c) for c in cases}
    varying = _varying_axes(list(labels.values()))
    out = _header_and_counts(analysis, config, run_dir)
    out += _failures_section(analysis, config, varying)
    out += findings_section(analysis.findings, analysis.competing, analysis.hypotheses, analysis.counterexamples)
    out += _conditions_section(analysis)
    accounted = accounting_lines(analysis)  # several causes, groups without a finding, refuted leads
    if accounted:
        out += ["## Causes, failing groups and leads", "", *accounted, ""]
    out += outputs_section(analysis, results)
    out += consistency_section(analysis)  # repeats, order, inputs written, batch, bias
    out += _failure_axes_section(analysis)
    out += _unsupported_section(analysis, results, varying)
    out += ["## Missing evidence", ""]
    out += ([f"- `{cid}` is planned but has no result" for cid in analysis.missing] or ["None."]) + [""]
    out += _next_cases_section(analysis)
    if analysis.integration_hint:
        out += ["## Integration boundary", "", one_line(analysis.integration_hint), ""]
    out += integration_diff_section(analysis)
    out += _every_case_section(analysis, cases, results, labels, varying)
    out += artifact_sections(run_dir)
    return "\n".join(out)


def _header_and_counts(analysis: Analysis, config: OperatorConfig, run_dir: str) -> list[str]:
    return [
        f"# Operator debug report: {one_line(config.operator.name)} (run `{analysis.run_id}`)",
        "",
        f"**Verdict: {analysis.verdict}** - {analysis.summary}",
        "",
        *latest_verify_line(run_dir),
        f"- candidate: `{config.operator.candidate}`",
        f"- reference: `{config.operator.reference}` (CPU, {config.operator.reference_dtype})",
        tolerance_line(config),
        f"- evidence: `{run_dir}`",
        f"- analyzed at: {analysis.analyzed_at.isoformat()}",
        "",
        "## Counts",
        "",
        table(
            ["status", "cases"],
            [[k, v] for k, v in analysis.status_counts.items()]
            + [["planned", analysis.planned], ["recorded", analysis.recorded]],
        ),
        "",
    ]


def _failures_section(analysis: Analysis, config: OperatorConfig, varying: set[str]) -> list[str]:
    """The source model's failure, the failing cases and their crash groups."""
    out: list[str] = []
    if config.source_model_failure:
        out += ["## Source model failure", "", *fenced(config.source_model_failure.strip()), ""]
    out += ["## Failures", ""]
    if analysis.failures:
        out += [table(["case", "status", "axes (varying)", "reason"], _failure_rows(analysis.failures, varying)), ""]
    else:
        out += ["No case crashed or mismatched.", ""]
    if analysis.crash_groups:
        out += [
            "### Crash groups (by error signature)",
            "",
            table(["signature", "cases"], [[s, ", ".join(ids)] for s, ids in analysis.crash_groups.items()]),
            "",
        ]
    return out


def _conditions_section(analysis: Analysis) -> list[str]:
    """The conditions stated with this analysis (references/conditions.md), each with its fate."""
    if not analysis.conditions:
        return []
    out = ["## Conditions stated", ""]
    out += [f"- `{a.condition}`: **{a.fate}** - {one_line(a.text)}" for a in analysis.conditions]
    return out + [""]


def _failure_axes_section(analysis: Analysis) -> list[str]:
    out = ["## Failure axes", ""]
    if analysis.failure_axes:
        out += [
            "Axis values every failing case shares (and not every case has); most explanatory first.",
            "",
            table(
                ["axis", "value", "failing", "cases with value", "explains all"],
                [
                    [a.axis, a.value, a.failing, a.total_with_value, "yes" if a.explains_all else "no"]
                    for a in analysis.failure_axes
                ],
            ),
            "",
        ]
    else:
        out += [
            "None."
            if not analysis.failures
            else "No axis value is shared by all failing cases and absent from some other case.",
            "",
        ]
    return out


def _unsupported_section(analysis: Analysis, results: dict[str, CaseResult], varying: set[str]) -> list[str]:
    out = [
        "## Unsupported combinations",
        "",
        "Unsupported is not a product failure: the operator refuses this combination.",
        "",
    ]
    if analysis.unsupported:
        rows = []
        for f in analysis.unsupported:
            err = results[f.case_id].error
            rule = err.matched_rule if err else None
            rows.append([f"`{f.case_id}`", _axes_text(f.axes, varying) or "-", f.reason or "", rule or "-"])
        out += [table(["case", "axes (varying)", "error", "matched rule"], rows), ""]
    else:
        out += ["None.", ""]
    return out


def _next_cases_section(analysis: Analysis) -> list[str]:
    out = ["## Next cases", ""]
    if analysis.next_cases:
        for n in analysis.next_cases:
            change = f" - change: `{json.dumps(n.change)}`" if n.change else ""
            kind = f"[{n.kind}] " if n.kind else ""
            out.append(f"- {kind}base `{n.base_case}`{change}: {n.reason}")
        out.append("")
    else:
        out += ["None suggested.", ""]
    return out


def _every_case_section(
    analysis: Analysis,
    cases: list[Case],
    results: dict[str, CaseResult],
    labels: dict[str, dict[str, str]],
    varying: set[str],
) -> list[str]:
    """One line per planned case: its state, varying axes, and why it failed or how close it passed."""
    out = ["## Every case", ""]
    by_failure = {f.case_id: f for f in [*analysis.failures, *analysis.unsupported]}
    for case in cases:
        result = results.get(case.id)
        state = result.status if result else "missing"
        line = f"- `{case.id}`: **{state}** ({_axes_text(labels[case.id], varying) or 'base'})"
        if case.id in by_failure and by_failure[case.id].reason:
            line += f" - {by_failure[case.id].reason}"
        elif result is not None and result.status == "passed":
            line += judged_text(result)
        out.append(line)
    out.append("")
    return out


def case_json(case: Case) -> str:
    """A case as the reproduction shows it (indented JSON, None fields left out)."""
    return json.dumps(case.model_dump(mode="json", exclude_none=True), indent=2)


def render_reproduction(
    analysis: Analysis, config: OperatorConfig, cases: list[Case], results: dict[str, CaseResult], *, run_dir: str
) -> str:
    op = config.operator
    run_id = analysis.run_id
    where = f"--root {shlex.quote(str(Path(run_dir).parent))} --run-id {run_id}"
    out = [
        f"# Reproduction: {one_line(op.name)} (run `{run_id}`)",
        "",
        "## The operator call",
        "",
        f"- candidate (on the device): `{op.candidate}`",
        f"- reference (on CPU, floating inputs upcast to {op.reference_dtype}): `{op.reference}`",
        f"- arguments: {op.call.style}" + (f", order {op.call.order}" if op.call.order else ""),
        f"- outputs: {op.outputs}" if op.outputs else "- outputs: as the callable returns them",
        f"- user modules (in `{run_dir}/artifacts/modules/`): {op.modules}" if op.modules else "- user modules: none",
        f"- compile backend: {op.compile_backend or 'default (torchair on NPU, inductor elsewhere)'}",
        tolerance_line(config),
        "",
        f"The operator config is `operator-config.json` and every case is in `case-matrix.json` under `{run_dir}`.",
        "",
    ]
    failing = [*analysis.failures]
    if not failing:
        out += ["No failing case to reproduce.", ""]
    by_id = {c.id: c for c in cases}
    for f in failing:
        case = by_id[f.case_id]
        out += [
            f"## `{f.case_id}` - {f.status}",
            "",
            f.reason or "",
            "",
            "```json",
            once(case, "repro_json", functools.partial(case_json, case)),
            "```",
            "",
            "Run it again under a new id (a recorded case is never overwritten): save the JSON above as a "
            f"one-element list with `\"id\": \"{rerun_id(f.case_id)}\"` in `{rerun_id(f.case_id)}.json`, then:",
            "",
            "```sh",
            f"opdebug plan --output-dir {shlex.quote(run_dir)} --append --cases {rerun_id(f.case_id)}.json",
            f"opdebug run {where} --case {rerun_id(f.case_id)}",
            f"opdebug analyze {where}",
            "```",
            "",
        ]
        raw = results[f.case_id].source.raw_path
        if raw:
            out += [f"Raw evidence: `{run_dir}/{raw}`", ""]
    out += ["## Re-analyze", "", "```sh", f"opdebug analyze {where}", "```", ""]
    return "\n".join(out)


def integration_diff_section(analysis: Analysis) -> list[str]:
    """The captured call vs the planned cases: one row per boundary
    feature with the bridging case that crosses it; empty when there is none."""
    if not analysis.integration_diff:
        return []
    out = [
        "## Captured calls vs planned cases",
        "",
        "What the failing case has that no passing case of the other kind has; each bridge changes one axis "
        "of the closest passing case (append it with plan_cases `append: true`, `stars: [star]`).",
        "",
    ]
    rows = []
    for diff in analysis.integration_diff:
        bridges: dict[str, list[str]] = {}
        for b in diff.bridges:
            bridges.setdefault(b.axis, []).append(json.dumps(b.star["vary"][0], sort_keys=True))
        for feat in diff.features:
            rows.append(
                [
                    f"`{diff.failing_case}`",
                    diff.direction,
                    feat.axis,
                    feat.value,
                    ", ".join(feat.passing_values) or "-",
                    f"`{diff.closest_passing}`" if diff.closest_passing else "-",
                    "; ".join(bridges.get(feat.axis, [])) or "-",
                ]
            )
        if not diff.features:
            rows.append(
                [
                    f"`{diff.failing_case}`",
                    diff.direction,
                    "(none)",
                    "-",
                    "-",
                    f"`{diff.closest_passing}`" if diff.closest_passing else "-",
                    "no axis differs: compare values (star around the captured call)",
                ]
            )
    out += [
        table(
            ["failing case", "direction", "axis", "its value", "passing values", "closest passing", "bridge (vary)"],
            rows,
        ),
        "",
    ]
    return out
