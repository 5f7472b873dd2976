"""A half-precision accumulation bug: row sums accumulated in the input's
dtype, CHUNK (here 4) elements at a time, so the rounding error grows with
the row length; near the tolerance some lengths pass and some fail, depending
on the values (no clean boundary)."""
import torch

CHUNK = 4


def cand(x):
    acc = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for part in x.split(CHUNK, dim=-1):
        acc = acc + part.sum(-1)  # rounded to x.dtype at every step
    return acc


def ref(x):
    return x.sum(-1)
