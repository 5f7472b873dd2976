"""Trends: when failing and passing values of an ordered axis interleave (no
threshold separates them) but the error grows with the axis, the finding is
a trend - "max_rel grows with x.shape[-1]" - never a set of failing values
and never exact.  Such a failure has no clean boundary at the run's
tolerances; the baseline judge (the candidate's error over a correct
same-dtype computation's) is the way to tell the kernel's fault from the dtype's.
"""

from __future__ import annotations

from typing import Any

from ..cases.derived import source_of
from ..schemas import CaseResult, Finding

MIN_CASES = 5
MIN_CORRELATION = 0.6


def error_metric(result: CaseResult) -> tuple[str, float] | None:
    """The worst output's relative error (max_rel), else its absolute error."""
    rels = [c.max_rel for c in result.comparisons if c.max_rel is not None]
    if rels and len(rels) == len(result.comparisons):
        return "max_rel", max(rels)
    abss = [c.max_abs for c in result.comparisons if c.max_abs is not None]
    if abss:
        return "max_abs", max(abss)
    return None


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
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return 0.0 if vx == 0 or vy == 0 else cov / (vx * vy)


def _interleaved(fvals: list[float], pvals: list[float]) -> bool:
    return bool(fvals and pvals) and not (max(pvals) < min(fvals) or max(fvals) < min(pvals))


def trend_finding(hax: dict[str, dict[str, Any]], dist: dict[str, dict[str, str]], results: dict[str, CaseResult],
                  failing: list[str], passing: list[str]) -> Finding | None:
    """The ordered axis the error follows best, among cases in the failing
    cases' dtypes, when its failing and passing values interleave."""
    dtypes = {dist[c].get("dtype") for c in failing}
    ids = sorted(c for c in failing + passing if dist[c].get("dtype") in dtypes)
    metrics = {c: error_metric(results[c]) for c in ids}
    ids = [c for c in ids if metrics[c] is not None]
    kinds = {metrics[c][0] for c in ids}
    if len(ids) < MIN_CASES or len(kinds) != 1:
        return None
    metric = kinds.pop()
    fset = set(failing)
    best = None
    keys = sorted({k for c in ids for k in hax[c]})
    for key in keys:
        vals = {c: hax[c].get(key) for c in ids}
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals.values()):
            continue
        if len(set(vals.values())) < 3:
            continue
        fv = [vals[c] for c in ids if c in fset]
        pv = [vals[c] for c in ids if c not in fset]
        if not _interleaved(fv, pv):
            continue
        rho = spearman([float(vals[c]) for c in ids], [metrics[c][1] for c in ids])
        score = (abs(rho), -len(key), key)
        if abs(rho) >= MIN_CORRELATION and (best is None or score > best[0]):
            best = (score, key, rho, fv, pv)
    if best is None:
        return None
    _, key, rho, fv, pv = best
    verb = "grows" if rho > 0 else "shrinks"
    overlap = f"failing values {sorted(set(fv))[:6]} and passing values {sorted(set(pv))[:6]} interleave"
    text = (f"{metric} {verb} with {key} (rank correlation {rho:.2f} over {len(ids)} cases) but {overlap}: a clean "
            f"boundary does not exist at these tolerances; use the baseline judge (config.judge 'baseline' or "
            f"'both') to tell the kernel's error from the dtype's")
    return Finding(axis=key, kind="trend", predicate=f"{metric} {verb} with {key}", source=source_of(key),
                   failing_values=sorted(set(fv))[:32], passing_values=sorted(set(pv))[:32], exact=False,
                   failing=len(failing), passing=len(passing), statement=text, metric=metric,
                   correlation=round(rho, 3),
                   why_not_exact=["a trend is never exact: failing and passing values interleave"])
