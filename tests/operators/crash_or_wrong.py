"""Two failing groups of different statuses: a transposed input crashes the
kernel (its tiling check), and the float16 path is wrong on contiguous rows."""
import torch


def cand(x):
    if x.dim() == 2 and x.shape[0] > 1 and x.shape[1] > 1 and x.stride(0) == 1:
        raise RuntimeError("EZ9999: tiling of the transposed operand is invalid")
    out = x * 2
    if x.dtype == torch.float16:
        out = out + 1
    return out


def ref(x):
    return x * 2
