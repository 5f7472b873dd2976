"""Crashes above an element count: a fixed workspace of LIMIT elements
(here 4096), whatever the shape."""
import torch

LIMIT = 4096


def cand(x):
    if x.numel() > LIMIT:
        raise RuntimeError(f"workspace overflow: {x.numel()} elements")
    return torch.sin(x)


def ref(x):
    return torch.sin(x)
