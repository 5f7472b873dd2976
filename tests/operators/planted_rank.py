"""Wrong for inputs of rank above 2, whatever their sizes: the kernel's 3-d-and-higher path scales by the
wrong constant.  (It used to reverse the leading dimension, which is no error where that dimension is 1: a
rank-4 input [1, 2, 4, 32] passed, and "x.rank > 2" was a wrong exact finding the rank probes now refute.)"""
import torch


def cand(x):
    out = x * 0.5
    if x.dim() > 2:
        out = out * 1.25
    return out


def ref(x):
    return x * 0.5
