"""Wrong for non-contiguous inputs: reads the storage as if it were row-major."""
import torch


def cand(x):
    strides, acc = [], 1
    for size in reversed(x.shape):
        strides.append(acc)
        acc *= size
    raw = torch.as_strided(x, x.shape, list(reversed(strides)), x.storage_offset())  # ignores x.stride()
    return raw * 3


def ref(x):
    return x * 3
