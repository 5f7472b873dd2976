"""Killed by SIGKILL while being imported (as the OOM killer would kill a
module that allocates too much at import): a harness phase - the candidate
never ran, so no case may be recorded as its crash."""
import os
import signal

os.kill(os.getpid(), signal.SIGKILL)


def cand(x):
    return x


def ref(x):
    return x
