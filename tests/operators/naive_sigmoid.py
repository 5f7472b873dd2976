"""A sigmoid whose float32 reference overflows in its backward only: the reference is written
naively, 1 / (1 + exp(-x)).  At x near -100 its forward is a finite 0 (1 / inf), but autograd
multiplies that 0 by exp(100) = inf in float32: NaN gradients, where the true gradient (~4e-44,
finite in float64) rounds to 0 in bfloat16 as the candidate's own sigmoid gives."""

import torch


def cand(input):
    return torch.sigmoid(input)


def ref(input):
    return 1 / (1 + torch.exp(-input))
