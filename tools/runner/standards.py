"""msprobe 26.2's precision standards, each from its own code: stage 1 measures
one output against the truth, stage 2 decides from the candidate's (and, for
the benchmark and ULP standards, a correct same-dtype computation's) stage-1
numbers.  Standard library and torch only.

The project's own extra rules are elsewhere (checks.py); which standard and
level apply is routing.py.  Every function here is a pure function of
tensors (or of the numbers stage 1 gave) and returns a *verdict*:

    {"standard", "level" (benchmark only, else None), "passed", "ratios",
     "thresholds", "rule", "failed"}

where ``ratios`` are the numbers the standard decides on (None where msprobe
has a NaN ratio) and ``thresholds`` their limits.  Citations are
``msprobe/pytorch/api_accuracy_checker/`` paths of mindstudio-probe 26.2.0;
references/behavior.md has the formulas.

- benchmark (标杆比对法): ``precision_standard/benchmark_compare.py``
  ``BenchmarkCompare`` (stage 1 is compare.precision_metrics, msprobe-exact)
  and ``BenchmarkPrecisionCompare`` (ratio ``|c| / max(|b|, floor)``, a NaN
  ratio passes, a non-finite metric on one side fails, strict ``>``; the
  error balance is shown and left out of the status).
- ulp (ULP误差比对法): ``precision_standard/ulp_compare.py`` ``UlpCompare`` /
  ``UlpPrecisionCompare``, ``compare/algorithm.py: get_ulp_err``.
- binary (二进制一致法): ``compare/algorithm.py: compare_bool_tensor``; pass iff
  no element differs (``api_precision_compare.check_error_rate``).
- thousandth (双千指标法): ``precision_standard/thousandth_standard.py``; pass
  iff ``#(rel < 1e-3)/N >= 0.999`` (``check_thousandth_rate``).
- absolute (绝对阈值法): ``precision_standard/absolute_threshold.py``,
  ``algorithm.check_inf_nan_value`` / ``check_norm_value`` /
  ``check_small_value``; pass iff all three ratios are 0
  (``api_precision_compare.get_absolute_threshold_result``).
- quantization: ``compare/compare.py: Comparator._compare_quantization_tensor``
  (integer outputs of quantization APIs: pass iff max |d| <= 1).
"""

from __future__ import annotations

import math

import torch

from .compare import CHUNK, dtype_name, one_thread, overflow_rounded, precision_metrics
from .precision import BFLOAT16_EPS, benchmark_for
from .routing import EB_THRESHOLD, LEVEL_THRESHOLDS, SMALL_VALUE_THRESHOLD

BENCHMARK_RATIOS = (
    ("small_value", "small_value_error_ratio"),
    ("rmse", "rmse"),
    ("max_rel", "max_rel_error"),
    ("mean_rel", "mean_rel_error"),
    ("error_balance", "error_balance"),
)
IN_STATUS = ("small_value", "rmse", "max_rel", "mean_rel")  # benchmark_compare.py l.216: eb is not among them

# ULP standard (compare_utils.ULP_PARAMETERS; CompareConst.ULP_FLOAT32_THRESHOLD / ULP_FLOAT16_THRESHOLD;
# StandardConfig._fp32_mean_ulp_err_threshold, _fp32_ulp_err_proportion, _fp16_ulp_err_proportion,
# ulp_err_proportion_ratio)
ULP_PARAMETERS = {"float16": (-14, 10), "bfloat16": (-126, 7), "float32": (-126, 23)}
ULP_ELEMENT_THRESHOLD = {"float32": 32.0}  # every other dtype: 1
FP32_MEAN_ULP = 64.0
FP32_ULP_PROPORTION = 0.05
HALF_ULP_PROPORTION = 0.001
ULP_PROPORTION_RATIO = 1.0
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
# thousandth (CompareConst.THOUSAND_RATIO_THRESHOLD, THOUSANDTH_PASS_VALUE)
THOUSANDTH_REL = 1e-3
THOUSANDTH_PASS = 0.999
# absolute threshold (StandardConfig._rtol, _threshold_small_value_atol; CompareConst.BFLOAT16_MAX)
ABSOLUTE_RTOL = {"float16": 2**-10, "bfloat16": 2**-8, "float32": 2**-20}
ABSOLUTE_RTOL_DEFAULT = 2**-20
ABSOLUTE_SMALL_ATOL = {"float16": 2**-16, "bfloat16": 1e-16, "float32": 2**-30}
ABSOLUTE_SMALL_ATOL_DEFAULT = 2**-30
BFLOAT16_MAX = 3.3895313892515355e38
QUANTIZATION_MAX_ABS = 1.0


