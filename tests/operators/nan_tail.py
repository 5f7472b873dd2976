"""A float16 exp whose last 12 elements come out NaN (a correct kernel has none).
msprobe's benchmark standard masks every non-finite pair out of its metrics,
so it passes this; the project's nan_inf check fails it."""
import torch


def cand(x):
    out = torch.exp(x)
    if x.dtype == torch.float16:
        out.reshape(-1)[-12:] = float("nan")
    return out


def ref(x):
    return torch.exp(x)
