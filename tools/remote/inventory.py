"""The host inventory: which machines the tools may run cases on.

A TOML file (path by argument or $OPDEBUG_INVENTORY) with one table per host.
The fields every host has are `HostConfig`'s; a host's *kind* (``transport``,
and ``scheduler`` in front of a login host: a module of tools/remote, kinds.py,
references/host-kinds.md) declares the fields of its own in a strict model
(``HostKind.fields``), and the entry's keys are validated by those models and
this one together - every error at once, each at its key, a key no kind of
the entry takes refused with the fields it does take::

    [hosts.npu-a]                   # transport "ssh" (the default): ssh.SSHFields
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

    [hosts.pod]                     # a machine reached by a command prefix: command.CommandFields
    transport = "command"
    command = ["kubectl", "exec", "-i", "npu-pod-0", "-n", "ascend", "--"]
    device = "npu"
    devices = [0, 1]

With ``container``, the worker runs inside ``docker exec -i NAME``; over SSH
the runner is uploaded by SFTP to the host's filesystem, so ``work_dir`` must
be mounted into the container at the same path (check_host verifies it).

A host behind a cluster scheduler is a *login host* (``transport = "local"``:
this machine, or ``"ssh"`` with the fields above) plus ``scheduler = "slurm"``
and a ``[hosts.NAME.slurm]`` table (slurm_fields.SlurmOptions); each slot is
one ``srun`` job (``concurrency`` of them at once), the scheduler picks the
node and the device, ``env_scripts`` are sourced on the node inside the job,
and ``work_dir`` must be on a file system the nodes see (see tools/remote/slurm.py)::

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
device its probe sees (check_host's count), each under its own lease.  Tools
take host *names* only; every field that ends up in a remote command line is
checked against a strict pattern here (or in its kind's model) and quoted
again with shlex.quote where the command is built.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, Field, ValidationError, model_validator

from ..errors import ToolError
from ..schemas import Slug, Strict, format_validation_error
from .kinds import UnknownHostKind, host_kind

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

INVENTORY_ENV = "OPDEBUG_INVENTORY"
LOCAL = "local"

_HOSTNAME_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*|[0-9A-Fa-f:.]{2,45})$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_ABS_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@=-]{0,1023}$")
_COMMAND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def matching(regex: re.Pattern, what: str):
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


Hostname = Annotated[str, AfterValidator(matching(_HOSTNAME_RE, "host name or IP address"))]
User = Annotated[str, AfterValidator(matching(_USER_RE, "user name"))]
Alias = Annotated[str, AfterValidator(matching(_ALIAS_RE, "OpenSSH config alias"))]
Container = Annotated[str, AfterValidator(matching(_CONTAINER_RE, "container name"))]
AbsPath = Annotated[str, AfterValidator(_abs_path)]
Python = Annotated[str, AfterValidator(_python)]
DeviceKind = Literal["npu", "cuda", "cpu"]

# The variable that makes device ID the only visible one, per device kind.
VISIBILITY_VARIABLE = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES", "cpu": None}


class NoFields(Strict):
    """A host kind's own inventory fields when it has none."""


F = TypeVar("F", bound=BaseModel)


