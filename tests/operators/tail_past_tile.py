"""Wrong past one tile: a kernel that processes rows in tiles of 256 columns
drops the tail tile (leaves it zero) - every row longer than 256 columns
fails, every row of at most 256 columns passes.  A shape threshold: the
smallest failing last dimension is 257, whatever the leading dimensions."""
import torch

TILE = 256


def cand(x):
    y = x * 2
    if x.shape[-1] > TILE:
        y[..., TILE:] = 0  # the planted bug: the tail tile is never written
    return y


def ref(x):
    return x * 2
