"""Wrong for large magnitudes: an intermediate kept in float16 range
overflows to inf above 65504 (ordinary values, NaN and denormals are right)."""
import torch


def cand(x):
    out = x * 1.0
    big = x.abs() > 65504
    return torch.where(big, torch.sign(x) * float("inf"), out)


def ref(x):
    return x * 1.0
