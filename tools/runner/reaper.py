"""Ending every process a case started, however it detached itself.

Standard library only (the supervisor and the worker both use it).

- Every worker is started with ``OPDEBUG_SWEEP_TOKEN=<random>`` in its
  environment; whatever it (or a candidate) forks inherits the token, also
  after ``setsid`` or a double fork, so a sweep finds them by reading
  ``/proc/<pid>/environ`` (same user only).
- The supervisor and the worker become child subreapers
  (``prctl(PR_SET_CHILD_SUBREAPER)``), so orphans are re-parented to them and
  reaped, not to init.
- A watchdog (``python -m <runner> watchdog``, its own session, no token)
  holds a pipe from the supervisor; when the pipe ends - the supervisor exited
  or was SIGKILLed - it sweeps the token's processes, so a helper the case
  left behind never outlives the run.

Linux only; elsewhere every function is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection

SWEEP_ENV = "OPDEBUG_SWEEP_TOKEN"
PR_SET_CHILD_SUBREAPER = 36
SWEEP_ROUNDS = 5


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def token_pids(token: str) -> set[int]:
    """Live processes of this user whose environment carries the token."""
    needle = f"{SWEEP_ENV}={token}".encode()
    uid, me = os.getuid(), os.getpid()
    out: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env.split(b"\0") and not _zombie(int(name)):
            out.add(int(name))
    return out


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def children(pid: int) -> set[int]:
    """Direct children of ``pid`` (any state)."""
    out: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(name))
    return out


def own_children() -> set[int] | None:
    """Children of this process from /proc/self/task/*/children (cheap), or
    None where the kernel does not offer that file."""
    out: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
        for tid in tasks:
            with open(f"/proc/self/task/{tid}/children") as fh:
                out.update(int(p) for p in fh.read().split())
    except (OSError, ValueError):
        return None
    return out


def reap_children(keep: Collection[int] = ()) -> None:
    """Collect exited children of this process that nobody else waits for."""
    for pid in children(os.getpid()) - set(keep):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def sweep(token: str | None, keep: Collection[int] = (), reap_keep: Collection[int] = ()) -> list[int]:
    """SIGKILL every process carrying the token except ``keep``, until none is
    left (a process may be forking while we look); returns the pids killed."""
    if not token:
        return []
    killed: list[int] = []
    for _ in range(SWEEP_ROUNDS):
        found = token_pids(token) - set(keep)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        reap_children(set(keep) | set(reap_keep))
    reap_children(set(keep) | set(reap_keep))
    return killed


def start_watchdog(token: str, package: str, pythonpath: str) -> subprocess.Popen | None:
    """The process that sweeps the token's processes once our pipe to it ends."""
    env = {k: v for k, v in os.environ.items() if k != SWEEP_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", package, "watchdog", "--token", token],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    except OSError:
        return None


def watchdog_main(token: str) -> int:
    """Wait for stdin to end (the supervisor is gone, however), then sweep."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    for _ in range(3):  # a process forking at the moment of the first sweep is caught by the next
        sweep(token)
        time.sleep(0.1)
    return 0
