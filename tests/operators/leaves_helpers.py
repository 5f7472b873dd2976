"""Starts helper processes that outlive the call and writes their pids to
pid_file: a plain child (same process group), one that calls setsid, and a
double-forked daemon; then spins when asked (spin=True) or returns."""
import os
import time


def _helper(detach: str) -> int:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if detach in ("setsid", "daemon"):
            os.setsid()
        if detach == "daemon":
            if os.fork():
                os._exit(0)
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        while True:
            time.sleep(1)
    os.close(w)
    data = os.read(r, 64)
    os.close(r)
    if detach == "daemon":
        os.waitpid(pid, 0)
    return int(data)


def cand(x, pid_file, spin=False):
    pids = [_helper(d) for d in ("child", "setsid", "daemon")]
    with open(pid_file + ".tmp", "w") as fh:
        fh.write(" ".join(map(str, pids + [os.getpid()])))
    os.replace(pid_file + ".tmp", pid_file)
    while spin:
        pass
    return x * 2


def ref(x, pid_file, spin=False):
    return x * 2
