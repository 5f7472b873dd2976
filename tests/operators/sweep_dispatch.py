"""Not buggy: calls the torch callable named by the case's ``op`` attribute
with the case's other inputs and attributes, so one run sweeps many
operators.  With ``precise=True`` float16/bfloat16 inputs are computed in
float32 and the outputs rounded once to the input dtype - a right candidate
that is not the baseline computation itself."""
import importlib

import torch

_LOW = (torch.float16, torch.bfloat16)


def _resolve(dotted):
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


def call(op, precise=False, **kwargs):
    fn = _resolve(op)
    if not precise:
        return fn(**kwargs)
    low = [v.dtype for v in kwargs.values() if isinstance(v, torch.Tensor) and v.dtype in _LOW]
    if not low:
        return fn(**kwargs)
    out = fn(**{k: v.float() if isinstance(v, torch.Tensor) and v.dtype in _LOW else v for k, v in kwargs.items()})
    return out.to(low[0]) if out.dtype == torch.float32 else out


def reference(op, precise=False, **kwargs):
    return _resolve(op)(**kwargs)
