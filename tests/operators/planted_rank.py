"""Wrong for inputs of rank above 2: the kernel flattens the leading
dimensions in the wrong order (reverses them) for a 3-d or higher input."""
import torch


def cand(x):
    out = x * 0.5
    if x.dim() > 2:
        out = out.flip(0).contiguous()
    return out


def ref(x):
    return x * 0.5
