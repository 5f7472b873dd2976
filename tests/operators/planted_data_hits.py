"""Wrong only when a long row holds an element above 2.26 (a lookup table
overflows on the long-row path): the row length is necessary, the values
drawn decide - some seeds fail, some pass."""
import torch


def cand(x):
    out = torch.tanh(x)
    return out + 0.1 if x.shape[-1] > 64 and bool((x > 2.26).any()) else out


def ref(x):
    return torch.tanh(x)
