"""The comparison engine: candidate outputs against reference outputs.

Per output, dtype-aware.  Floating outputs get max_abs, max_rel, mean_abs,
rmse, cosine, the count/ratio of elements outside ``atol + rtol*|ref|``,
the worst and the first mismatching index with both values, NaN/Inf pattern
mismatches, error balance (signed mean error) and the ULP error; integer and
bool outputs are compared exactly; complex outputs as floating ones over their
real and imaginary parts (a trailing dimension of 2).  Nested tuples, lists
and dicts of outputs are compared leaf by leaf (``state.0``, ``state.1``).  A
shape or dtype contract violation is its own reason (``contract_mismatch``)
and fails the output.

Definitions (documented in references/runner-protocol.md):

- ``d = cand - ref`` on elements where both are finite.
- ``max_rel = max |d| / max(|ref|, guard)`` with ``guard = max(atol,
  finfo(cand).tiny)``: relative error of values below atol is measured
  against atol, so near-zero references do not blow it up.
- ``max_ulp = max |d| / ulp(ref)`` where ``ulp`` is the spacing of the
  candidate's dtype at the reference value (subnormal spacing near zero).
- An element mismatches when it is finite on both sides and ``|d| > atol +
  rtol*|ref|``, or when its NaN/Inf pattern differs (NaN on both sides and the
  same infinity on both sides match).
- ``nan_mismatch``: positions NaN on exactly one side.  ``inf_mismatch``:
  positions with an infinity on one side not matched by the same infinity on
  the other (NaN positions are counted under nan_mismatch only).
- ``cosine`` over the finite pairs; 1.0 when both are all-zero.

Cost: bounded passes over fixed-size chunks (the temporaries stay in cache),
in float32 (float64 only when an operand is float64), with no whole-tensor
float64 copy.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .precision import BFLOAT16_EPS, TEN_THOUSANDTH, THOUSANDTH, benchmark_for
from .precision import tolerance_for as _tolerance_for
from .wrong_where import locate

CHUNK = 1 << 18
SQUARE_SAFE = 2.0**63  # |x| above it: x*x overflows float32 (max ~2**128)

_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def json_element(value) -> object:
    """A tensor element as JSON: finite numbers as numbers, the rest spelled out."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, bool) or isinstance(value, int):
        return value
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def unravel(flat: int, shape) -> list[int]:
    index = []
    for size in reversed(list(shape)):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return list(reversed(index))


def name_outputs(out, names: list[str] | None) -> dict:
    """Outputs by name: dicts keep their keys, tuples/lists take config names
    (or out0, out1, ...), a single output takes the first name (or "out")."""
    if isinstance(out, dict):
        top = {str(k): v for k, v in out.items()}
    elif isinstance(out, (tuple, list)):
        names = list(names or [])
        top = {(names[i] if i < len(names) else f"out{i}"): v for i, v in enumerate(out)}
    else:
        return {(names[0] if names else "out"): out}
    flat = {}
    for name, value in top.items():  # nested outputs, e.g. (out, (h, c)): "state.0", "state.1"
        if isinstance(value, (tuple, list, dict)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            flat.update(name_outputs({f"{name}.{k}": v for k, v in items}, None))
        else:
            flat[name] = value
    return flat


def as_tensor(value):
    if value is None or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value)
    raise TypeError(f"output of type {type(value).__name__} is not a tensor, a number or None")


def tolerance_for(tolerance: dict, dtype: torch.dtype, output: str | None = None) -> tuple[float, float]:
    """(atol, rtol): the output's per_output entry, the per_dtype entry, the blanket pair, else the
    default table (precision.py)."""
    atol, rtol, _ = _tolerance_for(tolerance, dtype_name(dtype), output)
    return atol, rtol


