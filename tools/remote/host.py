"""The host layer: what a host kind does, and the one slot lifecycle that runs over every kind.

A *host kind* (local.py, ssh.py, command.py, slurm.py; kinds.py finds them by
name) is a small interface - four operations, a probe and a few facts:

- ``start_process(argv, env, root, device)``: start a supervisor whose stdin
  and stdout are the protocol channel (a `HostProcess`);
- ``stage_runner()`` / ``stage_run_files(run)``: put the shipped runner and a
  run's files where that process can read them;
- ``run_command(argv, timeout)``: a short command on the host (the model
  command of verify_run);
- ``probe(script, here, timeout)``: check_host's stdlib probe where the worker
  runs, seeing the files staged for it (`ProbeRun`);
- ``fields``: the strict model of the inventory fields of its own (an SSH
  address, a command prefix, a Slurm request), and ``check_entry``: what else
  it refuses of an entry;
- where the device comes from: ``device_source`` is ``"lease"`` (the inventory
  names the devices and a lease file on the host keeps one case per device,
  lease.py) or ``"scheduler"`` (a job scheduler hands it out; slurm.py).

`SupervisorSlot` is the slot every kind's pool entry is: it starts the
process, takes the device (the lease handshake, defined here once), waits for
the supervisor's hello, runs cases, and ends the process - polite shutdown,
then end of stdin, then a kill - so nothing of the slot outlives it.  A kind
whose device comes from elsewhere overrides the device step (slurm.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from ..errors import ToolError
from ..schemas import Strict
from .bundle import LEASE_SCRIPT, RUNNER_PACKAGE
from .busy import busy_text, wait_budget, waiting_text
from .errors import LOST_ERRORS, SlotCannotStart, SlotGone, SlotLost, WorkerCannotStart
from .inventory import VISIBILITY_VARIABLE, HostConfig, NoFields
from .slot import RunFiles
from .supervisor_client import SupervisorClient

START_TIMEOUT_S = 180.0  # until the supervisor first answers hello (then the budget it announces)
SHUTDOWN_GRACE_S = 5.0
LEASE_GRACE_S = 60.0  # beyond the lease wait: the helper itself must have answered by then
STDERR_TAIL = 2000  # characters of a slot's stderr kept in its messages
STAGE_FAILURES: tuple[type[BaseException], ...] = (ToolError, *LOST_ERRORS)  # a stage the probe reports
_OWNER_SAFE = re.compile(r"[^A-Za-z0-9._:-]")


class HostProcess(Protocol):
    """A started process on a host: its stdio and how to end it."""

    stdin: Any  # write(bytes), drain(), close()/write_eof()
    stdout: Any  # async readline()
    stderr: Any  # async readline()

    @property
    def exit_code(self) -> int | None: ...  # None while it runs (or while its channel is open)
    @property
    def pid(self) -> int | None: ...  # a local pid, where there is one
    async def wait(self, timeout: float) -> bool: ...  # ended within timeout
    def close_stdin(self) -> None: ...  # end of input: the supervisor stops its worker and exits
    def kill(self) -> None: ...  # at once, with everything it started


class HostContext:
    """What the kinds' objects of one pool registry share (SSH connections, a
    scheduler's job names), each created on first use by the kind that needs it."""

    def __init__(self) -> None:
        self._shared: dict[str, Any] = {}

    def shared(self, key: str, make) -> Any:
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]

    def close_unused(self, used_hosts: set[str]) -> None:
        """Let go of what no slot of these hosts uses any more (idle connections)."""
        for value in self._shared.values():
            close = getattr(value, "close_unused", None)
            if close is not None:
                close(used_hosts)


@dataclass
class ProbeRun:
    """What a kind's probe gave check_host: the stdlib probe's exit status and output, run
    where the worker runs, and where the files it stages are looked for; or, for a kind
    whose workers only a scheduler starts, its read-only report instead (``ran`` False)."""

    work_dir: str
    code: int | None = None
    out: str = ""
    err: str = ""
    staged: str | None = None  # a file of the staged runner the probe looked for
    ran: bool = True
    scheduler_report: dict | None = None  # what a scheduler offers (tool_io.SchedulerCheck)
    missing: list[str] = field(default_factory=list)  # what the kind itself found missing


