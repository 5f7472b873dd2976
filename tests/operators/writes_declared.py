"""Declared in-place (operator.writes: ["out"]): writes softmax(x) into out and
returns None; the reference does the same. A bug in what it
writes shows as the comparison input:out."""

import torch


def cand(x, out):
    out.copy_(torch.softmax(x, dim=-1))
    out[..., 0] += 0.25  # wrong first column


def ref(x, out):
    out.copy_(torch.softmax(x, dim=-1))
