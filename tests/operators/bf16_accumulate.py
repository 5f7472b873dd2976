"""Wrong for bfloat16 only: the last-dimension sum accumulates in bfloat16
(every partial sum rounded to bfloat16), where a correct kernel accumulates
in float32 and rounds once.  Within bfloat16's tolerance for short rows, many
times the error of a correct bfloat16 computation."""
import torch


def cand(x):
    if x.dtype != torch.bfloat16:
        return x.sum(-1)
    acc = torch.zeros(x.shape[:-1], dtype=torch.bfloat16)
    for i in range(x.shape[-1]):  # the planted bug: a bfloat16 accumulator
        acc = acc + x[..., i]
    return acc


def ref(x):
    return x.sum(-1)


def rounded_once(x):
    """A correct computation in the input's dtype: float32 accumulation, one rounding."""
    return x.float().sum(-1).to(x.dtype)
