"""The Slurm transport: each slot is one ``srun`` job on a node the scheduler picks.

A Slurm host (inventory ``scheduler = "slurm"``) is a *login host* - this
machine (``transport = "local"``) or an SSH host - from which ``srun``,
``squeue``, ``scancel`` and ``scontrol`` are run.  One `SlurmSlot` is one job
with one step (``srun`` outside an allocation), started as::

    srun --job-name=opdebug-<server>-<host>-<slot>-<n> --nodes=1 --ntasks=1 --time=T --gres=G
         [--partition=P] [--account=A] [--qos=Q] [--cpus-per-task=C] --kill-on-bad-exit=1 [srun_options]
         -- bash -c 'source ENV && export PYTHONPATH=R... && exec PY R/opdebug_step.py -- PY -m opdebug_runner supervise --device K'

built from validated inventory fields and constants only (an argument vector
locally, each piece shlex-quoted over SSH; only inventory names reach it).
The step's stdin/stdout is the supervisor's protocol channel, as on the local
and SSH transports; srun's and slurmstepd's own messages come on stderr.

- **The device is the scheduler's.**  The step helper (slurm_step.py) first
  says which job it runs in and which device variables the step was given;
  the server settles the device - the scheduler's variable
  (``ASCEND_RT_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES``, or ``SLURM_STEP_GPUS``
  on an NPU host), else the job's GRES index (``scontrol -d -o show job``:
  ``GRES=npu:1(IDX:2)``, where gres.conf names device files), else, for a GRES
  that is a bare count, the slot's number on its node - and sends it back; the
  supervisor starts with it, and every result's ``environment.placement`` says
  the device, how it was decided and the job.  No lease file.
- **Waiting in the queue is progress, not a hang**: while the job is pending
  its squeue state and reason are reported (``RunFiles.news``); past
  ``max_pending_s`` the slot gives up (its job cancelled) and says why.
- **A job the scheduler ends** (time limit, preemption, node failure,
  scancel) raises `JobEnded`: the case in flight stays pending with the
  scheduler's reason - read from slurmstepd's ``*** STEP ... CANCELLED AT ...
  [DUE TO ...] ***`` line and the job's state - never the operator's crash,
  even when the worker's SIGTERM reached the supervisor first.  A slot near its
  time limit refuses its next case (`SlotExpired`: the case is requeued, the
  slot replaced).
- **Nothing outlives the run**: a slot lives for one run (pool.py closes it
  when its queue is empty); closing ends its step (stdin EOF: the supervisor
  exits), then ``scancel`` and, last, a SIGKILL of srun's pid (never its
  process group: srun's helper child ends the job).  A server killed outright
  closes every step's stdin with it; the jobs end on their own, and the first
  slot a later server starts on the host cancels the jobs whose names say they
  belong to a server of this machine that is gone (`SlurmClusters.sweep`).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
import shlex
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ToolError
from ..evidence import safe_component
from .bundle import RUNNER_PACKAGE, STEP_SCRIPT, bundle_files, content_hash
from .errors import SlotCannotStart, SlotExpired, SlotGone, SlotLost, WorkerCannotStart
from .inventory import VISIBILITY_VARIABLE, HostConfig
from .safe_stage import private_dir, stage_tree
from .slot import RunFiles
from .slurm_step import ACK, LINE, MORE, NUDGE, PLACEMENT_VALUE, RS as RS_BYTES, STREAM, frames, unframe
from .ssh import SSHConnections
from .supervisor_client import SupervisorClient, within

STREAM_LIMIT = 1 << 24  # longest protocol line accepted
COMMAND_TIMEOUT_S = 30.0  # one squeue/scancel/scontrol/sinfo
FIRST_POLL_S = 1.0  # a free slot starts in ~50 ms: squeue only when it did not
POLL_S = 3.0
REPORT_EVERY_S = 30.0  # a pending job's state is said again at least this often
STEP_START_TIMEOUT_S = 300.0  # allocated -> the step's first line (the node's env scripts)
SLOT_START_TIMEOUT_S = 180.0  # the step's first line -> the supervisor's hello
STOP_GRACE_S = 5.0
SCANCEL_WAIT_S = 15.0
END_CHECK_S = 1.5  # after a worker killed by a signal: how long to look for the scheduler's hand
COMPLETING_WAIT_S = 3.0  # a job COMPLETING: how long to wait for the state it ends in
EXPIRY_MARGIN_S = 60.0  # a case needs its timeout plus this before the job's time limit
ACK_TIMEOUT_S = 60.0  # the step relay's ack of one piece of a long line
SWEEP_EVERY_S = 30.0  # a host is swept for jobs of servers that are gone at most this often

# Job states in which the scheduler, not the task, ended the job.
SCHEDULER_END_STATES = {"CANCELLED": "cancelled", "TIMEOUT": "time limit", "PREEMPTED": "preemption",
                        "NODE_FAIL": "node failure", "DEADLINE": "deadline", "OUT_OF_MEMORY": "out of memory",
                        "BOOT_FAIL": "node boot failure", "REVOKED": "revoked"}
EXTERNAL_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
# slurmstepd's line on the step's stderr when the scheduler kills it (22.05:
# "*** STEP 7.0 ON vm CANCELLED AT <time> DUE TO TIME LIMIT ***"; older releases
# leave out "ON <node>"; no DUE TO clause: scancel).
CANCELLED_LINE = re.compile(
    r"\*\*\* (?:STEP|JOB) (\d+)(?:\.\d+)?(?: ON (\S+))? CANCELLED AT (\S+)(?: DUE TO ([^*]+?))? \*\*\*")
QUEUED_LINE = re.compile(r"srun: job (\d+) queued and waiting for resources")
ALLOCATED_LINE = re.compile(r"srun: job (\d+) has been allocated resources")
JOB_ID = re.compile(r"^\d{1,12}$")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# The variables stripped from the login environment before srun: an outer allocation's
# SLURM_* would make srun start a step inside it, and the login host's own device
# variables would pass for the scheduler's.  SLURM_CONF stays (it names the cluster).
DEVICE_VARIABLES = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
LOGIN_SCRUB = ("unset " + " ".join(DEVICE_VARIABLES) + " $(compgen -e SLURM_ | grep -vx SLURM_CONF)")


# --------------------------------------------------------------------------
# Job names: which server of which machine started a job
# --------------------------------------------------------------------------


def _machine_id() -> str:
    try:
        seed = Path("/etc/machine-id").read_text().strip()
    except OSError:
        seed = ""
    return hashlib.sha256(f"{seed}|{socket.gethostname()}".encode()).hexdigest()[:8]


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (with the pid: who it is)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return None if fields[0] == b"Z" else fields[19].decode()
    except (OSError, IndexError):
        return None


MACHINE = _machine_id()
JOB_PREFIX = "opdebug-"
# opdebug-<machine>-<pid>-<start ticks>-<host>-<slot>-<serial>
OWNER_NAME = re.compile(r"^opdebug-([0-9a-f]{8})-(\d+)-(\d+)-")


def server_tag() -> str:
    """This server process in job names: machine, pid and the pid's start time
    (a reused pid is not taken for the server that is gone)."""
    pid = os.getpid()
    return f"{MACHINE}-{pid}-{_start_ticks(pid) or 0}"


def owner_gone(name: str) -> bool | None:
    """For a job named by this transport: True when it belongs to a server of this
    machine that no longer runs, False when that server runs, None when the name is
    not ours or comes from another machine (never touched)."""
    m = OWNER_NAME.match(name)
    if m is None or m.group(1) != MACHINE:
        return None
    return _start_ticks(int(m.group(2))) != m.group(3)


# --------------------------------------------------------------------------
# Command lines (inventory fields and constants only)
# --------------------------------------------------------------------------


def step_script(host: HostConfig, runner_root: str) -> str:
    """What the job step runs under bash on the node: the environment scripts, the
    shipped runner first on PYTHONPATH, then the step helper that execs the supervisor."""
    q = shlex.quote
    steps = [f"source {q(script)}" for script in host.env_scripts]
    steps.append(f"export PYTHONPATH={q(runner_root)}" + "${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1")
    steps.append(" ".join(["exec", q(host.python), q(f"{runner_root}/{STEP_SCRIPT}"), "--", q(host.python),
                           "-m", RUNNER_PACKAGE, "supervise", "--device", q(host.device)]))
    return " && ".join(steps)


def srun_argv(host: HostConfig, job_name: str, runner_root: str) -> list[str]:
    """The slot's srun command as an argument vector (no ``-u``: it would give the
    task a pty; no ``--pty``, no ``--label``: the channel stays the runner's lines)."""
    o = host.slurm
    assert o is not None
    argv = ["srun", f"--job-name={job_name}", "--nodes=1", "--ntasks=1", f"--time={o.time_limit}",
            f"--gres={o.gres}", "--kill-on-bad-exit=1"]
    for flag, value in (("--partition", o.partition), ("--account", o.account), ("--qos", o.qos),
                        ("--cpus-per-task", o.cpus_per_task)):
        if value is not None:
            argv.append(f"{flag}={value}")
    argv += list(o.srun_options)
    argv += ["--", "bash", "-c", step_script(host, runner_root)]
    return argv


