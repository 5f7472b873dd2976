"""Where a failing output's wrong elements are.

From the mismatch mask (an element outside ``atol + rtol*|ref|`` where both are finite, or a NaN/Inf
pattern difference; integers and bool: any difference) - the same rule as compare.py's
``mismatch_count`` - this module measures (tools/schemas/result.py ``WrongWhere`` names the keys):

- ``count``, ``fraction``;
- ``rows``: whole rows along the last dimension all wrong; ``rows_zero``: rows the candidate gives
  entirely 0 where the reference's row is not (and something in it is wrong: the small elements of
  a zeroed row may be within tolerance); ``cols``: indices of the last dimension wrong in every row
  (rank 2 and up);
- per dimension d (lists indexed like ``shape``): ``tail[d]``, the index from which every wrong
  element lies, up to the end (null when the wrong elements start at 0 or stop before the end);
  ``period[d]``, the smallest period (at least 2) of which indices along d hold a wrong element,
  when that pattern repeats at least once and is not every index;
- ``channels``: [lo, hi) of dimension 1 (rank 3 and up) when every wrong element lies there and
  that block is narrower than the dimension;
- ``zeros`` / ``nan`` / ``inf``: wrong elements that are 0 / NaN / Inf where the reference is not.

Cost: one chunked pass over both tensors builds the mask (one byte per element; the chunks widen to
float32, float64 only when an operand is float64 - never a whole float64 copy), then a bounded
number of reductions over the mask (one per dimension, plus rows and columns).
"""

from __future__ import annotations

import torch

CHUNK = 1 << 18
MAX_INDICES = 16  # row and column indices listed
MAX_PERIOD_TRIES = 32  # candidate periods tried per dimension


def locate(cand: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> dict | None:
    """The WrongWhere fields of one output (same shape on both sides), or None when nothing is wrong."""
    cand, ref = cand.detach().cpu(), ref.detach().cpu()
    if cand.dtype.is_complex or ref.dtype.is_complex:
        cand, ref = torch.view_as_real(cand.resolve_conj()), torch.view_as_real(ref.resolve_conj())
    mask, zeros, counts = _mask(cand, ref, atol, rtol)
    count = counts["count"]
    if not count:
        return None
    shape = list(cand.shape)
    out = dict(counts, fraction=count / cand.numel(), shape=shape)
    if len(shape) >= 1 and shape[-1]:
        out.update(_rows_and_cols(mask, zeros, shape))
    profiles = [_profile(mask, d) for d in range(len(shape))]
    out["tail"] = [_tail(p) for p in profiles]
    out["period"] = [_period(p) for p in profiles]
    if len(shape) >= 3:
        out["channels"] = _block(profiles[1])
    return out


def _mask(cand: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float):
    """The mismatch mask, the candidate's and the reference's zeros (each shaped like the output),
    and the counts: wrong elements, and those 0 / NaN / Inf where the reference is not."""
    floating = cand.dtype.is_floating_point or ref.dtype.is_floating_point
    work = torch.float64 if torch.float64 in (cand.dtype, ref.dtype) else torch.float32
    c_flat, r_flat = cand.reshape(-1), ref.reshape(-1)
    mask, c_zero, r_zero = (torch.empty(c_flat.numel(), dtype=torch.bool) for _ in range(3))
    counts = {"count": 0, "zeros": 0, "nan": 0, "inf": 0}
    for start in range(0, c_flat.numel(), CHUNK):
        c = c_flat[start : start + CHUNK]
        r = r_flat[start : start + CHUNK]
        if floating:
            c, r = c.to(work), r.to(work)
            both = torch.isfinite(c) & torch.isfinite(r)
            outside = (c - r).abs_() > atol + rtol * r.abs()
            special = ~both & ~((torch.isnan(c) & torch.isnan(r)) | (c == r))
            m = (both & outside) | special
            counts["nan"] += int((m & torch.isnan(c) & ~torch.isnan(r)).sum())
            counts["inf"] += int((m & torch.isinf(c) & ~torch.isinf(r)).sum())
        else:
            m = c != r
        cz, rz = c == 0, r == 0
        mask[start : start + CHUNK], c_zero[start : start + CHUNK], r_zero[start : start + CHUNK] = m, cz, rz
        counts["count"] += int(m.sum())
        counts["zeros"] += int((m & cz & ~rz).sum())
    return mask.view(cand.shape), (c_zero.view(cand.shape), r_zero.view(cand.shape)), counts


def _rows_and_cols(mask: torch.Tensor, zeros: tuple, shape: list) -> dict:
    """Rows all wrong; rows the candidate gives entirely 0 where the reference's row is not and
    something is wrong; columns wrong in every row (rank 2 and up)."""
    n = shape[-1]
    grid = mask.reshape(-1, n)
    whole = grid.all(1)
    out = {"rows": int(whole.sum()), "of_rows": grid.shape[0], "row_index": _first(whole)}
    c_zero, r_zero = (z.reshape(-1, n) for z in zeros)
    zero_rows = c_zero.all(1) & ~r_zero.all(1) & grid.any(1)
    out.update(rows_zero=int(zero_rows.sum()), zero_row_index=_first(zero_rows))
    if len(shape) >= 2:
        cols = grid.all(0)
        out.update(cols=int(cols.sum()), of_cols=n, col_index=_first(cols))
    return out


def _first(flags: torch.Tensor) -> list[int]:
    return [int(i) for i in torch.nonzero(flags).reshape(-1)[:MAX_INDICES]]


def _profile(mask: torch.Tensor, d: int) -> torch.Tensor:
    """Which indices along ``d`` hold a wrong element (1-D bool)."""
    others = [k for k in range(mask.dim()) if k != d]
    return mask.any(dim=tuple(others)) if others else mask.clone()


def _tail(profile: torch.Tensor) -> int | None:
    at = torch.nonzero(profile).reshape(-1)
    if not at.numel():
        return None
    low, high = int(at[0]), int(at[-1])
    return low if low > 0 and high == profile.numel() - 1 else None


def _period(profile: torch.Tensor) -> int | None:
    """The smallest k >= 2 with profile[i] == profile[i + k] everywhere, the pattern seen at least
    twice (2k <= n) and not every index; candidates are the distances from the first wrong index."""
    n = profile.numel()
    at = torch.nonzero(profile).reshape(-1)
    if at.numel() < 2 or at.numel() == n:
        return None
    for k in sorted({int(i) for i in (at[1 : MAX_PERIOD_TRIES + 1] - at[0])}):
        if k >= 2 and 2 * k <= n and bool(torch.equal(profile[:-k], profile[k:])):
            return k
    return None


def _block(profile: torch.Tensor) -> list[int] | None:
    at = torch.nonzero(profile).reshape(-1)
    if not at.numel():
        return None
    low, high = int(at[0]), int(at[-1]) + 1
    return [low, high] if (low, high) != (0, profile.numel()) else None
