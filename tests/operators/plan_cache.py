"""Order-dependent: a plan cache keyed by element count. The first shape seen
for an element count fixes the plan (the row length); a later call with
another shape of the same element count reuses it and normalizes the wrong
rows. Right alone on a fresh worker; wrong after a case of the same element
count and another shape."""

import torch

_PLANS: dict[int, tuple] = {}


def cand(x):
    plan = _PLANS.setdefault(x.numel(), tuple(x.shape))
    rows = x.reshape(plan)  # the cached layout, not this call's
    return torch.softmax(rows, dim=-1).reshape(x.shape)


def ref(x):
    return torch.softmax(x, dim=-1)
