"""The ``local`` host kind: the runner as a local subprocess.

It ships the runner the way SSH does: the files of ``tools/runner/`` are
staged once per content hash into ``<stage>/runner-<hash12>/opdebug_runner/``
(``$OPDEBUG_RUNNER_STAGE``, default ``<tmp>/opdebug-runner-<uid>``) and the
supervisor runs as ``python -m opdebug_runner supervise --device KIND`` with
that directory first on PYTHONPATH (the caller's entries stay, e.g. CANN's) -
so the local path runs the shipped copy, as SSH hosts do.  The slot is the
common `host.SupervisorSlot`, under the same device lease as on SSH hosts
(``<stage>/leases/``); ending it ends the supervisor's session (its worker
and watchdog with it).

With ``all_devices = true`` in its inventory entry a local host lends a slot
on every device its probe sees (what check_host reports: ``cpu devices [0, 1]
of 2 seen``), each with its own lease, instead of the ``devices`` listed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .bundle import bundle_files, content_hash
from .host import HostContext, HostKind, SupervisorSlot, str_or_none
from .inventory import HostConfig
from .safe_stage import stage_tree

STAGE_ENV = "OPDEBUG_RUNNER_STAGE"
STREAM_LIMIT = 1 << 24  # longest protocol line accepted
PROBE_SRC = Path(__file__).resolve().parent / "host_probe.py"
PROBE_TIMEOUT_S = 180.0


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


class LocalProcess:
    """A local child process in a session of its own (a `host.HostProcess`)."""

    def __init__(self, proc: asyncio.subprocess.Process, *, whole_group: bool = True):
        self.proc = proc
        self.whole_group = whole_group  # srun: never its group (srun's helper child ends the job)
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr

    @property
    def exit_code(self) -> int | None:
        return self.proc.returncode

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def close_stdin(self) -> None:
        try:
            if self.stdin is not None and not self.stdin.is_closing():
                self.stdin.close()
        except Exception:  # the pipe may be gone
            pass

    def kill(self) -> None:
        if self.proc.returncode is not None:
            return
        try:
            if self.whole_group:  # the supervisor's session: its worker dies with it (PR_SET_PDEATHSIG)
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def spawn(argv: list[str], env: dict[str, str], *, whole_group: bool = True) -> LocalProcess:
    """``argv`` as a local child with piped stdio, in a session of its own."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
        limit=STREAM_LIMIT,
    )
    return LocalProcess(proc, whole_group=whole_group)


async def run_local(
    argv: list[str],
    timeout: float,
    *,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    merge_stderr: bool = False,
) -> tuple[int | None, str, str]:
    """A short local command, no shell: (exit status, stdout, stderr); None when it
    could not start or ran past ``timeout`` (its session is killed)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return None, "", f"cannot run {argv[0]}: {exc.strerror or exc}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        LocalProcess(proc).kill()
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return None, "", f"{argv[0]} did not finish within {timeout:g} s (killed)"
    return proc.returncode, out.decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")


@functools.cache
def seen_devices(kind: str) -> int:
    """How many devices of ``kind`` this machine's probe sees (what check_host reports)."""
    if kind == "cpu":
        return os.cpu_count() or 1
    done = subprocess.run(
        [sys.executable, "-", tempfile.gettempdir(), kind],
        input=PROBE_SRC.read_bytes(),
        capture_output=True,
        timeout=PROBE_TIMEOUT_S,
        env={**os.environ, "OPDEBUG_ENV_STATUS": ""},
    )
    try:
        count = json.loads(done.stdout.decode().strip().splitlines()[-1]).get("device_count")
    except (ValueError, IndexError):
        count = None
    return max(1, int(count or 0))


class LocalHost(HostKind):
    """This machine: the supervisor as a local subprocess."""

    name = "local"

    def __init__(self, cfg: HostConfig, context: HostContext):
        super().__init__(cfg, context)
        self.python = sys.executable

    @classmethod
    def check_entry(cls, cfg: HostConfig) -> None:
        if cfg.container or cfg.env_scripts:
            raise ValueError("transport 'local' takes no container or env_scripts (this machine's environment)")

    @classmethod
    def slot_devices(cls, cfg: HostConfig) -> list[int]:
        if not cfg.all_devices:
            return super().slot_devices(cfg)
        seen = list(range(seen_devices(cfg.device)))
        return seen[: cfg.concurrency or len(seen)]

    def lent_devices(self, seen: int | None) -> list[int]:
        if self.cfg.all_devices and seen:
            return list(range(seen))[: self.cfg.concurrency or seen]
        return list(self.cfg.devices)

    def probe_work_dir(self, here: str) -> str:
        return here  # this machine: the evidence root the server was started with

    async def stage_runner(self) -> str:
        return str(stage_runner())

    async def stage_run_files(self, run: Any) -> tuple[str | None, str | None]:
        return str_or_none(getattr(run, "modules_dir", None)), str_or_none(getattr(run, "captured_dir", None))

    async def start_process(self, argv: list[str], env: dict[str, str], root: str, device: int) -> LocalProcess:
        full = {**os.environ, **env}
        # the staged runner first; the caller's own entries (CANN's te/tbe, an operator
        # package under development) stay
        full["PYTHONPATH"] = os.pathsep.join(p for p in (root, full.get("PYTHONPATH")) if p)
        return await spawn(argv, full)

    async def run_command(
        self,
        argv: list[str],
        timeout: float,
        *,
        stdin: bytes | None = None,
        merge_stderr: bool = False,
        each_env_script: bool = False,
    ) -> tuple[int | None, str, str]:
        return await run_local(argv, timeout, stdin=stdin, merge_stderr=merge_stderr)


HOST_KIND = LocalHost


def LocalSlot(
    host: str = "local", device_kind: str = "cpu", device_id: int = 0, lease_wait_s: float = 30.0
) -> SupervisorSlot:
    """One local supervisor on one device (for cpu the id is only a label), outside any pool."""
    cfg = HostConfig(
        name=host, transport="local", device=device_kind, devices=[int(device_id)], lease_wait_s=lease_wait_s
    )
    return LocalHost(cfg, HostContext()).new_slot(device_id)
