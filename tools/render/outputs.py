"""report.md's per-output section: which output fails, and its metrics.

Only drawn when the run compares more than one output or a gradient (a plain
one-output run says it all in its failures table)."""

from __future__ import annotations

from ..schemas import Analysis, CaseResult
from .markdown import table

MAX_ROWS = 60


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def outputs_section(analysis: Analysis, results: dict[str, CaseResult]) -> list[str]:
    outputs = analysis.outputs
    if len(outputs) < 2 and not any(o.output.startswith("grad.") for o in outputs):
        return []
    out = [
        "## Outputs",
        "",
        "Each output on its own (forward outputs, and one `grad.<input>` per gradient): where it fails and "
        "its worst case.",
        "",
        table(
            [
                "output",
                "compared",
                "failing",
                "dtypes failing / passing",
                "worst case",
                "max_abs",
                "max_rel",
                "mismatch ratio",
                "verdict",
            ],
            [
                [
                    f"`{o.output}`",
                    o.compared,
                    o.failing,
                    f"{', '.join(o.failing_dtypes) or '-'} / {', '.join(o.passing_dtypes) or '-'}",
                    f"`{o.worst_case}`" if o.worst_case else "-",
                    _num(o.max_abs),
                    _num(o.max_rel),
                    _num(o.mismatch_ratio),
                    (o.verdict or "")[:200],
                ]
                for o in outputs
            ],
        ),
        "",
    ]
    rows = []
    for failure in analysis.failures:
        result = results.get(failure.case_id)
        if result is None or result.status != "numerical_mismatch":
            continue
        for c in result.comparisons:
            rows.append(
                [
                    f"`{failure.case_id}`",
                    f"`{c.output}`",
                    "pass" if c.passed else "FAIL",
                    c.actual_dtype or "-",
                    _num(c.max_abs),
                    _num(c.max_rel),
                    _num(c.mismatch_ratio),
                    _num((c.ratios or {}).get("rmse")),
                    (c.verdict or c.contract_mismatch or "")[:160],
                ]
            )
    if rows:
        out += [
            "### Per-output metrics of the mismatching cases",
            "",
            table(
                ["case", "output", "judged", "dtype", "max_abs", "max_rel", "mismatch ratio", "rmse ratio", "verdict"],
                rows[:MAX_ROWS],
            ),
            "",
        ]
        if len(rows) > MAX_ROWS:
            out += [f"({len(rows) - MAX_ROWS} more rows in analysis.json and raw-results/)", ""]
    return out
