"""The values actually built: what one input tensor holds, measured where the tensors are made.

Per tensor (tools/schemas/result.py ``InputValues`` names the keys): ``min``, ``max``, ``max_abs``
over the finite values; ``nan``, ``inf``, ``zeros`` counts; ``distinct`` (exact up to
``DISTINCT_CAP``, and ``distinct_capped`` says "at least" beyond it); and per dimension ``d``
(lists indexed like ``shape``, so ``sumsq[-1]`` is the last dimension) the largest over the slices
reduced along ``d`` of the sum of x*x (``sumsq``) and of |x| (``sum_abs``).

Guarantees:

- Read only: nothing is written into the tensor (the candidate's and the reference's inputs stay
  bit-identical).
- Bounded cost: the tensor is read in blocks of at most ``CHUNK`` elements (a row longer than that in
  pieces), each widened to float64 on its own - never a whole float64 copy. One pass per dimension
  (the last one with the scalar statistics), and the distinct count stops at its cap.
- Sums are accumulated in float64 over finite values only (NaN and Inf are counted, not summed); a sum
  past float64's range is recorded as float64's largest value.
"""

from __future__ import annotations

import math
import sys

import torch

CHUNK = 1 << 20
DISTINCT_CAP = 1 << 16
DISTINCT_PIECE = 1 << 16  # the distinct count starts on pieces this small, doubling up to CHUNK
FLOAT64_MAX = sys.float_info.max
_SORTABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def measure(tensor: torch.Tensor) -> dict:
    """The recorded statistics of ``tensor``'s logical values (see the module docstring)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    rank = t.dim()
    out: dict = {"numel": t.numel(), "min": None, "max": None, "max_abs": None}
    out.update(nan=0, inf=0, zeros=0, distinct=0, distinct_capped=False)
    out.update(sumsq=[None] * rank, sum_abs=[None] * rank)
    if t.numel() == 0:
        return out
    buf = torch.empty(min(t.numel(), CHUNK), dtype=torch.float64)  # one widening buffer, reused per block
    scalars = _Scalars(t.dtype)
    if rank == 0:
        scalars.add(t)
    for d in reversed(range(rank)):  # the last dimension first: its pass reads the scalars too
        if d == rank - 1 or t.shape[d] > 1:
            out["sumsq"][d], out["sum_abs"][d] = _slice_sums(t, d, buf, scalars, first=d == rank - 1)
    out.update(scalars.result())
    for d in range(rank - 1):  # a dimension of size 1: each slice is one element
        if t.shape[d] == 1 and out["max_abs"] is not None:
            out["sumsq"][d] = min(float(out["max_abs"]) ** 2, FLOAT64_MAX)
            out["sum_abs"][d] = float(out["max_abs"])
    out["distinct"], out["distinct_capped"] = distinct(t, low=out["min"], high=out["max"])
    return out


def _blocks(y: torch.Tensor, d: int, limit: int = CHUNK):
    """(block, d) pairs: sub-views covering ``y`` once, each keeping dimension ``d`` whole (its
    index there), of at most ``limit`` elements where the slices along ``d`` allow - cut along the
    outermost other dimension, and below it where one index of that is too large already (a slice
    longer than ``limit`` comes alone, as a 1-D view)."""
    if y.dim() <= 1 or y.numel() <= limit:
        yield y, d
        return
    c = 0 if d != 0 else 1
    per = y.numel() // max(y.shape[c], 1)
    if per <= limit:
        step = max(1, limit // max(per, 1))
        for start in range(0, y.shape[c], step):
            yield y.narrow(c, start, min(step, y.shape[c] - start)), d
    else:
        for i in range(y.shape[c]):
            yield from _blocks(y.select(c, i), d - 1 if c < d else d, limit)


class _Scalars:
    """min, max (finite values), nan, inf and zeros over blocks, in the dtype's own arithmetic
    (integers and bool as Python ints; float8 through float32, exact)."""

    def __init__(self, dtype: torch.dtype):
        self.complex = dtype.is_complex
        self.floating = dtype.is_floating_point
        self.low: float | int | None = None
        self.high: float | int | None = None
        self.top: float | None = None  # complex: the largest finite |z|
        self.nan = self.inf = self.zeros = 0

    def add(self, block: torch.Tensor) -> None:
        self.zeros += block.numel() - int(torch.count_nonzero(block))
        if self.complex:
            return self._add_complex(block)
        if not self.floating:
            w = block.to(torch.uint8) if block.dtype == torch.bool else block
            low, high = (int(v) for v in torch.aminmax(w))
        else:
            w = block if block.dtype in _SORTABLE else block.to(torch.float32)
            low, high = (float(v) for v in torch.aminmax(w))
            if not (math.isfinite(low) and math.isfinite(high)):  # NaN or Inf in this block
                finite = torch.isfinite(w)
                n_nan = int(torch.isnan(w).sum())
                self.nan += n_nan
                self.inf += w.numel() - int(finite.sum()) - n_nan
                if not bool(finite.any()):
                    return
                low = float(torch.where(finite, w, math.inf).min())
                high = float(torch.where(finite, w, -math.inf).max())
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def _add_complex(self, block: torch.Tensor) -> None:
        parts = torch.view_as_real(block.resolve_conj())
        nan = torch.isnan(parts).any(-1)
        bad = nan | torch.isinf(parts).any(-1)
        self.nan += int(nan.sum())
        self.inf += int(bad.sum()) - int(nan.sum())
        if not bool(bad.all()):
            top = float(torch.where(bad, 0.0, block.abs().to(torch.float64)).max())
            self.top = top if self.top is None else max(self.top, top)

    def result(self) -> dict:
        out = {"nan": self.nan, "inf": self.inf, "zeros": self.zeros, "max_abs": self.top}
        if self.low is not None and self.high is not None:
            low, high = self.low + 0, self.high + 0  # -0.0 + 0 is 0.0
            out.update(min=low, max=high, max_abs=max(abs(low), abs(high)))
        return out


def _slice_sums(t: torch.Tensor, d: int, buf: torch.Tensor, scalars: _Scalars, first: bool):
    """The largest sum of x*x and of |x| over the slices reduced along ``d`` (finite values, in
    float64); on the ``first`` pass ``scalars`` reads each block too (later passes mask NaN and Inf
    only where that pass found any)."""
    best_sq = best_abs = 0.0
    for block, bd in _blocks(t, d):
        specials = scalars.nan + scalars.inf
        if first:
            scalars.add(block)
        masked = scalars.nan + scalars.inf > (specials if first else 0)
        if block.dim() == 1 and block.numel() > buf.numel():  # one slice longer than a block: in pieces
            sq = ab = 0.0
            for start in range(0, block.numel(), buf.numel()):
                w = _widen(block.narrow(0, start, min(buf.numel(), block.numel() - start)), buf, masked)
                ab += float(w.abs_().sum())
                sq += float(w.square_().sum())
        else:
            w = _widen(block, buf, masked)
            ab = float(w.abs_().sum(bd).max())
            sq = float(w.square_().sum(bd).max())
        best_sq, best_abs = max(best_sq, sq), max(best_abs, ab)
    return min(best_sq, FLOAT64_MAX), min(best_abs, FLOAT64_MAX)


def _widen(block: torch.Tensor, buf: torch.Tensor, masked: bool) -> torch.Tensor:
    """The block in float64 in ``buf`` (complex: |z|; bool: 0/1); ``masked``: NaN and Inf made 0."""
    w = buf[: block.numel()].view(block.shape)
    w.copy_(block.abs() if block.dtype.is_complex else block)
    if masked:
        w.nan_to_num_(0.0, 0.0, 0.0)
    return w


def distinct(t: torch.Tensor, cap: int = DISTINCT_CAP, low=None, high=None) -> tuple[int, bool]:
    """(distinct values, capped): exact up to ``cap``; past it (cap, True) - at least that many.
    NaN counts once; -0.0 equals 0.0.  Dtypes of one or two bytes by their bit patterns (one
    counting pass), integers of a narrow range ``[low, high]`` by their offsets, the rest by a
    sorted set of the values seen, each piece looked up in it (a new value is sorted in)."""
    if t.dtype.is_complex:
        return _distinct_sorted(_complex_keys(t), cap)
    if t.element_size() <= 2:
        return _distinct_bits(t, cap)
    if not t.dtype.is_floating_point and low is not None and high is not None and high - low < 1 << 24:
        present = torch.zeros(high - low + 1, dtype=torch.bool)
        for block, _ in _blocks(t, t.dim() - 1):
            present[block.reshape(-1).to(torch.int64) - low] = True
        return _capped(int(present.sum()), cap)
    return _distinct_sorted(_real_keys(t), cap)


def _capped(count: int, cap: int) -> tuple[int, bool]:
    return (cap, True) if count > cap else (count, False)


def _distinct_bits(t: torch.Tensor, cap: int) -> tuple[int, bool]:
    """Distinct values of a one- or two-byte dtype: which bit patterns occur, then those patterns'
    values compared (-0.0 is 0.0, every NaN one value)."""
    carrier = torch.int16 if t.element_size() == 2 else torch.uint8
    size = 1 << (8 * t.element_size())
    present = torch.zeros(size, dtype=torch.bool)
    for block, _ in _blocks(t, t.dim() - 1):
        bits = block.contiguous().view(carrier).reshape(-1).to(torch.int32) & (size - 1)
        present |= torch.bincount(bits, minlength=size) > 0
    patterns = torch.nonzero(present).reshape(-1)
    if t.dtype == torch.bool or not t.dtype.is_floating_point:
        return _capped(patterns.numel(), cap)
    values = patterns.to(carrier).view(t.dtype).to(torch.float32)
    nan = torch.isnan(values)
    return _capped(torch.unique(values[~nan] + 0).numel() + int(bool(nan.any())), cap)


def _real_keys(t: torch.Tensor):
    """Each block's values as sort keys, and whether it held a NaN (NaN left out; -0.0 made 0.0)."""
    for block, _ in _blocks(t, t.dim() - 1):
        flat = block.reshape(-1)
        nan = torch.isnan(flat) if flat.dtype.is_floating_point else None
        if nan is not None and bool(nan.any()):
            yield flat[~nan] + 0, True
        else:
            yield (flat + 0 if nan is not None else flat), False


