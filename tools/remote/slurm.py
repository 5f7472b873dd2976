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
  process group: srun's helper child ends the job); it returns once squeue no
  longer lists the job.  Every process of the step stays in the step's
  process tree, which Slurm follows and ends (time limit, scancel): the step's
  helper outlives the SIGTERM and adopts the supervisor's orphans - its
  watchdog, in a session of its own - until they are gone (slurm_step.relay).  A server killed outright
  closes every step's stdin with it; the jobs end on their own, and the first
  slot a later server starts on the host cancels the jobs whose names say they
  belong to a server of this machine that is gone (`slurm_login.sweep`).

The host kind ``slurm`` (`SlurmHost`) runs its slots as `SlurmSlot`, the common
host.SupervisorSlot with the device taken from the scheduler instead of a lease.
The parts: slurm_commands (job names, command lines, what Slurm prints),
slurm_login (this machine or an SSH host: srun and the job queries),
slurm_channel (the framed channel), slurm_step (the step's helper, shipped),
slurm_partition (check_host's read-only report); this module is the slot.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ..runner.phases import killed_from_outside  # stdlib only: the runner's one kill decision
from .envelopes import MalformedEnvelope, error_doc, parse_case_done
from .errors import SlotCannotStart, SlotExpired, SlotGone, SlotLost
from .host import HostContext, HostKind, HostProcess, ProbeRun, SupervisorSlot
from .inventory import VISIBILITY_VARIABLE, HostConfig
from .slot import RunFiles
from .slurm_channel import FramedChannel
from .slurm_commands import (
    ALLOCATED_LINE,
    JOB_ID,
    JOB_PREFIX,
    NODE_NAME,
    QUEUED_LINE,
    SCHEDULER_END_STATES,
    cancelled_line,
    duration_s,
    gres_indexes,
    server_tag,
    show_field,
    srun_argv,
)
from .slurm_fields import SlurmFields, slurm_options
from .slurm_login import job_state, jobs_named, login_for, sweep
from .slurm_step import PLACEMENT_VALUE
from .ssh import SSHConnections
from .supervisor_client import within

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
SWEEP_EVERY_S = 30.0  # a host is swept for jobs of servers that are gone at most this often


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
            login = login_for(host, self.ssh)
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
        except Exception:  # a failed sweep never stops a slot
            pass


# --------------------------------------------------------------------------
# The slot
# --------------------------------------------------------------------------


class JobEnded(SlotLost):
    """The scheduler ended the slot's job (time limit, preemption, node failure,
    scancel): the case in flight stays pending with the scheduler's reason."""


class SlurmHost(HostKind):
    """A Slurm host: a login host (this machine or SSH) where srun starts each slot as a job."""

    name = "slurm"
    fields = SlurmFields
    device_source = "scheduler"
    keep_warm = False  # a slot is a job: it lives for one run

    def __init__(self, cfg: HostConfig, context: HostContext):
        super().__init__(cfg, context)
        ssh = context.shared("ssh", SSHConnections)
        self.clusters: SlurmClusters = context.shared("slurm", lambda: SlurmClusters(ssh))
        self.login = self.clusters.login(cfg)

    @classmethod
    def check_entry(cls, cfg: HostConfig) -> None:
        super().check_entry(cfg)  # no all_devices
        if cfg.transport not in ("local", "ssh"):
            raise ValueError(
                f"a Slurm host's login host is this machine (transport 'local') or 'ssh', not {cfg.transport!r}"
            )
        if "devices" in cfg.model_fields_set:
            raise ValueError(
                "a scheduler host takes no 'devices': the scheduler picks them; 'concurrency' "
                "is the number of jobs (slots) at once"
            )
        if cfg.container:
            raise ValueError(
                "a scheduler host takes no 'container' (a site's container plugin goes in slurm.srun_options)"
            )

    @classmethod
    def slot_devices(cls, cfg: HostConfig) -> list[int]:
        """Slot numbers 0..concurrency-1: the scheduler picks the devices."""
        return list(range(cfg.concurrency or 1))

    def lent_devices(self, seen: int | None) -> list[int]:
        return []  # the scheduler's, known once a job runs

    @property
    def address(self) -> str | None:
        return self.login.address

    async def probe(self, script: bytes, here: str, timeout: float) -> ProbeRun:
        """What the partition offers against the request, read-only: no job is started
        (the stdlib probe would need one), nothing is written."""
        from .slurm_partition import partition_report

        report, missing = await partition_report(self.login, self.cfg)
        if self.address is None and not os.access(_existing_parent(self.cfg.work_dir), os.W_OK):
            missing.append(f"a writable work_dir ({self.cfg.work_dir}) on a file system the nodes see")
        return ProbeRun(self.cfg.work_dir, ran=False, scheduler_report=report, missing=missing)

    async def stage_runner(self) -> str:
        return await self.login.runner_root()

    async def stage_run_files(self, run: Any) -> tuple[str | None, str | None]:
        return await self.login.run_files(run)

    async def start_process(self, argv: list[str], env: dict[str, str], root: str, device: int) -> HostProcess:
        """``argv`` is srun's: the environment reaches the step through its placement."""
        return await self.login.spawn(argv)

    async def run_command(
        self,
        argv: list[str],
        timeout: float,
        *,
        stdin: bytes | None = None,
        merge_stderr: bool = False,
        each_env_script: bool = False,
    ) -> tuple[int | None, str, str]:
        code, out, err = await self.login.run(argv, timeout)
        return (code, out + err, "") if merge_stderr else (code, out, err)

    def new_slot(self, device: int) -> SlurmSlot:
        return SlurmSlot(self, device)


HOST_KIND = SlurmHost


class SlurmSlot(SupervisorSlot):
    """One srun job whose single step runs the supervisor on the device the scheduler gave it:
    the common slot lifecycle, with the device taken from the scheduler instead of a lease."""

    kind: SlurmHost

    def __init__(self, kind: SlurmHost, slot: int):
        super().__init__(kind, slot)
        self.clusters = kind.clusters
        self.slot = int(slot)
        self.device = f"{self.cfg.device}:slot{self.slot}"  # until the scheduler places it
        self.login = kind.login
        self.stderr_chars = 4000  # srun's and slurmstepd's lines are read for the scheduler's hand
        self.job_name: str | None = None
        self.job_id: str | None = None
        self.node: str | None = None
        self.placement: dict[str, str] = {}
        self.channel: FramedChannel | None = None
        self.step_s: float | None = None  # srun started -> the step's first line (queue + launch)
        self.start_s: float | None = None  # srun started -> hello (the runner's worker ready)
        self._t0 = 0.0
        self._step_started = False
        self._deadline: float | None = None  # monotonic time of the job's time limit
        self._claim: tuple[str, int] | None = None

    @property
    def step(self) -> HostProcess | None:
        return self.process

    @property
    def label(self) -> str:
        job = f" (slurm job {self.job_id})" if self.job_id else ""
        return f"{self.host} slot {self.slot}{job}"

    # -- start ---------------------------------------------------------------

    async def start(self, run: RunFiles | None = None) -> None:
        self._t0 = time.monotonic()
        await super().start(run)
        self.start_s = time.monotonic() - self._t0

    async def _spawn(self, root: str, run: RunFiles | None) -> HostProcess:
        await self.clusters.sweep_once(self.cfg, self.login, run)
        self.job_name = self.clusters.job_name(self.cfg, self.slot)
        return await self.kind.start_process(srun_argv(self.cfg, self.job_name, root), {}, root, self.slot)

    async def _take_device(self, run: RunFiles | None) -> tuple[Any, Any]:
        """The scheduler's device: the step says where it runs, the server settles the
        device and sends it; then the supervisor speaks through the framed channel."""
        assert self.process is not None
        started = await self._await_step(run)
        self.step_s = time.monotonic() - self._t0
        env = await self._place(started)
        self.process.stdin.write(json.dumps({"op": "place", "env": env}).encode() + b"\n")
        await self.process.stdin.drain()
        await self._await_placed()
        self.channel = FramedChannel(self.process.stdout, self.process.stdin)
        return self.channel, self.channel

    async def _failed_start(self, exc: BaseException) -> BaseException:
        if isinstance(exc, SlotGone) and not isinstance(exc, JobEnded):
            return await self._explain_loss(exc, "before its first case")
        if isinstance(exc, (ConnectionError, OSError)):
            return await self._explain_loss(
                SlotLost(f"{self.label}: {type(exc).__name__}: {exc}"), "before its first case"
            )
        await self._end()
        return exc

    async def _await_step(self, run: RunFiles | None) -> dict:
        """The step helper's first line; meanwhile, a pending job's state is reported
        and bounded by max_pending_s."""
        assert self.step is not None
        t0 = time.monotonic()
        next_poll = t0 + FIRST_POLL_S
        said: tuple[str | None, str | None] | None = None
        said_at = 0.0
        allocated_at: float | None = None
        max_pending = slurm_options(self.cfg).max_pending_s
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
                    await _say(
                        run,
                        f"{self.label}: waiting in the queue, {state.text()}, for {now - t0:.0f} s "
                        f"(gives up after {max_pending:g} s)",
                    )
                if now - t0 > max_pending:
                    raise SlotCannotStart(
                        f"{self.label}: still pending after {max_pending:g} s ({state.text()}); its job was "
                        f"cancelled. Ask for less (slurm.gres, time_limit, partition) or raise max_pending_s",
                        code="slot_pending",
                        details={"job_id": self.job_id, "reason": state.reason},
                    )
            elif state.state is not None:
                allocated_at = allocated_at or now
                if now - allocated_at > STEP_START_TIMEOUT_S:
                    raise SlotCannotStart(
                        f"{self.label}: the job is {state.text()} but its step said nothing "
                        f"within {STEP_START_TIMEOUT_S:g} s; srun: {self.stderr_tail() or '-'}",
                        code="slot_start_failed",
                    )
            next_poll = time.monotonic() + POLL_S

    async def _await_placed(self) -> None:
        """The step helper's answer to the placement (then the supervisor speaks)."""
        assert self.step is not None
        while True:
            try:
                line = await within(self.step.stdout.readline(), SLOT_START_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise SlotLost(
                    f"{self.label}: the step did not answer its placement within {SLOT_START_TIMEOUT_S:g} s"
                ) from None
            if not line:
                raise SlotLost(f"{self.label}: the step ended before it took its placement")
            event = _event(line)
            if event.get("event") == "step_placed":
                return
            if event.get("event") == "step_refused":
                raise SlotCannotStart(
                    f"{self.label}: the step refused its placement: {event.get('reason')}", code="slot_start_failed"
                )

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
        return SlotCannotStart(
            f"{self.host} slot {self.slot}: srun exited (status {self.step.exit_code if self.step else '?'}) "
            f"before the job's step started: {_last_lines(text) or 'no message'}",
            code="slot_start_failed",
            details={"srun_stderr": text[-2000:]},
        )

    async def _place(self, started: dict) -> dict[str, str]:
        """Settle the device from what the step was given; the variables to send it."""
        job_id, node = str(started.get("job_id") or ""), str(started.get("node") or "")
        if JOB_ID.fullmatch(job_id):
            self.job_id = job_id
        if NODE_NAME.fullmatch(node):
            self.node = node
        visible = {
            k: v
            for k, v in (started.get("visible") or {}).items()
            if isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9,]{1,64}", v)
        }
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
        gres_name = slurm_options(self.cfg).gres_name
        env: dict[str, str] = {}
        candidates = (var, "ASCEND_VISIBLE_DEVICES") if kind == "npu" else (var,)
        given = next((k for k in candidates if k and visible.get(k)), None)
        gpus = next((k for k in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS") if visible.get(k)), None)
        indexes = gres_indexes(show, gres_name) if show else None
        if given:
            ids, source = visible[given], f"{given} set in the job by the scheduler"
        elif kind == "npu" and gpus and var:  # var: the npu's visibility variable, always named
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
            source = (
                f"slot order on node {where}: the GRES {gres_name} is a bare count and the scheduler does not "
                "say which device (safe when the run owns the devices of the node)"
            )
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

    async def _before_case(self, timeout_s: float) -> None:
        if (
            self.cases_run
            and self._deadline is not None
            and time.monotonic() + float(timeout_s) + EXPIRY_MARGIN_S > self._deadline
        ):
            self._alive = False
            limit = slurm_options(self.cfg).time_limit
            raise SlotExpired(
                f"{self.label}: its job's time limit ({limit}) ends in "
                f"{max(0.0, self._deadline - time.monotonic()):.0f} s, too soon for a case of "
                f"{timeout_s:g} s; the slot is replaced"
            )

    async def _after_case(self, event: dict) -> dict:
        if _scheduler_may_have_ended(event):
            ended = await self._scheduler_end(wait_s=END_CHECK_S)
            if ended:
                self._alive = False
                raise JobEnded(
                    f"{ended} mid-case; nothing recorded (the worker's death is the scheduler's "
                    "doing, not the operator's crash)"
                )
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
            why = line["due_to"] or SCHEDULER_END_STATES["CANCELLED"]
            return f"{self.host} slot {self.slot}: {where} was ended by the scheduler ({why}; job {state.text()})"
        if state.state in SCHEDULER_END_STATES:
            return (
                f"{self.host} slot {self.slot}: {where} was ended by the scheduler "
                f"({SCHEDULER_END_STATES[state.state]}; job {state.text()})"
            )
        return None

    async def _explain_loss(self, exc: BaseException, when: str = "mid-case; nothing recorded") -> SlotGone:
        """The channel ended: the scheduler's doing (JobEnded) or a plain loss, with srun's words."""
        if self.step is not None:
            await self.step.wait(STOP_GRACE_S)  # a cancelled step's srun exits within KillWait + 2 s
        ended = await self._scheduler_end(wait_s=0.0)
        await self._end()
        if ended:
            return JobEnded(f"{ended} {when}")
        tail = _last_lines(self.stderr_tail())
        code = self.step.exit_code if self.step else None
        return SlotLost(
            f"{exc}" + (f"; srun exit status {code}" if code is not None else "") + (f"; srun: {tail}" if tail else "")
        )

    # -- stop --------------------------------------------------------------------

    async def _end(self) -> None:
        """End the step and make sure its job is gone: stdin EOF, then scancel, then
        SIGKILL of srun's pid; then squeue by name must not list the job (a COMPLETING
        job still has processes on its node: wait for it to end)."""
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
            await self._job_gone()

    async def _job_gone(self) -> None:
        """Cancel the job if squeue still lists it, and wait (at most SCANCEL_WAIT_S) until it does not."""
        assert self.job_name is not None
        deadline = time.monotonic() + SCANCEL_WAIT_S
        cancelled = False
        while True:
            left = await jobs_named(self.login, [self.job_name])
            if not left or time.monotonic() > deadline:
                return
            running = [job_id for job_id, _, state in left if state != "COMPLETING"]
            if running and not cancelled:
                await self.login.run(["scancel", *running])
                cancelled = True
            await asyncio.sleep(0.1)

    async def _scancel(self) -> None:
        target = [self._known_job_id()] if self._known_job_id() else [f"--name={self.job_name}", "--me"]
        if self.job_name or self.job_id:
            await self.login.run(["scancel", *target])


def _existing_parent(path: str) -> str:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return str(p)


def _event(line) -> dict:
    try:
        msg = json.loads(line)
    except (ValueError, TypeError):
        return {}
    return msg if isinstance(msg, dict) else {}


def _last_lines(text: str, n: int = 4) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])[-1500:]


def _scheduler_may_have_ended(event: dict) -> bool:
    """A case_done whose worker was lost to a signal the harness never sends (SIGTERM from
    slurmstepd reaches the worker too) or in a harness phase: the scheduler may be ending the job."""
    try:
        done = parse_case_done(event)
    except MalformedEnvelope:
        return False
    result = done.result
    if done.worker_lost and result is not None:
        return result.status == "crash" and killed_from_outside(error_doc(result))
    return done.worker_lost and done.outcome == "harness_error"


async def _say(run: RunFiles | None, text: str) -> None:
    if run is not None:
        await run.say(text)
