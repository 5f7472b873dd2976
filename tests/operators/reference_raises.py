"""A correct candidate whose reference is broken (a harness problem, not a result)."""


def cand(x):
    return x + 1


def ref(x):
    raise ValueError("reference exploded: shapes do not broadcast")
