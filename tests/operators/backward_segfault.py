"""Forward right; the backward dies of a real SIGSEGV for inputs over 1000
elements (a kernel that overruns its workspace), and is right below that.
With ``hang=True`` the backward never returns (a deadlocked kernel)."""
import os
import signal
import time

import torch


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, hang):
        ctx.numel, ctx.hang = x.numel(), hang
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        if ctx.hang:
            while True:
                time.sleep(1)
        if ctx.numel > 1000:
            os.kill(os.getpid(), signal.SIGSEGV)
        return grad * 2, None


def cand(x, hang=False):
    return Doubled.apply(x, hang)


def ref(x, hang=False):
    return x * 2
