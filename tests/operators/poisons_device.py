"""Raises after leaving the worker's device unusable, as a hung AI core would:
the health check before the next case fails and the worker is replaced."""
import torch


def _broken(*args, **kwargs):
    raise RuntimeError("device lost: stream synchronize failed")


def cand(x, poison=False):
    if poison:
        torch.ones = _broken  # every later use of the device fails in this process
        raise RuntimeError("aicore exception: kernel execution timed out")
    return x + 2


def ref(x, poison=False):
    return x + 2
