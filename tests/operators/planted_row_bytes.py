"""Wrong unless one row of the last dimension is a multiple of 32 bytes (a
vector unit of 32 bytes): 16 float16 elements, 8 float32 elements - the
alignment in elements moves with the element size."""
import torch


def cand(x):
    out = torch.tanh(x)
    if (x.shape[-1] * x.element_size()) % 32:
        out = out + 0.1
    return out


def ref(x):
    return torch.tanh(x)