class HostKind:
    """One kind of host.  Subclasses set ``name`` (the inventory's transport or
    scheduler value) and ``fields`` (the strict model of the inventory fields of
    their own), and implement the four operations; ``probe`` and the device facts
    have defaults that suit a kind whose workers start under a lease."""

    name: ClassVar[str]
    fields: ClassVar[type[Strict]] = NoFields  # the kind's own inventory fields, validated by this model
    device_source: ClassVar[str] = "lease"  # or "scheduler": the scheduler hands the device out
    keep_warm: ClassVar[bool] = True  # False: a slot lives for one run (a scheduler's job), closed after it
    python: str  # the interpreter that runs the supervisor there

    def __init__(self, cfg: HostConfig, context: HostContext):
        self.cfg = cfg
        self.context = context
        self.python = cfg.python

    @classmethod
    def check_entry(cls, cfg: HostConfig) -> None:
        """Refuse (ValueError) an inventory entry this kind cannot run, beyond what its
        ``fields`` model checks (run for the kind that runs the host's slots)."""
        if cfg.all_devices:
            raise ValueError("'all_devices' is for a host of this machine (transport 'local') without a scheduler")

    @property
    def address(self) -> str | None:
        """How the host is named in messages (None: this machine)."""
        return None

    async def stage_runner(self) -> str:
        raise NotImplementedError

    async def stage_run_files(self, run: Any) -> tuple[str | None, str | None]:
        raise NotImplementedError

    async def start_process(self, argv: list[str], env: dict[str, str], root: str, device: int) -> HostProcess:
        raise NotImplementedError

    async def run_command(
        self,
        argv: list[str],
        timeout: float,
        *,
        stdin: bytes | None = None,
        merge_stderr: bool = False,
        each_env_script: bool = False,
    ) -> tuple[int | None, str, str]:
        """(exit status or None when it could not run or timed out, stdout, stderr).
        ``each_env_script``: every environment script is sourced even after one fails,
        their exit statuses in ``$OPDEBUG_ENV_STATUS`` (the probe reports each)."""
        raise NotImplementedError

    def probe_work_dir(self, here: str) -> str:
        """The directory the probe checks (``here``: the evidence root, for a host of this machine)."""
        return self.cfg.work_dir

    async def probe(self, script: bytes, here: str, timeout: float) -> ProbeRun:
        """The stdlib probe (``script``) run as ``python - WORK_DIR KIND STAGED`` where the worker
        runs, after staging the runner as a slot would: STAGED is a file of that stage, so the
        probe says whether the worker sees the files staged for it."""
        work_dir = self.probe_work_dir(here)
        try:
            staged: str | None = f"{await self.stage_runner()}/{LEASE_SCRIPT}"
            missing = []
        except STAGE_FAILURES as exc:  # said with the rest of what is missing
            staged, missing = None, [f"the runner staged where the worker runs ({exc})"]
        argv = [self.python, "-", work_dir, self.cfg.device, *([staged] if staged else [])]
        code, out, err = await self.run_command(argv, timeout, stdin=script, each_env_script=True)
        return ProbeRun(work_dir, code, out, err, staged=staged, missing=missing)

    @classmethod
    def slot_devices(cls, cfg: HostConfig) -> list[int]:
        """The devices (or, under a scheduler, slot numbers) this host lends a run."""
        return cfg.devices[: cfg.concurrency or len(cfg.devices)]

    def lent_devices(self, seen: int | None) -> list[int]:
        """The devices check_host says the slots use, given how many the probe saw."""
        return list(self.cfg.devices)

    def new_slot(self, device: int) -> SupervisorSlot:
        return SupervisorSlot(self, device)


def server_owner() -> str:
    """Who holds a lease: this server, as host:pid (safe characters only)."""
    return _OWNER_SAFE.sub("_", f"{socket.gethostname()}:{os.getpid()}")[:128]


def device_env(kind: str, device: int | str) -> dict[str, str]:
    """The variables that give a supervisor its device (the only one it sees)."""
    env = {"OPDEBUG_DEVICE_ID": str(device), "PYTHONUNBUFFERED": "1"}
    variable = VISIBILITY_VARIABLE.get(kind)
    if variable:
        env[variable] = str(device)
    return env


