"""The consistency checks over a run: which cases are evidence of
their own kind, never of an axis, and the warnings a passing run can carry.

- ``nondeterministic`` failing cases (repeated runs gave different results),
  ``order_dependent`` ones (fail after other cases on a warm worker, pass alone
  on a fresh one), ``order_suspect`` ones (fail the same way as an
  order-dependent case after other cases, not run alone) and probe cases
  (``case.after``) are kept out of the evidence for findings and failure axes;
- ``writes_input`` and ``batch_variant`` cases are flagged and stay evidence
  (a deterministic failure of a check the run asked for);
- bias: errors of a passing floating output that lean one way, far from the
  baseline's balance (or from 0 without one), are warned about;
- an order-dependent case is tied to its probes (same case, other id, an
  ``after`` list): the smallest ``after`` that makes it fail names the cases
  that poison it.

Pure: cases and results in, a ConsistencyReport out.
"""

from __future__ import annotations

import math

from ..cases.axes import case_axes, differing_axes
from ..cases.ids import case_content
from ..runner.precision import LEAN_MIN_ERRORS, LEAN_SHARE, LEAN_SIGMAS
from ..schemas import AloneRun, BiasWarning, Case, CaseFailure, CaseResult, ConsistencyReport, FlaggedCase

FAILING = ("numerical_mismatch", "crash")
NOT_EVIDENCE = ("nondeterministic", "order_dependent", "order_suspect")
# The runner's lean (tools/runner/precision.py), which makes the tolerance judge run the baseline too:
# (#one way - #the other) / #nonzero errors of 0.5 (a 75/25 split; rounding to nearest is ~0), at least
# 20 errors, |imbalance| > 4 sqrt(#nonzero) (a fair coin does that once in ~30,000).
BIAS_SHARE = LEAN_SHARE
BIAS_MIN_ERRORS = LEAN_MIN_ERRORS
BIAS_SIGMAS = LEAN_SIGMAS


def failure_group(result: dict) -> str:
    """What one alone-run stands for: the failure's signature and the failing outputs' dtypes."""
    if result.get("status") == "crash":
        return "crash: " + str((result.get("error") or {}).get("signature"))
    failed = [c for c in result.get("comparisons") or [] if not c.get("passed")]
    outs = ",".join(c.get("output", "") for c in failed)
    dtypes = ",".join(sorted({str(c.get("actual_dtype")) for c in failed}))
    return f"numerical_mismatch: {outs} ({dtypes})"


def _probe_key(case: Case) -> str:
    """A case's content without its id, description and consistency directives: a probe's target has the same."""
    doc = case.model_dump(mode="json")
    return case_content({k: v for k, v in doc.items() if k not in ("after", "repeats", "batch_invariance")})


def _relation(poison: Case, target: Case) -> str:
    """How an earlier case relates to the one it poisons: what differs, and what is the same
    (the element count, when the shapes differ: a cache keyed by size)."""
    diff = differing_axes(poison, target)
    if not diff:
        return "the same case"
    la, lb = case_axes(poison), case_axes(target)
    parts = []
    same = []
    for key in diff:
        if key.endswith(".shape"):
            name = key[: -len(".shape")]
            sa = next((i.shape for i in poison.inputs if i.name == name and i.shape is not None), None)
            sb = next((i.shape for i in target.inputs if i.name == name and i.shape is not None), None)
            if sa is not None and sb is not None and math.prod(sa) == math.prod(sb):
                same.append(f"same {name}.numel {math.prod(sa)}")
            parts.append(f"other {key} ({la.get(key)} vs {lb.get(key)})")
        else:
            parts.append(f"other {key} ({la.get(key, '-')} vs {lb.get(key, '-')})")
    return ", ".join(same + parts)


def _repeat_detail(r: CaseResult) -> str:
    rep = r.consistency.repeats if r.consistency else None
    if rep is None:
        return "its runs differ"
    text = (
        f"{rep.distinct} distinct results in {rep.runs} runs on the same inputs (statuses "
        f"{', '.join(rep.statuses)}; passed in runs {rep.passed_runs or 'none'})"
    )
    if rep.max_diff is not None:
        text += f"; largest difference between runs {rep.max_diff:.4g}"
    if rep.differing_outputs:
        text += f" in {', '.join(rep.differing_outputs)}"
    return text


