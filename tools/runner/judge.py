"""Judges: which rule decides a comparison, and the sentence that says so.

The comparison engine (compare.py) measures; a judge decides.  Chosen in the
operator config before any result (``judge``):

- ``tolerance``: every element within ``atol + rtol*|ref|`` (NaN/Inf
  patterns equal) - the engine's ``mismatch_count`` is 0.
- ``baseline``: the candidate's error against the reference, divided by the
  error of a correct computation in the same dtype (the baseline) against the
  same reference, stays under the thresholds of Ascend's benchmark standard
  (precision.py).
- ``both``: both must pass; the verdict names the judge(s) that failed.

Standard library and torch only.
"""

from __future__ import annotations

from .compare import exact_metrics, as_tensor, dtype_name, name_outputs, precision_metrics
from .precision import judge_baseline, judge_exact

JUDGES = ("tolerance", "baseline", "both")


class BaselineError(Exception):
    """The baseline's output cannot be judged against (a harness error)."""


def tolerance_verdict(comp: dict) -> str:
    within = f"atol {comp.get('atol', 0):.3g} + rtol {comp.get('rtol', 0):.3g}*|ref|"
    n, bad = comp.get("numel", 0), comp.get("mismatch_count", 0)
    if not bad:
        return f"all {n} elements within {within}"
    special = (comp.get("nan_mismatch") or 0) + (comp.get("inf_mismatch") or 0)
    text = f"{bad} of {n} elements ({bad / n:.2%}) outside {within}" if n else f"{bad} elements outside {within}"
    return text + (f", {special} NaN/Inf pattern mismatches" if special else "")


def apply_judge(comparisons: list[dict], judge: str, *, baseline=None, reference=None,
                names: list[str] | None = None) -> list[dict]:
    """Decide every comparison with ``judge`` (in place; returned).  With the
    baseline judge, ``baseline`` and ``reference`` are the baseline's and the
    reference's outputs (CPU)."""
    base = name_outputs(baseline, names) if judge != "tolerance" else {}
    ref = name_outputs(reference, names) if judge != "tolerance" else {}
    for comp in comparisons:
        comp["judge"] = judge
        if comp.get("contract_mismatch"):
            comp["verdict"] = f"contract mismatch: {comp['contract_mismatch']}"
            continue
        tol_ok = comp.get("mismatch_count", 0) == 0
        tol_text = tolerance_verdict(comp)
        if judge == "tolerance":
            comp["passed"] = tol_ok
            comp["verdict"] = f"tolerance judge: {tol_text}"
            continue
        b = base.get(comp["output"])
        r = ref.get(comp["output"])
        if b is None or r is None:
            raise BaselineError(f"the baseline returned no output {comp['output']!r} to judge against")
        b, r = as_tensor(b), as_tensor(r)
        if list(b.shape) != list(r.shape):
            raise BaselineError(f"the baseline's output {comp['output']!r} has shape {list(b.shape)}, the "
                                f"reference's {list(r.shape)}")
        dtype = comp.get("actual_dtype") or dtype_name(b.dtype)
        if b.numel() == 0:
            decided = {"passed": True, "ratios": {}, "failed": [], "verdict": "empty output"}
        elif "precision" in comp:  # a floating (or complex) output
            b_prec = precision_metrics(b, r)
            comp["baseline"] = b_prec
            decided = judge_baseline(comp["precision"], b_prec, dtype)
            comp["ratios"] = decided["ratios"]
        else:  # exact output
            bm = exact_metrics(b, r)
            comp["baseline_mismatch_count"] = bm["mismatch_count"]
            decided = judge_exact(comp.get("mismatch_count", 0), bm["mismatch_count"], comp.get("numel", 0), dtype)
        base_text = f"baseline judge: {decided['verdict']}"
        if judge == "baseline":
            comp["passed"] = decided["passed"]
            comp["verdict"] = base_text
        else:  # both
            comp["passed"] = tol_ok and decided["passed"]
            if comp["passed"]:
                comp["verdict"] = f"both judges pass: {tol_text}; {decided['verdict']}"
            else:
                parts = ([f"tolerance judge: {tol_text}"] if not tol_ok else []) + \
                    ([base_text] if not decided["passed"] else [])
                comp["verdict"] = "; ".join(parts)
    return comparisons