def _flat(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _verdict(
    standard: str, passed: bool, ratios: dict, thresholds: dict, rule: str, failed: list, level: str | None = None
) -> dict:
    return {
        "standard": standard,
        "level": level,
        "passed": bool(passed),
        "ratios": ratios,
        "thresholds": thresholds,
        "rule": rule,
        "failed": failed,
    }


def _number(x) -> float | None:
    """A stage-1 number as a float (NaN/inf spelled as strings travel as such); None stays None."""
    if x is None:
        return None
    if isinstance(x, str):
        return float(x)
    return float(x)


def finite_or_text(x: float):
    """A number for JSON: finite as it is, NaN/inf spelled out (msprobe distinguishes them in stage 2)."""
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _consistent(a, b) -> bool:
    """compare_utils.check_inf_or_nan: both NaN, or the same infinity (None: a non-finite value of unknown kind)."""
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isinf(a) and math.isinf(b) and (a > 0) == (b > 0)


def _nonfinite(x) -> bool:
    return x is None or not math.isfinite(x)


def _ratio(c, b, floor: float):
    """(ratio or None for NaN, consistent): algorithm.calc_ratio, or check_inf_or_nan when either is non-finite."""
    if _nonfinite(c) or _nonfinite(b):
        return None, _consistent(c, b)
    return abs(c) / max(abs(b), floor), True


# --------------------------------------------------------------------------
# benchmark
# --------------------------------------------------------------------------


def decide_benchmark(cand: dict, base: dict, dtype: str, level: str = "L0") -> dict:
    """Stage 2 of the benchmark standard on two precision metric sets (compare.precision_metrics)."""
    floor = benchmark_for(dtype)["ratio_floor"]
    limits = dict(LEVEL_THRESHOLDS.get(level, LEVEL_THRESHOLDS["L0"]), small_value=SMALL_VALUE_THRESHOLD)
    ratios, failed = {}, []
    for name, metric in BENCHMARK_RATIOS:
        value, consistent = _ratio(_number(cand.get(metric)), _number(base.get(metric)), floor)
        ratios[name] = value
        if name not in IN_STATUS:
            continue
        if not consistent or (value is not None and value > limits[name]):
            failed.append(name)
    thresholds = {n: limits[n] for n in IN_STATUS}
    return _verdict(
        "benchmark",
        not failed,
        ratios,
        thresholds,
        "every ratio |candidate| / max(|baseline|, floor) at most its threshold (error balance shown, "
        f"not judged; its threshold is {EB_THRESHOLD:g})",
        failed,
        level=level,
    )


def benchmark(
    cand: torch.Tensor,
    bench: torch.Tensor,
    truth: torch.Tensor,
    level: str = "L0",
    *,
    cand_metrics: dict | None = None,
    bench_metrics: dict | None = None,
) -> dict:
    """The benchmark standard: both outputs' metric sets against ``truth``, then their ratios."""
    cm = cand_metrics if cand_metrics is not None else precision_metrics(cand, truth)
    bm = bench_metrics if bench_metrics is not None else precision_metrics(bench, truth)
    return decide_benchmark(cm, bm, dtype_name(cand.dtype), level)


# --------------------------------------------------------------------------
# ULP
# --------------------------------------------------------------------------


def _ulp_chunk(x: torch.Tensor, g: torch.Tensor, dtype: str) -> torch.Tensor:
    """|ULP error| of one chunk (algorithm.get_ulp_err): in the truth's binade, float64 for float32 outputs."""
    if dtype in FLOAT8:
        return _ulp_chunk_fp8(x, g).abs_()
    min_eb, mantissa = ULP_PARAMETERS.get(dtype, ULP_PARAMETERS["float32"])
    work = torch.float64 if dtype == "float32" else torch.float32
    ag = g.abs()
    eb = torch.where(ag == 0, torch.zeros((), dtype=ag.dtype), torch.floor(torch.log2(ag))).clamp_min_(min_eb)
    scale = torch.exp2(mantissa - eb).to(work)
    return ((x.to(work) - g).to(work) * scale).abs_()


def _ulp_chunk_fp8(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """algorithm.calc_ulp_err_fp8: mantissa width 3/2/1/0 by |exponent| <= 3/7/15/else; a log ratio at width 0."""
    xg, hx = g.to(torch.float64), x.to(torch.float64)
    ex = torch.log2(xg.abs() + 2.0**-1000).clamp_min_(-22)
    exponent = torch.floor(ex)
    eabs = exponent.abs()
    wm = torch.zeros_like(xg)
    wm[eabs <= 15] = 1
    wm[eabs <= 7] = 2
    wm[eabs <= 3] = 3
    err = (hx - xg) * torch.exp2(-exponent + wm)
    s_ex = ex * torch.where(xg >= 0, 1.0, -1.0)
    eh = torch.log2(hx.abs() + 2.0**-1000)
    s_eh = eh * torch.where(hx >= 0, 1.0, -1.0)
    return torch.where(wm == 0, s_eh - s_ex, err)


@one_thread
def ulp_metrics(out: torch.Tensor, truth: torch.Tensor) -> dict:
    """Stage 1 of the ULP standard (UlpCompare): max and mean ULP error over every element (NaN
    propagates) and the share above the element threshold (32 for float32, 1 otherwise)."""
    dtype = dtype_name(out.dtype)
    x, g = _flat(out), _flat(truth)
    if out.dtype == torch.bfloat16:
        x = x.to(torch.float32)  # compare.py _compare_torch_tensor converts bfloat16 outputs first
    limit = ULP_ELEMENT_THRESHOLD.get(dtype, 1.0)
    n = x.numel()
    total, top, above = 0.0, -math.inf, 0
    for start in range(0, n, CHUNK):
        u = _ulp_chunk(x[start : start + CHUNK], g[start : start + CHUNK], dtype)
        total += u.sum().item()
        m = u.max().item()
        top = m if math.isnan(m) or math.isnan(top) else max(top, m)  # np.max: NaN wins
        above += int(torch.count_nonzero(u > limit).item())
    return {
        "count": n,
        "max_ulp_error": finite_or_text(top if n else 0.0),
        "mean_ulp_error": finite_or_text(total / n if n else 0.0),
        "ulp_error_proportion": above / n if n else 0.0,
    }


def decide_ulp(cand: dict, base: dict, dtype: str) -> dict:
    """Stage 2 of the ULP standard (UlpPrecisionCompare): strict ``<`` throughout."""
    floor = benchmark_for(dtype)["ratio_floor"]
    c_mean, b_mean = _number(cand.get("mean_ulp_error")), _number(base.get("mean_ulp_error"))
    c_prop, b_prop = _number(cand.get("ulp_error_proportion")), _number(base.get("ulp_error_proportion"))
    if dtype in FLOAT8 or dtype == "hifloat8":  # the baseline is not consulted
        thresholds = {"ulp_error_proportion": HALF_ULP_PROPORTION}
        passed = c_prop is not None and c_prop < HALF_ULP_PROPORTION
        return _verdict(
            "ulp",
            passed,
            {"ulp_error_proportion": c_prop},
            thresholds,
            "the share of elements above 1 ULP below its threshold",
            [] if passed else ["ulp_error"],
        )
    mean_ok = not (_nonfinite(c_mean) or _nonfinite(b_mean)) or _consistent(c_mean, b_mean)
    prop_ratio, prop_ok = _ratio(c_prop, b_prop, floor)
    ratios = {
        "mean_ulp_error": c_mean if c_mean is None or math.isfinite(c_mean) else None,
        "ulp_error_proportion": c_prop,
        "ulp_error_proportion_ratio": prop_ratio,
    }
    if dtype == "float32":
        thresholds = {
            "mean_ulp_error": FP32_MEAN_ULP,
            "ulp_error_proportion": FP32_ULP_PROPORTION,
            "ulp_error_proportion_ratio": ULP_PROPORTION_RATIO,
        }
    else:
        thresholds = {"ulp_error_proportion": HALF_ULP_PROPORTION, "ulp_error_proportion_ratio": ULP_PROPORTION_RATIO}
    if not (mean_ok and prop_ok):
        passed = False
    else:
        nan = math.nan
        values = {
            "mean_ulp_error": nan if c_mean is None else c_mean,
            "ulp_error_proportion": nan if c_prop is None else c_prop,
            "ulp_error_proportion_ratio": nan if prop_ratio is None else prop_ratio,
        }
        passed = any(values[k] < t for k, t in thresholds.items())
    return _verdict(
        "ulp",
        passed,
        ratios,
        thresholds,
        "pass when any of these is below its threshold (strict)",
        [] if passed else ["ulp_error"],
    )


def ulp(cand: torch.Tensor, bench: torch.Tensor, truth: torch.Tensor, **_ignored) -> dict:
    return decide_ulp(ulp_metrics(cand, truth), ulp_metrics(bench, truth), dtype_name(cand.dtype))


# --------------------------------------------------------------------------
# binary consistency, quantization
# --------------------------------------------------------------------------


@one_thread
def binary_metrics(out: torch.Tensor, truth: torch.Tensor) -> dict:
    """error_rate = #(truth != out) / N (algorithm.compare_bool_tensor; NaN != NaN)."""
    x, g = _flat(out), _flat(truth)
    if x.dtype != g.dtype:
        common = torch.promote_types(x.dtype, g.dtype)
        x, g = x.to(common), g.to(common)
    n = x.numel()
    differ = sum(int(torch.count_nonzero(x[s : s + CHUNK] != g[s : s + CHUNK]).item()) for s in range(0, n, CHUNK))
    return {"count": n, "error_count": differ, "error_rate": differ / n if n else 0.0}


def decide_binary(cand: dict) -> dict:
    rate = cand["error_rate"]
    return _verdict(
        "binary",
        rate == 0,
        {"error_rate": rate},
        {"error_rate": 0.0},
        "no element may differ from the truth",
        [] if rate == 0 else ["error_rate"],
    )


def binary(cand: torch.Tensor, bench: torch.Tensor | None, truth: torch.Tensor, **_ignored) -> dict:
    return decide_binary(binary_metrics(cand, truth))


@one_thread
def quantization_metrics(out: torch.Tensor, truth: torch.Tensor) -> dict:
    """max |truth - out| (compare.py _compare_quantization_tensor, via algorithm.get_max_abs_err)."""
    x, g = _flat(out), _flat(truth)
    n = x.numel()
    top = 0.0
    for s in range(0, n, CHUNK):
        d = (x[s : s + CHUNK].to(torch.float64) - g[s : s + CHUNK].to(torch.float64)).abs_()
        m = d.max().item()
        top = m if math.isnan(m) or math.isnan(top) else max(top, m)  # np.max: NaN wins
    return {"count": n, "max_abs_error": finite_or_text(top)}


def decide_quantization(cand: dict) -> dict:
    top = _number(cand["max_abs_error"])
    passed = top is not None and top <= QUANTIZATION_MAX_ABS
    return _verdict(
        "quantization",
        passed,
        {"max_abs_error": top if top is not None and math.isfinite(top) else None},
        {"max_abs_error": QUANTIZATION_MAX_ABS},
        "max |candidate - truth| at most 1 (msprobe's stage 1; its stage 2 records SKIP)",
        [] if passed else ["max_abs_error"],
    )


def quantization(cand: torch.Tensor, bench: torch.Tensor | None, truth: torch.Tensor, **_ignored) -> dict:
    return decide_quantization(quantization_metrics(cand, truth))


# --------------------------------------------------------------------------
# thousandth, absolute threshold
# --------------------------------------------------------------------------


def _eps(out_dtype: torch.dtype, truth_dtype: torch.dtype) -> float:
    """algorithm.get_abs_bench_with_eps: the truth dtype's eps, 2**-8 for bfloat16 outputs."""
    if out_dtype == torch.bfloat16:
        return BFLOAT16_EPS
    return torch.finfo(truth_dtype).eps if truth_dtype.is_floating_point else torch.finfo(torch.float32).eps


def _work_pair(out: torch.Tensor, truth: torch.Tensor):
    """(x, g, work dtype): numpy's promotion of msprobe's arrays (bfloat16 outputs converted to float32)."""
    x, g = _flat(out), _flat(truth)
    if out.dtype == torch.bfloat16:
        x = x.to(torch.float32)
    work = torch.promote_types(x.dtype, g.dtype)
    if not work.is_floating_point:
        work = torch.float64
    return x, g, work


@one_thread
def thousandth_metrics(out: torch.Tensor, truth: torch.Tensor) -> dict:
    """rel_err_thousandth = #(|d| / (|truth| + eps) < 1e-3) / N over every element (NaN and Inf never within)."""
    x, g, work = _work_pair(out, truth)
    eps = _eps(out.dtype, truth.dtype)
    n = x.numel()
    within = 0
    for s in range(0, n, CHUNK):
        xc, gc = x[s : s + CHUNK].to(work), g[s : s + CHUNK].to(work)
        rel = (xc - gc).abs_().div_(gc.abs().add_(eps))
        within += int(torch.count_nonzero(rel < THOUSANDTH_REL).item())
    return {"count": n, "rel_err_thousandth": within / n if n else 1.0}


def decide_thousandth(cand: dict) -> dict:
    ratio = cand["rel_err_thousandth"]
    passed = ratio >= THOUSANDTH_PASS
    return _verdict(
        "thousandth",
        passed,
        {"rel_err_thousandth": ratio},
        {"rel_err_thousandth": THOUSANDTH_PASS},
        "the share of elements within 1e-3 relative at least its threshold",
        [] if passed else ["rel_err_thousandth"],
    )


def thousandth(cand: torch.Tensor, bench: torch.Tensor | None, truth: torch.Tensor, **_ignored) -> dict:
    return decide_thousandth(thousandth_metrics(cand, truth))


@one_thread
def absolute_metrics(out: torch.Tensor, truth: torch.Tensor) -> dict:
    """AbsolutethdCompare: the failing share of the non-finite pairs (clipped to the output dtype's range),
    of the normal pairs (relative error above rtol) and of the small values (absolute error above atol)."""
    dtype = dtype_name(out.dtype)
    x, g, work = _work_pair(out, truth)
    eps = _eps(out.dtype, truth.dtype)
    rtol = ABSOLUTE_RTOL.get(dtype, ABSOLUTE_RTOL_DEFAULT)
    sv = benchmark_for(dtype)["small_value"]
    sv_atol = ABSOLUTE_SMALL_ATOL.get(dtype, ABSOLUTE_SMALL_ATOL_DEFAULT)
    cast = x.dtype  # the (converted) output's dtype: the truth is cast to it for the finite mask and the clip
    top = BFLOAT16_MAX if out.dtype == torch.bfloat16 else torch.finfo(cast).max
    counts = {"nonfinite": 0, "nonfinite_bad": 0, "normal": 0, "normal_bad": 0, "small": 0, "small_bad": 0}
    n = x.numel()
    for s in range(0, n, CHUNK):
        xc, gc = x[s : s + CHUNK], g[s : s + CHUNK]
        g_cast = gc.to(cast)
        fin = torch.isfinite(xc) & torch.isfinite(g_cast)
        ag = gc.to(work).abs()
        ad = (xc.to(work) - gc.to(work)).abs_()
        rel = ad / (ag + eps)
        small = (ag <= sv) & fin
        normal = fin & ~small
        counts["small"] += int(small.sum().item())
        counts["small_bad"] += int((small & (ad > sv_atol)).sum().item())
        counts["normal"] += int(normal.sum().item())
        counts["normal_bad"] += int((normal & (rel > rtol)).sum().item())
        special = ~fin
        n_special = int(special.sum().item())
        if n_special:
            g_clip, x_clip = g_cast.clamp(-top, top), xc.clamp(-top, top)
            clipped = (x_clip.to(work) - g_clip.to(work)).abs_() / (ag + eps)
            ok = (clipped <= rtol) | (torch.isnan(xc) & torch.isnan(g_clip))
            counts["nonfinite"] += n_special
            counts["nonfinite_bad"] += int((special & ~ok).sum().item())

    def ratio(bad: str, total: str) -> float:
        return counts[bad] / counts[total] if counts[total] else 0.0

    return {
        "count": n,
        "inf_nan_error_ratio": ratio("nonfinite_bad", "nonfinite"),
        "rel_err_ratio": ratio("normal_bad", "normal"),
        "abs_err_ratio": ratio("small_bad", "small"),
    }


def decide_absolute(cand: dict) -> dict:
    names = ("inf_nan_error_ratio", "rel_err_ratio", "abs_err_ratio")
    failed = [k for k in names if cand[k] != 0]
    return _verdict(
        "absolute",
        not failed,
        {k: cand[k] for k in names},
        {k: 0.0 for k in names},
        "each share of failing elements must be 0",
        failed,
    )


def absolute(cand: torch.Tensor, bench: torch.Tensor | None, truth: torch.Tensor, **_ignored) -> dict:
    return decide_absolute(absolute_metrics(cand, truth))


# --------------------------------------------------------------------------
# one entry point for a judge (and a baseline host's side)
# --------------------------------------------------------------------------

STAGE1 = {
    "benchmark": precision_metrics,
    "ulp": ulp_metrics,
    "binary": binary_metrics,
    "thousandth": thousandth_metrics,
    "absolute": absolute_metrics,
    "quantization": quantization_metrics,
}


def stage1(standard: str, out: torch.Tensor, truth: torch.Tensor) -> dict:
    """One output's stage-1 numbers for ``standard`` (what a baseline host sends back)."""
    return STAGE1[standard](out, truth)


def decide(standard: str, cand: dict, base: dict | None, dtype: str, level: str = "L0") -> dict:
    """Stage 2: the verdict of ``standard`` from stage-1 numbers (``base`` only for benchmark and ULP)."""
    if standard == "benchmark":
        return decide_benchmark(cand, base or {}, dtype, level)
    if standard == "ulp":
        return decide_ulp(cand, base or {}, dtype)
    return {
        "binary": decide_binary,
        "thousandth": decide_thousandth,
        "absolute": decide_absolute,
        "quantization": decide_quantization,
    }[standard](cand)


def judge(
    standard: str, cand: torch.Tensor, bench: torch.Tensor | None, truth: torch.Tensor, level: str = "L0"
) -> dict:
    """``standard``'s verdict on ``cand`` (``bench``: a correct same-dtype computation; not read by binary,
    thousandth, absolute and quantization, which decide on the candidate alone)."""
    base = None
    if standard in ("benchmark", "ulp"):
        if bench is None:
            raise ValueError(f"the {standard} standard compares with a benchmark computation: give bench")
        base = stage1(standard, bench, truth)
    return decide(standard, stage1(standard, cand, truth), base, dtype_name(cand.dtype), level)


def stage1_in_dtype(standard: str, t, r) -> dict:
    """A standard's stage 1 with the elements where ``t`` is the infinity the finite truth rounds to in
    ``t``'s dtype (a result beyond the dtype's range, which a correct computation returns) counted as
    exact: the ULP and thousandth standards would count an error there (an infinite ulp or relative
    error), where the benchmark standard masks the pair (msprobe's finite mask)."""
    if (
        t.dtype.is_floating_point
        and r.dtype.is_floating_point
        and list(t.shape) == list(r.shape)
        and t.dtype != r.dtype
        and not bool(torch.isfinite(t.sum()))
    ):
        over = overflow_rounded(t, r, t.dtype)
        if bool(over.any()):
            zero = torch.zeros((), dtype=t.dtype)
            t, r = torch.where(over, zero, t), torch.where(over, zero.to(r.dtype), r)
    return stage1(standard, t, r)
