"""Writes its input: the output is right, but the kernel uses its input as
scratch (it leaves x scaled by 0.5). A model's next layer reads a corrupted x."""

import torch


def cand(x):
    out = torch.softmax(x, dim=-1)
    x.mul_(0.5)  # scratch space, never restored
    return out


def ref(x):
    return torch.softmax(x, dim=-1)