def lease_file(root: str, kind: str, device: int) -> str:
    """The device's lease file: ``leases/`` beside the staged runner (the stage or work_dir)."""
    return f"{root.rstrip('/').rsplit('/', 1)[0]}/leases/{kind}-{int(device)}.lock"


def supervise_argv(
    python: str, root: str, kind: str, device: int, wait_s: float, owner: str | None = None
) -> list[str]:
    """The lease helper holding the device's lease for as long as the supervisor it execs lives."""
    owner = server_owner() if owner is None else _OWNER_SAFE.sub("_", owner)[:128]
    return [
        python,
        f"{root}/{LEASE_SCRIPT}",
        "--lease-file",
        lease_file(root, kind, device),
        "--wait",
        repr(float(wait_s)),
        "--owner",
        owner,
        "--device",
        f"{kind}:{int(device)}",
        "--",
        python,
        "-m",
        RUNNER_PACKAGE,
        "supervise",
        "--device",
        kind,
    ]


class SupervisorSlot:
    """One warm supervisor (hence one warm worker) on one device of a host, of any kind."""

    def __init__(self, kind: HostKind, device: int):
        self.kind = kind
        self.cfg = kind.cfg
        self.host = kind.cfg.name
        self.device_id = int(device)
        self.device = f"{kind.cfg.device}:{self.device_id}"
        self.stderr_chars = STDERR_TAIL
        self.process: HostProcess | None = None
        self.client: SupervisorClient | None = None
        self.hello: dict = {}
        self.lease: dict = {}
        self.cases_run = 0
        self._alive = False
        self._stderr: deque[str] = deque(maxlen=200)
        self._stderr_task: asyncio.Task | None = None

    @property
    def label(self) -> str:
        return f"{self.host} {self.device}"

    @property
    def alive(self) -> bool:
        """Started, and neither its process nor its channel has gone away."""
        return (
            self._alive
            and self.process is not None
            and self.process.exit_code is None
            and self.client is not None
            and not self.client.closed
        )

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    # -- start ---------------------------------------------------------------

    async def start(self, run: RunFiles | None = None) -> None:
        root = await self.kind.stage_runner()
        self.process = await self._spawn(root, run)
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        try:
            reader, writer = await self._take_device(run)
            self.client = SupervisorClient(reader, writer, label=self.label)
            self.hello = await self.client.hello(timeout=START_TIMEOUT_S)
            if self.hello.get("worker_error"):
                raise WorkerCannotStart(f"{self.label}: the worker cannot start: {self.hello['worker_error']}")
        except BaseException as exc:
            raise await self._failed_start(exc) from None
        self._alive = True

    async def _spawn(self, root: str, run: RunFiles | None) -> HostProcess:
        # the helper waits as long as this call may (run_case_remote's device_wait_s, else the host's)
        argv = supervise_argv(
            self.kind.python, root, self.cfg.device, self.device_id, wait_budget(self.cfg.lease_wait_s, run)
        )
        return await self.kind.start_process(argv, device_env(self.cfg.device, self.device_id), root, self.device_id)

    async def _failed_start(self, exc: BaseException) -> BaseException:
        """What a start that failed raises, once the process is ended."""
        await self._end()
        return exc

    async def _take_device(self, run: RunFiles | None) -> tuple[Any, Any]:
        """The lease handshake; the channel to the supervisor (its stdout and stdin)."""
        wait_s = wait_budget(self.cfg.lease_wait_s, run)
        self.lease = await asyncio.wait_for(self._await_lease(wait_s, run), wait_s + LEASE_GRACE_S)
        assert self.process is not None
        return self.process.stdout, self.process.stdin

    async def _await_lease(self, wait_s: float, run: RunFiles | None) -> dict:
        """The lease helper's answer: acquired, or why the device cannot be had (who
        holds it, since when, how long this call waited); each second of a wait is
        told to the run's news."""
        assert self.process is not None
        holder: dict = {}
        t0 = time.monotonic()
        while True:
            event = await self._next_event()
            kind = event.get("event")
            if kind == "lease_acquired":
                return event
            holder = event.get("holder") or holder
            waited = time.monotonic() - t0
            if kind == "lease_refused":
                raise SlotCannotStart(
                    f"{self.label}: refused to take the device lease: {event.get('reason')}", code="unsafe_path"
                )
            # lease_busy, or still waiting when the call's budget (shorter than the helper's --wait) is spent
            if kind == "lease_busy" or (kind == "lease_waiting" and waited >= wait_s):
                raise SlotCannotStart(
                    busy_text(self.host, self.device, holder, waited, wait_s, event.get("lease_file")),
                    code="device_busy",
                    details={"holder": holder, "waited_s": round(waited, 1), "budget_s": wait_s},
                )
            if kind == "lease_waiting" and run is not None:
                await run.say(waiting_text(self.host, self.device, holder, waited, wait_s))

    async def _next_event(self) -> dict:
        """The next JSON object line of the process's stdout (noise of an environment
        script skipped); a process that ends first cannot start."""
        assert self.process is not None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                await self.process.wait(2.0)
                await self._stderr_settled()
                raise SlotCannotStart(
                    f"{self.label}: the process exited before taking the device lease (exit status "
                    f"{self.process.exit_code}); stderr: {self.stderr_tail() or '-'}",
                    code="slot_start_failed",
                )
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                return event

    # -- cases -----------------------------------------------------------------

    async def run_case(self, run: Any, case: dict, timeout_s: float) -> dict:
        """The supervisor's ``case_done`` envelope, or a SlotGone (the case stays pending)."""
        if not self.alive or self.client is None:
            raise SlotLost(f"{self.label} is not running")
        await self._before_case(timeout_s)
        modules, captured = await self.kind.stage_run_files(run)
        self.cases_run += 1
        try:
            event = await self.client.run_case(run.config, case, timeout_s, modules, captured)
        except LOST_ERRORS as exc:
            self._alive = False
            raise await self._explain_loss(exc) from None
        return await self._after_case(event)

    async def _before_case(self, timeout_s: float) -> None:
        """A kind whose slot has an end of its own refuses a case it cannot finish (SlotExpired)."""

    async def _after_case(self, event: dict) -> dict:
        return event

    async def _explain_loss(self, exc: BaseException) -> SlotGone:
        """The loss with the process's last words (a SlotGone keeps its type)."""
        await self._stderr_settled()
        tail = self.stderr_tail()
        lost = type(exc) if isinstance(exc, SlotGone) else SlotLost
        return lost(
            f"{self.label}: connection lost mid-case ({type(exc).__name__}: {exc})"
            + (f"; supervisor stderr: {tail}" if tail else "")
        )

    # -- stop --------------------------------------------------------------------

    async def close(self) -> None:
        """Polite shutdown (the supervisor stops its worker and exits), then `_end`."""
        if self.alive and self.client is not None:
            try:
                await asyncio.wait_for(self.client.close(), SHUTDOWN_GRACE_S)
            except (asyncio.TimeoutError, Exception):
                pass
        await self._end()

    async def abort(self) -> None:
        """Cancelled or broken: end the process now (end of stdin ends the supervisor even mid-case)."""
        await self._end()

    async def _end(self) -> None:
        """End of stdin (the supervisor kills its worker group, its watchdog sweeps, it exits),
        then a kill of whatever is left."""
        self._alive = False
        process = self.process
        if process is not None and process.exit_code is None:
            process.close_stdin()
            if not await process.wait(SHUTDOWN_GRACE_S):
                process.kill()
                await process.wait(SHUTDOWN_GRACE_S)
        await self._stderr_settled()
        if self._stderr_task is not None and not self._stderr_task.done():
            self._stderr_task.cancel()

    # -- stderr --------------------------------------------------------------------

    async def _drain_stderr(self) -> None:
        """Keep the process's diagnostics (and keep an SSH channel's window open)."""
        assert self.process is not None
        try:
            while True:
                line = await self.process.stderr.readline()
                if not line:
                    return
                self._stderr.append(line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line))
        except Exception:  # the stream broke: nothing more to read
            return

    async def _stderr_settled(self, timeout: float = 1.0) -> None:
        """Let the last words of a process that ended arrive (its stderr ends with it)."""
        task = self._stderr_task
        if task is not None and not task.done() and self.process is not None and self.process.exit_code is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except (asyncio.TimeoutError, Exception):
                pass

    def stderr_tail(self) -> str:
        return "".join(self._stderr).strip()[-self.stderr_chars :]


def str_or_none(path: Path | str | None) -> str | None:
    return None if path is None else str(path)
