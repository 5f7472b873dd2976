"""Fails on an empty input: reads the first element to pick a code path."""
import torch


def cand(x):
    first = x.reshape(-1)[0]  # IndexError on zero elements
    return x - first + first


def ref(x):
    return x.clone()
