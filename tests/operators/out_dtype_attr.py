"""A sum with an output-dtype attribute, wrong when that dtype is float64 and the rows are longer than 8
(the attribute is a torch dtype: proposals must pass it as one)."""
import torch


def cand(x, dtype=None):
    if not isinstance(dtype, torch.dtype) and dtype is not None:
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}: {dtype!r}")
    out = x.sum(-1, dtype=dtype)
    if dtype == torch.float64 and x.shape[-1] > 8:
        out = out + 1
    return out


def ref(x, dtype=None):
    return x.sum(-1, dtype=dtype)
