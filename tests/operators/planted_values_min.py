"""Wrong when every element is above 0.4 (a log-domain shortcut taken only
then): a star of normal and uniform(0.5, 1.5) values reads it as the sign
class "nonnegative"; other generators of nonnegative values pass."""
import torch


def cand(x):
    out = torch.tanh(x)
    return out + 0.1 if bool((x > 0.4).all()) else out


def ref(x):
    return torch.tanh(x)
