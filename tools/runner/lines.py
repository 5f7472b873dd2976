"""Lines from several pipes, read in the calling thread.

The supervisor waits on two streams at once: its own stdin (the server's
requests) and the stdout of its current worker (answers).  A reader thread per
stream handing lines over through a queue costs two thread wake-ups per line;
on a host whose cores are busy each is a wait for the scheduler.  Here one
``selectors`` wait covers every stream and the line is read by the thread that
handles it.

Standard library only (the runner is shipped alone).
"""

from __future__ import annotations

import collections
import os
import selectors
import time

READ_SIZE = 1 << 16


class Lines:
    """``add(fd, kind, tag)`` a pipe; ``get(timeout)`` the next ``(kind, tag, line)``,
    ``(kind + "_eof", tag, None)`` once a pipe ends, or None when ``timeout`` passes."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._ready: collections.deque = collections.deque()

    def add(self, fd: int, kind: str, tag: int = 0) -> None:
        # the fd stays blocking: it is read once per readiness, which never blocks on a pipe;
        # O_NONBLOCK would be set on the whole open file (sshd may share it with stdout)
        self._selector.register(fd, selectors.EVENT_READ, (kind, tag, bytearray()))

    def remove(self, fd: int) -> None:
        """Stop reading ``fd`` (before it is closed); lines already read stay queued."""
        try:
            self._selector.unregister(fd)
        except (KeyError, ValueError):
            pass

    def get(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ready:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            for key, _ in self._selector.select(remaining):
                self._read(key)
        return self._ready.popleft()

    def _read(self, key: selectors.SelectorKey) -> None:
        kind, tag, buf = key.data
        try:
            chunk = os.read(key.fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:  # e.g. EIO: the stream is gone, as at end-of-file
            chunk = b""
        if not chunk:
            if buf:  # a last line without its newline
                self._ready.append((kind, tag, bytes(buf)))
                buf.clear()
            self._ready.append((kind + "_eof", tag, None))
            self.remove(key.fd)
            return
        buf += chunk
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            self._ready.append((kind, tag, bytes(buf[start : end + 1])))
            start = end + 1
        del buf[:start]

    def close(self) -> None:
        self._selector.close()