def login_command(host: HostConfig, argv: list[str]) -> str:
    """``argv`` as one shell command for an SSH login host: the login environment
    scripts, the scrubbed variables, then ``exec argv`` - every piece quoted."""
    q = shlex.quote
    o = host.slurm
    steps = [f"source {q(s)}" for s in (o.login_env_scripts if o else [])]
    steps.append(LOGIN_SCRUB)
    steps.append("exec " + " ".join(q(a) for a in argv))
    return " ".join(q(a) for a in ["bash", "-c", " && ".join(steps)])


def local_login_env() -> dict[str, str]:
    """This machine's environment for srun and friends, scrubbed like LOGIN_SCRUB."""
    return {k: v for k, v in os.environ.items()
            if not (k.startswith("SLURM_") and k != "SLURM_CONF") and k not in DEVICE_VARIABLES}


# --------------------------------------------------------------------------
# What Slurm prints
# --------------------------------------------------------------------------


def cancelled_line(text: str) -> dict | None:
    """slurmstepd's CANCELLED line in ``text``: job, node, reason (None: scancel)."""
    m = None
    for m in CANCELLED_LINE.finditer(text):
        pass
    if m is None:
        return None
    return {"job_id": m.group(1), "node": m.group(2), "at": m.group(3),
            "due_to": m.group(4).strip().lower() if m.group(4) else None}


