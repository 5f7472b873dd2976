"""Never finishes importing (a module waiting on a lock or a network share):
the harness's problem, bounded by operator.import_timeout_s."""
import time

while True:
    time.sleep(1)


def cand(x):
    return x


def ref(x):
    return x