def consistency_report(cases: list[Case], results: dict[str, CaseResult]) -> ConsistencyReport:
    """The flagged cases, the cases kept out of the findings, the probes, the bias warnings."""
    report = ConsistencyReport()
    by_id = {c.id: c for c in cases}
    probes: dict[str, list[tuple[Case, CaseResult | None]]] = {}
    for c in cases:
        if c.after:
            report.probes.append(c.id)
            probes.setdefault(_probe_key(c), []).append((c, results.get(c.id)))
    order_groups: set[str] = set()
    for c in cases:
        r = results.get(c.id)
        if r is None or r.consistency is None or c.after:
            continue
        ev = r.consistency
        report.repeated += ev.repeats is not None
        report.alone += ev.alone is not None and ev.alone.history_total > 0
        failing = r.status in FAILING
        if "nondeterministic" in ev.flags and failing:
            report.flagged.append(
                FlaggedCase(case_id=c.id, flag="nondeterministic", status=r.status, detail=_repeat_detail(r))
            )
        elif "nondeterministic" in ev.flags:
            report.flagged.append(
                FlaggedCase(
                    case_id=c.id,
                    flag="nondeterministic",
                    status=r.status,
                    detail=_repeat_detail(r) + "; every run passed the judge",
                )
            )
        if "order_dependent" in ev.flags and ev.alone is not None:
            order_groups.add(failure_group(r.model_dump(mode="json")))
            report.flagged.append(_order_case(c, r, ev.alone, probes.get(_probe_key(c), []), by_id))
        for w in ev.inputs_written:
            if not w.declared:
                where = (
                    f"{w.changed} storage elements outside its view"
                    if w.outside_view
                    else f"{w.changed} of {w.numel} elements"
                    if w.changed is not None
                    else "its checksum"
                )
                report.flagged.append(
                    FlaggedCase(
                        case_id=c.id,
                        flag="writes_input",
                        status=r.status,
                        detail=f"the candidate modified its input {w.input}: {where} changed (not declared in "
                        "operator.writes)",
                    )
                )
        if "batch_variant" in ev.flags and ev.batch is not None:
            b = ev.batch
            detail = (
                b.note
                or f"rows [{b.start}, {b.start + b.length}) of {b.input} run alone differ "
                f"{'bit for bit' if b.exact else 'beyond the tolerance'} from the same rows of the full batch "
                f"(dim {b.dim}): {b.differing} element(s)"
                + (f", largest difference {b.max_diff:.4g}" if b.max_diff is not None else "")
            )
            report.flagged.append(FlaggedCase(case_id=c.id, flag="batch_variant", status=r.status, detail=detail))
    flagged_ids = {f.case_id for f in report.flagged}
    for c in cases:  # failing the way an order-dependent case fails, after other cases, never run alone
        r = results.get(c.id)
        if r is None or c.after or r.status not in FAILING or c.id in flagged_ids or r.consistency is None:
            continue
        ev = r.consistency
        if ev.history_total and ev.alone is None and failure_group(r.model_dump(mode="json")) in order_groups:
            report.flagged.append(
                FlaggedCase(
                    case_id=c.id,
                    flag="order_suspect",
                    status=r.status,
                    history=ev.history,
                    detail=f"fails like an order-dependent case after {ev.history_total} case(s) on the warm worker; "
                    "not run alone (one alone-run per kind of failure)",
                )
            )
    report.excluded_from_findings = sorted(
        {f.case_id for f in report.flagged if f.flag in NOT_EVIDENCE and f.status in FAILING} | set(report.probes)
    )
    report.bias = bias_warnings(cases, results)
    report.stats = {
        flag: sum(1 for f in report.flagged if f.flag == flag)
        for flag in ("nondeterministic", "order_dependent", "order_suspect", "writes_input", "batch_variant")
        if any(f.flag == flag for f in report.flagged)
    }
    report.summary = _summary(report)
    return report


