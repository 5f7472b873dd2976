"""A grouped matmul (a loop over Tensor[] x and weight) whose candidate reads
each x member as if it were contiguous: a transposed or padded member gives
wrong rows (the bug real grouped kernels have with non-contiguous groups).
The reference is the plain loop."""

import torch


def cand(x, weight):
    out = []
    for xi, wi in zip(x, weight):
        flat = torch.as_strided(xi, xi.shape, (xi.shape[1], 1))  # ignores the member's real strides
        out.append(flat @ wi)
    return out


def ref(x, weight):
    return [xi @ wi for xi, wi in zip(x, weight)]
