"""What the Slurm transport says to Slurm and reads from it: job names, command lines, output.

Pure functions and constants (no process is started here), shared by the
slot (slurm.py), the login host (slurm_login.py) and check_host's partition
report (slurm_partition.py):

- **job names** carry the server that started the job -
  ``opdebug-<machine>-<pid>-<start ticks>-<host>-<slot>-<n>`` - so a later
  server can tell the jobs of a server that is gone (`owner_gone`); only the
  inventory's host name and constants reach them, never a tool argument;
- **command lines** are built from validated inventory fields and constants
  only: ``srun`` as an argument vector (`srun_argv`), the step's bash script
  (`step_script`), and for an SSH login host one shell command with every piece
  quoted (`login_command`);
- **Slurm's output**: slurmstepd's ``CANCELLED`` line, srun's queued/allocated
  lines, ``scontrol -d -o show job`` fields (the GRES index, time limit, run
  time), Slurm's durations.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

from .bundle import RUNNER_PACKAGE, STEP_SCRIPT
from .inventory import HostConfig
from .slurm_fields import slurm_options

# Job states in which the scheduler, not the task, ended the job.
# CANCELLED with no DUE TO reason is an explicit scancel (by a user, an administrator
# or a script), whether or not slurmstepd's line reached us before the pipe closed.
SCHEDULER_END_STATES = {
    "CANCELLED": "scancel by a user or an administrator",
    "TIMEOUT": "time limit",
    "PREEMPTED": "preemption",
    "NODE_FAIL": "node failure",
    "DEADLINE": "deadline",
    "OUT_OF_MEMORY": "out of memory",
    "BOOT_FAIL": "node boot failure",
    "REVOKED": "revoked",
}
# slurmstepd's line on the step's stderr when the scheduler kills it (22.05:
# "*** STEP 7.0 ON vm CANCELLED AT <time> DUE TO TIME LIMIT ***"; older releases
# leave out "ON <node>"; no DUE TO clause: scancel).
CANCELLED_LINE = re.compile(
    r"\*\*\* (?:STEP|JOB) (\d+)(?:\.\d+)?(?: ON (\S+))? CANCELLED AT (\S+)(?: DUE TO ([^*]+?))? \*\*\*"
)
QUEUED_LINE = re.compile(r"srun: job (\d+) queued and waiting for resources")
ALLOCATED_LINE = re.compile(r"srun: job (\d+) has been allocated resources")
JOB_ID = re.compile(r"^\d{1,12}$")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# The variables stripped from the login environment before srun: an outer allocation's
# SLURM_* would make srun start a step inside it, and the login host's own device
# variables would pass for the scheduler's.  SLURM_CONF stays (it names the cluster).
DEVICE_VARIABLES = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
LOGIN_SCRUB = "unset " + " ".join(DEVICE_VARIABLES) + " $(compgen -e SLURM_ | grep -vx SLURM_CONF)"


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
    steps.append(
        " ".join(
            [
                "exec",
                q(host.python),
                q(f"{runner_root}/{STEP_SCRIPT}"),
                "--",
                q(host.python),
                "-m",
                RUNNER_PACKAGE,
                "supervise",
                "--device",
                q(host.device),
            ]
        )
    )
    return " && ".join(steps)


def srun_argv(host: HostConfig, job_name: str, runner_root: str) -> list[str]:
    """The slot's srun command as an argument vector (no ``-u``: it would give the
    task a pty; no ``--pty``, no ``--label``: the channel stays the runner's lines)."""
    o = slurm_options(host)
    assert o is not None
    argv = [
        "srun",
        f"--job-name={job_name}",
        "--nodes=1",
        "--ntasks=1",
        f"--time={o.time_limit}",
        f"--gres={o.gres}",
        "--kill-on-bad-exit=1",
    ]
    for flag, value in (
        ("--partition", o.partition),
        ("--account", o.account),
        ("--qos", o.qos),
        ("--cpus-per-task", o.cpus_per_task),
    ):
        if value is not None:
            argv.append(f"{flag}={value}")
    argv += list(o.srun_options)
    argv += ["--", "bash", "-c", step_script(host, runner_root)]
    return argv


def login_command(host: HostConfig, argv: list[str]) -> str:
    """``argv`` as one shell command for an SSH login host: the login environment
    scripts, the scrubbed variables, then ``exec argv`` - every piece quoted."""
    q = shlex.quote
    o = slurm_options(host)
    steps = [f"source {q(s)}" for s in (o.login_env_scripts if o else [])]
    steps.append(LOGIN_SCRUB)
    steps.append("exec " + " ".join(q(a) for a in argv))
    return " ".join(q(a) for a in ["bash", "-c", " && ".join(steps)])


def local_login_env() -> dict[str, str]:
    """This machine's environment for srun and friends, scrubbed like LOGIN_SCRUB."""
    return {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("SLURM_") and k != "SLURM_CONF") and k not in DEVICE_VARIABLES
    }


# --------------------------------------------------------------------------
# What Slurm prints
# --------------------------------------------------------------------------


def cancelled_line(text: str) -> dict | None:
    """slurmstepd's CANCELLED line in ``text``: job, node, reason (None: scancel)."""
    matches = list(CANCELLED_LINE.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    return {
        "job_id": m.group(1),
        "node": m.group(2),
        "at": m.group(3),
        "due_to": m.group(4).strip().lower() if m.group(4) else None,
    }


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
