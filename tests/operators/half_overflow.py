"""Half-precision overflow: right operators whose true result is beyond the
dtype's range, and one wrong one.

- ``matmul``: torch.matmul (right: a float16 result beyond 65504 is -inf/inf,
  as the float32 truth rounded to float16 is);
- ``naive_softmax``: exp(x) / sum(exp(x)) computed in the input's dtype (right
  for that formula: in float16 exp(12) overflows and the row is NaN, where the
  float32 truth is finite - a correct same-dtype computation has the same NaN);
- ``inf_when_big``: wrong - infinity wherever |result| > 60000, values float16
  holds (65504 is its max);
- ``nan_when_big``: wrong - the naive softmax, NaN wherever x > 4 (exp(4) is far
  inside float16's range: a correct computation has no NaN there);
- ``norm`` (reference): sqrt(sum(x*x)) - in float32 x*x overflows for |x| >
  1.8e19, values bfloat16 holds, so the float32 truth is Inf;
- ``scaled_norm``: right - max|x| * sqrt(sum((x/max|x|)^2)), finite and exact
  where the float64 truth is within bfloat16's range;
- ``max_for_norm``: wrong - max|x|, finite where the float32 truth overflowed.
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


def nan_when_big(x):
    return torch.where(x > 4, float("nan"), naive_softmax(x))


def norm(x):
    return torch.sqrt((x * x).sum(-1))


def scaled_norm(x):
    m = x.float().abs().amax(-1, keepdim=True)
    return (m * torch.sqrt(((x.float() / m) ** 2).sum(-1, keepdim=True))).squeeze(-1).to(x.dtype)


def max_for_norm(x):
    return x.abs().amax(-1)


KERNELS = {"naive_softmax": naive_softmax, "nan_when_big": nan_when_big, "scaled_norm": scaled_norm,
           "max_for_norm": max_for_norm}


def kernel(x, which):
    """One run, several kernels: the one named by the case's ``which`` attribute."""
    return KERNELS[which](x)


def truth(x, which):
    """The reference of ``kernel``: the naive softmax for the softmax kernels, else the plain norm."""
    return naive_softmax(x) if which in ("naive_softmax", "nan_when_big") else norm(x)
