"""A torch.compile backend that takes SECONDS to compile (deterministically
slow), then runs the graph as is: a compile slower than the run-time timeout."""
import time

SECONDS = 3.0


def backend(gm, example_inputs):
    time.sleep(SECONDS)
    return gm.forward


def cand(x):
    return x * 2 + 1


def ref(x):
    return x * 2 + 1