def expand_indexes(spec: str) -> list[int]:
    """Slurm's index list ``0-1,3`` -> [0, 1, 3]."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


_GRES_IDX = re.compile(r"([A-Za-z][\w.:-]*?)(?::\d+)?\(IDX:([0-9,\-]+)\)")


def gres_indexes(show_job: str, gres_name: str) -> list[int] | None:
    """The device indexes of ``gres_name`` that ``scontrol -d -o show job`` gives the
    job (``GRES=npu:1(IDX:2)``), or None for a count-only GRES (``npu(CNT:1)``)."""
    for m in re.finditer(r"(?:^|\s)GRES=(\S+)", show_job):
        for g in _GRES_IDX.finditer(m.group(1)):
            if g.group(1).split(":", 1)[0] == gres_name:
                try:
                    return expand_indexes(g.group(2))
                except ValueError:
                    return None
    return None


def duration_s(text: str | None) -> float | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (or ``UNLIMITED``) in seconds."""
    if not text or not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", text):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return float(((days * 24 + h) * 60 + m) * 60 + s)


def time_limit_s(spec: str) -> float | None:
    """srun --time in seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    if not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", spec or ""):
        return None
    if "-" in spec:
        days, rest = spec.split("-", 1)
        parts = [int(p) for p in rest.split(":")] + [0, 0]
        h, m, s = parts[:3]
        return float(((int(days) * 24 + h) * 60 + m) * 60 + s)
    parts = [int(p) for p in spec.split(":")]
    if len(parts) == 1:
        return parts[0] * 60.0
    if len(parts) == 2:
        return parts[0] * 60.0 + parts[1]
    return (parts[0] * 60.0 + parts[1]) * 60.0 + parts[2]


def show_field(show: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", show)
    return m.group(1) if m else None


@dataclass
class JobState:
    job_id: str | None
    state: str | None
    reason: str | None

    def text(self) -> str:
        if self.state is None:
            return "not in squeue"
        return f"{self.state}" + (f" ({self.reason})" if self.reason and self.reason != "None" else "")


# --------------------------------------------------------------------------
# The framed channel through srun (the server side of slurm_step.Relay)
# --------------------------------------------------------------------------


class FramedChannel:
    """The supervisor's line streams over a step's stdio, framed as slurm_step
    describes: what is written goes as one burst of chunks of at most PIECE
    bytes, each but the last after the relay's ack of the one before, so no
    message waits behind another for a delayed ACK (44 ms each way through
    srun).  Presents what SupervisorClient reads from (``readline``) and writes
    to (``write``, ``drain``, ``write_eof``).

    A pump task reads the wire at all times: acks release the sender, ``+``
    chunks are acked, the stream is cut into lines for ``readline``.  A reader
    that has taken every line of a burst and waits for more sends a nudge: the
    relay's next message then finds its last one acknowledged."""

    def __init__(self, reader, writer):
        self._reader, self._writer = reader, writer
        self._lines: asyncio.Queue = asyncio.Queue()
        self._acks = asyncio.Semaphore(0)
        self._pending: list[bytes] = []
        self._send_lock = asyncio.Lock()
        self._ended = False
        self._owe_nudge = False  # a burst ended ("=") and nothing of ours went out since
        self._pump = asyncio.ensure_future(self._read_wire())

    async def _read_wire(self) -> None:
        parts: list[bytes] = []  # the start of a line whose end has not come yet
        try:
            while True:
                line = await self._reader.readline()
                if not line:
                    break
                if isinstance(line, str):
                    line = line.encode()
                tag, body = line[:1], line[1:].rstrip(b"\n")
                if tag == ACK:
                    self._acks.release()
                    continue
                if tag == MORE:
                    self._writer.write(ACK + b"\n")
                elif tag == LINE:
                    self._owe_nudge = True
                elif tag == NUDGE:
                    continue
                elif tag != STREAM:  # not framed (cannot come from the relay): passed on as a line
                    body = line.rstrip(b"\n") + RS_BYTES
                chunk = unframe(body)
                if b"\n" not in chunk:
                    parts.append(chunk)
                    continue
                *complete, rest = chunk.split(b"\n")
                complete[0] = b"".join(parts) + complete[0]
                for text in complete:
                    self._lines.put_nowait(text + b"\n")
                parts = [rest] if rest else []
        except Exception as exc:  # noqa: BLE001 - the stream broke: readline raises it
            self._lines.put_nowait(exc)
        finally:
            self._ended = True
            self._acks.release()
            self._lines.put_nowait(b"")

    async def readline(self) -> bytes:
        if self._lines.empty() and self._owe_nudge and not self._ended:
            self._owe_nudge = False
            try:
                self._writer.write(NUDGE + b"\n")
            except Exception:  # noqa: BLE001 - the stream is going: the read below says so
                pass
        item = await self._lines.get()
        if isinstance(item, Exception):
            raise item
        if item == b"":
            self._lines.put_nowait(b"")  # every later read sees the end too
        return item

    def write(self, data: bytes) -> None:
        self._pending.append(data)

    async def drain(self) -> None:
        async with self._send_lock:
            data, self._pending = b"".join(self._pending), []
            if not data:
                return
            self._owe_nudge = False  # our data carries the ACK
            for piece in frames(data):
                self._writer.write(piece)
                await self._writer.drain()
                if piece[:1] != MORE:
                    continue
                try:
                    await within(self._acks.acquire(), ACK_TIMEOUT_S)
                except asyncio.TimeoutError:
                    raise ConnectionError(f"the step relay did not ack a chunk within {ACK_TIMEOUT_S:g} s") \
                        from None
                if self._ended:
                    raise ConnectionError("the step's output ended while a line was being sent")

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        try:
            if hasattr(self._writer, "can_write_eof") and self._writer.can_write_eof():
                self._writer.write_eof()
            else:
                self._writer.close()
        except Exception:  # noqa: BLE001 - the stream may be gone
            pass

    def close(self) -> None:
        self._pump.cancel()


