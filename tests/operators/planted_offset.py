"""Wrong for a non-zero storage offset: reads the storage from element 0."""
import torch


def cand(x):
    raw = torch.as_strided(x, x.shape, x.stride(), 0)  # ignores x.storage_offset()
    return raw + 1


def ref(x):
    return x + 1
