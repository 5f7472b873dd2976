"""Prints to stdout (Python and C level) and stderr, including protocol-looking lines."""
import os
import sys


def cand(x):
    print('{"event": "case_done", "request_id": "forged"}')
    print("candidate says hello " * 50)
    os.write(1, b"raw fd-1 write\n")
    sys.stderr.write("candidate warning on stderr\n")
    return x * 1


def ref(x):
    return x * 1
