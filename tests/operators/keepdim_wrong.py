"""Ignores the keepdim attribute (always drops the reduced dimension)."""


def cand(x, keepdim=False):
    return x.sum(dim=-1)


def ref(x, keepdim=False):
    return x.sum(dim=-1, keepdim=keepdim)
