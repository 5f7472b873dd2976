"""Forward right, backward wrong for bfloat16 only: a scaled linear layer
``x * weight`` (weight broadcast over the rows) as a custom autograd function
whose weight gradient, the sum over rows of ``grad * x``, accumulates row by
row in bfloat16 (every partial sum rounded) where a correct kernel
accumulates in float32 and rounds once.  The input gradient is right in
every dtype, and so is the forward."""
import torch


class ScaledRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        rows = (grad * x).reshape(-1, x.shape[-1])
        if x.dtype == torch.bfloat16:  # the planted bug: a bfloat16 accumulator
            acc = torch.zeros(x.shape[-1], dtype=torch.bfloat16)
            for i in range(rows.shape[0]):
                acc = acc + rows[i]
            grad_weight = acc
        else:
            grad_weight = rows.float().sum(0).to(x.dtype)
        return grad * weight, grad_weight


def cand(x, weight):
    return ScaledRows.apply(x, weight)


def ref(x, weight):
    return x * weight