def _order_case(case: Case, r: CaseResult, alone: AloneRun, probes: list, by_id: dict[str, Case]) -> FlaggedCase:
    ran = {p.id: (res.status if res is not None else "pending") for p, res in probes}
    failing = [(len(p.after), i, p) for i, (p, res) in enumerate(probes) if res is not None and res.status in FAILING]
    poisoned = list(min(failing, key=lambda t: t[:2])[2].after) if failing else None
    history = alone.history
    if poisoned:
        rel = "; ".join(f"`{p}` ({_relation(by_id[p], case)})" for p in poisoned if p in by_id)
        detail = f"fails after {rel} on a fresh worker; passes alone"
    else:
        latest = ", ".join(f"`{h}`" for h in history[-3:])
        detail = (
            f"fails after {alone.history_total} case(s) on the warm worker (latest {latest}); passes alone on a "
            "fresh worker"
            + (
                "; no probe has made it fail yet"
                if probes
                else "; narrow_failure finds the earlier case that poisons it"
            )
        )
    return FlaggedCase(
        case_id=case.id,
        flag="order_dependent",
        status=r.status,
        detail=detail,
        history=history,
        poisoned_by=poisoned,
        probes=ran,
    )


def bias_warnings(cases: list[Case], results: dict[str, CaseResult]) -> list[BiasWarning]:
    """Floating outputs whose errors lean one way, far from the lean of a correct computation in the same
    dtype (the baseline judge's).  Without a baseline there is no warning: ordinary arithmetic leans too
    (float32 against a float64 truth leans away from zero in an RMSNorm), so a lean measured against 0
    says nothing about the kernel's rounding."""
    found: dict[tuple, BiasWarning] = {}
    for c in cases:
        r = results.get(c.id)
        if r is None:
            continue
        for comp in r.comparisons:
            p = comp.precision
            # within the judge (a failing output is its own evidence): the errors that lean one way all the same
            if p is None or not comp.passed or comp.output.startswith(("input:", "batch:")) or p.sign_balance is None:
                continue
            m = p.nonzero_errors
            if m < BIAS_MIN_ERRORS:
                continue
            base = comp.baseline
            if base is None or not base.nonzero_errors:
                continue
            for kind, value, base_value in (
                ("sign", p.sign_balance, base.sign_balance if base else None),
                ("magnitude", p.magnitude_balance, base.magnitude_balance if base else None),
            ):
                if value is None:
                    continue
                imbalance = value * p.count
                share = imbalance / m
                if base_value is None:
                    continue
                base_share = base_value * base.count / base.nonzero_errors
                far = abs(share - base_share) >= BIAS_SHARE
                if not far or abs(imbalance) <= BIAS_SIGMAS * math.sqrt(m):
                    continue
                direction = (
                    ("positive" if share > 0 else "negative")
                    if kind == "sign"
                    else ("away_from_zero" if share > 0 else "toward_zero")
                )
                key = (comp.output, comp.actual_dtype, kind, direction)
                w = found.get(key)
                if w is None:
                    found[key] = BiasWarning(
                        output=comp.output,
                        dtype=comp.actual_dtype or "?",
                        kind=kind,
                        direction=direction,
                        share=round(share, 4),
                        baseline_share=None if base_share is None else round(base_share, 4),
                        cases=[c.id],
                        message="",
                    )
                else:
                    w.cases.append(c.id)
                    if abs(share) > abs(w.share):
                        w.share = round(share, 4)
    warnings = list(found.values())
    directions: dict[tuple, set[str]] = {}
    for w in warnings:
        directions.setdefault((w.output, w.dtype), set()).add(w.direction)
    for w in warnings:
        w.message = _bias_message(w, directions[(w.output, w.dtype)])
    # one warning per output and dtype: the sign one when both lean (its message names
    # truncation when the magnitude leans toward zero too)
    out, seen = [], set()
    for w in sorted(warnings, key=lambda w: (w.kind != "sign", -abs(w.share))):
        if (w.output, w.dtype) not in seen:
            seen.add((w.output, w.dtype))
            out.append(w)
    return out