class HostConfig(Strict):
    """One inventory host: the fields every host kind reads, and in ``options`` each of
    its kinds' own fields (``HostKind.fields``, a strict model of the kind's module: the
    SSH address and known_hosts, a command prefix, a Slurm request), validated with it."""

    name: Slug
    # The host kind: "ssh", "local", "command", or any kind a module of tools/remote defines (kinds.py).
    transport: Annotated[str, AfterValidator(_known_kind)] = "ssh"
    python: Python = "python3"
    env_scripts: list[AbsPath] = Field(default_factory=list)
    container: Container | None = None
    device: DeviceKind = "npu"
    devices: list[Annotated[int, Field(ge=0, le=1023)]] = Field(default_factory=lambda: [0], min_length=1)
    work_dir: Annotated[str, AfterValidator(_work_dir)] = "/tmp/opdebug"
    concurrency: Annotated[int, Field(ge=1, le=1024)] | None = None
    # How long a slot waits for a device leased by someone else before giving up.
    lease_wait_s: Annotated[float, Field(ge=0, le=3600)] = 30.0
    # A warm worker nobody used for this long is shut down (its lease released).
    idle_timeout_s: Annotated[float, Field(gt=0, le=86400)] = 600.0
    scheduler: Annotated[str, AfterValidator(_known_kind)] | None = Field(
        None,
        description=(
            "a cluster scheduler between the login host and the devices (a host kind, e.g. 'slurm'): "
            "each slot is one of its jobs, no lease"
        ),
    )
    all_devices: bool = Field(
        False,
        description=(
            "a local host lends a slot on every device its probe sees (check_host's 'devices ... of N seen': cpu "
            "counts os.cpu_count(), cuda/npu torch's device count), each under its own lease, instead of the listed "
            "'devices' (still capped by 'concurrency')"
        ),
    )
    # Each of the host's kinds' own fields, by kind name (filled from the entry's other keys).
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _kind_fields(cls, data: Any, handler: Any) -> HostConfig:
        """Split the entry: the keys a kind of the host declares (its ``fields`` model) are
        validated by that model, the rest by this one; every error at once, each at its key."""
        if not isinstance(data, dict):
            return handler(data)
        data = {**data, **{k: v for opts in (data.get("options") or {}).values() for k, v in dict(opts).items()}}
        data.pop("options", None)
        errors: list[Any] = []
        options: dict[str, Any] = {}
        for kind in _entry_kinds(data):
            own = {k: data.pop(k) for k in list(data) if k in kind.fields.model_fields}
            try:
                options[kind.name] = kind.fields.model_validate(own)
            except ValidationError as exc:
                errors += exc.errors()
        try:
            host = handler(data)
        except ValidationError as exc:
            errors = [_unknown_field(e, data) for e in exc.errors()] + errors
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        host.options = options
        try:
            for kind in _entry_kinds(data)[-1:]:  # the kind that runs the slots checks the whole entry
                kind.check_entry(host)
        except ValueError as exc:
            raise ValidationError.from_exception_data(
                cls.__name__, [{"type": "value_error", "loc": (), "input": data, "ctx": {"error": exc}}]
            ) from None
        return host

    @model_validator(mode="after")
    def _shape(self) -> HostConfig:
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"'devices' repeats an id: {self.devices}")
        return self

    def fields(self, model: type[F]) -> F:
        """The host's fields of one of its kinds (``model``: that kind's ``fields``)."""
        for value in self.options.values():
            if isinstance(value, model):
                return value
        raise LookupError(f"host {self.name!r} has no {model.__name__} (transport {self.transport!r})")

    def worker_identity(self) -> tuple:
        """What a connection and a started worker depend on: when any of it changes,
        they are not reused (concurrency, timeouts and lease waits may change freely)."""
        return (
            self.transport,
            self.python,
            tuple(self.env_scripts),
            self.container,
            self.device,
            self.work_dir,
            self.scheduler,
            self.all_devices,
            tuple((k, v.model_dump_json()) for k, v in sorted(self.options.items())),
        )


def _unknown_field(error: Any, data: dict) -> Any:
    """An unknown key, said as what the host's kinds take instead."""
    if error.get("type") != "extra_forbidden":
        return error
    kinds = _entry_kinds(data)
    names = " + ".join(repr(k.name) for k in kinds)
    own = sorted({f for k in kinds for f in k.fields.model_fields})
    why = (f"not a field of a {names} host" if names else "not a field of a host") + (
        f" (its kind's own fields: {', '.join(own)})" if own else ""
    )
    return {"type": "value_error", "loc": error["loc"], "input": error.get("input"), "ctx": {"error": ValueError(why)}}


def _entry_kinds(data: dict) -> list[Any]:
    """The kinds an entry names: its transport's, then its scheduler's (none when a name is unknown:
    the field's own check says so)."""
    names = [data.get("transport", "ssh"), *([data["scheduler"]] if data.get("scheduler") else [])]
    try:
        return [host_kind(n) for n in names]
    except UnknownHostKind:
        return []


# Built without validation: validating asks kinds.py, which imports the host kind modules,
# which import this one (tests/test_host_kinds.py validates it).
LOCAL_HOST = HostConfig.model_construct(
    name=LOCAL, transport="local", device="cpu", devices=[0], options={LOCAL: NoFields()}
)


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
        if name == LOCAL and host.transport != LOCAL:
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
