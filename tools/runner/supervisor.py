"""The supervisor: owns one warm worker, enforces timeouts, survives crashes.

Standard library only (it never imports torch).  Speaks JSON lines with the
server on its stdin/stdout (see references/runner-protocol.md).  The worker
runs in its own process group; the supervisor

- forwards one case at a time and answers a ``phase`` event as each phase begins, then ``case_done``;
- kills the worker's process group when a case exceeds its timeout and
  reports a ``crash`` with signature ``timeout`` (``timeout during compile``
  when compiling or capturing a compile/graph case ran past its own budget);
- turns a worker that died (fatal signal, abort, exit) into a ``crash`` with
  the signal name (or ``exit <code>``) and the tail of the worker's stderr;
- starts a replacement worker right away, so the next case finds it warm;
- stops starting workers after ``max_worker_start_failures`` consecutive
  start failures (each later case is answered at once, naming the bound);
- announces its start deadlines in ``hello`` (the client derives its waits);
- after a candidate exception, health-checks the device before the next
  case and replaces the worker when the check fails;
- when its stdin closes (server gone, SSH channel dropped) or on
  ``shutdown``/SIGTERM/SIGHUP, kills the worker's process group and exits:
  no orphaned processes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO

from . import PROTOCOL, RUNNER_VERSION, reaper
from .board import Board
from .classify import signal_name
from .lease_note import LeaseNote
from .lines import Lines
from .phases import (
    BUDGET_KNOBS,
    HARNESS,
    HEALTH_TIMEOUT_S,
    PHASE,
    PHASE_EVENT,
    Phase,
    Step,
    budget_s,
    budgets,
    file_tail,
    harness_error,
    killed_from_outside,
    wants_gradients,
)
from .template import ForkedWorker, Template, kill_group, usable

# Consecutive worker start failures after which the supervisor stops starting
# workers (like pytest-xdist's --max-worker-restart): every later case is
# answered at once with a harness_error where worker_start, type WorkerRestartLimit.
MAX_WORKER_START_FAILURES = 3
DEATH_POLL_S = 0.5
MIN_POLL_S = 0.02
PROGRESS_FLUSH_S = 0.05
# The cases a worker ran, kept per worker (a case_done names them: a case that fails after them and
# passes alone on a fresh worker is order-dependent); the latest HISTORY_KEPT are listed.
HISTORY_KEPT = 64
REPORTED_ENV_PREFIXES = ("ASCEND_", "CUDA_", "OPDEBUG_", "NPU_", "HCCL_", "TORCH_DEVICE")


class ServerGone(Exception):
    """The server closed our stdin or asked us to shut down."""


def _package_name() -> str:
    return __name__.rsplit(".", 1)[0]


def _package_parent() -> str:
    # .../<parent>/<pkg...>/supervisor.py -> <parent>, so the worker imports
    # the very same files whatever the package is called.
    depth = _package_name().count(".") + 1
    path = os.path.abspath(__file__)
    for _ in range(depth + 1):
        path = os.path.dirname(path)
    return path


def worker_env(token: str) -> dict[str, str]:
    """A worker's environment (a template's too: its forks are workers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_parent(), env.get("PYTHONPATH")) if p)
    # compile in-process: no compile-worker pool to outlive a killed worker
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if token:
        env[reaper.SWEEP_ENV] = token
    return env


