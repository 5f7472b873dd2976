"""Wrong for bfloat16 only: the bfloat16 path adds a rounding bias."""
import torch


def cand(x):
    y = x * 2
    if x.dtype == torch.bfloat16:
        y = y + 0.25  # the planted bug
    return y


def ref(x):
    return x * 2
