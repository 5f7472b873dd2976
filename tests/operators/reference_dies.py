"""The candidate is right; the CPU reference kills its process (as an OOM
kill of a huge float32 reference would): not the candidate's crash."""
import ctypes


def cand(x):
    return x * 1


def ref(x):
    ctypes.string_at(0)
    return x * 1
