"""Per-dtype precision tables.  Standard library only.

Imported by the runner (compare, execute) and by the server (schemas, plan
warnings), so the tables exist once.  Sources (see references/behavior.md):

- ``DEFAULT_TOLERANCES``: torch.testing's ``_DTYPE_PRECISIONS``
  (torch/testing/_comparison.py), the defaults of ``assert_close``: used for a
  dtype that has no ``tolerance.per_dtype`` entry when the config gives no
  blanket ``atol``/``rtol``.
- ``BENCHMARK``: Ascend's accuracy checker (mindstudio-probe,
  msprobe/pytorch/api_accuracy_checker/precision_standard/standard_config.py,
  ``StandardConfig``): the small-value threshold (``_small_value``), the
  absolute error a small value may have (``_benchmark_small_value_atol``) and
  the floor of a ratio's denominator (``_minmum_err``, used by
  ``compare/algorithm.py: calc_ratio``).

The runner's baseline judge decides with standards.py (msprobe 26.2's
standards at the operator's level, whose thresholds are in routing.py) and
checks.py (the project's rules, whose constants are below).
"""

from __future__ import annotations

import math

# dtype -> (rtol, atol), as torch.testing._comparison._DTYPE_PRECISIONS
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}
# exact dtypes (integers, bool): assert_close compares them with 0/0
EXACT_TOLERANCE = (0.0, 0.0)
# dtype -> machine epsilon (the spacing above 1.0; torch.finfo(dtype).eps), for tolerances below a
# dtype's resolution; complex dtypes take their parts'
DTYPE_EPS: dict[str, float] = {
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float32": 2.0**-23,
    "float64": 2.0**-52,
    "float8_e4m3fn": 2.0**-3,
    "float8_e5m2": 2.0**-2,
    "complex32": 2.0**-10,
    "complex64": 2.0**-23,
    "complex128": 2.0**-52,
}
TOLERANCE_SOURCE = "torch.testing.assert_close's per-dtype defaults (torch/testing/_comparison.py _DTYPE_PRECISIONS)"


def default_tolerance(dtype: str) -> tuple[float, float]:
    """(atol, rtol) of the default table for ``dtype`` (a name such as "bfloat16")."""
    rtol, atol = DEFAULT_TOLERANCES.get(dtype, EXACT_TOLERANCE)
    return atol, rtol


GRADIENTS = "grad.*"  # the per_output key of every gradient output (grad.<input>)


def tolerance_for(tolerance: dict, dtype: str, output: str | None = None) -> tuple[float, float, str]:
    """(atol, rtol, where it came from) for one output dtype: the output's
    ``per_output`` entry (its name, else ``grad.*`` for a gradient; its
    ``per_dtype`` pair first), else the ``per_dtype`` entry, else the blanket
    ``atol``/``rtol`` when given, else the default table."""
    per_output = tolerance.get("per_output") or {}
    if output is not None and per_output:
        for key in (output, GRADIENTS if output.startswith("grad.") else None):
            entry = per_output.get(key) if key else None
            if not entry:
                continue
            pair = (entry.get("per_dtype") or {}).get(dtype) or entry
            if pair.get("atol") is not None:
                return float(pair["atol"]), float(pair["rtol"]), "per_output"
    per = (tolerance.get("per_dtype") or {}).get(dtype)
    if per and per.get("atol") is not None:
        return float(per["atol"]), float(per["rtol"]), "per_dtype"
    if tolerance.get("atol") is not None:
        return float(tolerance["atol"]), float(tolerance["rtol"]), "config"
    atol, rtol = default_tolerance(dtype)
    return atol, rtol, "default"


# dtype -> small-value threshold, small-value atol, ratio floor (msprobe StandardConfig)
BENCHMARK: dict[str, dict[str, float]] = {
    "float16": {"small_value": 2**-10, "small_value_atol": 1e-16, "ratio_floor": 2**-11},
    "bfloat16": {"small_value": 2**-10, "small_value_atol": 1e-16, "ratio_floor": 2**-8},
    "float32": {"small_value": 2**-20, "small_value_atol": 2**-30, "ratio_floor": 2**-14},
}
BENCHMARK_DEFAULT = {"small_value": 2**-20, "small_value_atol": 2**-30, "ratio_floor": 2**-14}
BFLOAT16_EPS = 2**-8  # msprobe CompareConst.BFLOAT16_EPS: the eps of relative errors for bfloat16 outputs
THOUSANDTH = 1e-3  # msprobe CompareConst.THOUSAND_RATIO_THRESHOLD
TEN_THOUSANDTH = 1e-4  # msprobe CompareConst.TEN_THOUSAND_RATIO_THRESHOLD

# the error balance decides only when the candidate's sign imbalance is real:
# |#(d>0) - #(d<0)| above SIGN_TEST_SIGMAS standard deviations of a fair coin
SIGN_TEST_SIGMAS = 4.0
# NaN/Inf pattern mismatches: the candidate may have at most this many times the baseline's
SPECIAL_RATIO = 2.0


# A lean in a passing output's errors: of its nonzero errors, a share LEAN_SHARE or more one way
# (0.5: a 75/25 split; rounding to nearest is ~0), at least LEAN_MIN_ERRORS of them, and an imbalance
# beyond LEAN_SIGMAS standard deviations of a fair coin (4: once in ~30,000).  The tolerance judge then
# runs the same-dtype baseline once (a correct computation may lean too: float32 against a float64
# truth does in an RMSNorm); the analysis warns when the baseline's lean is LEAN_SHARE or more apart.
LEAN_SHARE = 0.5
LEAN_MIN_ERRORS = 20
LEAN_SIGMAS = 4.0


def lean_shares(metrics: dict) -> dict[str, float]:
    """The ``sign`` and ``magnitude`` shares of a precision metric set whose errors lean (see
    LEAN_SHARE): (#one way - #the other) / #nonzero errors, signed; empty when nothing leans."""
    nonzero, count = metrics.get("nonzero_errors") or 0, metrics.get("count") or 0
    if nonzero < LEAN_MIN_ERRORS:
        return {}
    found = {}
    for kind in ("sign", "magnitude"):
        value = metrics.get(f"{kind}_balance")
        if value is None:
            continue
        imbalance = value * count
        if abs(imbalance) / nonzero >= LEAN_SHARE and abs(imbalance) > LEAN_SIGMAS * math.sqrt(nonzero):
            found[kind] = imbalance / nonzero
    return found


def benchmark_for(dtype: str) -> dict[str, float]:
    return BENCHMARK.get(dtype, BENCHMARK_DEFAULT)


def sign_imbalance_significant(metrics: dict) -> bool:
    nonzero = metrics.get("nonzero_errors") or 0
    imbalance = (metrics.get("error_balance") or 0.0) * (metrics.get("count") or 0)
    return nonzero > 0 and imbalance > SIGN_TEST_SIGMAS * math.sqrt(nonzero)
