"""Warm workers by fork: one process of the supervisor's imports torch once, and each of its
workers is a fork of that process - a new process with nothing run before it - instead of a new
interpreter that imports torch again (about 3 s of CPU per worker: a worker replaced after a
crash, a case run alone on a fresh worker).

Only for the ``cpu`` device on Linux: an accelerator's runtime is not safe across a fork, so
those workers start as before (a new interpreter each).  The template never runs a case and
never opens a device; where its imports fail it still forks, and the worker imports again and
reports why (as a new interpreter would).

The supervisor asks over a Unix socket: the worker's arguments, and its stdin, stdout and stderr
as descriptors.  The fork is double: the worker's first parent exits at once, so the worker is
re-parented to the supervisor (a child subreaper, reaper.py), which waits for it and reads its
exit status as it would a child it spawned.  The template itself dies with the supervisor
(PR_SET_PDEATHSIG, the end of its socket) and carries the sweep token, so the watchdog's sweep
ends it too.

Standard library only on the supervisor's side (``Template``, ``ForkedWorker``); the template
process imports torch (``template_main``).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

REPLY_TIMEOUT_S = 30.0  # a fork answers in milliseconds once the template's imports are done
ENV_SWITCH = "OPDEBUG_WORKER_TEMPLATE"  # "0": every worker is a new interpreter


def usable(device: str, subreaper: bool) -> bool:
    """Whether workers of ``device`` may be forks of a template here."""
    return (
        device == "cpu"
        and subreaper
        and sys.platform.startswith("linux")
        and hasattr(socket, "send_fds")
        and os.environ.get(ENV_SWITCH, "1") != "0"
    )


class Template:
    """The supervisor's side: the template process and its socket."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [*argv, "--socket-fd", str(theirs.fileno()), "--parent-pid", str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                env=env,
                pass_fds=(theirs.fileno(),),
            )
        theirs.close()
        self.sock: socket.socket | None = ours
        self.pending = 0  # fork requests not answered yet, oldest first

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.sock is not None and self.proc.poll() is None

    def fork(self, args: list[str], stderr_fd: int) -> ForkedWorker | None:
        """A worker forked with ``args`` (the worker command's arguments), its stderr on
        ``stderr_fd``; None when the template is gone (the caller starts a new interpreter)."""
        if not self.alive:
            return None
        assert self.sock is not None
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            socket.send_fds(self.sock, [json.dumps(args).encode()], [in_r, out_w, stderr_fd])
        except OSError:
            for fd in (in_r, in_w, out_r, out_w):
                os.close(fd)
            self.close()
            return None
        finally:
            for fd in (in_r, out_w):  # the worker's ends: its copies are the ones that count
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.pending += 1
        return ForkedWorker(self, os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"))

    def next_pid(self) -> int:
        """The pid of the oldest fork not answered yet (0: the template did not answer)."""
        if self.sock is None or self.pending <= 0:
            return 0
        self.pending -= 1
        ready, _, _ = select.select([self.sock], [], [], REPLY_TIMEOUT_S)
        data = self.sock.recv(64) if ready else b""
        try:
            return int(data.decode().strip() or 0)
        except ValueError:
            return 0
        finally:
            if not data:  # gone or hung: the next worker is a new interpreter
                self.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc.poll() is None:
            kill_group(self.proc)


def kill_group(proc: subprocess.Popen | ForkedWorker) -> None:
    """SIGKILL a process's group (its own: started in a session of its own) and wait for it up to 10 s; a fork
    the template never answered has no pid (never our own group)."""
    try:
        if proc.pid > 0:
            os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class ForkedWorker:
    """A forked worker, as much of ``subprocess.Popen`` as the supervisor uses: its pipes, its pid
    (asked of the template when first needed), ``poll``, ``wait`` and ``returncode``."""

    def __init__(self, template: Template, stdin, stdout):
        self.template = template
        self.stdin, self.stdout = stdin, stdout
        self._pid: int | None = None
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        if self._pid is None:
            self._pid = self.template.next_pid()
            if not self._pid:
                self.returncode = 255  # no worker came of the request (the template is gone)
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is None and self.pid:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (a sweep): as subprocess.Popen says then
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode


# -- the template process --------------------------------------------------------------------


def template_main(sock_fd: int, parent_pid: int, run: Callable[[list[str]], int]) -> int:
    """Import what a worker imports, then fork a worker per request until the socket ends; each
    fork runs ``run(args)`` (the runner's command line: ``worker ...``) and exits with its status."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the supervisor
    if os.getppid() != parent_pid:
        return 70
    sock = socket.socket(fileno=sock_fd)
    try:
        import torch  # noqa: F401 - what every fork finds imported

        from . import devices, execute  # noqa: F401
    except BaseException:  # each worker imports again and reports why it cannot
        traceback.print_exc()
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        except OSError:
            return 0
        if not msg:
            return 0
        sys.stdout.flush()
        sys.stderr.flush()
        sock.send(str(_fork_worker(sock, json.loads(msg), fds, run)).encode())


def _fork_worker(sock: socket.socket, args: list[str], fds: list[int], run: Callable[[list[str]], int]) -> int:
    """Fork twice: the worker's first parent tells its pid and exits, so the worker is re-parented
    to the supervisor.  The worker's pid, or 0."""
    r, w = os.pipe()
    first = os.fork()
    if first == 0:
        try:
            os.close(r)
            # the first parent's pid read here, not in the fork: it may already have exited there, its
            # getppid() the supervisor's, and the wait for re-parenting would never end
            me = os.getpid()
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _become_worker(sock, args, fds, run, first_parent=me)
            os.write(w, str(pid).encode())
        finally:
            os._exit(0)
    os.close(w)
    for fd in fds:
        os.close(fd)
    with os.fdopen(r, "rb") as pipe:
        data = pipe.read()
    os.waitpid(first, 0)
    try:
        return int(data or 0)
    except ValueError:
        return 0


def _become_worker(
    sock: socket.socket, args: list[str], fds: list[int], run: Callable[[list[str]], int], first_parent: int
) -> None:
    """In the fork: the worker's own session and stdio, then the worker's main; never returns."""
    code = 1
    try:
        os.setsid()
        sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        while os.getppid() == first_parent:  # re-parented to the supervisor once the first parent exits
            time.sleep(0.001)
        _retitle(args[:3] + ["--parent-pid", args[args.index("--parent-pid") + 1]])
        sys.argv = [sys.argv[0], *args]
        code = run(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _retitle(words: list[str]) -> None:
    """The fork's command line (/proc/<pid>/cmdline, what ps shows) reads as a worker's, written in
    place over the template's own (as setproctitle does; it has room for the first words)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end (fields 48 and 49)
        room = end - start
        if start <= 0 or not 0 < room < 1 << 16:
            return
        title = "\0".join([sys.executable, "-m", __package__ or "opdebug_runner", *words]).encode()[: room - 1]
        ctypes.memmove(start, title.ljust(room, b"\0"), room)
    except (OSError, ValueError, IndexError):
        pass
