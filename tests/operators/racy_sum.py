"""Nondeterministic: a racy row sum. In about one call in two a "lost update"
drops one partial sum of a random row (the race picks the row; an unseeded
source, as a real race is not seeded): the same inputs give different results."""

import os

import torch


def cand(x):
    out = x.sum(dim=-1)
    if os.urandom(1)[0] & 1:  # the race, off in about one call in two
        rows = out.numel()
        row = int.from_bytes(os.urandom(4), "little") % max(1, rows)
        part = x.reshape(rows, -1)[row, : max(1, x.shape[-1] // 4)].sum()
        out.view(-1)[row] -= part  # one partial sum lost
    return out


def ref(x):
    return x.sum(dim=-1)
