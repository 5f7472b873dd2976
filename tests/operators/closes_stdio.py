"""Closes one of the worker's standard descriptors (fd 1 or 2) and returns
the right value: its own result is honest, but the worker it leaves behind
cannot run another case."""
import os


def cand(x, close_fd=-1):
    if close_fd >= 0:
        os.close(close_fd)
    return x + 1


def ref(x, close_fd=-1):
    return x + 1
