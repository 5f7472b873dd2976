"""Appends the case's tag to log_file each time the candidate runs (to count
how often a case is executed); ``delay`` seconds of sleep make calls overlap."""

import time


def cand(x, log_file, tag, delay=0.0):
    with open(log_file, "a") as fh:
        fh.write(tag + "\n")
    time.sleep(delay)
    return x + 1


def ref(x, log_file, tag, delay=0.0):
    return x + 1
