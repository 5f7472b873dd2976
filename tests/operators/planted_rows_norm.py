"""A fused RMSNorm whose rows beyond the N-th (here 8) reuse the N-th row's
scale: inputs x [rows, hidden] and weight [hidden]."""
import torch

ROWS = 8


def cand(x, weight, eps=1e-6):
    xf = x.float()
    scale = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if x.shape[0] > ROWS:
        scale = scale.clone()
        scale[ROWS:] = scale[ROWS - 1]
    return (xf * scale * weight.float()).to(x.dtype)


def ref(x, weight, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
