"""Two separate bugs in one row kernel (an OR, not an AND): the bfloat16 path
adds a bias, and any dtype past LIMIT (512) columns loses its tail."""
import torch

LIMIT = 512


def cand(x):
    out = x * 2
    if x.dtype == torch.bfloat16:
        out = out + 1
    if x.shape[-1] > LIMIT:
        out = out.clone()
        out[..., LIMIT:] = 0
    return out


def ref(x):
    return x * 2
