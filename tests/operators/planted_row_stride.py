"""Wrong unless the row stride is a multiple of 16 elements (a padded-row
loader): a property no planned axis holds - contiguous [8, 40] fails, the
same shape with padded rows (strides [64, 1]) passes."""
import torch


def cand(x):
    out = torch.tanh(x)
    return out + 0.1 if x.dim() >= 2 and x.stride(-2) % 16 else out


def ref(x):
    return torch.tanh(x)
