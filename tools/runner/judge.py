"""Judges: which rule decides a comparison, and the sentence that says so.

The comparison engine (compare.py) measures; a judge decides.  Chosen in the
operator config before any result (``judge``):

- ``tolerance``: every element within ``atol + rtol*|ref|`` (NaN/Inf
  patterns equal) - the engine's ``mismatch_count`` is 0.
- ``baseline``: msprobe 26.2's standard for the output (routing.py: the
  benchmark standard at the operator's level for floating outputs, binary
  consistency for integer and bool outputs...; ``standard`` and
  ``judge_level`` in the config override), computed as msprobe computes it
  (standards.py) against the error of a correct computation in the same dtype
  (the baseline), plus this project's own checks (checks.py: the NaN/Inf
  pattern, the error balance).  ``comparisons[].benchmark`` is exactly the
  standard's verdict; ``comparisons[].checks`` the extra rules; the output
  fails when either fails.
- ``both``: both must pass; the verdict names the judge(s) that failed.

Standard library and torch only.
"""

from __future__ import annotations

import torch

from . import checks as extra
from . import standards
from .compare import as_tensor, dtype_name, exact_metrics, name_outputs, precision_metrics
from .precision import lean_shares
from .routing import INTEGER, MSPROBE, level_for, needs_baseline, route


class BaselineError(Exception):
    """The baseline's output cannot be judged against (a harness error)."""


def tolerance_mismatches(comp: dict) -> int:
    """The tolerance judge's count: the elements outside atol + rtol*|ref| or of another NaN/Inf pattern,
    less the NaN/Inf the same-dtype baseline has at the same places (``specials_as_baseline``)."""
    return max(0, comp.get("mismatch_count", 0) - (comp.get("specials_as_baseline") or 0))


def tolerance_verdict(comp: dict) -> str:
    within = f"atol {comp.get('atol', 0):.3g} + rtol {comp.get('rtol', 0):.3g}*|ref|"
    n, bad = comp.get("numel", 0), tolerance_mismatches(comp)
    dtype = comp.get("actual_dtype") or "its dtype"
    accepted = []
    if comp.get("dtype_overflow"):
        accepted.append(
            f"{comp['dtype_overflow']} infinite where the truth is beyond {dtype}'s range, as the truth "
            f"rounded to {dtype} is"
        )
    if comp.get("specials_as_baseline"):
        accepted.append(f"{comp['specials_as_baseline']} NaN/Inf where a correct {dtype} computation has the same")
    note = f" ({'; '.join(accepted)})" if accepted else ""
    if not bad:
        return f"all {n} elements within {within}{note}"
    special = (
        (comp.get("nan_mismatch") or 0) + (comp.get("inf_mismatch") or 0) - (comp.get("specials_as_baseline") or 0)
    )
    text = f"{bad} of {n} elements ({bad / n:.2%}) outside {within}" if n else f"{bad} elements outside {within}"
    return text + (f", {special} NaN/Inf pattern mismatches" if special else "") + note


def choose(config: dict, output: str, out_dtype: str, in_dtypes: list[str]) -> dict:
    """The standard and level that judge one output, and why (the config's per-output entry, its
    ``standard`` / ``judge_level``, else msprobe 26.2's routing and level lists)."""
    op = config.get("operator") or {}
    per = (config.get("output_judges") or {}).get(output) or {}
    asked_std = per.get("standard") or config.get("standard") or "auto"
    asked_level = per.get("judge_level") or config.get("judge_level") or "auto"
    standard, why = route(out_dtype, in_dtypes, asked_std, op)
    integer = out_dtype in INTEGER
    if integer and standard not in ("binary", "quantization"):
        standard, why = "binary", f"a {out_dtype} output (integer and bool outputs are compared exactly)"
    elif out_dtype.startswith("complex") and standard not in ("benchmark", "binary"):
        standard, why = "benchmark", f"a {out_dtype} output (complex outputs: the benchmark standard on re/im)"
    level, level_why = level_for(asked_level, op)
    return {"standard": standard, "routed": why, "level": level, "level_source": level_why}


