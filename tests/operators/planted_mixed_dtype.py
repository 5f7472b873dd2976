"""A type-promotion bug: when the two inputs' dtypes differ, the kernel
computes in bfloat16 and casts the result to the promoted dtype (correct
when both inputs share a dtype, whichever it is)."""
import torch


def cand(x, y):
    if x.dtype != y.dtype:
        out = x.to(torch.bfloat16) * y.to(torch.bfloat16) + 1
        return out.to(torch.result_type(x, y))
    return x * y + 1


def ref(x, y):
    return x * y + 1
