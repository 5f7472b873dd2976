"""This project's rules beyond msprobe's standards: each a named check with its
own pass/fail and number, kept apart from the standard's verdict (a kernel
team reads the standard's verdict as msprobe's, and these as ours).
Standard library only.

- ``nan_inf``: the NaN/Inf pattern against the truth.  msprobe masks every
  pair that is not finite on both sides out of its metrics, so a candidate of
  NaN passes its benchmark standard; here the candidate may have at most
  ``SPECIAL_RATIO`` times the pattern mismatches of a correct same-dtype
  computation (none when it has none).
- ``error_balance``: msprobe computes the error balance (EB) ratio and leaves
  it out of its status; here it fails above ``EB_THRESHOLD`` when the
  candidate's sign imbalance is also significant (a fair coin's would not be:
  ``|#(d>0) - #(d<0)| > SIGN_TEST_SIGMAS * sqrt(#(d != 0))``).
"""

from __future__ import annotations

from .precision import SIGN_TEST_SIGMAS, SPECIAL_RATIO, sign_imbalance_significant
from .routing import EB_THRESHOLD


def nan_inf(nan: int, inf: int, baseline: int | None, dtype: str) -> dict:
    """The candidate's NaN and Inf pattern mismatches against the baseline's (None: no baseline count)."""
    count = int(nan) + int(inf)
    base = int(baseline or 0)
    limit = SPECIAL_RATIO * base
    passed = count <= limit
    kinds = " and ".join(p for p in ((f"{nan} NaN" if nan else ""), (f"{inf} Inf" if inf else "")) if p) or "0"
    has = f"{base}" if base else "none"
    label = "NaN pattern" if nan and not inf else ("Inf pattern" if inf and not nan else "NaN/Inf pattern")
    if passed:
        text = f"{label}: {kinds} mismatches, a correct {dtype} computation has {has}" if count else f"{label}: none"
    else:
        text = f"{label}: {kinds} where a correct {dtype} computation has {has}"
    return {"name": "nan_inf", "passed": passed, "value": count, "limit": limit, "text": text}


def error_balance(eb_ratio: float | None, cand: dict, dtype: str) -> dict:
    """The benchmark standard's EB ratio as a rule: above the threshold with a significant sign imbalance."""
    ratio = eb_ratio if eb_ratio is not None else 0.0
    significant = sign_imbalance_significant(cand)
    passed = not (ratio > EB_THRESHOLD and significant)
    if passed:
        text = f"error balance: ratio {ratio:.3g}" + (
            "" if ratio <= EB_THRESHOLD else " (a fair coin's imbalance: not significant)"
        )
    else:
        text = (
            f"error balance: {ratio:.3g}x the sign imbalance of a correct {dtype} computation "
            f"(> {EB_THRESHOLD:g}, beyond {SIGN_TEST_SIGMAS:g} sigma of a fair coin): a biased rounding"
        )
    return {"name": "error_balance", "passed": passed, "value": ratio, "limit": EB_THRESHOLD, "text": text}
