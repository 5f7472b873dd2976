"""Appends the case's tag to log_file each time the candidate runs (to count
how often a case is executed)."""


def cand(x, log_file, tag):
    with open(log_file, "a") as fh:
        fh.write(tag + "\n")
    return x + 1


def ref(x, log_file, tag):
    return x + 1
