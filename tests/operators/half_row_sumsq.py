"""A float16 RMS norm whose row sum of squares is accumulated in the input's dtype: where a row's
sum of squares passes float16's largest value (65504) it becomes inf and the whole row comes out 0."""
import torch


def cand(x):
    ss = (x * x).sum(-1, keepdim=True)  # the planted bug: float16 overflows past 65504
    return x * torch.rsqrt(ss / x.shape[-1] + 1e-6)


def ref(x):
    ss = (x * x).sum(-1, keepdim=True)  # float32 here (the reference's upcast inputs)
    return x * torch.rsqrt(ss / x.shape[-1] + 1e-6)
