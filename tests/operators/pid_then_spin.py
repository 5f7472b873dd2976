"""Writes its pid to pid_file, then spins forever (for the cancellation test)."""
import os


def cand(x, pid_file):
    with open(pid_file + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    while True:
        pass


def ref(x, pid_file):
    return x