class Worker:
    """One worker process (its own process group), its progress board, its stdout read through Lines."""

    def __init__(
        self,
        generation: int,
        device: str,
        workdir: str,
        lines: Lines,
        token: str = "",
        template: Template | None = None,
    ):
        self.generation = generation
        self.stderr_path = os.path.join(workdir, f"worker-{generation}.stderr")
        self.capture_path = os.path.join(workdir, f"worker-{generation}.stdout")
        self.stderr_file = open(self.stderr_path, "ab")
        self.board_path = os.path.join(workdir, f"worker-{generation}.board")
        self.board = Board(self.board_path, create=True)
        args = [
            "worker",
            "--device",
            device,
            "--stderr-file",
            self.stderr_path,
            "--capture-file",
            self.capture_path,
            "--parent-pid",
            str(os.getpid()),
            "--board",
            self.board_path,
        ]
        forked = template.fork(args, self.stderr_file.fileno()) if template is not None else None
        self.proc: subprocess.Popen | ForkedWorker = forked or subprocess.Popen(
            [sys.executable, "-m", _package_name(), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            start_new_session=True,
            env=worker_env(token),
        )
        # both are pipes: Popen opens them when asked for PIPE, as above
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.ready: dict | None = None  # the worker's ready message once it arrived
        self.started_at = time.time()
        self.lines = lines
        self.stdout_fd: int | None = self.stdout.fileno()  # None once closed (kill)
        lines.add(self.stdout_fd, "worker", generation)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, msg: dict) -> bool:
        try:
            self.stdin.write(json.dumps(msg).encode("utf-8") + b"\n")
            self.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def wait_exit(self, timeout: float = 5.0) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        kill_group(self.proc)
        if self.stdout_fd is not None:  # unregistered before it closes: a reused fd number is another pipe's
            self.lines.remove(self.stdout_fd)
            self.stdout_fd = None
        for stream in (self.stdin, self.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.stderr_file.close()
        self.board.close()

    def stderr_tail(self) -> str:
        return file_tail(self.stderr_path)


class Supervisor:
    def __init__(
        self,
        device: str,
        worker_start_timeout_s: float = 600.0,
        out=None,
        max_worker_start_failures: int = MAX_WORKER_START_FAILURES,
    ):
        self.device = device
        self.worker_start_timeout_s = worker_start_timeout_s
        self.max_worker_start_failures = max(1, int(max_worker_start_failures))
        self.start_failures = 0  # consecutive; reset by a worker that becomes ready
        self.out = out or sys.stdout.buffer
        self.lines = Lines()  # stdin and the worker's stdout, read in this thread (lines.py)
        self.backlog: list[bytes] = []
        self.workdir = tempfile.mkdtemp(prefix="opdebug-supervisor-")
        self.generation = 0
        self.worker: Worker | None = None
        self.worker_error: str | None = None
        self.needs_health_check = False
        self.replaced = False  # the current worker replaces one that died or failed its health check
        self.import_hung: dict[str, str] = {}  # modules whose import ran out of its budget -> why
        self.token = secrets.token_hex(16)  # in every worker's environment: how a sweep finds their descendants
        self.watchdog: subprocess.Popen | None = None
        self.template: Template | None = None  # the cpu workers' template (template.py), once serving
        self.env: dict = {}
        self.lease_note = LeaseNote()  # the run and case in the device lease, for whoever waits for it
        self.history: list[str] = []  # run_id/case_id of each case the current worker ran, oldest first
        self.history_total = 0

    # -- plumbing ---------------------------------------------------------

    def send(self, obj: dict, flush: bool = True) -> None:
        """One event to the server.  ``flush=False`` (progress events): it goes out
        with the next event, or after one poll slice - one message per fast case
        instead of three, each of which wakes the server under load."""
        try:
            self.out.write(json.dumps(obj).encode("utf-8") + b"\n")
            if flush:
                self.out.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise ServerGone("stdout closed") from exc

    def flush(self) -> None:
        try:
            self.out.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise ServerGone("stdout closed") from exc

    def _next_event(self, timeout: float | None):
        """The next event; server lines that arrive while busy wait in the backlog."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            got = self.lines.get(remaining)
            if got is None:
                return None
            kind, gen, payload = got
            if kind == "server_eof":
                raise ServerGone("stdin closed")
            if kind == "server":
                if _parse(payload).get("op") == "shutdown":
                    raise ServerGone("shutdown requested")  # acted on at once, even mid-case
                self.backlog.append(payload)  # anything else waits for the current op
                continue
            if self.worker is None or gen != self.worker.generation:
                continue  # a stale line from a worker already replaced
            return kind, payload

    # -- worker lifecycle -----------------------------------------------------

    def _start_worker(self) -> Worker:
        self.history, self.history_total = [], 0  # a new process: nothing ran on it
        self.generation += 1
        template = self.template if self.template is not None and self.template.alive else None
        self.worker = Worker(self.generation, self.device, self.workdir, self.lines, self.token, template)
        return self.worker

    def _drop_worker(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
        self._sweep()

    def _sweep(self) -> None:
        """End every process a worker left (its group, setsid'ed and double-forked ones alike)."""
        keep: set[int] = {self.watchdog.pid} if self.watchdog is not None else set()
        template = {self.template.pid} if self.template is not None and self.template.alive else set()
        reaper.sweep(self.token, keep=template, reap_keep=keep | template)

    def _ensure_ready(self) -> str | None:
        """Start the worker if needed and wait for it; None or why it cannot start."""
        if self.gave_up():
            return self.worker_error
        worker = self.worker if self.worker is not None else self._start_worker()
        if worker.ready is not None:
            return None
        deadline = time.monotonic() + self.worker_start_timeout_s
        while True:
            event = self._next_event(max(0.0, deadline - time.monotonic()))
            if event is None:
                why = f"worker did not become ready within {self.worker_start_timeout_s:g} s"
                break
            kind, payload = event
            if kind == "worker_eof":
                rc = worker.wait_exit()
                why = f"worker exited during start-up ({_death(rc)}): {worker.stderr_tail()[-1500:]}"
                break
            msg = _parse(payload)
            if msg.get("event") == "ready":
                if msg.get("ok"):
                    worker.ready = msg
                    self.env = msg.get("env") or {}
                    self.worker_error = None
                    self.start_failures = 0
                    return None
                why = f"worker failed to start: {msg.get('error')}"
                break
        self._drop_worker()
        self.worker_error = self._count_start_failure(why)
        return self.worker_error

    def _count_start_failure(self, why: str) -> str:
        """Count one more consecutive start failure; at the bound, say that no start is tried any more."""
        self.start_failures += 1
        if self.gave_up():
            why += (
                f"; that is {self.start_failures} worker start failures in a row, the supervisor's bound "
                f"(max_worker_start_failures={self.max_worker_start_failures}): no further start is tried, "
                "every remaining case stays pending until the slot is started afresh"
            )
        return why

    def gave_up(self) -> bool:
        return self.start_failures >= self.max_worker_start_failures

    def deadlines(self) -> dict:
        """The supervisor's clocks before the candidate's phase begins (announced in ``hello``; the client derives its waits)."""
        return {
            "worker_start_timeout_s": self.worker_start_timeout_s,
            "health_check_timeout_s": HEALTH_TIMEOUT_S,
            "harness_timeout_s": self.worker_start_timeout_s,
            "max_worker_start_failures": self.max_worker_start_failures,
        }

    def _health_check(self) -> bool:
        if self.worker is None or not self.worker.send({"op": "health"}):
            return False
        while True:
            event = self._next_event(HEALTH_TIMEOUT_S)
            if event is None or event[0] == "worker_eof":
                return False
            msg = _parse(event[1])
            if msg.get("event") == "health":
                return bool(msg.get("ok"))

    def _replace_worker(self) -> None:
        self._drop_worker()
        self._start_worker()
        self.replaced = True

    # -- ops ------------------------------------------------------------------

    def hello(self, msg: dict) -> None:
        if not self.gave_up() and (self.worker is None or self.worker.ready is None):  # the client's clock follows ours
            self.send(
                {
                    "event": PHASE_EVENT,
                    "request_id": None,
                    "case_id": None,
                    "phase": "worker_start",
                    "budget_s": self.worker_start_timeout_s,
                    "at": time.time(),
                }
            )
        why = self._ensure_ready()
        ready: dict = (self.worker.ready if self.worker else None) or {}
        env = ready.get("env") or {}
        self.send(
            {
                "event": "hello",
                "runner_version": RUNNER_VERSION,
                "protocol": PROTOCOL,
                "python": sys.version.split()[0],
                "executable": sys.executable,
                "torch": env.get("torch"),
                "torch_npu": env.get("torch_npu"),
                "device": env.get("device", self.device),
                "device_kind": self.device,
                "device_count": env.get("device_count"),
                "pid": os.getpid(),
                "worker_pid": self.worker.pid if self.worker else None,
                "worker_error": why,
                "env": {k: v for k, v in os.environ.items() if k.startswith(REPORTED_ENV_PREFIXES)},
                "worker_env": env,
                "deadlines": self.deadlines(),
            }
        )

    def _news(self, request_id, case_id, phase: str, budget_s: float, flush: bool = True) -> None:
        """Tell the client a preparation phase began and how long it may take (its clock follows ours)."""
        self.send(
            {
                "event": PHASE_EVENT,
                "request_id": request_id,
                "case_id": case_id,
                "phase": phase,
                "budget_s": budget_s,
                "at": time.time(),
            },
            flush=flush,
        )

    def run(self, msg: dict) -> None:
        config, case = msg.get("config") or {}, msg.get("case") or {}
        case_id, request_id = case.get("id"), msg.get("request_id")
        timeout_s = float(msg.get("timeout_s") or 60.0)
        self.lease_note.case_started(config.get("run_id"), case_id)
        base = {"event": "case_done", "request_id": request_id, "case_id": case_id, "started_at": time.time()}
        hung = self.import_hung.get(_modules_key(msg))
        if hung is not None:  # the same modules already hung at import in this supervisor
            self.send(
                _harness_done(
                    base,
                    "resolve",
                    "ImportTimeout",
                    hung + " (not tried again for this case: the same modules hung before)",
                    "",
                    None,
                    worker_lost=False,
                )
            )
            return
        if not self._worker_for(case, request_id, base):
            return
        worker = self.worker
        assert worker is not None  # _worker_for returned True: a ready worker is in place
        restarted, self.replaced = self.replaced, False
        base.update(
            worker_pid=worker.pid,
            worker_restarted=restarted,
            worker_history=list(self.history),
            worker_history_total=self.history_total,
        )
        self._ran(msg)
        watch = _CaseWatch(worker, request_id, case_id, budgets(config, case, timeout_s, self.worker_start_timeout_s))
        # graph mode replays forward and backward as one graph: no backward phase to name
        watch.grads = wants_gradients(config, case) and case.get("mode") != "graph"
        self._enter(watch, Step("resolve", time.monotonic()))  # held back one slice, like every per-case news
        sent = worker.send(
            {
                "op": "run",
                "request_id": request_id,
                "config": msg.get("config"),
                "case": case,
                "modules_dir": msg.get("modules_dir"),
                "captured_dir": msg.get("captured_dir"),
            }
        )
        kind = self._watch_case(watch) if sent else "worker_eof"
        if kind == "worker":
            self._on_answer(base, watch.answer)
        elif watch.row().blame == HARNESS:
            self._on_harness_failure(base, watch, kind, msg)
        else:
            self._on_candidate_failure(base, watch, kind)

    def _worker_for(self, case: dict, request_id, base: dict) -> bool:
        """A sound, ready worker for the case (a fresh one when it asks to run alone); False
        when none can start (the case was answered with why)."""
        case_id = case.get("id")
        if case.get("fresh_worker") and self.history_total:  # alone: a new worker, nothing run before it
            self._replace_worker()
            self.replaced = False
            self.needs_health_check = False
        if self.worker is not None and self.worker.ready is not None and self.needs_health_check:
            self._news(request_id, case_id, "health_check", HEALTH_TIMEOUT_S)
            if not self._health_check():
                self._replace_worker()
        self.needs_health_check = False
        if self.worker is None or self.worker.ready is None:
            self._news(request_id, case_id, "worker_start", self.worker_start_timeout_s)
        why = self._ensure_ready()
        if why is None:
            return True
        kind = "WorkerRestartLimit" if self.gave_up() else "WorkerStartError"
        self.send(
            _case_done(
                base,
                worker_lost=False,
                worker_pid=None,
                worker_restarted=False,
                harness_error=harness_error("worker_start", kind, why),
            )
        )
        return False

    def _watch_case(self, watch: _CaseWatch) -> str:
        """Follow the worker through the case's phases; 'worker' (its answer is in
        watch.answer), 'worker_eof' (it died) or 'timeout' (the phase ran out).

        The worker posts its progress on its board (see board.py), read here at
        each wake-up and before a deadline is called; a post too big for the
        board comes as a message and is handled alike."""
        died_at = None
        worker = watch.worker
        poll = min(DEATH_POLL_S, max(MIN_POLL_S, watch.clocks["case"] / 20))  # a phase change is seen this late
        while True:
            self._catch_up(watch)
            remaining = watch.deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            event = self._next_event(min(remaining, PROGRESS_FLUSH_S if watch.unflushed else poll))
            if event is None and watch.unflushed:
                self._catch_up(watch)
                self.flush()  # news held back for a slice: the case is not that fast
                watch.unflushed = False
                continue
            if event is None:
                watch.sample_memory()
                # a dead worker whose stdout a process it forked still holds open never
                # reaches end-of-file: found by polling (one more slice for its last lines)
                if worker.proc.poll() is not None:
                    if died_at is not None:
                        self._catch_up(watch)
                        return "worker_eof"
                    died_at = time.monotonic()
                continue
            if event[0] == "worker_eof":
                self._catch_up(watch)
                return "worker_eof"
            answer = _parse(event[1])
            if answer.get("request_id") != watch.request_id:
                continue
            self._catch_up(watch)  # what the board holds came first (its news goes out with the answer)
            if answer.get("event") == "case_result":
                watch.answer = answer
                return "worker"
            step = Step.parse(answer, time.monotonic()) if answer.get("event") == "phase" else None
            if step is not None:
                self._progress(watch, step)

    def _catch_up(self, watch: _CaseWatch) -> None:
        """Apply the progress the worker posted on its board and not yet seen."""
        doc = watch.worker.board.read()
        if not doc or doc.get("request_id") != watch.request_id:
            return
        for posted in (doc.get("events") or [])[watch.board_seen :]:
            watch.board_seen += 1
            step = Step.parse(posted, time.monotonic())
            if step is not None:
                self._progress(watch, step)

    def _progress(self, watch: _CaseWatch, step: Step) -> None:
        """One phase begun (from the board or a message), handled by its ``phase_<name>`` method;
        ``step.at`` is on the worker's monotonic clock (the same clock here): the phase's
        deadline counts from when the worker got there, not from when we looked."""
        if step.key in watch.seen:
            return
        watch.seen.add(step.key)
        getattr(self, f"phase_{step.phase}")(watch, step)

    def _enter(self, watch: _CaseWatch, step: Step, flush: bool = False, **news) -> None:
        """Phase ``step.phase`` began: its deadline (phases.PHASES' budget), and the client's
        news (held back one slice unless ``flush``: a fast case sends the client one message)."""
        name = step.phase
        budget = budget_s(name, watch.clocks)
        watch.enter(name, budget, since=step.at)
        if not PHASE[name].tells:
            return
        doc = {
            "event": PHASE_EVENT,
            "request_id": watch.request_id,
            "case_id": watch.case_id,
            "phase": name,
            "budget_s": budget,
            "at": time.time() - (time.monotonic() - step.at),
            **news,
        }
        self.send(doc, flush=flush)
        watch.unflushed = not flush

    # -- one handler per phase the worker posts (phases.PHASES) ----------------------

    def phase_inputs(self, watch: _CaseWatch, step: Step) -> None:
        """Emitted when the worker imported the user modules and resolved the callables: it builds the inputs."""
        self._enter(watch, step)

    def phase_compile(self, watch: _CaseWatch, step: Step) -> None:
        """Emitted when the inputs of a compile or graph case are built: compiling (or capturing) the
        candidate begins, on a budget of its own; the case's clock starts."""
        self._started(watch, step)

    def phase_candidate(self, watch: _CaseWatch, step: Step) -> None:
        """Emitted when the inputs of an eager case are built, or when compiling is over: the
        candidate's timed run begins, on the case timeout."""
        if watch.phase == "compile":
            self._enter(watch, step, flush=True)
        elif watch.phase == "inputs":
            self._started(watch, step)

    def _started(self, watch: _CaseWatch, step: Step) -> None:
        watch.input_metadata = step.input_metadata  # kept in case the worker dies
        watch.t0 = step.at
        self._enter(watch, step, worker_pid=watch.worker.pid)

    def phase_backward(self, watch: _CaseWatch, step: Step) -> None:
        """Emitted when the candidate's forward returned and its backward begins: a timeout of
        its own, and a death from here on is blamed on the backward (phase: backward)."""
        if watch.phase != "candidate":
            return
        if isinstance(watch.input_metadata, dict):
            watch.input_metadata["grad_outputs"] = step.grad_outputs or []
        self._enter(watch, step)

    def phase_reference(self, watch: _CaseWatch, step: Step) -> None:
        """Emitted when the candidate returned: the CPU reference and the comparison begin, on a
        timeout of their own (running out of it says nothing about the operator)."""
        self._enter(watch, step)

    def phase_consistency(self, watch: _CaseWatch, step: Step) -> None:
        """Emitted before each further candidate run of the consistency checks (repeat1..., batch):
        each gets the case timeout again; a death there is the case's crash."""
        self._enter(watch, step)
        watch.rerun = step.step

    def _ran(self, msg: dict) -> None:
        """Note a case the current worker is given (its history)."""
        run_id = (msg.get("config") or {}).get("run_id")
        case_id = (msg.get("case") or {}).get("id")
        self.history.append(f"{run_id}/{case_id}")
        del self.history[:-HISTORY_KEPT]
        self.history_total += 1

    def _on_answer(self, base: dict, answer: dict) -> None:
        answer.pop("event", None)
        self.needs_health_check = bool(answer.pop("needs_health_check", False))
        unusable = answer.pop("worker_unusable", None)
        self.send(_case_done(base, worker_lost=False, worker_replaced_after=unusable, **answer))
        if unusable:  # the next case gets a sound worker, never this one's damage
            self._replace_worker()

    def _collect_dead(self, worker: Worker, kill: bool = False) -> tuple:
        """(exit status, stderr tail, stdout tail) of a worker that died or is killed now."""
        if kill:
            worker.kill()
            rc = worker.proc.returncode
        else:
            rc = worker.wait_exit()
            if rc is None:
                worker.kill()
                rc = worker.proc.returncode
        stderr, stdout = worker.stderr_tail(), file_tail(worker.capture_path)
        self._replace_worker()  # start the next worker now, so it is warm for the next case
        return rc, stderr, stdout

    def _on_harness_failure(self, base: dict, watch: _CaseWatch, kind: str, msg: dict) -> None:
        """The worker died or ran out of time in a phase that blames the harness (phases.PHASES):
        nothing about the operator; the case stays pending."""
        rc, stderr, stdout = self._collect_dead(watch.worker, kill=kind == "timeout")
        phase = watch.row()
        after = (
            "The candidate finished; nothing about the operator"
            if watch.phase == "reference"
            else "The candidate never ran; the case stays pending"
        )
        if kind == "timeout":
            # a phase without a budget of its own runs on the clock of the phase before it
            knob = BUDGET_KNOBS[phase.budget] if phase.budget is not None else "the previous phase's budget"
            why = (
                f"{phase.text} did not finish within {watch.budget_s:g} s ({knob}); the supervisor killed "
                f"the worker. {after}"
            )
            if watch.phase == "resolve":
                self.import_hung[_modules_key(msg)] = why
            self.send(
                _harness_done(
                    base, phase.name, "Timeout", why, stderr, None if watch.phase == "reference" else rc, stdout=stdout
                )
            )
            return
        why = (
            f"the worker died while {phase.text} ({_death(rc)}{watch.memory_note()}; the supervisor did not "
            f"kill it: the kernel's OOM killer or another process did, e.g. out of memory). {after}"
        )
        self.send(_harness_done(base, phase.name, "WorkerDied", why, stderr, rc, stdout=stdout))

    def _on_candidate_failure(self, base: dict, watch: _CaseWatch, kind: str) -> None:
        """The worker died or ran out of time in a phase that blames the operator: this case's crash."""
        elapsed_us = (time.monotonic() - watch.t0) * 1e6
        rc, stderr, stdout = self._collect_dead(watch.worker, kill=kind == "timeout")
        error = _timeout_error(watch) if kind == "timeout" else _death_error(watch, rc)
        if watch.phase == "backward":  # the forward returned; its backward crashed, timed out or was killed
            error.update(
                phase="backward",
                signature=f"backward: {error['signature']}",
                message=f"phase: backward: {error['message']}",
            )
        elif watch.grads:
            error["phase"] = "forward"
        error["traceback_tail"] = stderr
        result = {
            "schema_version": 1,
            "case_id": watch.case_id,
            "status": "crash",
            "comparisons": [],
            "error": error,
            "timing_us": {"total_us": elapsed_us},
            "environment": self.env,
        }
        self.send(
            _case_done(
                base,
                worker_lost=True,
                worker_exit=rc,
                result=result,
                input_metadata=watch.input_metadata,
                stdout=stdout,
                stderr=stderr,
                traceback=stderr,
            )
        )

    def serve(self) -> int:
        self.lines.add(sys.stdin.fileno(), "server")
        subreaper = reaper.become_subreaper()
        self.watchdog = reaper.start_watchdog(self.token, _package_name(), _package_parent())
        try:
            if usable(self.device, subreaper):  # every worker a fork of one that imported torch
                self.template = Template(
                    [sys.executable, "-m", _package_name(), "template"],
                    worker_env(self.token),
                    os.path.join(self.workdir, "template.stderr"),
                )
            self._start_worker()  # warm up while the server gets ready
            while True:
                if self.backlog:
                    line = self.backlog.pop(0)
                else:
                    kind, gen, line = self.lines.get()
                    if kind == "server_eof":
                        return 0
                    if kind != "server":
                        if kind == "worker_eof" and self.worker is not None and gen == self.worker.generation:
                            if self.worker.ready is not None:
                                # died between cases: replace it, the next case gets a fresh one
                                self._replace_worker()
                            else:  # died during start-up: the next case retries and reports why
                                self._drop_worker()
                        elif kind == "worker" and self.worker is not None and gen == self.worker.generation:
                            msg = _parse(line)
                            if msg.get("event") == "ready" and msg.get("ok"):
                                self.worker.ready = msg
                                self.env = msg.get("env") or {}
                        continue
                if not line.strip():
                    continue
                msg = _parse(line)
                op = msg.get("op")
                if op == "shutdown":
                    self.send({"event": "bye"})
                    return 0
                if op == "hello":
                    self.hello(msg)
                elif op == "run":
                    self.run(msg)
                else:
                    self.send({"event": "error", "message": f"unknown op {op!r}; expected hello, run or shutdown"})
        except ServerGone:
            return 0
        finally:
            self._drop_worker()
            if self.template is not None:
                self.template.close()
            shutil.rmtree(self.workdir, ignore_errors=True)
            # its stdin ends: it sweeps once more and exits
            if self.watchdog is not None and self.watchdog.stdin is not None:
                try:
                    self.watchdog.stdin.close()
                except OSError:
                    pass


class _CaseWatch:
    """What the supervisor knows about the case in flight: its phase (phases.PHASES: resolve ->
    inputs -> [compile ->] candidate -> [backward ->] reference [-> consistency...]), that phase's
    budget and deadline, the input metadata once built, and the worker's peak memory so far."""

    def __init__(self, worker: Worker, request_id, case_id, clocks: dict):
        self.worker, self.request_id, self.case_id, self.clocks = worker, request_id, case_id, clocks
        self.t0 = time.monotonic()
        self.phase: str | None = None
        self.budget_s, self.deadline = 0.0, self.t0
        self.input_metadata: dict | None = None
        self.answer: dict = {}
        self.peak_kib = 0
        self.seen: set[tuple] = set()  # phase steps applied (from the board or a message)
        self.board_seen = 0  # steps of the board's post applied
        self.unflushed = False  # news to the client held back for one slice
        self.grads = False  # the case asks for gradients (its crash says which phase)
        self.rerun: str | None = None  # a consistency check's further candidate run (repeat1, batch) under way

    def enter(self, phase: str, budget_s: float | None, since: float) -> None:
        """Phase ``phase`` began at ``since``; a phase without a budget of its own keeps the clock before it."""
        self.phase = phase
        if budget_s is not None:
            self.budget_s, self.deadline = budget_s, since + budget_s

    def row(self) -> Phase:
        """The phases.PHASES row of the phase under way (one is entered before the worker is asked to run)."""
        if self.phase is None:
            raise RuntimeError("no phase entered yet")
        return PHASE[self.phase]

    def sample_memory(self) -> None:
        self.peak_kib = max(self.peak_kib, _peak_rss_kib(self.worker.pid))

    def memory_note(self) -> str:
        self.sample_memory()
        return f"; the worker's peak memory was {self.peak_kib / 1024:.0f} MiB" if self.peak_kib else ""


def _timeout_error(watch: _CaseWatch) -> dict:
    """The crash of a candidate phase that ran past its budget (the supervisor killed the worker)."""
    if watch.phase == "compile":  # never the same signature as a run-time hang
        return {
            "type": "CompileTimeout",
            "signature": "timeout during compile",
            "signal": "SIGKILL",
            "message": (
                f"compiling or capturing the candidate did not finish within its compile budget "
                f"of {watch.budget_s:g} s (compile_timeout_s); the supervisor killed the "
                "worker's process group"
            ),
        }
    what = "the candidate's backward" if watch.phase == "backward" else "the case"
    return {
        "type": "Timeout",
        "signature": "timeout",
        "signal": "SIGKILL",
        "message": (
            f"{what} did not finish within its timeout of {watch.budget_s:g} s; the "
            "supervisor killed the worker's process group"
        ),
    }


def _death_error(watch: _CaseWatch, rc) -> dict:
    """The crash of a worker that died in a candidate phase (a signal or an exit)."""
    sig = signal_name(rc)
    what = "the candidate's backward" if watch.phase == "backward" else "the candidate"
    message = f"the worker died while running {what} ({_death(rc)})"
    if watch.rerun:
        message += f" (consistency check {watch.rerun}: the candidate run again on the same inputs)"
    error = {
        "type": "WorkerDied",
        "signature": sig or f"exit {rc}",
        "signal": sig,
        "exit_code": None if sig else rc,
        "message": message,
    }
    if killed_from_outside(error):
        error["message"] = (
            f"the worker was killed by {sig} while {what} ran (phase: {watch.phase}). The supervisor did not "
            f"send it (the case timeout of {watch.clocks['case']:g} s had not passed): the kernel's OOM killer or "
            f"another process did{watch.memory_note()}; the sender is not known to the harness. Re-run it as a "
            "new case id (the outcome's rerun_case) to see whether the candidate itself causes it"
        )
    return error


def _peak_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _modules_key(msg: dict) -> str:
    op = (msg.get("config") or {}).get("operator") or {}
    return json.dumps([msg.get("modules_dir"), op.get("modules") or [], op.get("candidate"), op.get("reference")])


def _harness_done(
    base: dict, where: str, type_: str, message: str, stderr: str, rc, *, stdout: str = "", worker_lost: bool = True
) -> dict:
    """The case_done of a failure that says nothing about the operator (the case stays pending)."""
    extra = {} if rc is None else {"worker_exit": rc}
    return _case_done(
        base,
        worker_lost=worker_lost,
        harness_error=harness_error(where, type_, message, stderr),
        stdout=stdout,
        stderr=stderr,
        traceback=stderr,
        **extra,
    )


def _case_done(
    base: dict, *, worker_lost: bool, result: dict | None = None, harness_error: dict | None = None, **fields
) -> dict:
    """The one ``case_done`` envelope (its contract: tools/remote/envelopes.py ``CaseDone``).
    ``base`` holds event, request_id, case_id, started_at (and worker_pid,
    worker_restarted once a worker took the case); ``fields`` the worker's
    answer or stdout/stderr/traceback/input_metadata/worker_exit."""
    done = dict(base, **fields)
    if result is not None:
        done.update(outcome="result", result=result)
    elif harness_error is not None:
        done.update(outcome="harness_error", harness_error=harness_error)
    done.update(finished_at=time.time(), worker_lost=worker_lost)
    for key in ("stdout", "stderr", "traceback"):
        done.setdefault(key, "")
    return done


def _parse(line) -> dict:
    try:
        msg = json.loads(line)
    except (ValueError, TypeError):
        return {}
    return msg if isinstance(msg, dict) else {}


def _death(rc) -> str:
    if rc is None:
        return "still running, killed"
    sig = signal_name(rc)
    return f"killed by {sig}" if sig else f"exit code {rc}"


def main(device: str, worker_start_timeout_s: float, max_worker_start_failures: int = MAX_WORKER_START_FAILURES) -> int:
    def on_signal(signum, frame):
        raise ServerGone(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    sup = Supervisor(device, worker_start_timeout_s, max_worker_start_failures=max_worker_start_failures)
    try:
        code = sup.serve()
    except ServerGone:
        code = 0
    try:
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass
    # The stdin reader thread may sit in a blocking read: leave without the
    # interpreter's shutdown (which would wait on that thread's lock).
    os._exit(code)
