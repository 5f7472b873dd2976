"""The ``slurm`` kind's own inventory fields: the ``[hosts.NAME.slurm]`` table.

How each slot's job is asked of Slurm (`SlurmOptions`), every value checked
against a strict pattern: they end up on srun's command line (an argument
vector on this machine, each word shlex-quoted over SSH).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from ..schemas import Strict
from .inventory import AbsPath, HostConfig, matching

_SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Slurm's --time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_SLURM_TIME_RE = re.compile(r"^(?:\d{1,7}(?::\d{1,2}){0,2}|\d{1,4}-\d{1,2}(?::\d{1,2}){0,2})$")
# name[:type]:count, e.g. npu:1, gpu:a100:2
_GRES_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}(?::[A-Za-z0-9_.-]{1,64})?:[1-9][0-9]{0,3}$")
_SRUN_OPTION_RE = re.compile(r"^--[a-z][a-z0-9-]{1,40}(?:=[A-Za-z0-9_.,:=/@%+\[\]-]{1,256})?$")
# srun options the transport sets itself, or that would break the protocol channel
# (a pty, labelled or redirected stdio, more than one task) or leave the job's own
# allocation (--jobid runs a step inside somebody else's job).
SRUN_RESERVED = frozenset(
    {
        "--job-name",
        "--partition",
        "--account",
        "--qos",
        "--time",
        "--gres",
        "--nodes",
        "--ntasks",
        "--cpus-per-task",
        "--pty",
        "--unbuffered",
        "--label",
        "--input",
        "--output",
        "--error",
        "--jobid",
        "--ntasks-per-node",
        "--multi-prog",
        "--kill-on-bad-exit",
        "--quit-on-interrupt",
        "--overlap",
        "--het-group",
        "--open-mode",
        "--export",
        "--chdir",
        "--immediate",
        "--no-allocate",
        "--test-only",
        "--wait",
        "--bcast",
        "--propagate",
        "--task-prolog",
        "--task-epilog",
        "--prolog",
        "--epilog",
    }
)


def _srun_option(value: str) -> str:
    if not _SRUN_OPTION_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an srun option of the form --name or --name=value (long options "
            "only; values of letters, digits and _ . , : = / @ % + [ ] -)"
        )
    name = value.split("=", 1)[0]
    if name in SRUN_RESERVED:
        raise ValueError(
            f"{name} is set by the transport or breaks the protocol channel; it cannot be given in srun_options"
        )
    return value


SlurmName = Annotated[str, AfterValidator(matching(_SLURM_NAME_RE, "Slurm partition, account or QoS name"))]
SlurmTime = Annotated[str, AfterValidator(matching(_SLURM_TIME_RE, "Slurm time limit (M, H:M:S, D-H:M:S...)"))]
Gres = Annotated[str, AfterValidator(matching(_GRES_RE, "GRES request name[:type]:count (e.g. npu:1)"))]
SrunOption = Annotated[str, AfterValidator(_srun_option)]


class SlurmOptions(Strict):
    """How a scheduler host's slots are asked of Slurm: one ``srun`` job per slot."""

    partition: SlurmName | None = Field(None, description="--partition (none: the cluster's default partition)")
    account: SlurmName | None = Field(None, description="--account to charge")
    qos: SlurmName | None = Field(None, description="--qos")
    time_limit: SlurmTime = Field(
        "01:00:00",
        description="--time of each slot's job (always passed): the "
        "longest one slot may live; a slot near it is replaced before its next case",
    )
    gres: Gres = Field("npu:1", description="--gres of each slot: the devices one slot gets (name[:type]:count)")
    cpus_per_task: Annotated[int, Field(ge=1, le=1024)] | None = Field(None, description="--cpus-per-task")
    srun_options: list[SrunOption] = Field(
        default_factory=list,
        max_length=32,
        description=(
            "further srun options, each one argument (--name or --name=value), e.g. --constraint=910b, "
            "--exclusive, --nodelist=n1; the options the transport sets are refused"
        ),
    )
    login_env_scripts: list[AbsPath] = Field(
        default_factory=list,
        description=(
            "scripts sourced on the login host before srun, squeue, scancel, scontrol and sinfo (e.g. a module "
            "setup that puts Slurm on PATH or sets SLURM_CONF)"
        ),
    )
    max_pending_s: Annotated[float, Field(gt=0, le=86400)] = Field(
        600.0,
        description=(
            "how long a slot's job may wait in the queue (its squeue state and reason are reported meanwhile) "
            "before the slot gives up and its job is cancelled"
        ),
    )

    @property
    def gres_name(self) -> str:
        return self.gres.split(":", 1)[0]


class SlurmFields(Strict):
    """The fields a scheduler host adds to its login host's (SlurmHost.fields)."""

    slurm: SlurmOptions = Field(default_factory=SlurmOptions, description="the Slurm request of each slot")


def slurm_options(host: HostConfig) -> SlurmOptions:
    return host.fields(SlurmFields).slurm