# --------------------------------------------------------------------------
# The login host: this machine or an SSH host
# --------------------------------------------------------------------------


class LocalStep:
    """srun as a local child process."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr

    @property
    def exit_code(self) -> int | None:
        return self.proc.returncode

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
        except Exception:  # noqa: BLE001 - the pipe may be gone
            pass

    def kill(self) -> None:
        """SIGKILL srun itself - never its process group: srun's helper child ends the job."""
        if self.proc.returncode is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class SSHStep:
    """srun as a process on the SSH login host."""

    def __init__(self, process: Any):
        self.process = process
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr

    @property
    def exit_code(self) -> int | None:
        p = self.process
        if p.exit_status is not None:
            return p.exit_status
        if p.is_closing() or p.channel.get_connection().is_closed():
            return -1  # the channel is gone: for us the step is over
        return None

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self.process.wait_closed()), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        except Exception:  # noqa: BLE001 - a broken connection: closed for us
            return True

    def close_stdin(self) -> None:
        try:
            self.stdin.write_eof()
        except Exception:  # noqa: BLE001
            pass

    def kill(self) -> None:
        """Close the channel: srun's stdin and stdout go, it ends the step."""
        try:
            self.process.close()
        except Exception:  # noqa: BLE001
            pass


class LocalLogin:
    """srun and friends run on this machine, as argument vectors (no shell on our side)."""

    def __init__(self, host: HostConfig):
        self.cfg = host
        self._files: dict[tuple[str, str], tuple[str | None, str | None]] = {}

    def _argv(self, argv: list[str]) -> list[str]:
        scripts = self.cfg.slurm.login_env_scripts if self.cfg.slurm else []
        if not scripts:
            return list(argv)
        q = shlex.quote
        steps = [f"source {q(s)}" for s in scripts] + [LOGIN_SCRUB, 'exec "$@"']
        return ["bash", "-c", " && ".join(steps), "opdebug-login", *argv]

    async def run(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int | None, str, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(argv), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=local_login_env())
        except OSError as exc:
            return None, "", f"cannot run {argv[0]}: {exc.strerror or exc}"
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return None, "", f"{argv[0]} did not answer within {timeout:g} s"
        except BaseException:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    async def spawn(self, argv: list[str]) -> LocalStep:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(argv), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=local_login_env(), start_new_session=True, limit=STREAM_LIMIT)
        except OSError as exc:
            raise SlotCannotStart(f"{self.cfg.name}: cannot run srun on this machine: {exc.strerror or exc} "
                                  "(is Slurm's client installed and on PATH?)", code="slurm_missing") from None
        return LocalStep(proc)

    async def runner_root(self) -> str:
        """The runner staged into work_dir (which the nodes must see), once per content hash."""
        files = bundle_files()
        root = await asyncio.to_thread(stage_tree, Path(self.cfg.work_dir), f"runner-{content_hash(files)[:12]}",
                                       files)
        return str(root)

    async def run_files(self, run: RunFiles) -> tuple[str | None, str | None]:
        """The run's user modules and captured inputs, copied under work_dir (the
        evidence directory need not be on a file system the nodes see)."""
        stamp = json.dumps([_stamp(run.modules_dir), _stamp(run.captured_dir)])
        key = (run.run_id, stamp)
        if key not in self._files:
            self._files[key] = await asyncio.to_thread(self._stage_run_files, run)
        return self._files[key]

    def _stage_run_files(self, run: RunFiles) -> tuple[str | None, str | None]:
        run_id = safe_component(run.run_id, "run_id")
        out: list[str | None] = []
        for kind, local in (("modules", run.modules_dir), ("captured", run.captured_dir)):
            files = _dir_files(local)
            if not files:
                out.append(None)
                continue
            base = private_dir(private_dir(Path(self.cfg.work_dir) / "runs") / run_id)
            out.append(str(stage_tree(base, f"{kind}-{content_hash(files)[:12]}", files)))
        return out[0], out[1]


class SSHLogin:
    """srun and friends run on an SSH login host over the host's shared connection."""

    def __init__(self, connections: SSHConnections, host: HostConfig):
        self.connections = connections
        self.cfg = host

    async def run(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int | None, str, str]:
        import asyncssh

        try:
            conn = await self.connections.connection(self.cfg)
            done = await asyncio.wait_for(conn.run(login_command(self.cfg, argv), check=False), timeout)
        except asyncio.TimeoutError:
            return None, "", f"{argv[0]} did not answer within {timeout:g} s on {self.cfg.address}"
        except (asyncssh.Error, OSError, ToolError) as exc:  # ToolError: cannot connect, host key refused
            return None, "", f"{argv[0]} on {self.cfg.address}: {exc}"
        out = done.stdout if isinstance(done.stdout, str) else (done.stdout or b"").decode("utf-8", "replace")
        err = done.stderr if isinstance(done.stderr, str) else (done.stderr or b"").decode("utf-8", "replace")
        return done.exit_status, out or "", err or ""

    async def spawn(self, argv: list[str]) -> SSHStep:
        import asyncssh

        conn = await self.connections.connection(self.cfg)
        try:
            process = await conn.create_process(login_command(self.cfg, argv), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            if conn.is_closed():
                self.connections.forget_connection(self.cfg.name, conn)
            raise SlotLost(f"cannot start srun on {self.cfg.name} ({self.cfg.address}): {exc}") from None
        return SSHStep(process)

    async def runner_root(self) -> str:
        return await self.connections.runner_root(self.cfg, await self.connections.connection(self.cfg))

    async def run_files(self, run: RunFiles) -> tuple[str | None, str | None]:
        return await self.connections.run_files(self.cfg, run)


def _dir_files(local: Path | None) -> dict[str, bytes]:
    if local is None or not local.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(local.iterdir()) if p.is_file() and not p.name.startswith(".")}


