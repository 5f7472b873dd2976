"""Biased rounding: exp in float32, converted to bfloat16 by truncation (the
low 16 bits dropped) instead of round-to-nearest. Within a bfloat16 tolerance,
but every error is negative (toward zero): a model's activations drift low."""

import torch


def cand(x):
    y = torch.exp(x.float())
    bits = y.view(torch.int32) & ~0xFFFF  # truncate the mantissa
    return bits.view(torch.float32).to(torch.bfloat16)  # exact: the low bits are zero


def ref(x):
    return torch.exp(x)
