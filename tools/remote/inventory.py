"""The host inventory: which machines the tools may run cases on.

A TOML file (path by argument or $OPDEBUG_INVENTORY) with one table per host::

    [hosts.npu-a]
    hostname = "10.0.0.12"          # or: ssh_config_alias = "npu-a" (+ ssh_config)
    user = "debug"
    identity_files = ["/home/me/.ssh/id_ed25519"]   # none: ssh-agent / default keys
    known_hosts = "/home/me/.ssh/known_hosts"
    python = "/usr/local/python3.10/bin/python3"
    env_scripts = ["/usr/local/Ascend/ascend-toolkit/set_env.sh"]
    container = "cann-dev"          # optional: docker exec -i NAME ...
    device = "npu"
    devices = [0, 1, 2, 3, 4, 5, 6, 7]
    work_dir = "/tmp/opdebug"
    concurrency = 8

With ``container``, the worker runs inside ``docker exec -i NAME``, while
the runner is uploaded by SFTP to the host's filesystem: ``work_dir`` must be
mounted into the container at the same path (check_host verifies it).

A host behind a cluster scheduler is a *login host* (``transport = "local"``:
this machine, or ``"ssh"`` with the fields above) plus ``scheduler = "slurm"``
and a ``[hosts.NAME.slurm]`` table (`SlurmOptions`); each slot is one ``srun``
job (``concurrency`` of them at once), the scheduler picks the node and the
device, ``env_scripts`` are sourced on the node inside the job, and
``work_dir`` must be on a file system the nodes see (see tools/remote/slurm.py)::

    [hosts.cluster]
    transport = "local"             # the login host: this machine (or "ssh" + hostname, user, ...)
    scheduler = "slurm"
    device = "npu"
    concurrency = 4                 # jobs at once: one slot each
    python = "/usr/local/python3.10/bin/python3"
    env_scripts = ["/usr/local/Ascend/ascend-toolkit/set_env.sh"]
    work_dir = "/home/me/.opdebug"  # shared with the nodes

    [hosts.cluster.slurm]
    partition = "ascend"
    account = "proj42"
    qos = "normal"
    time_limit = "02:00:00"
    gres = "npu:1"
    srun_options = ["--constraint=910b"]

The host ``local`` (the same runner as a local subprocess, device cpu) is
always there; with ``all_devices = true`` a local host lends a slot on every
device its probe sees (check_host's count), each under its own lease.  The
``transport`` (and ``scheduler``) names a host kind: a module of tools/remote
(kinds.py, references/host-kinds.md).  Tools take host *names* only; every field that ends up in a
remote command line is checked against a strict pattern here and quoted again
with shlex.quote where the command is built.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, model_validator

from ..errors import ToolError
from ..schemas import Slug, Strict, format_validation_error
from .kinds import UnknownHostKind, host_kind

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

INVENTORY_ENV = "OPDEBUG_INVENTORY"
LOCAL = "local"
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")

_HOSTNAME_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*|[0-9A-Fa-f:.]{2,45})$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_ABS_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@=-]{0,1023}$")
_COMMAND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
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


def _matching(regex: re.Pattern, what: str):
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what}")
        return value

    return check


def _abs_path(value: str) -> str:
    if not _ABS_PATH_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} must be an absolute path of letters, digits and . _ / + @ = - "
            "(no spaces, quotes, '~' or shell characters)"
        )
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r} must not contain '.' or '..' components")
    return value.rstrip("/") or "/"


def _work_dir(value: str) -> str:
    value = _abs_path(value)
    if value == "/":
        raise ValueError(
            "'/' cannot be the work_dir: give a directory of its own (e.g. /home/USER/.opdebug), "
            "owned by the login user and writable by nobody else"
        )
    return value


def _known_kind(value: str) -> str:
    try:
        host_kind(value)
    except UnknownHostKind as exc:
        raise ValueError(str(exc)) from None
    return value


def _python(value: str) -> str:
    if value.startswith("/"):
        return _abs_path(value)
    if not _COMMAND_RE.fullmatch(value):
        raise ValueError(f"{value!r} must be an absolute path or a plain command name such as 'python3'")
    return value


Hostname = Annotated[str, AfterValidator(_matching(_HOSTNAME_RE, "host name or IP address"))]
User = Annotated[str, AfterValidator(_matching(_USER_RE, "user name"))]
Alias = Annotated[str, AfterValidator(_matching(_ALIAS_RE, "OpenSSH config alias"))]
Container = Annotated[str, AfterValidator(_matching(_CONTAINER_RE, "container name"))]
AbsPath = Annotated[str, AfterValidator(_abs_path)]
Python = Annotated[str, AfterValidator(_python)]
DeviceKind = Literal["npu", "cuda", "cpu"]

# The variable that makes device ID the only visible one, per device kind.
VISIBILITY_VARIABLE = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES", "cpu": None}


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


SlurmName = Annotated[str, AfterValidator(_matching(_SLURM_NAME_RE, "Slurm partition, account or QoS name"))]
SlurmTime = Annotated[str, AfterValidator(_matching(_SLURM_TIME_RE, "Slurm time limit (M, H:M:S, D-H:M:S...)"))]
Gres = Annotated[str, AfterValidator(_matching(_GRES_RE, "GRES request name[:type]:count (e.g. npu:1)"))]
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


class HostConfig(Strict):
    name: Slug
    # The host kind: "ssh", "local", or any kind a module of tools/remote defines (kinds.py).
    transport: Annotated[str, AfterValidator(_known_kind)] = "ssh"
    # Address: hostname (+ port, user), or an alias of an OpenSSH config file.
    hostname: Hostname | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: User | None = None
    ssh_config_alias: Alias | None = None
    ssh_config: AbsPath | None = None
    # Keys: explicit files, else the agent ($SSH_AUTH_SOCK) and ~/.ssh defaults.
    identity_files: list[AbsPath] = Field(default_factory=list)
    # Never disabled; defaults to ~/.ssh/known_hosts when that file exists.
    known_hosts: AbsPath | None = None
    python: Python = "python3"
    env_scripts: list[AbsPath] = Field(default_factory=list)
    container: Container | None = None
    device: DeviceKind = "npu"
    devices: list[Annotated[int, Field(ge=0, le=1023)]] = Field(default_factory=lambda: [0], min_length=1)
    work_dir: Annotated[str, AfterValidator(_work_dir)] = "/tmp/opdebug"
    concurrency: Annotated[int, Field(ge=1, le=1024)] | None = None
    connect_timeout: Annotated[float, Field(gt=0, le=600)] = 15.0
    # The host sshd's MaxSessions (OpenSSH default 10): a host with more slots
    # than fit on one connection (one session kept for SFTP) gets another one.
    max_sessions: Annotated[int, Field(ge=2, le=1024)] = 10
    # How long a slot waits for a device leased by someone else before giving up.
    lease_wait_s: Annotated[float, Field(ge=0, le=3600)] = 30.0
    # A warm worker nobody used for this long is shut down (its lease released).
    idle_timeout_s: Annotated[float, Field(gt=0, le=86400)] = 600.0
    scheduler: Literal["slurm"] | None = Field(
        None,
        description=(
            "a cluster scheduler between the login host and the devices: each slot is one of its jobs, no lease"
        ),
    )
    slurm: SlurmOptions | None = Field(None, description="the Slurm request of each slot (scheduler 'slurm')")
    all_devices: bool = Field(
        False,
        description=(
            "a local host lends a slot on every device its probe sees (check_host's 'devices ... of N seen': cpu "
            "counts os.cpu_count(), cuda/npu torch's device count), each under its own lease, instead of the listed "
            "'devices' (still capped by 'concurrency')"
        ),
    )

    @model_validator(mode="after")
    def _shape(self) -> HostConfig:
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"'devices' repeats an id: {self.devices}")
        if self.scheduler is None and self.slurm is not None:
            raise ValueError("a [slurm] table needs scheduler = 'slurm'")
        if self.scheduler == "slurm":
            if self.slurm is None:
                self.slurm = SlurmOptions()
            if "devices" in self.model_fields_set:
                raise ValueError(
                    "a scheduler host takes no 'devices': the scheduler picks them; 'concurrency' "
                    "is the number of jobs (slots) at once"
                )
            if self.container:
                raise ValueError(
                    "a scheduler host takes no 'container' (a site's container plugin goes in slurm.srun_options)"
                )
        remote = host_kind(self.transport).remote
        if self.all_devices and (remote or self.scheduler):
            raise ValueError("'all_devices' is for a host of this machine (transport 'local') without a scheduler")
        if not remote and self.scheduler:
            if self.hostname or self.ssh_config_alias:
                raise ValueError(
                    "transport 'local' (the login host is this machine) takes no hostname or ssh_config_alias"
                )
            return self
        if not remote:
            if self.hostname or self.ssh_config_alias or self.container or self.env_scripts:
                raise ValueError("transport 'local' takes no hostname, ssh_config_alias, container or env_scripts")
            return self
        if (self.hostname is None) == (self.ssh_config_alias is None):
            raise ValueError("give exactly one of 'hostname' or 'ssh_config_alias'")
        if self.ssh_config and not self.ssh_config_alias:
            raise ValueError("'ssh_config' is only used with 'ssh_config_alias'")
        if self.known_hosts is None:
            default = DEFAULT_KNOWN_HOSTS.expanduser()
            if not default.is_file():
                raise ValueError(f"'known_hosts' is required: {default} does not exist (host keys are always verified)")
            self.known_hosts = str(default)
        return self

    def worker_identity(self) -> tuple:
        """What a connection and a started worker depend on: when any of it changes,
        they are not reused (concurrency, timeouts and lease waits may change freely)."""
        return (
            self.transport,
            self.hostname,
            self.port,
            self.user,
            self.ssh_config_alias,
            self.ssh_config,
            tuple(self.identity_files),
            self.known_hosts,
            self.python,
            tuple(self.env_scripts),
            self.container,
            self.device,
            self.work_dir,
            self.max_sessions,
            self.scheduler,
            self.slurm.model_dump_json() if self.slurm else None,
            self.all_devices,
        )

    @property
    def slot_devices(self) -> list[int]:
        """The devices this host lends to a run: the first `concurrency` ids (a
        scheduler host: slot numbers 0..concurrency-1, the scheduler picks the devices)."""
        if self.scheduler:
            return list(range(self.concurrency or 1))
        return self.devices[: self.concurrency or len(self.devices)]

    @property
    def address(self) -> str:
        """How the host is named in messages (never used to build a shell command)."""
        if self.ssh_config_alias:
            return f"{self.ssh_config_alias} (alias in {self.ssh_config or '~/.ssh/config'})"
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"


# Built without validation: validating asks kinds.py, which imports the host kind modules,
# which import this one (tests/test_host_kinds.py validates it).
LOCAL_HOST = HostConfig.model_construct(name=LOCAL, transport="local", device="cpu", devices=[0])


class Inventory:
    """The validated hosts, by name; `local` always present."""

    def __init__(self, hosts: dict[str, HostConfig], path: Path | None = None):
        self.path = path
        self.hosts = {LOCAL: LOCAL_HOST, **hosts}

    def names(self) -> list[str]:
        return list(self.hosts)

    def get(self, name: str) -> HostConfig:
        host = self.hosts.get(name) if isinstance(name, str) else None
        if host is None:
            where = f" (inventory {self.path})" if self.path else f" (no inventory file; set ${INVENTORY_ENV})"
            raise ToolError(
                f"unknown host {name!r}{where}; known hosts: {self.names()}",
                code="unknown_host",
                details={"known_hosts": self.names()},
            )
        return host

    def resolve(self, names: list[str] | None) -> list[HostConfig]:
        names = names or [LOCAL]
        dupes = sorted(n for n, k in Counter(names).items() if k > 1)  # linear: a long list costs one pass
        if dupes:
            raise ToolError(f"hosts named more than once: {dupes}", code="invalid_request")
        return [self.get(n) for n in names]


def parse_inventory(data: dict, path: Path | None = None) -> Inventory:
    where = str(path) if path else "inventory"
    unknown = sorted(set(data) - {"hosts"})
    errors = [f"{k}: unknown top-level key (only [hosts.NAME] tables)" for k in unknown]
    tables = data.get("hosts", {})
    if not isinstance(tables, dict):
        raise ToolError(f"{where}: 'hosts' must be tables [hosts.NAME]", code="invalid_inventory")
    hosts: dict[str, HostConfig] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            errors.append(f"hosts.{name}: must be a table")
            continue
        if "name" in table and table["name"] != name:
            errors.append(f"hosts.{name}.name: differs from the table name")
            continue
        try:
            host = HostConfig.model_validate({**table, "name": name})
        except ValidationError as exc:
            errors.append(format_validation_error(exc, prefix=f"hosts.{name}"))
            continue
        if name == LOCAL and host_kind(host.transport).remote:
            errors.append(f"hosts.{LOCAL}.transport: the name 'local' is reserved for the local transport")
            continue
        hosts[name] = host
    if errors:
        raise ToolError(f"invalid inventory {where}:\n" + "\n".join(errors), code="invalid_inventory")
    return Inventory(hosts, path)


def load_inventory(path: str | os.PathLike | None = None) -> Inventory:
    """The inventory at `path`, else $OPDEBUG_INVENTORY, else just `local`."""
    if path is None:
        path = os.environ.get(INVENTORY_ENV) or None
    if path is None:
        return Inventory({})
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ToolError(f"inventory file {p} does not exist", code="invalid_inventory") from None
    except tomllib.TOMLDecodeError as exc:
        raise ToolError(f"inventory file {p} is not valid TOML: {exc}", code="invalid_inventory") from None
    return parse_inventory(data, p)


def as_inventory(inventory: Inventory | str | os.PathLike | None) -> Inventory:
    """Accept an Inventory, a path to one, or None (path from the environment)."""
    if isinstance(inventory, Inventory):
        return inventory
    return load_inventory(inventory)
