"""Forward right; the backward dies of a real SIGSEGV for inputs over 1000
elements (a kernel that overruns its workspace), and is right below that."""
import os
import signal

import torch


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.numel = x.numel()
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        if ctx.numel > 1000:
            os.kill(os.getpid(), signal.SIGSEGV)
        return grad * 2


def cand(x):
    return Doubled.apply(x)


def ref(x):
    return x * 2
