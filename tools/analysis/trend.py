"""Trends: when failing and passing values of an ordered axis interleave (no
threshold separates them) but the error grows with the axis, the finding is
a trend - "max_rel grows with x.shape[-1]" - never a set of failing values
and never exact.  Such a failure has no clean boundary at the run's
tolerances; the baseline judge (the candidate's error over a correct
same-dtype computation's) is the way to tell the kernel's fault from the dtype's.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from ..cases.derived import source_of
from ..schemas import CaseResult, Finding
from .hypotheses import axis_sources

MIN_CASES = 5
MIN_CORRELATION = 0.6


METRICS = ("max_rel", "max_abs")


def error_metric(result: CaseResult, name: str) -> float | None:
    """The worst output's error by one metric (None when an output lacks it)."""
    vals = [getattr(c, name) for c in result.comparisons]
    if not vals or any(v is None for v in vals):
        return None
    return max(vals)


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float:
    rx, ry = _ranks(xs), _ranks(ys)
    n = len(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return 0.0 if vx == 0 or vy == 0 else cov / (vx * vy)


def _interleaved(fvals: list[float], pvals: list[float]) -> bool:
    return bool(fvals and pvals) and not (max(pvals) < min(fvals) or max(fvals) < min(pvals))


def trend_finding(
    hax: dict[str, dict[str, Any]],
    dist: dict[str, dict[str, str]],
    results: dict[str, CaseResult],
    failing: list[str],
    passing: list[str],
) -> Finding | None:
    """The ordered axis the error follows best with every other planned axis
    held (cases grouped by the values of the other variation axes), when its
    failing and passing values interleave."""
    ids = sorted(failing + passing)
    if len(ids) < MIN_CASES:
        return None
    hax = {c: realized(hax[c], results[c]) for c in ids}
    fset = set(failing)
    dist_keys = sorted({k for c in ids for k in dist[c]})
    rows = {c: tuple(dist[c].get(k) for k in dist_keys) for c in ids}
    first = hax[ids[0]]
    keys = sorted(
        {k for c in ids[:64] for k, v in hax[c].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        | {k for k, v in first.items() if isinstance(v, (int, float))}
    )
    groupings: dict[tuple, list[list[str]]] = {}
    best = None
    for metric in METRICS:
        values = {c: error_metric(results[c], metric) for c in ids}
        for key in keys:
            src = tuple(axis_sources(key))
            if src not in groupings:  # cases that differ only in the key's sources, once per source
                held = [
                    j
                    for j, k in enumerate(dist_keys)
                    if k not in src and not (k.endswith(".strides") and k[: -len(".strides")] + ".shape" in src)
                ]
                pick = itemgetter(*held) if held else (lambda row: ())
                groups: dict[Any, list[str]] = {}
                for c in ids:
                    groups.setdefault(pick(rows[c]), []).append(c)
                groupings[src] = [
                    g
                    for g in groups.values()
                    if len(g) >= MIN_CASES and any(c in fset for c in g) and any(c not in fset for c in g)
                ]
            for members in groupings[src]:
                raw = [hax[c].get(key) for c in members]
                vals = [v for v in raw if isinstance(v, (int, float)) and not isinstance(v, bool)]
                errs = [e for e in (values[c] for c in members) if e is not None]
                if len(errs) < len(members) or len(vals) < len(members) or len(set(vals)) < 3:
                    continue
                fv = [v for c, v in zip(members, vals, strict=True) if c in fset]
                pv = [v for c, v in zip(members, vals, strict=True) if c not in fset]
                if not _interleaved(fv, pv):
                    continue
                rho = spearman([float(v) for v in vals], errs)
                score = (abs(rho), len(members), -len(key), key)
                if abs(rho) >= MIN_CORRELATION and (best is None or score > best[0]):
                    best = (score, key, rho, fv, pv, metric, len(members))
    if best is None:
        return None
    _, key, rho, fv, pv, metric, n = best
    verb = "grows" if rho > 0 else "shrinks"
    overlap = f"failing values {sorted(set(fv))[:6]} and passing values {sorted(set(pv))[:6]} interleave"
    if ".values." in key:
        overlap += " (measured in the values actually built, not the generator's parameters)"
    text = (
        f"{metric} {verb} with {key} (rank correlation {rho:.2f} over {n} cases differing only there) but "
        f"{overlap}: a clean boundary does not exist at these tolerances; use the baseline judge (config.judge "
        f"'baseline' or 'both') to tell the kernel's error from the dtype's"
    )
    return Finding(
        axis=key,
        kind="trend",
        predicate=f"{metric} {verb} with {key}",
        source=source_of(key),
        failing_values=sorted(set(fv))[:32],
        passing_values=sorted(set(pv))[:32],
        exact=False,
        failing=len(failing),
        passing=len(passing),
        statement=text,
        metric=metric,
        correlation=round(rho, 3),
        why_not_exact=["a trend is never exact: failing and passing values interleave"],
    )


REALIZED = ("min", "max", "max_abs")  # the measured statistics a trend may follow


def realized(axes: dict[str, Any], result: CaseResult) -> dict[str, Any]:
    """A case's axes with the values actually built where its result records them: ``x.values.min``,
    ``.max`` and ``.max_abs`` added, and the generator's ``x.magnitude`` (|mean| + std, a parameter,
    not a value drawn) left out for an input whose values were measured."""
    if not result.values:
        return axes
    out = dict(axes)
    for name, measured in result.values.items():
        if measured.max_abs is None:
            continue
        out.pop(f"{name}.magnitude", None)
        out.update({f"{name}.values.{k}": getattr(measured, k) for k in REALIZED if getattr(measured, k) is not None})
    return out


_FLOATING_OUTPUTS = ("float", "bfloat", "complex")


def trend_helps(results: dict[str, CaseResult], failing: list[str]) -> bool:
    """A trend (and the baseline judge it points to) says something only about floating outputs: an integer
    or boolean output (indices, a mask) is right or wrong, there is no error to grow."""
    for c in failing:
        for comp in results[c].comparisons:
            dtype = comp.expected_dtype or comp.actual_dtype
            if not comp.passed and dtype and not dtype.startswith(_FLOATING_OUTPUTS):
                return False
    return True
