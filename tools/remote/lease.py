"""Device leases on the host: one lock file per device, held by the supervisor.

This file is shipped to the host next to the runner (as ``opdebug_lease.py``)
and depends on the standard library only.  The SSH transport starts every
device worker through it::

    python opdebug_lease.py --lease-file WORK/leases/npu-3.lock --wait 30 \\
        --owner HOST:PID --device npu:3 -- python -m opdebug_runner supervise ...

It takes an exclusive ``flock`` on the lease file (waiting at most ``--wait``
seconds), writes who holds it into the file (pid, owner, host, device,
since), tells the transport on stdout, then ``exec``s the supervisor with the
locked descriptor inherited (its number in ``$OPDEBUG_LEASE_FD``: the
supervisor adds the run id and the case it is running, runner/lease_note.py).  The supervisor therefore holds the lease for as
long as it lives, and the kernel releases it the moment that process dies,
whatever the way (exit, kill, lost connection).  Two agents, or two servers,
can never run on one device at once; the second is told who holds it.

Events on stdout (one JSON line each, before the supervisor speaks):
``{"event": "lease_waiting", "holder": {...}}`` (when someone holds it;
repeated every second while waiting), then ``{"event": "lease_acquired", "lease_file": ..., "holder": {...}}`` or
``{"event": "lease_busy", "lease_file": ..., "holder": {...}}`` and exit 75, or
``{"event": "lease_refused", "reason": ...}`` and exit 77 when the lease
directory or file is not safely ours (see ``open_lease``).
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import stat
import sys
import time

LEASE_FD_ENV = "OPDEBUG_LEASE_FD"  # the locked lease file's descriptor, in the supervisor's environment
EXIT_BUSY = 75  # EX_TEMPFAIL
EXIT_REFUSED = 77  # EX_NOPERM
POLL_S = 0.05
NEWS_EVERY_S = 1.0


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def read_holder(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 65536).decode("utf-8", "replace").strip()
        return json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


class LeaseRefused(Exception):
    """The lease directory or file is not safely ours (another user's, writable by others, a link)."""


def open_lease(path: str) -> int:
    """The lease file, opened without following a link, in a directory only we
    can write, verified to be a plain file of ours with one name: a planted
    symlink or hard link never makes us write to (or truncate) another file."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.lstat(directory)
    uid = os.getuid()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
        raise LeaseRefused(
            f"lease directory {directory} must be a directory owned by uid {uid} and writable by "
            f"nobody else (owner uid {st.st_uid}, mode {st.st_mode & 0o7777:o})"
        )
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise LeaseRefused(f"cannot open lease file {path} without following links: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1:
        os.close(fd)
        raise LeaseRefused(
            f"lease file {path} is not a plain file of uid {uid} with one name (uid {st.st_uid}, links {st.st_nlink})"
        )
    return fd


def acquire(path: str, wait_s: float, holder: dict) -> tuple[int | None, dict]:
    """(fd holding the lock, holder written) or (None, current holder) after wait_s."""
    fd = open_lease(path)
    deadline = time.monotonic() + wait_s
    next_news = 0.0
    while not try_lock(fd):
        current = read_holder(fd)
        now = time.monotonic()
        if now >= next_news:
            # Repeated while waiting: a server that went away (channel closed) makes this
            # write fail, and the helper leaves instead of queueing for a device nobody wants.
            _emit({"event": "lease_waiting", "lease_file": path, "holder": current})
            next_news = now + NEWS_EVERY_S
        if now >= deadline:
            os.close(fd)
            return None, current
        time.sleep(POLL_S)
    since = time.time()
    holder = {
        **holder,
        "pid": os.getpid(),
        "since": since,
        "since_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)),
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(holder) + "\n").encode("utf-8"))
    os.fsync(fd)
    return fd, holder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opdebug_lease")
    parser.add_argument("--lease-file", required=True)
    parser.add_argument("--wait", type=float, default=30.0)
    parser.add_argument("--owner", default="")
    parser.add_argument("--device", default="")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run under the lease is required after --")
    holder = {"owner": args.owner, "device": args.device, "host": os.uname().nodename}
    try:
        fd, holder = acquire(args.lease_file, args.wait, holder)
    except LeaseRefused as exc:
        _emit({"event": "lease_refused", "lease_file": args.lease_file, "reason": str(exc)})
        return EXIT_REFUSED
    except (BrokenPipeError, OSError) as exc:
        if isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) == errno.EPIPE:
            return 0  # nobody is listening any more
        raise
    if fd is None:
        _emit({"event": "lease_busy", "lease_file": args.lease_file, "holder": holder})
        return EXIT_BUSY
    _emit({"event": "lease_acquired", "lease_file": args.lease_file, "holder": holder})
    os.set_inheritable(fd, True)
    # the supervisor notes the run and case it is running in the lease file (runner/lease_note.py)
    os.environ[LEASE_FD_ENV] = str(fd)
    os.execvp(command[0], command)  # the supervisor keeps fd, hence the lock, for its lifetime
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
