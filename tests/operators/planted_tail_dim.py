"""Wrong beyond a limit of the last dimension: a kernel whose tile covers at
most LIMIT elements of a row zeroes the rest (here LIMIT = 64)."""
import torch

LIMIT = 64


def cand(x):
    out = x * 2
    if x.shape[-1] > LIMIT:
        out = out.clone()
        out[..., LIMIT:] = 0
    return out


def ref(x):
    return x * 2
