"""One way to say what a comparison found, for people.

Every renderer (run_case_remote's outcome summary, the analysis's failure
reason, the CLI's case table) describes a ``Comparison`` through
:func:`describe_comparison`, so the same output reads the same everywhere:
the output's name, then either the contract mismatch or the metrics with the
tolerance applied, how much is outside it, where the worst element is, and
the NaN/Inf pattern differences.
"""

from __future__ import annotations

from typing import Any

from ..schemas import Comparison
from .wrong import wrong_sentences


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def describe_comparison(comparison: Comparison | dict[str, Any], *, brief: bool = False) -> str:
    """``output 'y': max_abs=0.25 max_rel=0.5 max_ulp=64 (atol 1e-05, rtol 1e-05),
    12.50% outside tolerance (2/16), worst at [0, 1]: candidate 1.25 vs reference 1,
    NaN pattern mismatches=1``; ``brief`` keeps max_abs, the share outside
    tolerance and the NaN/Inf counts (for a table cell or a one-line summary).
    A dict is validated as a Comparison first."""
    c = comparison if isinstance(comparison, Comparison) else Comparison.model_validate(comparison)
    head = f"output {c.output!r}"
    if c.contract_mismatch:
        return f"{head}: contract mismatch: {c.contract_mismatch}"
    if (
        not c.passed
        and c.verdict
        and (c.output.startswith("batch:") or c.output.startswith("input:") and "modified its input" in c.verdict)
    ):
        return f"{head}: {c.verdict}"  # a consistency check's own sentence: an input written, a batch slice
    if c.judge in ("baseline", "both") and c.verdict and not c.passed:
        # the judge's sentence names the judge that failed and carries the ratios
        text = f"{head}: {c.verdict}"
        if not brief and c.worst_index is not None:
            text += f"; worst at {c.worst_index}: candidate {c.worst_candidate} vs reference {c.worst_reference}"
        return text + _where(c, brief)
    names = ("max_abs",) if brief else ("max_abs", "max_rel", "max_ulp")
    metrics = [f"{name}={_num(getattr(c, name))}" for name in names if getattr(c, name) is not None]
    if not brief and (c.atol is not None or c.rtol is not None):
        metrics.append(f"(atol {_num(c.atol)}, rtol {_num(c.rtol)})")
    if c.passed:
        return f"{head}: passed" + (f", {' '.join(metrics)}" if metrics else "")
    text = f"{head}: " + (" ".join(metrics) or "comparison failed")
    if c.numel:
        text += f", {c.mismatch_ratio:.2%} outside tolerance ({c.mismatch_count}/{c.numel})"
    if not brief and c.worst_index is not None:
        text += f", worst at {c.worst_index}: candidate {c.worst_candidate} vs reference {c.worst_reference}"
    if c.nan_mismatch:
        text += f", NaN pattern mismatches={c.nan_mismatch}"
    if c.inf_mismatch:
        text += f", Inf pattern mismatches={c.inf_mismatch}"
    return text + _where(c, brief)


def _where(c: Comparison, brief: bool) -> str:
    """Where the wrong elements are: every sentence, or the most telling one when ``brief``."""
    said = wrong_sentences(c.wrong, c.output) if c.wrong is not None and not c.passed else []
    return "; " + "; ".join(said[:1] if brief else said) if said else ""
