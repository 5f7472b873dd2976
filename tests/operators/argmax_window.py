"""A routing-like kernel with an integer output: the flat index of the
largest element.  Rows longer than WINDOW (48) are searched only in their
first WINDOW columns, so it is wrong only when the largest value lies beyond
(the values decide; the row length is a necessary condition)."""
import torch

WINDOW = 48


def cand(x):
    if x.shape[-1] <= WINDOW:
        return x.flatten().argmax()
    head = x[..., :WINDOW]
    flat = head.flatten().argmax()
    row, col = divmod(int(flat), WINDOW)
    return torch.tensor(row * x.shape[-1] + col)


def ref(x):
    return x.flatten().argmax()
