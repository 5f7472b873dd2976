"""A kernel whose layout check fires before its shape validation: a
transposed (non-contiguous) ``x`` raises the tiling error whatever the shape,
so a shape the operator does not accept (the last dimension not a multiple of
8: the reference groups it by 8) fails the same way - a call that is not
valid, which shrinking must not take."""
import torch


def cand(x):
    if not x.is_contiguous():
        raise RuntimeError("EZ9999: Inner Error!\nEZ9999[PID: 1] AclNN_Inner_Error(EZ9999): aclnnGroupSum failed, "
                           "error code is 561103: the tiling of the transposed operand is invalid")
    return ref(x)


def ref(x):
    return x.reshape(x.shape[0], -1, 8).sum(-1)
