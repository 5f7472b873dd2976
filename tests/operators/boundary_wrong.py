"""Wrong only at the integration boundary: a non-contiguous x is read as if it
were row-major (its strides ignored), and an x whose dtype differs from the
weight's (a bfloat16 activation beside a float32 weight) drops the weight.
Contiguous single-dtype calls are right."""
import torch


def cand(x, weight):
    if x.dtype != weight.dtype:
        return x.to(torch.promote_types(x.dtype, weight.dtype)) * 1  # the weight is dropped
    if not x.is_contiguous():
        strides, acc = [], 1
        for size in reversed(x.shape):
            strides.append(acc)
            acc *= size
        x = torch.as_strided(x, x.shape, list(reversed(strides)), x.storage_offset())
    return x * weight


def ref(x, weight):
    return x * weight
