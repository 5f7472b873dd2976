"""NaN for an all-zero row: the kernel pre-scales each row by its largest
magnitude (0/0 for a row of zeros); every other row is exact, however
small its values."""
import torch


def cand(x):
    m = x.abs().amax(-1, keepdim=True)
    y = (x / m) * m  # NaN where a row is all zero
    return torch.tanh(y)


def ref(x):
    return torch.tanh(x)
