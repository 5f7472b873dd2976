"""A real segmentation fault for large inputs (a null read through ctypes)."""
import ctypes


def cand(x):
    if x.numel() > 1000:
        ctypes.string_at(0)  # SIGSEGV
    return x + 1


def ref(x):
    return x + 1
