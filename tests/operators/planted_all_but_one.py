"""Wrong for every group count but 1 (a special-cased fast path is the only
right one): a threshold `groups > 1` is what the first star shows; groups=0
fails too, so it is "any value but one"."""
import torch


def cand(x, groups=1):
    out = torch.tanh(x)
    return out if groups == 1 else out + 0.1


def ref(x, groups=1):
    return torch.tanh(x)
