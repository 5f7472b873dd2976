"""A real segmentation fault for large inputs (a null read through ctypes);
with ``exit_code`` set, the process exits abruptly instead (os._exit)."""
import ctypes
import os


def cand(x, exit_code=None):
    if exit_code is not None:
        os._exit(exit_code)
    if x.numel() > 1000:
        ctypes.string_at(0)  # SIGSEGV
    return x + 1


def ref(x, exit_code=None):
    return x + 1