def apply_judge(
    comparisons: list[dict],
    judge: str,
    *,
    baseline=None,
    reference=None,
    names: list[str] | None = None,
    candidate=None,
    config: dict | None = None,
    in_dtypes: list[str] | None = None,
    baseline_side: dict | None = None,
) -> list[dict]:
    """Decide every comparison with ``judge`` (in place; returned).  With the
    baseline judge, ``baseline``, ``reference`` and ``candidate`` are the
    baseline's, the reference's and the candidate's outputs (CPU);
    ``baseline_side``, when a baseline host ran the baseline instead, its
    stage-1 numbers per output (then ``baseline`` is None).  ``config`` (the
    operator config) and ``in_dtypes`` (the inputs' dtypes) choose each
    output's standard and level."""
    config = config or {}
    # the tolerance judge reads the baseline only for NaN/Inf it may explain (run when the pattern differs)
    base = name_outputs(baseline, names) if baseline is not None else {}
    ref = name_outputs(reference, names) if judge != "tolerance" or base else {}
    cand = name_outputs(candidate, names) if candidate is not None and (judge != "tolerance" or base) else {}
    where = (baseline_side or {}).get("where") or "a correct computation in the candidate's dtype on CPU"
    for comp in comparisons:
        comp["judge"] = judge
        if comp.get("contract_mismatch"):
            comp["passed"] = False
            comp["verdict"] = f"contract mismatch: {comp['contract_mismatch']}"
            continue
        if judge == "tolerance":
            _specials_of_baseline(comp, cand, base, ref)
            tol_ok, tol_text = tolerance_mismatches(comp) == 0, tolerance_verdict(comp)
            comp["passed"] = tol_ok
            comp["verdict"] = f"tolerance judge: {tol_text}"
            _lean_of_baseline(comp, base, ref)
            continue
        decided, found, dtype = _judge_by_standard(comp, ref, cand, base, baseline_side, config, in_dtypes or [])
        decided["baseline"], decided["msprobe"] = where, MSPROBE
        _record_standard(comp, decided, found)
        _settle_verdict(comp, judge, decided, found, dtype)
    return comparisons


def _judge_by_standard(comp, ref, cand, base, baseline_side, config, in_dtypes) -> tuple[dict, list, str]:
    """(decided, checks, output dtype) of one output under its msprobe standard: against the baseline
    host's numbers when ``baseline_side`` is given, else against the local baseline ``base``."""
    r = ref.get(comp["output"])
    if r is None:
        raise BaselineError(f"the reference returned no output {comp['output']!r} to judge against")
    r = as_tensor(r)
    dtype = comp.get("actual_dtype") or dtype_name(r.dtype)
    chosen = choose(config, comp["output"], dtype, in_dtypes)
    c = as_tensor(cand.get(comp["output"])) if comp["output"] in cand else None
    if baseline_side is not None:
        side = (baseline_side.get("outputs") or {}).get(comp["output"])
        if side is None:
            raise BaselineError(f"the baseline host returned no output {comp['output']!r} to judge against")
        decided, found = _judge_from_side(comp, c, side, r, chosen, dtype)
    else:
        decided, found = _judge_against_local_baseline(comp, c, base, r, chosen, dtype)
    decided.update(routed=chosen["routed"], level_source=chosen["level_source"] if decided["level"] else None)
    return decided, found, dtype


def _judge_against_local_baseline(comp, c, base, r, chosen, dtype) -> tuple[dict, list]:
    """(decided, checks) against the baseline computed here, its overflows repaired first."""
    b = base.get(comp["output"])
    if b is None:
        raise BaselineError(f"the baseline returned no output {comp['output']!r} to judge against")
    b = as_tensor(b)
    if list(b.shape) != list(r.shape):
        raise BaselineError(
            f"the baseline's output {comp['output']!r} has shape {list(b.shape)}, the reference's {list(r.shape)}"
        )
    b, repaired = repair_overflowed_baseline(c, b, r)
    shared = specials_as_baseline(comp, c, b, r)
    if shared:
        comp["specials_as_baseline"] = shared
    decided, found = _judge_local(comp, c, b, r, chosen, dtype)
    if repaired:
        decided["baseline_repaired"] = repaired
    return decided, found


def _record_standard(comp: dict, decided: dict, found: list) -> None:
    """The standard's numbers on the comparison (its finite ratios rounded for the benchmark standard)."""
    comp["benchmark"] = decided
    comp["checks"] = found
    finite = {k: v for k, v in decided["ratios"].items() if isinstance(v, (int, float)) and v == v}
    if decided["standard"] == "benchmark":
        comp["ratios"] = {k: round(v, 4) for k, v in finite.items()}


