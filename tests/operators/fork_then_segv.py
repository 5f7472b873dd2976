"""Forks a helper process (it inherits the worker's protocol pipe and keeps
it open), then segfaults: the crash is SIGSEGV, found at once - not a timeout
once the case's time is up."""
import ctypes
import multiprocessing
import time


def cand(x):
    helper = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    helper.start()
    ctypes.string_at(0)
    return x


def ref(x):
    return x * 1
