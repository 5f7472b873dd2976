"""Seed the global random generators with the case seed.

Random operators (dropout, rrelu, anything calling torch.rand without a
generator) draw from the global generators.  The runner seeds them with the
case seed right before the candidate and again right before the reference,
so a candidate and reference that draw alike (same device kind, same call
order) draw the same numbers.  Seeded: torch (CPU, and every CUDA, XPU,
MTIA or MPS device that is available), torch.npu when present, Python's ``random``, and numpy's
global generator when numpy is installed.  Device and CPU generators are
different algorithms: an NPU dropout does not draw what a CPU dropout does
(see ``nondeterministic`` in references/operators.md).
"""

from __future__ import annotations

import importlib.util
import random
import sys

import torch


def seed_everything(seed: int) -> list[str]:
    """Seed every global generator with ``seed``; the names of those seeded."""
    seeded = ["torch", "random"]
    _seed_torch(seed)
    random.seed(seed)
    npu = getattr(torch, "npu", None)
    if npu is not None and hasattr(npu, "manual_seed_all"):
        npu.manual_seed_all(seed)
        seeded.append("torch.npu")
    numpy = sys.modules.get("numpy")
    if numpy is None and importlib.util.find_spec("numpy") is not None:
        import numpy  # only when installed
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
        seeded.append("numpy")
    return seeded


def _seed_torch(seed: int) -> None:
    """What torch.manual_seed does, without its lazy calls for backends that are
    not there: on a host without CUDA (XPU, MTIA) torch.manual_seed still queues
    a deferred seeding call for each, formatting the Python stack every time -
    most of a small case's seeding time (two seedings per case; the worker's
    time for a 64x64 case fell from about 1.0 to 0.67 ms without it).  A backend
    that is available is seeded as torch does."""
    torch.default_generator.manual_seed(seed)
    for name in ("cuda", "xpu", "mtia"):
        backend = getattr(torch, name, None)
        if backend is not None and backend.is_available():
            backend.manual_seed_all(seed)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        torch.mps.manual_seed(seed)