def _settle_verdict(comp: dict, judge: str, decided: dict, found: list, dtype: str) -> None:
    """passed and the verdict sentence under the baseline judge or both judges."""
    tol_ok, tol_text = tolerance_mismatches(comp) == 0, tolerance_verdict(comp)
    std_ok = decided["passed"] and all(c["passed"] for c in found)
    base_text = f"baseline judge: {verdict_sentence(decided, found, dtype, comp)}"
    if judge == "baseline":
        comp["passed"] = std_ok
        comp["verdict"] = base_text
    else:  # both
        comp["passed"] = tol_ok and std_ok
        if comp["passed"]:
            comp["verdict"] = f"both judges pass: {tol_text}; {verdict_sentence(decided, found, dtype, comp)}"
        else:
            parts = ([f"tolerance judge: {tol_text}"] if not tol_ok else []) + ([base_text] if not std_ok else [])
            comp["verdict"] = "; ".join(parts)


def repair_overflowed_baseline(c, b, r):
    """(baseline, count): the baseline with each element that is not finite where the truth and the
    candidate are (a same-dtype computation that overflowed on a value the dtype holds) set to the
    truth rounded to the baseline's dtype - what a correct computation in that dtype gives there.

    Without it, msprobe's masking (each side drops its own non-finite pairs) leaves such an element out
    of the baseline's errors and in the candidate's, and a candidate better than the baseline fails (a
    float16 gradient finite where the float16 baseline overflowed).  msprobe's standard then judges the
    repaired tensors exactly; the count is on record (``benchmark.baseline_repaired``).  Costs one
    reduction over the baseline when it is all finite: a finite sum has no NaN or Inf among its terms
    (a sum that overflows finite terms takes the element-wise path below, which decides)."""
    if c is None or not b.dtype.is_floating_point or c.dtype != b.dtype or list(c.shape) != list(b.shape):
        return b, 0
    if bool(torch.isfinite(b.sum())):
        return b, 0
    finite_b = torch.isfinite(b)
    if bool(finite_b.all()):
        return b, 0
    rounded = r.to(b.dtype)
    fix = ~finite_b & torch.isfinite(c) & torch.isfinite(r) & torch.isfinite(rounded)
    count = int(fix.sum())
    if not count:
        return b, 0
    return torch.where(fix, rounded, b), count


def specials_as_baseline(comp: dict, c, b, r) -> int:
    """The candidate's NaN/Inf pattern mismatches against the truth at places where the same-dtype
    baseline has the same NaN or infinity: what a correct computation in that dtype gives there
    (a float16 intermediate that overflows while the float32 truth stays finite)."""
    if (
        c is None
        or not (comp.get("nan_mismatch") or comp.get("inf_mismatch"))
        or c.dtype != b.dtype
        or list(c.shape) != list(b.shape)
        or not c.dtype.is_floating_point
    ):
        return 0
    c, b, r = c.detach().cpu(), b.detach().cpu(), r.detach().cpu()
    cn, bn, rn = torch.isnan(c), torch.isnan(b), torch.isnan(r)
    ci, ri = torch.isinf(c), torch.isinf(r)
    r_in = r.to(c.dtype)
    ours = ~(cn & rn) & ~(ci & (c == r_in))  # not a match already (the overflow rule included)
    same_as_base = (cn & bn) | (ci & (c == b))
    return int(
        torch.count_nonzero((cn | ci | rn | ri) & ~(torch.isfinite(c) & torch.isfinite(r)) & ours & same_as_base).item()
    )


def special_mismatches(comp: dict) -> bool:
    """The comparison fails the tolerance judge with NaN/Inf pattern mismatches that no same-dtype
    baseline has explained yet: those a correct computation in the output's dtype may have too."""
    return (
        bool(comp.get("nan_mismatch") or comp.get("inf_mismatch"))
        and tolerance_mismatches(comp) > 0
        and not comp.get("contract_mismatch")
        and "specials_as_baseline" not in comp
    )


def leans(comp: dict) -> bool:
    """A passing output (not a written input, not a batch slice) whose errors lean one way
    (precision.lean_shares) with no same-dtype baseline measured beside it yet: the tolerance judge
    runs that baseline once for it, as for NaN/Inf the truth has not."""
    p = comp.get("precision")
    return (
        bool(comp.get("passed"))
        and isinstance(p, dict)
        and "baseline" not in comp
        and not comp["output"].startswith(("input:", "batch:"))
        and bool(lean_shares(p))
    )


