"""Importing this module takes 3 s (like JIT-building a custom op with
torch.utils.cpp_extension.load, or importing torch_npu): the harness's time,
not the candidate's - a case timeout of 2 s must still let the candidate run."""
import time

time.sleep(3)


def cand(x):
    return x * 1


def ref(x):
    return x * 1
