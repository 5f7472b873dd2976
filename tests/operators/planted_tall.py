"""Wrong when an input has more rows than columns (x.shape[0] > x.shape[-1]):
a "tall" code path transposes the tile and drops the last column."""
import torch


def cand(x):
    out = x - 1
    if x.shape[0] > x.shape[-1]:
        out = out.clone()
        out[..., -1] = 0
    return out


def ref(x):
    return x - 1