def _lean_of_baseline(comp: dict, base: dict, ref: dict) -> None:
    """Under the tolerance judge, with the baseline run for this case: the baseline's precision metrics
    beside a leaning output's (``comparisons[].baseline``; the analysis compares the two leans)."""
    name, p = comp["output"], comp.get("precision")
    if not isinstance(p, dict) or not lean_shares(p) or name not in base or ref.get(name) is None:
        return
    b, r = as_tensor(base[name]), as_tensor(ref[name])
    if b is not None and r is not None and list(b.shape) == list(r.shape) and b.dtype.is_floating_point:
        comp["baseline"] = precision_metrics(b, r)


def _specials_of_baseline(comp: dict, cand: dict, base: dict, ref: dict) -> None:
    """Under the tolerance judge, with the baseline run for this case: its own NaN/Inf accepted."""
    name = comp["output"]
    if (
        not (comp.get("nan_mismatch") or comp.get("inf_mismatch"))
        or name not in base
        or name not in cand
        or ref.get(name) is None
    ):
        return
    c, b, r = as_tensor(cand[name]), as_tensor(base[name]), as_tensor(ref[name])
    if list(b.shape) == list(r.shape):
        comp["specials_as_baseline"] = specials_as_baseline(comp, c, b, r)


def _judge_local(comp: dict, c, b, r, chosen: dict, dtype: str) -> tuple[dict, list]:
    """The standard's verdict and the checks with the baseline's output at hand (CPU, same dtype)."""
    standard, level = chosen["standard"], chosen["level"]
    if comp.get("numel", 0) == 0 or b.numel() == 0:
        return _empty(standard, level), []
    if "precision" not in comp:  # an exact output (integers, bool)
        comp["baseline_mismatch_count"] = exact_metrics(b, r)["mismatch_count"]
        cand_s1 = standards.stage1(standard, _cand_of(comp, c), r)
        return dict(standards.decide(standard, cand_s1, None, dtype), candidate=cand_s1), []
    b_prec = precision_metrics(b, r)
    comp["baseline"] = b_prec
    if standard == "benchmark":
        decided = standards.decide_benchmark(comp["precision"], b_prec, dtype, level)
    else:
        cand_s1 = standards.stage1_in_dtype(standard, _cand_of(comp, c), r)
        base_s1 = standards.stage1_in_dtype(standard, b, r) if needs_baseline(standard) else None
        decided = standards.decide(standard, cand_s1, base_s1, dtype, level)
        decided.update(candidate=cand_s1, **({"baseline_metrics": base_s1} if base_s1 else {}))
    return _levelled(decided, standard, level), _checks(comp, b_prec, decided, dtype)


def _judge_from_side(comp: dict, c, side: dict, r, chosen: dict, dtype: str) -> tuple[dict, list]:
    """The same with a baseline host's stage-1 numbers for this output."""
    standard, level = chosen["standard"], chosen["level"]
    if side.get("dtype") != dtype or list(side.get("shape") or []) != list(r.shape):
        raise BaselineError(
            f"the baseline host's output {comp['output']!r} is {side.get('dtype')} "
            f"{side.get('shape')}, the candidate's {dtype} {list(r.shape)}: no same-dtype baseline"
        )
    if side.get("standard") != standard:
        raise BaselineError(
            f"the baseline host measured {comp['output']!r} for the {side.get('standard')} standard, "
            f"the candidate's output is judged by {standard}"
        )
    if comp.get("numel", 0) == 0:
        return _empty(standard, level), []
    if "precision" not in comp:
        comp["baseline_mismatch_count"] = side.get("mismatch_count")
        cand_s1 = standards.stage1(standard, _cand_of(comp, c), r)
        return dict(standards.decide(standard, cand_s1, None, dtype), candidate=cand_s1), []
    b_prec = side.get("precision")
    if b_prec is None:  # baseline_side.measure sends them for every non-empty floating output
        raise BaselineError(f"the baseline host sent no precision metrics for {comp['output']!r}")
    comp["baseline"] = b_prec
    if standard == "benchmark":
        decided = standards.decide_benchmark(comp["precision"], b_prec, dtype, level)
    else:
        cand_s1 = standards.stage1_in_dtype(standard, _cand_of(comp, c), r)
        decided = standards.decide(standard, cand_s1, side.get("metrics"), dtype, level)
        decided.update(candidate=cand_s1, **({"baseline_metrics": side["metrics"]} if side.get("metrics") else {}))
    return _levelled(decided, standard, level), _checks(comp, b_prec, decided, dtype)


