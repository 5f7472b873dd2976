"""Batch-variant: the row reduction's path is picked by the batch size (a kernel
that chooses its tiling from the batch): a batch of 4 rows or more accumulates
each row in float64 halves, a smaller one in plain float32. Within the float32
tolerance either way, but a slice of the batch run alone differs bit for bit
from the same rows of the full batch."""

import torch


def cand(x):
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] < 4:
        out = rows.sum(dim=-1)
    else:  # the "big batch" tiling: two halves, accumulated wider
        half = rows.shape[-1] // 2
        out = (rows[:, :half].double().sum(dim=-1) + rows[:, half:].double().sum(dim=-1)).float()
    return out.reshape(x.shape[:-1])


def ref(x):
    return x.sum(dim=-1)
