"""Wrong only for float16 *and* a long last dimension (an interaction): the
float16 path of a row kernel keeps at most LIMIT (here 1024) columns in its
fast buffer and zeroes the rest; float32 and bfloat16 take another path."""
import torch

LIMIT = 1024


def cand(x):
    out = x * 3
    if x.dtype == torch.float16 and x.shape[-1] > LIMIT:
        out = out.clone()
        out[..., LIMIT:] = 0
    return out


def ref(x):
    return x * 3
