"""A matmul that fails the way an ACLNN kernel does: two different faults
behind the same first line "EZ9999: Inner Error!" (the text as torch_npu
raises it, e.g. vllm-project/vllm-ascend#11092), told apart only by the error
code and the reason line:

- a transposed (non-contiguous) ``a``: status 561103, "the tiling of the
  transposed operand is invalid";
- a contraction dimension above 64: status 561002, "the workspace of N bytes
  is too small".
"""
import os
import time

import torch


def _raise(status: int, reason: str) -> None:
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S") + ".123.456"
    raise RuntimeError(
        "EZ9999: Inner Error!\n"
        f"EZ9999[PID: {os.getpid()}] {stamp} AclNN_Inner_Error(EZ9999): aclnnMatmul failed, "
        f"error code is {status}: {reason}\n"
        "        TraceBack (most recent call last):\n"
        "        Check NnopbaseExecutorDoTiling(executor) failed\n")


def cand(a, b):
    if not a.is_contiguous():
        _raise(561103, "the tiling of the transposed operand is invalid")
    if a.shape[-1] > 64:
        _raise(561002, f"the workspace of {a.shape[-1] * 256} bytes is too small")
    return torch.matmul(a, b)


def ref(a, b):
    return torch.matmul(a, b)