def _stamp(path: Path | None) -> list:
    if path is None or not path.is_dir():
        return []
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir() if p.is_file())


async def job_state(login, *, job_id: str | None = None, name: str | None = None,
                    all_states: bool = False) -> JobState:
    """The job's squeue state and reason (by id, else by name among the caller's jobs)."""
    argv = ["squeue", "-h", "-o", "%i|%T|%r"]
    argv += ["-j", job_id] if job_id else ["--me", f"--name={name}"]
    if all_states:
        argv.append("--states=all")
    code, out, _ = await login.run(argv)
    if code == 0:
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and JOB_ID.fullmatch(parts[0]):
                return JobState(parts[0], parts[1], parts[2])
    return JobState(job_id, None, None)


async def jobs_named(login, names: list[str]) -> list[tuple[str, str, str]]:
    """(id, name, state) of the caller's queued or running jobs with these names."""
    if not names:
        return []
    code, out, _ = await login.run(["squeue", "--me", "-h", "-o", "%i|%j|%T", f"--name={','.join(names)}"])
    if code != 0:
        return []
    rows = [line.strip().split("|") for line in out.splitlines()]
    return [(r[0], r[1], r[2]) for r in rows if len(r) == 3 and JOB_ID.fullmatch(r[0])]


async def own_jobs(login) -> list[tuple[str, str, str]] | None:
    """(id, name, state) of every job of the login user named by this transport; None when squeue fails."""
    code, out, _ = await login.run(["squeue", "--me", "-h", "-o", "%i|%j|%T"])
    if code != 0:
        return None
    rows = [line.strip().split("|") for line in out.splitlines()]
    return [(r[0], r[1], r[2]) for r in rows if len(r) == 3 and JOB_ID.fullmatch(r[0])
            and r[1].startswith(JOB_PREFIX)]


# --------------------------------------------------------------------------
# Per-registry state: logins, job names, device claims, the sweep
# --------------------------------------------------------------------------


_SERIAL = itertools.count()  # job names stay unique across registries (event loops) of one process


class SlurmClusters:
    """What a registry's Slurm slots share: the login of each host, the serial of
    job names, the device numbers handed out per node where the GRES is a bare
    count, and whether the host was swept for jobs of servers that are gone."""

    def __init__(self, ssh: SSHConnections):
        self.ssh = ssh
        self._claims: dict[tuple[str, str], set[int]] = {}
        self._swept: dict[str, tuple[float, asyncio.Future]] = {}
        self._logins: dict[str, tuple[tuple, Any]] = {}
        self.tag = server_tag()

    def login(self, host: HostConfig):
        """The host's login (one per host: its run files are staged once), anew when its entry changed."""
        known = self._logins.get(host.name)
        if known is None or known[0] != host.worker_identity():
            login = LocalLogin(host) if host.transport == "local" else SSHLogin(self.ssh, host)
            known = self._logins[host.name] = (host.worker_identity(), login)
        return known[1]

    def job_name(self, host: HostConfig, slot: int) -> str:
        return f"{JOB_PREFIX}{self.tag}-{host.name}-{slot}-{next(_SERIAL)}"

    def claim(self, host: str, node: str) -> int:
        used = self._claims.setdefault((host, node), set())
        index = next(i for i in itertools.count() if i not in used)
        used.add(index)
        return index

    def unclaim(self, host: str, node: str, index: int) -> None:
        self._claims.get((host, node), set()).discard(index)

    async def sweep_once(self, host: HostConfig, login, run: RunFiles | None) -> None:
        """Cancel the jobs a server of this machine that is gone left behind: once for
        the slots a run starts together (at most every SWEEP_EVERY_S per host)."""
        at, fut = self._swept.get(host.name, (0.0, None))
        if fut is None or time.monotonic() - at > SWEEP_EVERY_S:
            fut = asyncio.ensure_future(sweep(login, host.name, run))
            self._swept[host.name] = (time.monotonic(), fut)
        try:
            await asyncio.shield(fut)
        except Exception:  # noqa: BLE001 - a failed sweep never stops a slot
            pass


async def sweep(login, host_name: str, run: RunFiles | None = None) -> list[str]:
    """Cancel the login user's jobs whose names say a server of this machine started
    them and that server no longer runs; returns their ids."""
    jobs = await own_jobs(login)
    orphans = [job_id for job_id, name, _ in jobs or [] if owner_gone(name)]
    if orphans:
        await login.run(["scancel", *orphans])
        if run is not None:
            await run.say(f"{host_name}: cancelled {len(orphans)} Slurm job(s) left by a server of this machine "
                          f"that is gone: {', '.join(orphans)}")
    return orphans


# --------------------------------------------------------------------------
# The slot
# --------------------------------------------------------------------------


class JobEnded(SlotLost):
    """The scheduler ended the slot's job (time limit, preemption, node failure,
    scancel): the case in flight stays pending with the scheduler's reason."""


