"""Wrong unless the last dimension is a multiple of 16: a vector kernel
drops the tail of each row that does not fill a 16-element block."""
import torch

BLOCK = 16


def cand(x):
    out = torch.tanh(x)
    tail = x.shape[-1] % BLOCK
    if tail:
        out = out.clone()
        out[..., x.shape[-1] - tail:] = 0
    return out


def ref(x):
    return torch.tanh(x)