def compare_outputs(
    candidate, reference, *, names: list[str] | None, tolerance: dict, strict_dtype: bool
) -> list[dict]:
    """One comparison per named output.  ``strict_dtype``: the reference ran
    at the candidate's own precision, so output dtypes must match exactly
    (otherwise only the kind - floating/integer/bool - must match)."""
    cand = name_outputs(candidate, names)
    ref = name_outputs(reference, names)
    comparisons = []
    for name in list(ref) + [n for n in cand if n not in ref]:
        if name not in cand:
            comparisons.append(_missing(name, "the candidate did not return this output", ref[name], None))
            continue
        if name not in ref:
            comparisons.append(_missing(name, "the reference did not return this output", None, cand[name]))
            continue
        c, r = cand[name], ref[name]
        if c is None and r is None:
            continue
        if c is None or r is None:
            comparisons.append(_missing(name, f"{'candidate' if c is None else 'reference'} returned None", r, c))
            continue
        try:
            r = as_tensor(r)
        except TypeError as exc:  # the reference's failure (a numpy array, say): not the operator's mismatch
            raise TypeError(f"the reference's output {name!r}: {exc}; a reference must return tensors") from None
        try:
            c = as_tensor(c)
        except TypeError as exc:
            comparisons.append(_missing(name, str(exc), r, c))
            continue
        atol, rtol = tolerance_for(tolerance, c.dtype, name)
        comparisons.append(compare_tensor(name, c, r, atol=atol, rtol=rtol, strict_dtype=strict_dtype))
        if comparisons[-1].get("mismatch_count") and not comparisons[-1].get("contract_mismatch"):
            comparisons[-1]["wrong"] = locate(c, r, atol, rtol)  # where the wrong elements are
    return comparisons


def _missing(name, why, ref, cand) -> dict:
    comp = {"output": name, "passed": False, "contract_mismatch": why}
    if isinstance(ref, torch.Tensor):
        comp.update(expected_shape=list(ref.shape), expected_dtype=dtype_name(ref.dtype))
    if isinstance(cand, torch.Tensor):
        comp.update(actual_shape=list(cand.shape), actual_dtype=dtype_name(cand.dtype))
    return comp


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    return "floating" if dtype.is_floating_point else ("complex" if dtype.is_complex else "integer")


PARALLEL_MIN_NUMEL = 1 << 21  # below it the chunked loop runs on one intra-op thread


