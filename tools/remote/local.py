"""The ``local`` transport: the runner as a local subprocess.

It ships the runner the way SSH does: the files of ``tools/runner/`` are
staged once per content hash into ``<stage>/runner-<hash12>/opdebug_runner/``
(``$OPDEBUG_RUNNER_STAGE``, default ``<tmp>/opdebug-runner-<uid>``) and the
supervisor runs as ``python -m opdebug_runner supervise --device KIND`` with
that directory first on PYTHONPATH (the caller's entries stay, e.g. CANN's) -
so the local path runs the shipped copy, as SSH hosts do.  One `LocalSlot` is one supervisor (hence
one warm worker) and implements the pool's DeviceSlot protocol (host,
device, alive, start, run_case, close).  Closing (or cancelling) kills the
supervisor, and the supervisor's worker with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from .busy import busy_text, wait_budget, waiting_text
from .bundle import LEASE_SCRIPT, RUNNER_PACKAGE, bundle_files, content_hash
from .errors import SlotCannotStart, WorkerCannotStart
from .inventory import VISIBILITY_VARIABLE
from .safe_stage import stage_tree
from .supervisor_client import ConnectionLost, SupervisorClient

STAGE_ENV = "OPDEBUG_RUNNER_STAGE"
START_TIMEOUT_S = 600.0
STREAM_LIMIT = 1 << 24  # longest protocol line accepted


def stage_base(base: str | os.PathLike | None = None) -> Path:
    return Path(base or os.environ.get(STAGE_ENV) or Path(tempfile.gettempdir()) / f"opdebug-runner-{os.getuid()}")


def stage_runner(base: str | os.PathLike | None = None) -> Path:
    """The staged runner directory for PYTHONPATH: ``<base>/runner-<hash12>/``.

    ``base`` must be a directory of ours that nobody else can write (else
    ``[unsafe_path]``); an existing stage is used only when its files are the
    ones shipped, byte for byte; a new one is written into a private temporary
    directory and renamed into place (see safe_stage.py)."""
    files = bundle_files()
    return stage_tree(stage_base(base), f"runner-{content_hash(files)[:12]}", files)


class LocalSlot:
    """One local supervisor on one device (for cpu the id is only a label)."""

    def __init__(self, host: str = "local", device_kind: str = "cpu", device_id: int = 0,
                 lease_wait_s: float = 30.0):
        self.host = host
        self.device_kind = device_kind
        self.device_id = int(device_id)
        self.device = f"{device_kind}:{self.device_id}"
        self.lease_wait_s = float(lease_wait_s)
        self.lease: dict = {}
        self.process: asyncio.subprocess.Process | None = None
        self.client: SupervisorClient | None = None
        self.hello: dict = {}
        self.alive = False
        self._stderr: deque[bytes] = deque(maxlen=200)
        self._stderr_task: asyncio.Task | None = None

    async def start(self, run=None) -> None:
        stage = stage_runner()
        env = dict(os.environ)
        # the staged runner first; the caller's own entries (CANN's te/tbe, an operator
        # package under development) stay
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stage), env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env["OPDEBUG_DEVICE_ID"] = str(self.device_id)
        variable = VISIBILITY_VARIABLE.get(self.device_kind)
        if variable:
            env[variable] = str(self.device_id)
        # The same device lease as on SSH hosts: one case at a time per device across
        # processes and agents (the supervisor holds it for as long as it lives).
        lease_file = stage.parent / "leases" / f"{self.device_kind}-{self.device_id}.lock"
        wait_s = wait_budget(self.lease_wait_s, run)
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, str(stage / LEASE_SCRIPT), "--lease-file", str(lease_file),
            "--wait", repr(wait_s), "--owner", f"{socket.gethostname()}:{os.getpid()}"[:128],
            "--device", self.device, "--",
            sys.executable, "-m", RUNNER_PACKAGE, "supervise", "--device", self.device_kind,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, start_new_session=True, limit=STREAM_LIMIT,
        )
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self.client = SupervisorClient(self.process.stdout, self.process.stdin, label=f"{self.host} {self.device}")
        try:
            self.lease = await asyncio.wait_for(self._await_lease(wait_s, run.say if run is not None else None), wait_s + 60)
            self.hello = await self.client.hello(timeout=START_TIMEOUT_S)
        except BaseException:
            await self._kill()
            raise
        if self.hello.get("worker_error"):
            why = self.hello["worker_error"]
            await self.close()
            raise WorkerCannotStart(f"{self.host} {self.device}: the worker cannot start: {why}")
        self.alive = True

    async def _await_lease(self, wait_s: float, on_wait=None) -> dict:
        """The lease helper's answer: acquired, or why the device cannot be had
        (who holds it, since when, how long this call waited); each second of a
        wait is told to ``on_wait`` (the run's news)."""
        assert self.process is not None and self.process.stdout is not None
        holder: dict = {}
        t0 = time.monotonic()
        while True:
            line = await self.process.stdout.readline()
            if not line:
                raise SlotCannotStart(f"{self.host} {self.device}: the lease helper exited before taking the device "
                                      f"lease; stderr: {self.stderr_tail() or '-'}", code="slot_start_failed")
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event") if isinstance(event, dict) else None
            if kind == "lease_acquired":
                return event
            if kind == "lease_waiting":
                holder = event.get("holder") or holder
                waited = time.monotonic() - t0
                if waited >= wait_s:  # the call's budget is shorter than the helper's --wait: stop here
                    raise SlotCannotStart(busy_text(self.host, self.device, holder, waited, wait_s,
                                                    event.get("lease_file")), code="device_busy",
                                          details={"holder": holder, "waited_s": round(waited, 1), "budget_s": wait_s})
                if on_wait is not None:
                    await on_wait(waiting_text(self.host, self.device, holder, waited, wait_s))
            elif kind == "lease_refused":
                raise SlotCannotStart(f"{self.host} {self.device}: refused to take the device lease: {event.get('reason')}",
                                code="unsafe_path")
            elif kind == "lease_busy":
                holder = event.get("holder") or holder
                waited = time.monotonic() - t0
                raise SlotCannotStart(busy_text(self.host, self.device, holder, waited, wait_s,
                                                event.get("lease_file")), code="device_busy",
                                      details={"holder": holder, "waited_s": round(waited, 1), "budget_s": wait_s})

    async def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while True:
            line = await self.process.stderr.readline()
            if not line:
                return
            self._stderr.append(line)

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")[-2000:]

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def run_case(self, run, case: dict, timeout_s: float) -> dict:
        """``run`` is the pool's RunFiles (run_id, config, modules_dir, captured_dir)."""
        if not self.alive or self.client is None:
            raise ConnectionLost(f"{self.host} {self.device} is not running")
        try:
            return await self.client.run_case(run.config, case, timeout_s,
                                              _str_or_none(run.modules_dir), _str_or_none(run.captured_dir))
        except ConnectionLost as exc:
            self.alive = False
            tail = self.stderr_tail()
            raise ConnectionLost(f"{exc}" + (f"; supervisor stderr: {tail}" if tail else "")) from None

    async def close(self) -> None:
        """Polite shutdown (the supervisor kills its worker and exits), then kill what is left."""
        if self.client is not None and self.alive:
            try:
                await asyncio.wait_for(self.client.close(), 5.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        await self._kill()

    async def abort(self) -> None:
        """Cancelled or broken: the same polite shutdown (a local pipe answers at once or is gone)."""
        await self.close()

    async def _kill(self) -> None:
        self.alive = False
        proc = self.process
        if proc is None:
            return
        if proc.returncode is None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()  # EOF: the supervisor kills its worker group and exits
            except Exception:  # noqa: BLE001
                pass
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except asyncio.TimeoutError:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # its worker dies with it (PR_SET_PDEATHSIG)
                except ProcessLookupError:
                    pass
                await proc.wait()
        if self._stderr_task is not None:
            try:
                await asyncio.wait_for(self._stderr_task, 2.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                self._stderr_task.cancel()


def _str_or_none(path) -> str | None:
    return None if path is None else str(path)


def make_local_slot(host, device: int) -> LocalSlot:
    """The pool's factory for an inventory host with transport 'local'."""
    return LocalSlot(host=host.name, device_kind=host.device, device_id=device, lease_wait_s=host.lease_wait_s)