def _levelled(decided: dict, standard: str, level: str) -> dict:
    decided["level"] = level if standard == "benchmark" else None
    return decided


def _empty(standard: str, level: str) -> dict:
    return {
        "standard": standard,
        "level": level if standard == "benchmark" else None,
        "passed": True,
        "ratios": {},
        "thresholds": {},
        "rule": "an empty output has nothing to judge",
        "failed": [],
    }


def _cand_of(comp: dict, c):
    """The candidate's output tensor, for standards that measure beyond the metric set."""
    if c is None:
        raise BaselineError(
            f"the candidate's output {comp['output']!r} is not at hand for the standard's own measurement"
        )
    return c


def _checks(comp: dict, b_prec: dict | None, decided: dict, dtype: str) -> list[dict]:
    found = [
        extra.nan_inf(
            comp.get("nan_mismatch") or 0, comp.get("inf_mismatch") or 0, (b_prec or {}).get("special_mismatch"), dtype
        )
    ]
    if decided["standard"] == "benchmark":
        found.append(extra.error_balance(decided["ratios"].get("error_balance"), comp["precision"], dtype))
    return found


# --------------------------------------------------------------------------
# the sentence
# --------------------------------------------------------------------------

_LABELS = {
    "small_value": "small-value error ratio",
    "max_rel": "max relative error",
    "mean_rel": "mean relative error",
    "rmse": "RMSE",
    "error_balance": "error balance",
}
_SHORT = {
    "small_value": "small-value",
    "max_rel": "max-rel",
    "mean_rel": "mean-rel",
    "rmse": "rmse",
    "error_balance": "balance",
}


def _x(value: float) -> str:
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def verdict_sentence(decided: dict, found: list[dict], dtype: str, comp: dict) -> str:
    """``msprobe L2: fail, 3x the max relative error of a correct bfloat16 computation (max-rel ratio
    3 > 2, ...)`` (the benchmark standard at its level; ``msprobe ulp: ...`` for another standard),
    then each failing check's sentence."""
    standard, level = decided["standard"], decided.get("level")
    head = f"msprobe {level}" if standard == "benchmark" and level else f"msprobe {standard}"
    state = "pass" if decided["passed"] else "fail"
    text = f"{head}: {state}"
    if not decided["ratios"]:
        text += f", {decided.get('rule', '')}" if decided.get("rule") else ""
    elif standard == "benchmark":
        text += ", " + _benchmark_words(decided, dtype)
    else:
        parts = []
        for name, value in decided["ratios"].items():
            limit = decided["thresholds"].get(name)
            shown = "n/a" if value is None else f"{value:.4g}"
            parts.append(f"{name.replace('_', ' ')} {shown}" + ("" if limit is None else f" (threshold {limit:g})"))
        text += f" ({', '.join(parts)}; {decided.get('rule', '')})"
        counted = decided.get("candidate") or {}
        if standard == "binary" and counted.get("error_count"):
            text += f", {counted['error_count']} of {counted.get('count', 0)} elements differ"
    if decided.get("baseline_repaired"):
        text += (
            f" (the baseline overflowed on {decided['baseline_repaired']} element(s) the truth and the candidate "
            f"hold: there it is the truth in {dtype})"
        )
    failing = [c["text"] for c in found if not c["passed"]]
    return "; ".join([text] + failing)


def _benchmark_words(decided: dict, dtype: str) -> str:
    ratios, limits, failed = decided["ratios"], decided["thresholds"], decided["failed"]
    shown = {k: v for k, v in ratios.items() if v is not None}
    order = sorted(shown, key=lambda n: (n not in failed, -shown[n] / limits.get(n, 2.0)))
    parts = []
    for n in order:
        part = f"{_SHORT[n]} ratio {_x(shown[n])}"
        if n in failed:
            part += f" > {limits[n]:g}"
        parts.append(part)
    listed = f" ({', '.join(parts)})" if parts else ""
    if not failed:
        return f"within {dtype} precision{listed}"
    worst = max((n for n in failed if ratios.get(n) is not None), key=lambda n: ratios[n] / limits[n], default=None)
    if worst is None:
        return f"a metric is NaN/Inf on one side only ({', '.join(failed)}){listed}"
    return f"{_x(ratios[worst])}x the {_LABELS[worst]} of a correct {dtype} computation{listed}"