class SlurmSlot:
    """One srun job whose single step runs the supervisor on the device the scheduler gave it."""

    def __init__(self, clusters: SlurmClusters, host: HostConfig, slot: int):
        self.clusters = clusters
        self.cfg = host
        self.host = host.name
        self.slot = int(slot)
        self.device = f"{host.device}:slot{self.slot}"  # until the scheduler places it
        self.login = clusters.login(host)
        self.job_name: str | None = None
        self.job_id: str | None = None
        self.node: str | None = None
        self.placement: dict[str, str] = {}
        self.step: LocalStep | SSHStep | None = None
        self.client: SupervisorClient | None = None
        self.channel: FramedChannel | None = None
        self.hello: dict = {}
        self.cases_run = 0
        self.step_s: float | None = None  # srun started -> the step's first line (queue + launch)
        self.start_s: float | None = None  # srun started -> hello (the runner's worker ready)
        self._step_started = False
        self._deadline: float | None = None  # monotonic time of the job's time limit
        self._claim: tuple[str, int] | None = None
        self._alive = False
        self._stderr: deque[str] = deque(maxlen=200)
        self._stderr_task: asyncio.Task | None = None

    @property
    def label(self) -> str:
        job = f" (slurm job {self.job_id})" if self.job_id else ""
        return f"{self.host} slot {self.slot}{job}"

    @property
    def alive(self) -> bool:
        return (self._alive and self.step is not None and self.step.exit_code is None
                and self.client is not None and not self.client.closed)

    # -- start ---------------------------------------------------------------

    async def start(self, run: RunFiles | None = None) -> None:
        t0 = time.monotonic()
        await self.clusters.sweep_once(self.cfg, self.login, run)
        root = await self.login.runner_root()
        self.job_name = self.clusters.job_name(self.cfg, self.slot)
        self.step = await self.login.spawn(srun_argv(self.cfg, self.job_name, root))
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        try:
            started = await self._await_step(run)
            self.step_s = time.monotonic() - t0
            env = await self._place(started)
            self.step.stdin.write(json.dumps({"op": "place", "env": env}).encode() + b"\n")
            await self.step.stdin.drain()
            await self._await_placed()
            self.channel = FramedChannel(self.step.stdout, self.step.stdin)
            self.client = SupervisorClient(self.channel, self.channel, label=self.label)
            self.hello = await self.client.hello(timeout=SLOT_START_TIMEOUT_S)
            if self.hello.get("worker_error"):
                raise WorkerCannotStart(f"{self.label}: the worker cannot start: {self.hello['worker_error']}")
        except JobEnded:
            await self._end()
            raise
        except SlotGone as exc:
            raise await self._explain_loss(exc, "before its first case") from None
        except (ConnectionError, OSError) as exc:
            raise await self._explain_loss(SlotLost(f"{self.label}: {type(exc).__name__}: {exc}"),
                                           "before its first case") from None
        except BaseException:
            await self._end()
            raise
        self.start_s = time.monotonic() - t0
        self._alive = True

    async def _await_step(self, run: RunFiles | None) -> dict:
        """The step helper's first line; meanwhile, a pending job's state is reported
        and bounded by max_pending_s."""
        assert self.step is not None and self.cfg.slurm is not None
        t0 = time.monotonic()
        next_poll = t0 + FIRST_POLL_S
        said: tuple[str | None, str | None] | None = None
        said_at = 0.0
        allocated_at: float | None = None
        max_pending = self.cfg.slurm.max_pending_s
        while True:
            try:
                line = await within(self.step.stdout.readline(), max(0.05, next_poll - time.monotonic()))
            except asyncio.TimeoutError:
                line = None
            if line is not None:
                if not line:  # srun ended before the step said anything
                    await self.step.wait(STOP_GRACE_S)
                    await self._stderr_settled()
                    raise self._start_failure()
                event = _event(line)
                if event.get("event") == "step_started":
                    self._step_started = True
                    return event
                continue  # noise of an environment script
            state = await job_state(self.login, job_id=self._known_job_id(), name=self.job_name)
            if state.job_id:
                self.job_id = self.job_id or state.job_id
            now = time.monotonic()
            if state.state == "PENDING":
                if said != (state.state, state.reason) or now - said_at >= REPORT_EVERY_S:
                    said, said_at = (state.state, state.reason), now
                    await _say(run, f"{self.label}: waiting in the queue, {state.text()}, for {now - t0:.0f} s "
                                    f"(gives up after {max_pending:g} s)")
                if now - t0 > max_pending:
                    raise SlotCannotStart(
                        f"{self.label}: still pending after {max_pending:g} s ({state.text()}); its job was "
                        f"cancelled. Ask for less (slurm.gres, time_limit, partition) or raise max_pending_s",
                        code="slot_pending", details={"job_id": self.job_id, "reason": state.reason})
            elif state.state is not None:
                allocated_at = allocated_at or now
                if now - allocated_at > STEP_START_TIMEOUT_S:
                    raise SlotCannotStart(f"{self.label}: the job is {state.text()} but its step said nothing "
                                          f"within {STEP_START_TIMEOUT_S:g} s; srun: {self.stderr_tail() or '-'}",
                                          code="slot_start_failed")
            next_poll = time.monotonic() + POLL_S

    async def _await_placed(self) -> None:
        """The step helper's answer to the placement (then the supervisor speaks)."""
        assert self.step is not None
        while True:
            try:
                line = await within(self.step.stdout.readline(), SLOT_START_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise SlotLost(f"{self.label}: the step did not answer its placement within "
                               f"{SLOT_START_TIMEOUT_S:g} s") from None
            if not line:
                raise SlotLost(f"{self.label}: the step ended before it took its placement")
            event = _event(line)
            if event.get("event") == "step_placed":
                return
            if event.get("event") == "step_refused":
                raise SlotCannotStart(f"{self.label}: the step refused its placement: {event.get('reason')}",
                                      code="slot_start_failed")

    def _known_job_id(self) -> str | None:
        if self.job_id:
            return self.job_id
        for line in self._stderr:
            m = QUEUED_LINE.search(line) or ALLOCATED_LINE.search(line)
            if m:
                self.job_id = m.group(1)
                return self.job_id
        return None

    def _start_failure(self) -> Exception:
        """srun ended before the step started: a cancelled job is lost (and retried);
        anything else - a refused request, a failing environment script - is a slot that
        cannot start, with srun's own words."""
        text = self.stderr_tail()
        self._known_job_id()
        if cancelled_line(text) or "Job has been cancelled" in text or "already completing or completed" in text:
            return JobEnded(f"{self.label}: the job was cancelled before its step started ({_last_lines(text)})")
        return SlotCannotStart(f"{self.host} slot {self.slot}: srun exited (status {self.step.exit_code if self.step else '?'}) "
                               f"before the job's step started: {_last_lines(text) or 'no message'}",
                               code="slot_start_failed", details={"srun_stderr": text[-2000:]})

    async def _place(self, started: dict) -> dict[str, str]:
        """Settle the device from what the step was given; the variables to send it."""
        job_id, node = str(started.get("job_id") or ""), str(started.get("node") or "")
        if JOB_ID.fullmatch(job_id):
            self.job_id = job_id
        if NODE_NAME.fullmatch(node):
            self.node = node
        visible = {k: v for k, v in (started.get("visible") or {}).items()
                   if isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9,]{1,64}", v)}
        show = ""
        if self.job_id:
            code, show, _ = await self.login.run(["scontrol", "-d", "-o", "show", "job", self.job_id])
            if code != 0:
                show = ""
        limit, ran = duration_s(show_field(show, "TimeLimit")), duration_s(show_field(show, "RunTime"))
        if limit is not None:
            self._deadline = time.monotonic() + limit - (ran or 0.0)
        kind = self.cfg.device
        var = VISIBILITY_VARIABLE.get(kind)
        gres_name = self.cfg.slurm.gres_name if self.cfg.slurm else "npu"
        env: dict[str, str] = {}
        candidates = (var, "ASCEND_VISIBLE_DEVICES") if kind == "npu" else (var,)
        given = next((k for k in candidates if k and visible.get(k)), None)
        gpus = next((k for k in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS") if visible.get(k)), None)
        indexes = gres_indexes(show, gres_name) if show else None
        if given:
            ids, source = visible[given], f"{given} set in the job by the scheduler"
        elif kind == "npu" and gpus:
            ids, source = visible[gpus], f"{gpus} set in the job by the scheduler, as {var}"
            env[var] = ids
        elif indexes:
            ids = ",".join(str(i) for i in indexes)
            source = f"the GRES index of the job (scontrol -d show job: {gres_name} IDX {ids})"
            if var:
                env[var] = ids
        else:
            where = self.node or "?"
            index = self.clusters.claim(self.host, where)
            self._claim = (where, index)
            ids = str(index)
            source = (f"slot order on node {where}: the GRES {gres_name} is a bare count and the scheduler does not "
                      "say which device (safe when the run owns the devices of the node)")
            if var:
                env[var] = ids
        env["OPDEBUG_DEVICE_ID"] = ids
        source = re.sub(r"[^A-Za-z0-9 _.,:;()/=+-]", "_", source)[:200]  # what the step helper takes
        assert PLACEMENT_VALUE.fullmatch(source)
        env["OPDEBUG_DEVICE_SOURCE"] = source
        self.device = f"{kind}:{ids}"[:64]
        self.placement = env
        return env

    # -- cases -----------------------------------------------------------------

    async def run_case(self, run: RunFiles, case: dict, timeout_s: float) -> dict:
        if not self.alive or self.client is None:
            raise SlotLost(f"{self.label} is not running")
        if (self.cases_run and self._deadline is not None
                and time.monotonic() + float(timeout_s) + EXPIRY_MARGIN_S > self._deadline):
            self._alive = False
            raise SlotExpired(f"{self.label}: its job's time limit ({self.cfg.slurm.time_limit}) ends in "
                              f"{max(0.0, self._deadline - time.monotonic()):.0f} s, too soon for a case of "
                              f"{timeout_s:g} s; the slot is replaced")
        modules, captured = await self.login.run_files(run)
        self.cases_run += 1
        try:
            event = await self.client.run_case(run.config, case, timeout_s, modules, captured)
        except SlotGone as exc:
            self._alive = False
            raise await self._explain_loss(exc, "mid-case; nothing recorded") from None
        if _killed_from_outside(event):
            ended = await self._scheduler_end(wait_s=END_CHECK_S)
            if ended:
                self._alive = False
                raise JobEnded(f"{ended} mid-case; nothing recorded (the worker's death is the scheduler's "
                               "doing, not the operator's crash)")
        return event

    async def _scheduler_end(self, wait_s: float) -> str | None:
        """Why the scheduler ended the job ("slurm job N ... was ended by the scheduler
        (time limit)"), looking for ``wait_s`` at most; None when it did not."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if cancelled_line(self.stderr_tail()) or (self.step and self.step.exit_code is not None):
                break
            await asyncio.sleep(0.05)
        await self._stderr_settled()
        line = cancelled_line(self.stderr_tail())
        state = await job_state(self.login, job_id=self.job_id, name=self.job_name, all_states=True)
        settle = time.monotonic() + COMPLETING_WAIT_S
        while state.state == "COMPLETING" and not line and time.monotonic() < settle:
            await asyncio.sleep(0.1)  # scancel's job is COMPLETING, then CANCELLED
            state = await job_state(self.login, job_id=self.job_id, name=self.job_name, all_states=True)
            line = cancelled_line(self.stderr_tail())
        where = f"slurm job {self.job_id or '?'}" + (f" on {self.node}" if self.node else "")
        if line:
            why = line["due_to"] or "scancel"
            return f"{self.host} slot {self.slot}: {where} was ended by the scheduler ({why}; job {state.text()})"
        if state.state in SCHEDULER_END_STATES:
            return (f"{self.host} slot {self.slot}: {where} was ended by the scheduler "
                    f"({SCHEDULER_END_STATES[state.state]}; job {state.text()})")
        return None

    async def _explain_loss(self, exc: BaseException, when: str) -> SlotGone:
        """The channel ended: the scheduler's doing (JobEnded) or a plain loss, with srun's words."""
        if self.step is not None:
            await self.step.wait(STOP_GRACE_S)  # a cancelled step's srun exits within KillWait + 2 s
        ended = await self._scheduler_end(wait_s=0.0)
        await self._end()
        if ended:
            return JobEnded(f"{ended} {when}")
        tail = _last_lines(self.stderr_tail())
        code = self.step.exit_code if self.step else None
        return SlotLost(f"{exc}" + (f"; srun exit status {code}" if code is not None else "")
                        + (f"; srun: {tail}" if tail else ""))

    # -- stop --------------------------------------------------------------------

    async def close(self) -> None:
        """Polite shutdown (the supervisor stops its worker and exits, the job completes), then _end."""
        if self.alive and self.client is not None:
            try:
                await asyncio.wait_for(self.client.close(), STOP_GRACE_S)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        await self._end()

    async def abort(self) -> None:
        """Cancelled or broken: end the step now (stdin EOF ends the supervisor even mid-case)."""
        await self._end()

    async def _end(self) -> None:
        """End the step and make sure its job is gone: stdin EOF, then scancel, then
        SIGKILL of srun's pid; then squeue by name must not list the job."""
        self._alive = False
        step = self.step
        if step is not None and step.exit_code is None:
            if not self._step_started:
                await self._scancel()  # pending, or not yet placed: EOF alone would not end it
            step.close_stdin()
            if not await step.wait(STOP_GRACE_S):
                await self._scancel()
                if not await step.wait(SCANCEL_WAIT_S):
                    step.kill()
                    await step.wait(STOP_GRACE_S)
        if self._stderr_task is not None:
            await self._stderr_settled()
            if not self._stderr_task.done():
                self._stderr_task.cancel()
        if self.channel is not None:
            self.channel.close()
        if self._claim is not None:
            self.clusters.unclaim(self.host, *self._claim)
            self._claim = None
        if self.job_name is not None:
            left = [job_id for job_id, _, _ in await jobs_named(self.login, [self.job_name])]
            if left:
                await self.login.run(["scancel", *left])

    async def _scancel(self) -> None:
        target = [self._known_job_id()] if self._known_job_id() else [f"--name={self.job_name}", "--me"]
        if self.job_name or self.job_id:
            await self.login.run(["scancel", *target])

    # -- stderr --------------------------------------------------------------------

    async def _drain_stderr(self) -> None:
        assert self.step is not None
        try:
            while True:
                line = await self.step.stderr.readline()
                if not line:
                    return
                self._stderr.append(line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line))
        except Exception:  # noqa: BLE001 - the stream broke: nothing more to read
            return

    async def _stderr_settled(self, timeout: float = 1.0) -> None:
        """Let srun's last words arrive (its stderr ends when it exits)."""
        task = self._stderr_task
        if task is not None and not task.done() and self.step is not None and self.step.exit_code is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass

    def stderr_tail(self) -> str:
        return "".join(self._stderr)[-4000:]


def _event(line) -> dict:
    try:
        msg = json.loads(line)
    except (ValueError, TypeError):
        return {}
    return msg if isinstance(msg, dict) else {}


def _last_lines(text: str, n: int = 4) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])[-1500:]


def _killed_from_outside(event: dict) -> bool:
    """A case_done whose worker died of a signal the harness never sends (SIGTERM from
    slurmstepd reaches the worker too): the scheduler may be ending the job."""
    result = event.get("result") or {}
    error = result.get("error") or {}
    if event.get("worker_lost") and result.get("status") == "crash":
        return error.get("signal") in EXTERNAL_SIGNALS and error.get("signature") != "timeout"
    return bool(event.get("worker_lost")) and event.get("outcome") == "harness_error"


async def _say(run: RunFiles | None, text: str) -> None:
    if run is not None:
        await run.say(text)


def make_slurm_slot(clusters: SlurmClusters, host: HostConfig, slot: int) -> SlurmSlot:
    """The pool's factory for an inventory host with scheduler 'slurm'."""
    return SlurmSlot(clusters, host, slot)
