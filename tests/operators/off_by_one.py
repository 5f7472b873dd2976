"""An argmax that answers one row wrong by one (exact outputs: binary consistency)."""
import torch


def cand(x):
    out = torch.argmax(x, dim=-1)
    out[0] = (out[0] + 1) % x.shape[-1]
    return out


def ref(x):
    return torch.argmax(x, dim=-1)