def one_thread(fn):
    """Run the chunked loop of a small output on one intra-op thread: there the
    thread pool does not pay, and on a busy host every parallel region waits for
    a descheduled thread (benchmarks/bench_compare.py: 10x slower under load with
    64K-element chunks).  An output of PARALLEL_MIN_NUMEL elements or more keeps
    the default threads: its 256K-element chunks amortise a parallel region
    (2**24 float32 on 2 quiet cores: 80 ms with 2 threads vs 125 ms with one).
    The previous setting is restored."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        threads = torch.get_num_threads()
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if threads == 1 or (tensors and max(t.numel() for t in tensors) >= PARALLEL_MIN_NUMEL):
            return fn(*args, **kwargs)
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapper


@one_thread
def compare_tensor(
    name: str, cand: torch.Tensor, ref: torch.Tensor, *, atol: float, rtol: float, strict_dtype: bool = True
) -> dict:
    cand = cand.detach()
    ref = ref.detach()
    if cand.device.type != "cpu":
        cand = cand.cpu()
    if ref.device.type != "cpu":
        ref = ref.cpu()
    comp: dict[str, Any] = {
        "output": name,
        "passed": False,
        "expected_shape": list(ref.shape),
        "actual_shape": list(cand.shape),
        "expected_dtype": dtype_name(ref.dtype),
        "actual_dtype": dtype_name(cand.dtype),
        "atol": atol,
        "rtol": rtol,
        "numel": cand.numel(),
    }
    if list(cand.shape) != list(ref.shape):
        comp["contract_mismatch"] = f"shape {list(cand.shape)} but the reference gives {list(ref.shape)}"
        return comp
    ck, rk = _kind(cand.dtype), _kind(ref.dtype)
    if ck != rk:
        comp["contract_mismatch"] = (
            f"dtype {dtype_name(cand.dtype)} ({ck}) but the reference gives {dtype_name(ref.dtype)} ({rk})"
        )
        return comp
    if strict_dtype and cand.dtype != ref.dtype:
        comp["contract_mismatch"] = f"dtype {dtype_name(cand.dtype)} but the reference gives {dtype_name(ref.dtype)}"
        return comp
    if ck == "complex":  # real and imaginary parts as a trailing dimension of 2
        cand, ref = torch.view_as_real(cand.resolve_conj()), torch.view_as_real(ref.resolve_conj())
        ck = "floating"
        comp["numel"] = cand.numel()  # each part counts as an element
    if cand.numel() == 0:
        comp["passed"] = True
        return comp
    if ck == "floating":
        comp.update(_float_metrics(cand, ref, atol, rtol))
    else:
        comp.update(exact_metrics(cand, ref))
    comp["mismatch_ratio"] = comp["mismatch_count"] / cand.numel()
    comp["passed"] = comp["mismatch_count"] == 0
    return comp


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


class _Acc:
    """Running sums and extrema over chunks (Python floats: float64)."""

    def __init__(self):
        self.n_fin = 0
        self.sum_d = 0.0
        self.sum_ad = 0.0
        self.sum_ar = 0.0  # sum |ref|: the mean tolerance the bias is measured against
        self.sum_sq = 0.0
        self.dot_cr = 0.0
        self.dot_cc = 0.0
        self.dot_rr = 0.0
        self.max_abs = -1.0
        self.worst = None
        self.max_rel = 0.0
        self.max_ulp = 0.0
        self.mismatch = 0
        self.first = None
        self.nan_mismatch = 0
        self.inf_mismatch = 0
        self.overflowed = 0  # the candidate's infinity where the truth rounded to its dtype is that infinity
        self.prec = None  # _Prec: the precision (benchmark) metric set, when asked
        # Sums, max_abs and dot products are kept in units of 2**exp (2**(2*exp) for
        # squares): float64 values near its range (1e308) are scaled down by a
        # power of two (exact) instead of overflowing to inf.
        self.exp = 0

    def bring(self, exp: int) -> int:
        """Rescale to at least 2**exp; the shift to apply to a chunk at 2**exp."""
        if exp > self.exp:
            shift = self.exp - exp
            self.sum_d, self.sum_ad, self.max_abs, self.sum_ar = (
                _ldexp(x, shift) for x in (self.sum_d, self.sum_ad, self.max_abs, self.sum_ar)
            )
            self.sum_sq, self.dot_cr, self.dot_cc, self.dot_rr = (
                _ldexp(x, 2 * shift) for x in (self.sum_sq, self.dot_cr, self.dot_cc, self.dot_rr)
            )
            if self.prec is not None:
                self.prec.sq_normal = _ldexp(self.prec.sq_normal, 2 * shift)
            self.exp = exp
        return exp - self.exp


def _ldexp(x: float, exp: int) -> float:
    try:
        return math.ldexp(x, exp)
    except OverflowError:
        return math.copysign(math.inf, x)


def _float_metrics(cand: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> dict:
    work = torch.float64 if torch.float64 in (cand.dtype, ref.dtype) else torch.float32
    cinfo = torch.finfo(cand.dtype)
    guard = max(atol, cinfo.tiny)
    exp_mask, int_view = (0x7FF0000000000000, torch.int64) if work == torch.float64 else (0x7F800000, torch.int32)
    cflat, rflat = _flat(cand), _flat(ref)
    acc = _Acc()
    acc.prec = _Prec(cand.dtype, ref.dtype)
    n = cflat.numel()
    for start in range(0, n, CHUNK):
        c = cflat[start : start + CHUNK].to(work)
        r = rflat[start : start + CHUNK].to(work)
        d = c - r
        sum_d = d.sum().item()
        if math.isfinite(sum_d):  # no NaN/Inf in either chunk (an overflow also takes the careful path)
            _chunk(acc, start, c, r, d, sum_d, c.numel(), atol, rtol, guard, exp_mask, int_view, cinfo.eps, cinfo.tiny)
        else:
            _chunk_nonfinite(
                acc,
                start,
                c,
                r,
                atol,
                rtol,
                guard,
                exp_mask,
                int_view,
                cinfo.eps,
                cinfo.tiny,
                rounds_to=cand.dtype if cand.dtype != ref.dtype else None,
            )
    out = {"mismatch_count": acc.mismatch, "nan_mismatch": acc.nan_mismatch, "inf_mismatch": acc.inf_mismatch}
    if acc.overflowed:
        out["dtype_overflow"] = acc.overflowed
    if acc.n_fin:
        nf = acc.n_fin
        out.update(
            max_abs=_finite_or_none(_ldexp(acc.max_abs, acc.exp)),
            max_rel=_finite_or_none(acc.max_rel),
            mean_abs=_finite_or_none(_ldexp(acc.sum_ad / nf, acc.exp)),
            rmse=_finite_or_none(_ldexp(math.sqrt(acc.sum_sq / nf), acc.exp)),
            error_balance=_finite_or_none(_ldexp(acc.sum_d / nf, acc.exp)),
            max_ulp=_finite_or_none(acc.max_ulp),
            cosine=_cosine(acc),
            bias=_bias(acc, nf, atol, rtol),
        )
    out["precision"] = acc.prec.result(n, acc.exp)
    if acc.worst is not None and acc.max_abs > 0:
        out.update(
            worst_index=unravel(acc.worst, cand.shape),
            worst_candidate=json_element(cflat[acc.worst]),
            worst_reference=json_element(rflat[acc.worst]),
        )
    if acc.first is not None:
        out.update(
            first_mismatch_index=unravel(acc.first, cand.shape),
            first_candidate=json_element(cflat[acc.first]),
            first_reference=json_element(rflat[acc.first]),
        )
    return out


def _bias(acc: _Acc, nf: int, atol: float, rtol: float):
    """Mean signed error over the mean tolerance (atol + rtol*|ref|): how far, and which way, the
    errors lean against what the judge allows."""
    tol = atol + rtol * _ldexp(acc.sum_ar / nf, acc.exp)
    if not tol > 0 or not math.isfinite(tol):
        return None
    return _finite_or_none(_ldexp(acc.sum_d / nf, acc.exp) / tol)


def _finite_or_none(x: float):
    return x if math.isfinite(x) else None


def _cosine(acc: _Acc):
    if acc.dot_cc == 0 and acc.dot_rr == 0:
        return 1.0
    if acc.dot_cc == 0 or acc.dot_rr == 0:
        return 0.0
    value = acc.dot_cr / (math.sqrt(acc.dot_cc) * math.sqrt(acc.dot_rr))  # no product to overflow
    return _finite_or_none(max(-1.0, min(1.0, value)))


def _chunk(
    acc,
    start,
    c,
    r,
    d,
    sum_d,
    nfin,
    atol,
    rtol,
    guard,
    exp_mask,
    int_view,
    eps,
    tiny,
    extra_mismatch=None,
    scale_exp=0,
    signs=None,
    prec_special=None,
):
    """Metrics of one chunk whose (masked) values are all finite (``c`` and ``r``
    already divided by 2**scale_exp, and atol, guard and tiny with them);
    ``signs``: the precision set's error-balance counts, when the caller took them
    from the unmasked values; ``prec_special``: the precision set's NaN/Inf pattern
    mismatches when they differ from ``extra_mismatch``'s (msprobe's own count)."""
    dot_cr, dot_cc, dot_rr = torch.dot(c, r).item(), torch.dot(c, c).item(), torch.dot(r, r).item()
    if signs is None and acc.prec is not None:
        signs = acc.prec.signs(c, r, d)
    ad = d.abs_()
    sum_sq = torch.dot(ad, ad).item()
    if not all(map(math.isfinite, (sum_d, dot_cr, dot_cc, dot_rr, sum_sq))):
        if c.dtype == torch.float32:
            return _chunk_in_float64(
                acc, start, c, r, nfin, atol, rtol, guard, eps, tiny, extra_mismatch, signs, prec_special
            )
        if c.dtype == torch.float64 and not scale_exp:
            return _chunk_scaled_down(
                acc,
                start,
                c,
                r,
                nfin,
                atol,
                rtol,
                guard,
                exp_mask,
                int_view,
                eps,
                tiny,
                extra_mismatch,
                signs,
                prec_special,
            )
    shift = acc.bring(scale_exp)
    acc.n_fin += nfin
    acc.sum_d += _ldexp(sum_d, shift)
    acc.dot_cr += _ldexp(dot_cr, 2 * shift)
    acc.dot_cc += _ldexp(dot_cc, 2 * shift)
    acc.dot_rr += _ldexp(dot_rr, 2 * shift)
    acc.sum_ad += _ldexp(ad.sum().item(), shift)
    acc.sum_sq += _ldexp(sum_sq, 2 * shift)
    mx = ad.max().item()
    if _ldexp(mx, shift) > acc.max_abs:  # the index only when the running maximum moves (argmax is slow)
        acc.max_abs, acc.worst = _ldexp(mx, shift), start + ad.argmax().item()
    ar = r.abs()
    acc.sum_ar += _ldexp(ar.sum().item(), shift)
    if acc.prec is not None:
        if prec_special is None:
            prec_special = 0 if extra_mismatch is None else int(torch.count_nonzero(extra_mismatch).item())
        acc.prec.add(signs, ad, ar, c.numel() - nfin, prec_special, r=r, shift=2 * shift)
    _count_mismatches(acc, start, ad, ar, atol, rtol, extra_mismatch)
    if mx > 0:
        # ulp of the candidate's dtype at |r| = 2**exponent(|r|) * eps, the
        # subnormal spacing tiny*eps below tiny (computed before ar is clamped)
        pow2 = (ar.view(int_view) & exp_mask).view(ar.dtype).clamp_min_(tiny)
        acc.max_ulp = max(acc.max_ulp, ad.div(pow2).max().item() / eps)
        acc.max_rel = max(acc.max_rel, ad.div_(ar.clamp_min_(guard)).max().item())


def _chunk_in_float64(acc, start, c, r, nfin, atol, rtol, guard, eps, tiny, extra_mismatch, signs, prec_special):
    """A float32 chunk of finite values whose difference or square overflows float32 (|x| above
    ~1e19): the chunk again in float64 - a chunk-sized copy, never the tensor."""
    c, r = c.to(torch.float64), r.to(torch.float64)
    d = c - r
    return _chunk(
        acc,
        start,
        c,
        r,
        d,
        d.sum().item(),
        nfin,
        atol,
        rtol,
        guard,
        0x7FF0000000000000,
        torch.int64,
        eps,
        tiny,
        extra_mismatch,
        signs=signs,
        prec_special=prec_special,
    )


def _chunk_scaled_down(
    acc, start, c, r, nfin, atol, rtol, guard, exp_mask, int_view, eps, tiny, extra_mismatch, signs, prec_special
):
    """A float64 chunk whose difference or square overflows (|x| near 1e308): the chunk divided by
    a power of two (exact), the sums kept in those units (to 2**480 at most: squares summed over a
    chunk stay below 2**1024, and values above 2**-479 keep every bit)."""
    k = max(1, math.frexp(max(c.abs().max().item(), r.abs().max().item()))[1] - 480)
    c, r = torch.ldexp(c, torch.tensor(-k)), torch.ldexp(r, torch.tensor(-k))
    d = c - r
    return _chunk(
        acc,
        start,
        c,
        r,
        d,
        d.sum().item(),
        nfin,
        _scaled(atol, k),
        rtol,
        _scaled(guard, k),
        exp_mask,
        int_view,
        eps,
        _scaled(tiny, k),
        extra_mismatch,
        scale_exp=k,
        signs=signs,
        prec_special=prec_special,
    )


def _count_mismatches(acc, start, ad, ar, atol, rtol, extra_mismatch) -> None:
    """Adds the chunk's mismatches, |d| - rtol*|r| > atol or a NaN/Inf pattern mismatch
    (``extra_mismatch``), to ``acc`` and the first one's index; the mask is built only when the
    chunk has one."""
    excess = torch.sub(ad, ar, alpha=rtol) if rtol else ad
    mis = None
    if excess.max().item() > atol:
        mis = excess.gt(atol)
    if extra_mismatch is not None:
        mis = extra_mismatch if mis is None else mis | extra_mismatch
    if mis is not None:
        count = torch.count_nonzero(mis).item()
        if count:
            acc.mismatch += count
            if acc.first is None:
                acc.first = start + mis.view(torch.uint8).argmax().item()


def _scaled(x: float, k: int) -> float:
    return max(math.ldexp(x, -k), 5e-324) if x > 0 else x


def _chunk_nonfinite(acc, start, c, r, atol, rtol, guard, exp_mask, int_view, eps, tiny, rounds_to=None):
    """A chunk with NaN/Inf on either side.  ``rounds_to``: the candidate's dtype when the reference
    ran wider: where the truth rounded to it is an infinity (a finite truth beyond its range), that
    infinity is what a correct computation in the candidate's dtype returns, so a candidate equal to
    it matches (``dtype_overflow`` counts them; msprobe's precision set keeps its own count)."""
    signs = acc.prec.signs(c, r, None) if acc.prec is not None else None
    cn, rn = torch.isnan(c), torch.isnan(r)
    ci, ri = torch.isinf(c), torch.isinf(r)
    fin = torch.isfinite(c) & torch.isfinite(r)
    # a non-finite position matches when both are NaN or both the same infinity
    matched_special = (cn & rn) | ((ci | ri) & (c == r))
    special_mismatch = ~fin & ~matched_special
    prec_special = None
    overflowed = rounds_to is not None and bool(ci.any().item())
    if overflowed:
        rounded = overflow_rounded(c, r, rounds_to)
        n_over = int(torch.count_nonzero(rounded).item())
        if n_over:
            prec_special = int(torch.count_nonzero(special_mismatch).item())
            acc.overflowed += n_over
            special_mismatch &= ~rounded
            ci = ci & ~rounded
    acc.nan_mismatch += (cn ^ rn).sum().item()
    acc.inf_mismatch += ((ci | ri) & (c != r) & ~(cn | rn)).sum().item()
    zero = torch.zeros((), dtype=c.dtype)
    c = torch.where(fin, c, zero)
    r = torch.where(fin, r, zero)
    d = c - r
    sum_d = d.sum().item()
    _chunk(
        acc,
        start,
        c,
        r,
        d,
        sum_d,
        int(torch.count_nonzero(fin).item()),
        atol,
        rtol,
        guard,
        exp_mask,
        int_view,
        eps,
        tiny,
        extra_mismatch=special_mismatch,
        signs=signs,
        prec_special=prec_special,
    )


def overflow_rounded(c: torch.Tensor, r: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Where ``c`` is an infinity and the finite truth ``r``, rounded once to ``dtype``, is that same
    infinity: a finite truth beyond the dtype's range (float16 above 65520 rounds to inf)."""
    return torch.isinf(c) & torch.isfinite(r) & (r.to(dtype).to(c.dtype) == c)


# --------------------------------------------------------------------------
# The precision metric set of Ascend's accuracy checker (msprobe 26.2's
# benchmark standard, stage 1: one output against the truth), accumulated in
# the same chunked pass as the metrics above, or alone for a baseline
# (precision_metrics).  Formulas and citations in references/behavior.md.
# --------------------------------------------------------------------------


def _signs(d: torch.Tensor, r: torch.Tensor) -> tuple[float, int, float]:
    """(#(d>0) - #(d<0), #(d != 0), #(|c|>|r|) - #(|c|<|r|)) of one chunk, in
    float arithmetic (a comparison to bool costs ten times a float op on CPU);
    the last is sum(sign(d)*sign(r)): -1 per error toward zero (truncation)."""
    s = torch.sign(d)
    return s.sum().item(), int(torch.dot(s, s).item()), torch.dot(s, torch.sign(r)).item()


def _count_below(x: torch.Tensor, threshold: float) -> int:
    """#(x < threshold) for x without NaN, from sum(sign(x - t)) = #above - #below
    (an element exactly at the threshold counts half, rounded down)."""
    return int((x.numel() - torch.sign(x - threshold).sum().item()) // 2)


class _Prec:
    """Running counts of the precision metric set over chunks, as msprobe's
    ``BenchmarkCompare`` computes it (precision_standard/benchmark_compare.py):

    - pairs count when the output and the truth *cast to the output's dtype*
      are finite (``algorithm.get_finite_and_infinite_mask``; for bfloat16
      outputs msprobe has converted both to float32 first);
    - small values: ``|truth| <= small_value`` on the un-cast truth;
    - relative errors ``|d| / (|truth| + eps)``, eps of the truth's dtype
      (2**-8 for bfloat16 outputs), over the other finite pairs;
    - RMSE over those same (normal) pairs, with msprobe's scaling
      ``sqrt(S/N * (N/(N - M + 1e-4) + 1e-4))`` (``algorithm.get_rmse``);
    - error balance on every pair, the truth rounded to the output's dtype
      (``algorithm.get_error_balance``): NaN compares false, infinities count.
    """

    def __init__(self, cand_dtype: torch.dtype, ref_dtype: torch.dtype):
        spec = benchmark_for(dtype_name(cand_dtype))
        self.small_value = spec["small_value"]
        self.small_atol = spec["small_value_atol"]
        # relative errors |d| / (|ref| + eps): eps of the reference's dtype, 2**-8 for bfloat16 outputs
        self.eps = BFLOAT16_EPS if cand_dtype == torch.bfloat16 else torch.finfo(ref_dtype).eps
        # the dtype the truth is cast to for the finite mask and the error balance: the output's
        # (float32 for bfloat16 outputs, which msprobe converts to float32 first); None: no cast
        cast = torch.float32 if cand_dtype == torch.bfloat16 else cand_dtype
        self.cast = cast if cast != ref_dtype and cast.is_floating_point and ref_dtype.is_floating_point else None
        self.cast_max = torch.finfo(self.cast).max if self.cast is not None else math.inf
        self.small = 0
        self.small_err = 0
        self.rel_max = 0.0
        self.rel_sum = 0.0
        self.sq_normal = 0.0  # sum of squared errors over the normal pairs (units of the caller's 2**(2*exp))
        self.masked = 0  # pairs not both finite once the truth is cast
        self.within_1e3 = 0
        self.within_1e4 = 0
        self.sign_sum = 0.0
        self.magnitude_sum = 0.0
        self.nonzero = 0
        self.special_mismatch = 0  # NaN/Inf pattern mismatches (among the pairs the caller zeroed)

    def signs(self, c: torch.Tensor, r: torch.Tensor, d: torch.Tensor | None) -> tuple[float, int, float]:
        """(#(x > g) - #(x < g), #(x != g), #(|x|>|g|) - #(|x|<|g|)) of one chunk with g the truth
        rounded to the output's dtype; ``d`` = c - r when every value is finite (else None)."""
        if self.cast is None and d is not None:
            return _signs(d, r)
        d = c - (r.to(self.cast).to(r.dtype) if self.cast is not None else r)
        if math.isfinite(d.sum().item()):
            return _signs(d, r)
        sd, sr = torch.sign(d).nan_to_num_(0.0), torch.sign(r).nan_to_num_(0.0)  # NaN compares false
        return sd.sum().item(), int(torch.dot(sd, sd).item()), torch.dot(sd, sr).item()

    def add(
        self,
        signs,
        ad: torch.Tensor,
        ar: torch.Tensor,
        n_nonfinite: int,
        n_special_mismatch: int,
        r: torch.Tensor | None = None,
        shift: int = 0,
    ) -> None:
        """One chunk: ``ad``/``ar`` are |cand - ref| and |ref| (non-finite pairs zeroed, ``n_nonfinite`` of
        them, ``n_special_mismatch`` of which are NaN/Inf pattern mismatches); ``r`` the (zeroed) reference
        chunk; ``shift``: the power of two that brings this chunk's squares to the running sum's units."""
        self.sign_sum += signs[0]
        self.nonzero += signs[1]
        self.magnitude_sum += signs[2]
        self.special_mismatch += n_special_mismatch
        n = ad.numel()
        masked = n_nonfinite
        if self.cast is not None and ar.max().item() > self.cast_max:
            # a truth finite in its own dtype but not in the output's: out of every metric (msprobe's mask)
            over = ~torch.isfinite((r if r is not None else ar).to(self.cast))
            extra = int(torch.count_nonzero(over).item())
            if extra:
                ad, ar = ad.masked_fill(over, 0.0), ar.masked_fill(over, 0.0)
                masked += extra
        self.masked += masked
        # fast paths: no small value in the chunk (one min), every element within 1e-4 (one max)
        n_small = 0 if ar.min().item() > self.small_value else -1
        if n_small:
            # keep: 1.0 where |truth| > small_value (a normal pair), 0.0 where small - float arithmetic,
            # as a bool mask and masked_fill cost several times a float op on CPU; the 0/1 sums and dots
            # over a chunk (2**18 elements at most, in float32 or float64) are exact counts
            keep = torch.sub(ar, self.small_value).sign_().clamp_(min=0.0)
            n_small = n - int(keep.sum().item())
        rel = ad / ar.add(self.eps)
        top = rel.max().item()
        if top < TEN_THOUSANDTH:
            within_1e4 = within_1e3 = n
        else:
            within_1e4 = _count_below(rel, TEN_THOUSANDTH)
            within_1e3 = within_1e4 if top < THOUSANDTH else _count_below(rel, THOUSANDTH)
        # zeroed NaN/Inf pattern mismatches are not within (matched NaN/Inf are)
        self.within_1e4 += within_1e4 - n_special_mismatch
        self.within_1e3 += within_1e3 - n_special_mismatch
        if n_small:
            # zeroed pairs look small and exact: they are neither
            self.small += n_small - masked
            over = torch.sub(ad, self.small_atol).sign_().clamp_(min=0.0)  # 1.0 where |d| > small_value_atol
            self.small_err += int(over.sum().item() - torch.dot(over, keep).item())
            if n_small < n:
                if math.isfinite(top):
                    rel.mul_(keep)
                else:  # an overflowed relative error: inf * 0 would be NaN
                    rel.masked_fill_(keep == 0, 0.0)
                self.rel_max = max(self.rel_max, rel.max().item())
                normal = ad.mul(keep)
                self.sq_normal += _ldexp(normal.mul_(normal).sum().item(), shift)
        else:
            self.rel_max = max(self.rel_max, top)
            self.sq_normal += _ldexp(ad.mul(ad).sum().item(), shift)
        if n_small < n:
            self.rel_sum += rel.sum().item()

    def result(self, numel: int, exp: int = 0) -> dict:
        """The metric set over ``numel`` elements (the normal pairs' squared errors in units of 2**(2*exp))."""
        n_fin = numel - self.masked
        normal = max(0, n_fin - self.small)  # the elements relative errors are taken over
        excluded = numel - normal  # masked and small: msprobe's get_rmse mask
        rmse = 0.0
        if numel and normal:
            rmse = _ldexp(math.sqrt(self.sq_normal / numel * (numel / (numel - excluded + 1e-4) + 1e-4)), exp)
        return {
            "count": numel,
            "small_value": self.small_value,
            "small_value_count": self.small,
            "small_value_error_ratio": self.small_err / self.small if self.small else 0.0,
            "max_rel_error": _finite_or_none(self.rel_max),
            "mean_rel_error": _finite_or_none(self.rel_sum / normal) if normal else 0.0,
            "rmse": _finite_or_none(rmse),
            "error_balance": abs(self.sign_sum) / numel if numel else 0.0,
            "nonzero_errors": self.nonzero,
            "thousandth_ratio": self.within_1e3 / numel if numel else 1.0,
            "ten_thousandth_ratio": self.within_1e4 / numel if numel else 1.0,
            "special_mismatch": self.special_mismatch,
            "sign_balance": max(-1.0, min(1.0, self.sign_sum / numel)) if numel else 0.0,
            "magnitude_balance": max(-1.0, min(1.0, self.magnitude_sum / numel)) if numel else 0.0,
        }


@one_thread
def precision_metrics(cand: torch.Tensor, ref: torch.Tensor) -> dict:
    """The precision metric set alone (for the baseline against the reference): one chunked pass."""
    cand, ref = cand.detach().cpu(), ref.detach().cpu()
    if cand.is_complex():
        cand, ref = torch.view_as_real(cand.resolve_conj()), torch.view_as_real(ref.resolve_conj())
    work = torch.float64 if torch.float64 in (cand.dtype, ref.dtype) else torch.float32
    prec = _Prec(cand.dtype, ref.dtype)
    cflat, rflat = _flat(cand), _flat(ref)
    n = cflat.numel()
    for start in range(0, n, CHUNK):
        c = cflat[start : start + CHUNK].to(work)
        r = rflat[start : start + CHUNK].to(work)
        d = c - r
        nonfinite, mism = 0, 0
        signs = None
        if not math.isfinite(d.sum().item()):
            fin = torch.isfinite(c) & torch.isfinite(r)
            signs = prec.signs(c, r, None)
            if work == torch.float32 and bool(fin.all()):  # finite values whose difference overflows float32
                c, r = c.to(torch.float64), r.to(torch.float64)
            else:
                cn, rn = torch.isnan(c), torch.isnan(r)
                special_mis = ~fin & ~((cn & rn) | ((torch.isinf(c) | torch.isinf(r)) & (c == r)))
                nonfinite = int(torch.count_nonzero(~fin).item())
                mism = int(torch.count_nonzero(special_mis).item())
                zero = torch.zeros((), dtype=c.dtype)
                c, r = torch.where(fin, c, zero), torch.where(fin, r, zero)
            d = c - r
        if signs is None:
            signs = prec.signs(c, r, d)
        ad = d.abs_()
        if ad.dtype == torch.float32 and ad.max().item() > SQUARE_SAFE:
            # errors whose squares overflow float32 (above ~1.8e19): the chunk in float64, as the
            # candidate's own pass does (_chunk), so both sides' RMSE stay finite
            c, r = c.to(torch.float64), r.to(torch.float64)
            ad = (c - r).abs_()
        prec.add(signs, ad, r.abs(), nonfinite, mism, r=r)
    return prec.result(n)


def exact_metrics(cand: torch.Tensor, ref: torch.Tensor) -> dict:
    cflat, rflat = _flat(cand), _flat(ref)
    mismatch, first, worst = 0, None, None
    max_abs: float = 0
    sum_ad: float = 0
    for start in range(0, cflat.numel(), CHUNK):
        c = cflat[start : start + CHUNK].to(torch.int64)
        r = rflat[start : start + CHUNK].to(torch.int64)
        ne = c != r
        count = int(ne.sum().item())
        if not count:
            continue
        mismatch += count
        if first is None:
            first = start + int(ne.view(torch.uint8).argmax().item())
        ad = (c.to(torch.float64) - r.to(torch.float64)).abs_()  # int64 differences can overflow
        sum_ad += ad.sum().item()
        mx, mi = ad.max(0)
        if mx.item() > max_abs:
            max_abs, worst = mx.item(), start + int(mi.item())
    out: dict[str, Any] = {"mismatch_count": mismatch, "max_abs": float(max_abs), "mean_abs": sum_ad / cflat.numel()}
    if worst is not None:
        out.update(
            worst_index=unravel(worst, cand.shape),
            worst_candidate=json_element(cflat[worst]),
            worst_reference=json_element(rflat[worst]),
        )
    if first is not None:
        out.update(
            first_mismatch_index=unravel(first, cand.shape),
            first_candidate=json_element(cflat[first]),
            first_reference=json_element(rflat[first]),
        )
    return out
