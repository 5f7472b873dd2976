"""Handles NaN wrongly: silently replaces it by 0 (the reference propagates it)."""
import torch


def cand(x):
    return torch.nan_to_num(x, nan=0.0) * 0.5


def ref(x):
    return x * 0.5
