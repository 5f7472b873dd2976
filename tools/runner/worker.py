"""The worker: imports torch once, then runs one case per request.

Spoken to by the supervisor only, in JSON lines over the worker's original
stdin/stdout.  Those two file descriptors are duplicated for the protocol at
start-up; fd 0 then reads /dev/null and fd 1 writes a capture file, so
whatever the candidate prints (Python or C level) can never corrupt the
protocol stream - it is returned as the case's ``stdout`` tail instead.
fd 2 is the supervisor's capture file for this worker (its tail explains a
worker that died).

Requests: ``{"op": "run", ...}`` -> ``{"event": "case_result", ...}``;
``{"op": "health"}`` -> ``{"event": "health", "ok": ...}``;
``{"op": "exit"}`` or end of input -> exit.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback

from . import reaper
from .board import Board
from .phases import PHASE, TAIL, HarnessFailure, Step, file_tail, harness_error


def _die_with_parent(parent_pid: int) -> None:
    """Never outlive the supervisor: PR_SET_PDEATHSIG on Linux, a watcher
    thread everywhere (a candidate in an endless Python loop still yields the
    GIL to it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(70)

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(70)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _fd_identity(fds) -> dict:
    """fd -> (device, inode) of what it is open on, None when closed."""
    out: dict[int, tuple[int, int] | None] = {}
    for fd in fds:
        try:
            st = os.fstat(fd)
            out[fd] = (st.st_dev, st.st_ino)
        except OSError:
            out[fd] = None
    return out


FD_ROLES = {0: "stdin (/dev/null)", 1: "stdout (the capture file)", 2: "stderr (the supervisor's capture file)"}


def _damage(expected: dict) -> str | None:
    """Why this worker cannot run another case (a case closed or replaced one of
    its descriptors), or None.  The supervisor replaces such a worker, so the
    next case is never blamed for this one's damage."""
    now = _fd_identity(expected)
    bad = [fd for fd in expected if now[fd] != expected[fd]]
    if not bad:
        return None
    names = ", ".join(f"fd {fd} ({FD_ROLES.get(fd, 'the protocol stream')})" for fd in bad)
    return f"the case closed or replaced the worker's {names}"


def _sweep_leftovers(baseline: set) -> None:
    """End what the case started and left running (setsid, double fork included).
    As a subreaper, every process a case left is a child of ours (orphans come
    back to us): with no new child there is nothing to look for."""
    children = reaper.own_children()
    if children is not None and not (children - baseline):
        return
    reaper.sweep(os.environ.get(reaper.SWEEP_ENV), keep=baseline | {os.getpid()})
    reaper.reap_children()


class _Progress:
    """The case's phases as they begin: posted on the board (no wake-up for the supervisor),
    or sent as a message when there is no board or the post does not fit."""

    def __init__(self, board: Board | None, send):
        self.board, self.send = board, send
        self.request_id = None
        self.steps: list[dict] = []  # the case's progress so far, posted whole on each step
        self.phase = "resolve"  # the phase the case is in (a harness bug there names it)

    def start(self, request_id) -> None:
        self.request_id, self.steps, self.phase = request_id, [], "resolve"

    def __call__(self, name: str, **fields) -> None:
        self.phase = name
        posts = PHASE[name].posts
        if posts is None:  # it runs on the clock before it: nothing to tell
            return
        step = Step(name, time.monotonic(), **{k: fields[k] for k in posts if k in fields}).doc()
        self.steps.append(step)
        if self.board is None or not self.board.post({"request_id": self.request_id, "events": self.steps}):
            self.send({"event": "phase", "request_id": self.request_id, **step})


def _protocol_streams(capture_file: str) -> tuple:
    """The protocol's own copies of stdin/stdout; fd 0 reads /dev/null and fd 1 writes the capture file."""
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    capture = os.open(capture_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    os.dup2(capture, 1)
    os.close(capture)
    return proto_in, proto_out


def main(device_kind: str, stderr_file: str, parent_pid: int, capture_file: str, board_path: str | None = None) -> int:
    _die_with_parent(parent_pid)
    reaper.become_subreaper()  # orphans of a case come back to us, and are ended after it
    proto_in, proto_out = _protocol_streams(capture_file)
    faulthandler.enable(file=sys.stderr, all_threads=False)

    def send(obj: dict) -> None:
        proto_out.write(json.dumps(obj, allow_nan=False).encode("utf-8") + b"\n")
        proto_out.flush()

    try:
        import torch  # noqa: F401 - the one import this process exists to keep warm

        from .devices import make_device
        from .execute import environment, execute_case, harness_answer

        device = make_device(device_kind)
        env = environment(device)
    except BaseException as exc:  # reported to the supervisor
        send(
            {
                "event": "ready",
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-TAIL:],
            }
        )
        return 3
    send({"event": "ready", "ok": True, "pid": os.getpid(), "env": env})
    fds = _fd_identity((0, 1, 2, proto_in.fileno(), proto_out.fileno()))
    pids_before = reaper.token_pids(os.environ.get(reaper.SWEEP_ENV) or "") if reaper.SWEEP_ENV in os.environ else set()
    progress = _Progress(Board(board_path) if board_path else None, send)

    def run(msg: dict) -> dict:
        progress.start(msg.get("request_id"))
        try:
            return execute_case(msg, device, env, on_phase=progress)
        except BaseException as exc:  # a bug of the harness, not of the operator
            return harness_answer(HarnessFailure(progress.phase, exc))

    while True:
        line = proto_in.readline()
        if not line:
            return 0
        msg = json.loads(line)
        op = msg.get("op")
        if op == "run":
            _answer_case(msg, run, send, fds, stderr_file, capture_file)
            _sweep_leftovers(pids_before)
        elif op == "health":
            try:
                device.health_check()
                send({"event": "health", "ok": True})
            except BaseException as exc:
                send({"event": "health", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        elif op == "exit":
            return 0
        else:
            send({"event": "error", "message": f"unknown op {op!r}"})


def _answer_case(msg: dict, run, send, fds: dict, stderr_file: str, capture_file: str) -> None:
    """Run one case (``run(msg)``) and send its answer with this case's stdout and stderr tails."""
    for fd in (1, 2):  # this case's output only
        try:
            sys.stdout.flush() if fd == 1 else sys.stderr.flush()
            os.ftruncate(fd, 0)
        except (OSError, ValueError):
            pass
    answer = run(msg)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    damage = _damage(fds)
    if damage:
        answer["worker_unusable"] = damage
    answer.update(
        event="case_result",
        request_id=msg.get("request_id"),
        stdout=file_tail(capture_file),
        stderr=file_tail(stderr_file),
    )
    answer.setdefault("traceback", ((answer.get("result") or {}).get("error") or {}).get("traceback_tail") or "")
    try:
        send(answer)
    except ValueError as exc:  # a non-finite number slipped into the answer: a harness bug
        send(
            {
                "event": "case_result",
                "request_id": msg.get("request_id"),
                "outcome": "harness_error",
                "worker_unusable": damage,
                "harness_error": harness_error("judge", "ValueError", f"answer is not valid JSON: {exc}"),
            }
        )