def _complex_keys(t: torch.Tensor):
    """complex64: both parts' bits in one int64 (exact); complex128: the (re, im) rows themselves."""
    for block, _ in _blocks(t, t.dim() - 1):
        parts = torch.view_as_real(block.resolve_conj()).reshape(-1, 2)
        nan = torch.isnan(parts).any(-1)
        parts = parts[~nan] + 0 if bool(nan.any()) else parts + 0
        if parts.dtype == torch.float32:
            bits = parts.contiguous().view(torch.int32).to(torch.int64)
            yield (bits[:, 0] << 32) | (bits[:, 1] & 0xFFFFFFFF), bool(nan.any())
        else:
            yield parts, bool(nan.any())


def _unseen(seen: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    """Which of ``part`` are not in the sorted ``seen``: a comparison per value for a few values,
    else a binary search."""
    if seen.numel() <= 16:
        new = part != seen[0]
        for value in seen[1:]:
            new &= part != value
        return new
    at = torch.searchsorted(seen, part).clamp_(max=seen.numel() - 1)
    return seen[at] != part


def _distinct_sorted(keys, cap: int) -> tuple[int, bool]:
    """A sorted set of the keys seen; each piece is looked up in it and only new keys are sorted in."""
    seen: torch.Tensor | None = None
    has_nan = False
    for flat, nan in keys:
        has_nan = has_nan or nan
        for start in range(0, flat.shape[0], DISTINCT_PIECE):
            part = flat[start : start + DISTINCT_PIECE]
            if part.dim() > 1:  # complex128 rows: no sort key, unique rows
                seen = torch.unique(part if seen is None else torch.cat([seen, part]), dim=0)
            else:
                if seen is not None and seen.numel():
                    new = _unseen(seen, part)
                    if not bool(new.any()):
                        continue
                    part = part[new]
                seen = torch.unique(part if seen is None else torch.cat([seen, part]))
            if seen.shape[0] + has_nan > cap:
                return cap, True
    return _capped((0 if seen is None else seen.shape[0]) + has_nan, cap)


def measure_inputs(tensors: list) -> dict:
    """name -> the statistics of each built input (``BuiltInput``: ``name``, ``view()``,
    ``metadata``), also written into the input's metadata as ``measured``."""
    values = {}
    for b in tensors:
        b.metadata["measured"] = values[b.name] = measure(b.view())
    return values
