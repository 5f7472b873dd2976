"""Correct (x * 2), but every candidate call appends its `tag` as one line to
the file `call_log`: a test counts how often each case really executed."""
import os


def cand(x, call_log, tag=""):
    fd = os.open(call_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tag}\n".encode())  # one short O_APPEND write: whole lines, even from several processes
    finally:
        os.close(fd)
    return x * 2


def ref(x, call_log, tag=""):
    return x * 2
