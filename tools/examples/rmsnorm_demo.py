"""A built-in example operator with a planted, realistic bug: RMSNorm.

``rms_norm`` is the candidate.  Its float32 path uses the library reduction;
its low-precision path is a hand-written lane-wise reduction that keeps
LANES running sums of squares, one element per lane per step, in an
accumulator whose dtype comes from ``_accumulator_dtype``.  float16 was given
a float32 accumulator (its running sums would overflow), but bfloat16 was
added later through the "native" path and accumulates in bfloat16 itself.
With a hidden size of 4096 each lane adds 256 squares; once a bfloat16 lane
sum passes 128 its spacing is 1.0 and most squares round away, so the mean of
squares comes out several percent low and the normalized output several
percent high - far beyond bfloat16's own rounding.  The failure follows
dtype=bfloat16; float16 and float32 pass.  ``rms_norm_reference`` is the
trusted reference (run in float32 by the harness).
"""

import torch

LANES = 16


def _accumulator_dtype(dtype):
    # BUG (planted): only float16 is upcast; bfloat16 accumulates in bfloat16.
    return torch.float32 if dtype == torch.float16 else dtype


def _mean_of_squares_lanewise(x):
    acc_dtype = _accumulator_dtype(x.dtype)
    hidden = x.shape[-1]
    squares = (x.to(acc_dtype) ** 2).reshape(-1, hidden // LANES, LANES)
    acc = torch.zeros(squares.shape[0], LANES, dtype=acc_dtype, device=x.device)
    for step in range(squares.shape[1]):
        acc = acc + squares[:, step, :]
    total = acc.sum(dim=-1, keepdim=True)
    return (total / hidden).reshape(x.shape[:-1] + (1,)), acc_dtype


def rms_norm(x, weight, eps=1e-6):
    if x.dtype == torch.float32 or x.shape[-1] % LANES:
        mean_sq, acc_dtype = x.pow(2).mean(dim=-1, keepdim=True), x.dtype
    else:
        mean_sq, acc_dtype = _mean_of_squares_lanewise(x)
    y = x.to(acc_dtype) * torch.rsqrt(mean_sq + eps)
    return (y * weight.to(acc_dtype)).to(x.dtype)


def rms_norm_reference(x, weight, eps=1e-6):
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight
