"""Half-precision overflow: right operators whose true result is beyond the
dtype's range, and one wrong one.

- ``matmul``: torch.matmul (right: a float16 result beyond 65504 is -inf/inf,
  as the float32 truth rounded to float16 is);
- ``naive_softmax``: exp(x) / sum(exp(x)) computed in the input's dtype (right
  for that formula: in float16 exp(12) overflows and the row is NaN, where the
  float32 truth is finite - a correct same-dtype computation has the same NaN);
- ``inf_when_big``: wrong - infinity wherever |result| > 60000, values float16
  holds (65504 is its max).
"""
import torch


def matmul(input, other):
    return torch.matmul(input, other)


def naive_softmax(x):
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def inf_when_big(input, other):
    out = torch.matmul(input, other)
    return torch.where(out.abs() > 60000, out.sign() * float("inf"), out)