def _bias_message(w: BiasWarning, directions: set[str]) -> str:
    how = "all" if abs(w.share) >= 0.95 else "mostly"
    pct = f"{(1 + abs(w.share)) / 2:.0%}"
    n = f"{len(w.cases)} case(s)"
    if w.kind == "sign":
        lean = f"{how} {w.direction}"
        if "toward_zero" in directions:
            guess = "truncation instead of round-to-nearest?"
            lean += " (toward zero)"
        else:
            guess = f"rounding toward {'-' if w.direction == 'negative' else '+'}inf instead of round-to-nearest?"
    else:
        lean = f"{how} {'toward zero' if w.direction == 'toward_zero' else 'away from zero'}"
        guess = (
            "truncation (round toward zero) instead of round-to-nearest?"
            if w.direction == "toward_zero"
            else "rounding away from zero instead of to nearest?"
        )
    base = f", the baseline's {w.baseline_share:+.2f}" if w.baseline_share is not None else ""
    return (
        f"{w.dtype} errors {lean} in output {w.output!r} ({pct} of the nonzero errors one way, balance "
        f"{w.share:+.2f}{base}; {n}): {guess}"
    )


def _summary(report: ConsistencyReport) -> str | None:
    """The consistency findings in one sentence (None when there is nothing to say)."""
    parts = []
    by = {
        flag: [f for f in report.flagged if f.flag == flag]
        for flag in ("nondeterministic", "order_dependent", "order_suspect", "writes_input", "batch_variant")
    }
    if by["nondeterministic"]:
        f = by["nondeterministic"][0]
        parts.append(f"{len(by['nondeterministic'])} case(s) nondeterministic (`{f.case_id}`: {f.detail})")
    if by["order_dependent"]:
        f = by["order_dependent"][0]
        text = f"{len(by['order_dependent'])} case(s) order-dependent (`{f.case_id}` {f.detail})"
        if by["order_suspect"]:
            text += f"; {len(by['order_suspect'])} more fail the same way after other cases, not run alone"
        parts.append(text)
    if by["writes_input"]:
        inputs = sorted({f.detail.split("its input ", 1)[-1].split(":", 1)[0] for f in by["writes_input"]})
        parts.append(
            f"the candidate writes its input {', '.join(inputs)} in {len(by['writes_input'])} case(s) "
            "(a model's next layer reads the changed tensor; declare operator.writes if it is in-place)"
        )
    if by["batch_variant"]:
        f = by["batch_variant"][0]
        parts.append(f"{len(by['batch_variant'])} case(s) batch-variant (`{f.case_id}`: {f.detail})")
    for w in report.bias[:2]:
        parts.append(w.message)
    return "; ".join(parts) or None


def evidence_for_findings(
    cases: list[Case], results: dict[str, CaseResult], report: ConsistencyReport
) -> tuple[list[Case], dict[str, CaseResult]]:
    """The cases and results findings and failure axes may use: without the excluded ones."""
    out = set(report.excluded_from_findings)
    if not out:
        return cases, results
    return [c for c in cases if c.id not in out], {k: v for k, v in results.items() if k not in out}


def annotate_failures(failures: list[CaseFailure], report: ConsistencyReport) -> None:
    """Each failing case carries its flags (and says it is not evidence of an axis)."""
    flags: dict[str, list[str]] = {}
    for flagged in report.flagged:
        flags.setdefault(flagged.case_id, []).append(flagged.flag)
    probes = set(report.probes)
    for f in failures:
        f.flags = flags.get(f.case_id, [])
        if any(x in NOT_EVIDENCE for x in f.flags):
            f.reason = (f.reason or "") + f" [{', '.join(f.flags)}: not evidence of an axis]"
        elif f.case_id in probes:
            f.reason = (f.reason or "") + " [order probe: run after earlier cases on a fresh worker]"


def amend_summary(
    summary: str, verdict: str, counts: dict[str, int], planned: int, report: ConsistencyReport, evidence_failing: int
) -> str:
    """The verdict's sentence, saying what the consistency checks found.  When every failure
    is nondeterministic or order-dependent, no axis is named: the failures are of their own kind."""
    if not report.summary:
        return summary
    failing = counts.get("numerical_mismatch", 0) + counts.get("crash", 0)
    if verdict == "diagnosed" and failing and not evidence_failing:
        probes = f"; {len(report.probes)} of the cases are order probes" if report.probes else ""
        return (
            f"diagnosed: {failing} of {planned} cases fail ({counts.get('numerical_mismatch', 0)} "
            f"numerical_mismatch, {counts.get('crash', 0)} crash{probes}), none as evidence of an axis: "
            f"{report.summary}."
        )
    return summary.rstrip(".") + f"; consistency: {report.summary}."
