"""A batched matmul whose kernel crashes on a transposed left operand (sizes
shared across inputs: a's last dimension is b's second-to-last, the batch is
shared)."""
import torch


def cand(a, b):
    if a.dim() == 3 and a.stride(-2) == 1 and a.shape[-1] > 1 and a.shape[-2] > 1:
        raise RuntimeError("EZ9999: the tiling of the transposed operand is invalid")
    return torch.matmul(a, b)


def ref(a, b):
    return torch.matmul(a, b)
