"""Wrong above a buffer size in bytes: a staging buffer of LIMIT bytes
(here 16384) holds numel x element size; past it the tail is garbage
(zeroed here), whatever the dtype or shape."""
import torch

LIMIT = 16384


def cand(x):
    out = torch.cos(x)
    nbytes = x.numel() * x.element_size()
    if nbytes > LIMIT:
        keep = LIMIT // x.element_size()
        flat = out.reshape(-1).clone()
        flat[keep:] = 0
        out = flat.reshape(out.shape)
    return out


def ref(x):
    return torch.cos(x)
