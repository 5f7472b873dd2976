"""The asyncssh transport: verified connections, the shipped runner, device workers.

- Host keys are always checked against the host's known_hosts file.  An
  unknown key is refused with its fingerprint and the command that trusts it;
  a changed key is refused and the file holding the old key is named.
- The runner (``tools/runner/*.py``, plus the lease helper) is uploaded by
  SFTP once per content hash into ``<work_dir>/runner-<hash12>/`` (into a
  private temporary directory first, renamed when complete, so a half-upload
  is never used); a run's user modules go to ``<work_dir>/runs/<run_id>/modules-<hash12>/``.
  An existing directory is used only after its files are compared byte for
  byte with ours, in a work_dir the login user owns and nobody else can write
  (safe_stage.py): code another user planted never runs.
- Remote command lines are built from validated inventory fields and
  constants only, every piece shlex-quoted.  Nothing from a tool argument
  reaches a shell: not even the run id (the lease names the server that holds it).
- The ``ssh`` host kind (`SSHHost`): a slot is the common `host.SupervisorSlot`,
  its supervisor a process on the host's shared connection, started under the
  device lease (see lease.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, cast

import asyncssh
from pydantic import Field, model_validator

from ..errors import ToolError
from ..evidence import safe_component
from ..schemas import Strict
from .bundle import RUNNER_SRC, bundle_files, content_hash, dir_files, dir_stamp
from .errors import SlotLost
from .host import HostContext, HostKind, device_env, supervise_argv
from .inventory import AbsPath, Alias, HostConfig, Hostname, User
from .safe_stage import CACHE_DIRS, refuse, unsafe_reason
from .shell import shell_command, supervisor_command
from .slot import RunFiles

COMPLETE_MARKER = ".complete"
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


class SSHFields(Strict):
    """The ``ssh`` kind's own inventory fields: the address and how the host is trusted."""

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
    connect_timeout: Annotated[float, Field(gt=0, le=600)] = 15.0
    # The host sshd's MaxSessions (OpenSSH default 10): a host with more slots
    # than fit on one connection (one session kept for SFTP) gets another one.
    max_sessions: Annotated[int, Field(ge=2, le=1024)] = 10

    @model_validator(mode="after")
    def _address(self) -> SSHFields:
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

    @property
    def address(self) -> str:
        """How the host is named in messages (never used to build a shell command)."""
        if self.ssh_config_alias:
            return f"{self.ssh_config_alias} (alias in {self.ssh_config or '~/.ssh/config'})"
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"


def ssh_fields(host: HostConfig) -> SSHFields:
    return host.fields(SSHFields)


class HostKeyRefused(ToolError):
    pass


# --------------------------------------------------------------------------
# Connections and host keys
# --------------------------------------------------------------------------


def _target(host: HostConfig) -> tuple[str, dict[str, Any]]:
    """asyncssh.connect's host argument and keyword options, from the inventory."""
    f = ssh_fields(host)
    kwargs: dict[str, Any] = {"connect_timeout": f.connect_timeout}
    if f.ssh_config_alias:
        kwargs["config"] = [f.ssh_config or str(Path("~/.ssh/config").expanduser())]
        target = f.ssh_config_alias
    else:
        kwargs["config"] = None  # the inventory is the whole truth for this host
        kwargs["port"] = f.port
        target = f.hostname  # type: ignore[assignment]
    if f.user:
        kwargs["username"] = f.user
    if f.identity_files:
        kwargs["client_keys"] = list(f.identity_files)
    return target, kwargs


def resolved_address(host: HostConfig) -> tuple[str, int]:
    """(hostname, port) after the OpenSSH config alias, for messages and known_hosts."""
    target, kwargs = _target(host)
    if not ssh_fields(host).ssh_config_alias:
        return target, ssh_fields(host).port
    # Options are only parsed here (no connection); the real trust store is passed anyway.
    opts = asyncssh.SSHClientConnectionOptions(host=target, config=kwargs["config"], known_hosts=_known_hosts(host))
    return opts.host, opts.port


def _known_hosts(host: HostConfig):
    path = ssh_fields(host).known_hosts
    if path and Path(path).is_file():
        return path
    return asyncssh.import_known_hosts("")  # a missing file trusts nothing; never verification off


def _keyscan_line(hostname: str, port: int, known_hosts: str) -> str:
    port_opt = f"-p {port} " if port != 22 else ""
    return f"ssh-keyscan {port_opt}{shlex.quote(hostname)} >> {shlex.quote(known_hosts)}"


async def explain_host_key(host: HostConfig) -> HostKeyRefused:
    """Why the host key was not trusted: unknown (with the command that trusts
    it) or changed (with the file holding the old key)."""
    hostname, port = resolved_address(host)
    target, kwargs = _target(host)
    kh = ssh_fields(host).known_hosts or "~/.ssh/known_hosts"
    try:
        key = await asyncio.wait_for(
            asyncssh.get_server_host_key(target, port=port, config=kwargs["config"]), kwargs["connect_timeout"]
        )
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
        return HostKeyRefused(
            f"host {host.name!r} ({hostname}:{port}): host key not trusted and could not be fetched again ({exc})",
            code="host_key_untrusted",
        )
    offered = f"{key.get_algorithm()} key {key.get_fingerprint('sha256')}" if key else "no host key"
    fp = key.get_fingerprint("sha256") if key else "?"
    recorded: Sequence[asyncssh.SSHKey] = ()
    if Path(kh).is_file():
        recorded = asyncssh.read_known_hosts(kh).match(hostname, hostname, port)[0]
    keyscan = _keyscan_line(hostname, port, kh)
    if recorded and key is not None and key.public_data not in {k.public_data for k in recorded}:
        old = ", ".join(sorted({k.get_fingerprint("sha256") for k in recorded}))
        entry = f"[{hostname}]:{port}" if port != 22 else hostname
        return HostKeyRefused(
            f"host {host.name!r} ({hostname}:{port}): HOST KEY CHANGED - refused. The server offers {offered}, "
            f"but {kh} holds a different key for it ({old}). This is either a man-in-the-middle or a "
            f"reinstalled host. Only if you have verified the new fingerprint {fp} out of band, remove the old "
            f"entry with `ssh-keygen -R {shlex.quote(entry)} -f {shlex.quote(kh)}` and trust the new one with "
            f"`{keyscan}`.",
            code="host_key_changed",
            details={"fingerprint": fp, "known_hosts": kh, "old_fingerprints": old},
        )
    return HostKeyRefused(
        f"host {host.name!r} ({hostname}:{port}): unknown host key - refused. The server offers {offered}, "
        f"which is not in {kh}. Verify the fingerprint {fp} out of band (on the host: "
        f"`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then trust it with: `{keyscan}`",
        code="host_key_unknown",
        details={"fingerprint": fp, "known_hosts": kh, "trust_command": keyscan},
    )


async def open_connection(host: HostConfig) -> asyncssh.SSHClientConnection:
    """A verified, authenticated connection to an inventory host."""
    target, kwargs = _target(host)
    try:
        return await asyncssh.connect(
            target, known_hosts=_known_hosts(host), keepalive_interval=15, keepalive_count_max=4, **kwargs
        )
    except asyncssh.HostKeyNotVerifiable:
        raise await explain_host_key(host) from None
    except asyncssh.PermissionDenied as exc:
        raise ToolError(
            f"host {host.name!r} ({ssh_fields(host).address}): authentication refused ({exc.reason}); "
            "check user and identity_files (or the ssh-agent)",
            code="ssh_auth",
        ) from None
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
        raise ToolError(
            f"host {host.name!r} ({ssh_fields(host).address}): cannot connect: {exc or type(exc).__name__}",
            code="connection_failed",
        ) from None


# --------------------------------------------------------------------------
# The shipped runner
# --------------------------------------------------------------------------


def runner_files() -> dict[str, bytes]:
    """Relative path on the host -> content: the runner package and the lease helper."""
    files = bundle_files()
    if len(files) < 2:
        raise ToolError(f"no runner sources under {RUNNER_SRC}", code="harness_error")
    return files


def runner_dir(host: HostConfig, files: dict[str, bytes] | None = None) -> str:
    return f"{host.work_dir}/runner-{content_hash(files or runner_files())[:12]}"


class _Attrs:
    """SFTP attributes as the few os.stat_result fields safe_stage checks."""

    def __init__(self, attrs: asyncssh.SFTPAttrs):
        mode = attrs.permissions or 0
        if not stat.S_IFMT(mode):  # a server that leaves the type out of the mode
            mode |= {
                asyncssh.FILEXFER_TYPE_DIRECTORY: stat.S_IFDIR,
                asyncssh.FILEXFER_TYPE_SYMLINK: stat.S_IFLNK,
                asyncssh.FILEXFER_TYPE_REGULAR: stat.S_IFREG,
            }.get(attrs.type, 0)
        self.st_mode, self.st_uid = mode, attrs.uid


async def remote_uid(sftp: asyncssh.SFTPClient, directory: str) -> int:
    """The login user's uid on the host (what every directory we trust must be
    owned by): the owner of a file we create in ``directory`` - over the SFTP
    session already open, so no extra channel (sshd's MaxSessions)."""
    probe = f"{directory}/.uid-probe-{secrets.token_hex(6)}"
    try:
        async with sftp.open(probe, "xb", attrs=asyncssh.SFTPAttrs(permissions=0o600)):
            pass
        uid = (await sftp.lstat(probe)).uid
        await sftp.remove(probe)
    except (asyncssh.SFTPError, OSError) as exc:
        raise refuse(directory, f"cannot create a file in it ({exc})") from None
    if uid is None:
        raise ToolError(
            f"the host's SFTP server does not report file owners; cannot check {directory}", code="unsafe_path"
        )
    return uid


async def _checked_work_dir(sftp: asyncssh.SFTPClient, host: HostConfig) -> int:
    """The login uid, after making sure work_dir exists and is private to it."""
    if not await sftp.exists(host.work_dir):
        try:
            await sftp.makedirs(host.work_dir, attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
        except asyncssh.SFTPError:
            pass
    uid = await remote_uid(sftp, host.work_dir)
    await require_private_dir(sftp, host.work_dir, uid, "the host's work_dir")
    return uid


async def require_private_dir(sftp: asyncssh.SFTPClient, path: str, uid: int, what: str) -> None:
    """Create ``path`` (mode 700) when missing; refuse it unless it is a directory of
    ``uid`` that nobody else can write (see safe_stage.py)."""
    try:
        attrs = await sftp.lstat(path)  # one round trip when it is there (the common case)
    except asyncssh.SFTPNoSuchFile:
        try:
            await sftp.makedirs(path, attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
        except asyncssh.SFTPError:
            pass
        attrs = await sftp.lstat(path)
    why = unsafe_reason(_Attrs(attrs), uid, what)
    if why:
        raise refuse(path, why)


async def remote_tree_mismatch(sftp: asyncssh.SFTPClient, root: str, files: dict[str, bytes], uid: int) -> str | None:
    """None when ``root`` on the host holds exactly ``files`` in directories of
    ``uid`` nobody else can write; else what differs (compared byte for byte)."""
    expected_dirs = {rel.rsplit("/", 1)[0] for rel in files if "/" in rel}
    seen: set[str] = set()
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        path = f"{root}/{rel_dir}" if rel_dir else root
        why = unsafe_reason(_Attrs(await sftp.lstat(path)), uid, f"directory {rel_dir or '.'!r}")
        if why:
            return why
        for entry in await sftp.readdir(path):
            # str: the SFTP client decodes names (asyncssh's default path_encoding, utf-8)
            name = cast(str, entry.filename)
            if name in (".", ".."):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            attrs = _Attrs(entry.attrs)
            if stat.S_ISDIR(attrs.st_mode):
                if name in CACHE_DIRS:
                    why = unsafe_reason(attrs, uid, f"directory {rel!r}")
                    if why:
                        return why
                elif rel in expected_dirs:
                    pending.append(rel)
                else:
                    return f"unexpected directory {rel!r}"
                continue
            if rel not in files:
                return f"unexpected file {rel!r}"
            if not stat.S_ISREG(attrs.st_mode) or attrs.st_uid != uid or attrs.st_mode & 0o022:
                return f"{rel!r} is not a regular file of ours"
            async with sftp.open(f"{root}/{rel}", "rb") as fh:
                if await fh.read() != files[rel]:
                    return f"{rel!r} differs from the shipped file"
            seen.add(rel)
    missing = sorted(set(files) - seen)
    return f"missing {missing}" if missing else None


async def _upload_tree(sftp: asyncssh.SFTPClient, final: str, files: dict[str, bytes], uid: int) -> bool:
    """Upload files into a private temp dir next to `final`, then rename it into
    place.  False when `final` already existed (verified byte for byte against
    `files`, else refused: an existing directory is never trusted by its name)."""
    files = dict(files)
    files[COMPLETE_MARKER] = json.dumps({"files": sorted(files)}).encode()
    if await _present(sftp, final):
        why = await remote_tree_mismatch(sftp, final, files, uid)
        if why:
            raise refuse(final, f"it is not what this server ships: {why}")
        return False
    parent = final.rsplit("/", 1)[0]
    tmp = f"{parent}/.{final.rsplit('/', 1)[1]}.tmp-{secrets.token_hex(6)}"
    await sftp.mkdir(tmp, attrs=asyncssh.SFTPAttrs(permissions=0o700))

    async def put(rel: str) -> None:
        async with sftp.open(f"{tmp}/{rel}", "wb", attrs=asyncssh.SFTPAttrs(permissions=0o600)) as fh:
            await fh.write(files[rel])

    try:
        # sub-directories first (in order), then every file at once: SFTP requests are pipelined on
        # one channel, so N files cost the round trips of one (many hosts upload at the same time)
        for directory in sorted({rel.rsplit("/", 1)[0] for rel in files if "/" in rel}):
            await sftp.makedirs(f"{tmp}/{directory}", attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
        await asyncio.gather(*(put(rel) for rel in sorted(files)))
        try:
            await sftp.rename(tmp, final)  # SFTP rename never replaces: the first complete upload wins
        except asyncssh.SFTPError:
            if not await sftp.exists(final):
                raise
            await sftp.rmtree(tmp, ignore_errors=True)
            why = await remote_tree_mismatch(sftp, final, files, uid)
            if why:
                raise refuse(final, f"it is not what this server ships: {why}") from None
            return False
    except BaseException:
        try:
            await sftp.rmtree(tmp, ignore_errors=True)
        except Exception:
            pass
        raise
    return True


async def _present(sftp: asyncssh.SFTPClient, path: str) -> bool:
    """Anything at ``path``, a dangling link included (one lstat)."""
    try:
        await sftp.lstat(path)
        return True
    except asyncssh.SFTPNoSuchFile:
        return False


async def ensure_runner(conn: asyncssh.SSHClientConnection, host: HostConfig) -> str:
    """The runner's directory on the host, uploaded once per content hash; an
    existing one is used only when its files are ours, byte for byte, in a
    work_dir only the login user can write."""
    files = runner_files()
    final = runner_dir(host, files)
    async with conn.start_sftp_client() as sftp:
        uid = await _checked_work_dir(sftp, host)
        await _upload_tree(sftp, final, files, uid)
    return final


async def upload_run_files(
    conn: asyncssh.SSHClientConnection,
    host: HostConfig,
    run_id: str,
    modules_dir: Path | None,
    captured_dir: Path | None,
) -> tuple[str | None, str | None]:
    """Ship a run's user modules and captured inputs; (remote modules dir, remote captured dir).

    Stored per content hash (``runs/<run_id>/<kind>-<hash12>/``), so a re-run
    with the same files uploads nothing and a changed file never mixes with
    an old one."""
    run_id = safe_component(run_id, "run_id")
    out: list[str | None] = []
    async with conn.start_sftp_client() as sftp:
        uid = await _checked_work_dir(sftp, host)
        for kind, local in (("modules", modules_dir), ("captured", captured_dir)):
            files = dir_files(local)
            if not files:
                out.append(None)
                continue
            base = f"{host.work_dir}/runs/{run_id}"
            await require_private_dir(sftp, f"{host.work_dir}/runs", uid, "the host's runs directory")
            await require_private_dir(sftp, base, uid, "the run's directory on the host")
            final = f"{base}/{kind}-{content_hash(files)[:12]}"
            await _upload_tree(sftp, final, files, uid)
            out.append(final)
    return out[0], out[1]


# --------------------------------------------------------------------------
# The device worker command
# --------------------------------------------------------------------------


def worker_command(
    host: HostConfig, device: int, runner_root: str, *, owner: str | None = None, wait_s: float | None = None
) -> str:
    """The remote command line of one device's supervisor, from inventory fields
    and constants only, each piece shlex-quoted:

    ``[docker exec -i C] bash -c 'source S && export PYTHONPATH=R${PYTHONPATH:+:$PYTHONPATH} && exec env VAR=ID PY R/opdebug_lease.py ... -- PY -m opdebug_runner supervise --device K'``
    """
    argv = supervise_argv(
        host.python, runner_root, host.device, device, host.lease_wait_s if wait_s is None else wait_s, owner
    )
    return supervisor_command(host, argv, device_env(host.device, device), runner_root)


# --------------------------------------------------------------------------
# The connection cache: one connection per host, shared by its slots
# --------------------------------------------------------------------------

CONNECT_FAILURE_MEMORY_S = 10.0  # a host that just refused or timed out is not retried per slot


class SSHConnections:
    """One connection per SSH host (more when the host has more slots than its
    sshd's MaxSessions allows on one), the runner root uploaded on it, and each
    run's files uploaded once per connection.  Owned by the pool's registry
    (one per event loop); every SSHDeviceSlot of the loop shares it."""

    def __init__(self) -> None:
        self._conns: dict[tuple[str, int], asyncssh.SSHClientConnection] = {}
        self._conn_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._conn_cfg: dict[str, HostConfig] = {}
        self._conn_failures: dict[str, tuple[float, ToolError]] = {}
        self._runner_roots: dict[str, str] = {}
        self._uploaded: dict[tuple[str, str, str], tuple[str | None, str | None]] = {}

    async def connection(self, host: HostConfig, index: int = 0) -> asyncssh.SSHClientConnection:
        """The host's connection number `index` (0 unless the host has more slots
        than its sshd's MaxSessions allows on one connection)."""
        previous = self._conn_cfg.get(host.name)
        if previous is not None and previous.worker_identity() != host.worker_identity():
            self.forget_connection(host.name)  # the inventory entry changed: start afresh
            self._conn_failures.pop(host.name, None)
        self._conn_cfg[host.name] = host
        key = (host.name, index)
        lock = self._conn_locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._conns.get(key)
            if conn is not None and not conn.is_closed():
                return conn
            failed = self._conn_failures.get(host.name)
            if failed is not None and time.monotonic() - failed[0] < CONNECT_FAILURE_MEMORY_S:
                raise failed[1]  # the host's other slots do not each wait out connect_timeout again
            if index == 0:
                self._runner_roots.pop(host.name, None)
            try:
                conn = await open_connection(host)
            except ToolError as exc:
                self._conn_failures[host.name] = (time.monotonic(), exc)
                raise
            self._conn_failures.pop(host.name, None)
            self._conns[key] = conn
            return conn

    def forget_connection(self, name: str, conn: asyncssh.SSHClientConnection | None = None) -> None:
        """Close and drop the host's connections (or only `conn`)."""
        for key in [k for k in self._conns if k[0] == name]:
            current = self._conns[key]
            if conn is None or current is conn:
                del self._conns[key]
                current.close()
        if (name, 0) not in self._conns:
            self._runner_roots.pop(name, None)
            for upload in [k for k in self._uploaded if k[0] == name]:
                del self._uploaded[upload]

    def _upload_lock(self, name: str) -> asyncio.Lock:
        # One SFTP session per host at a time: it shares connection 0 with a slot.
        return self._conn_locks.setdefault((name, -1), asyncio.Lock())

    async def runner_root(self, host: HostConfig, conn: asyncssh.SSHClientConnection) -> str:
        async with self._upload_lock(host.name):
            root = self._runner_roots.get(host.name)
            if root is None:
                root = await ensure_runner(conn, host)
                self._runner_roots[host.name] = root
            return root

    async def run_files(self, host: HostConfig, run: RunFiles) -> tuple[str | None, str | None]:
        """Remote (modules_dir, captured_dir) of the run on `host`, uploaded once per connection."""
        stamp = json.dumps([dir_stamp(run.modules_dir), dir_stamp(run.captured_dir)])
        key = (host.name, run.run_id, stamp)
        async with self._upload_lock(host.name):
            if key not in self._uploaded:
                conn = await self.connection(host)
                self._uploaded[key] = await upload_run_files(conn, host, run.run_id, run.modules_dir, run.captured_dir)
            return self._uploaded[key]

    def close_unused(self, used_hosts: set[str]) -> None:
        """Close the connections of every host not in ``used_hosts``."""
        for name in {k[0] for k in self._conns} - used_hosts:
            self.forget_connection(name)


# --------------------------------------------------------------------------
# The SSH host kind: a supervisor is a process on the host's shared connection
# --------------------------------------------------------------------------


class SSHProcess:
    """A process on an SSH host (a `host.HostProcess`); a connection found closed
    when it ends is dropped from the connection cache (the next slot reconnects)."""

    def __init__(self, process: Any, connections: SSHConnections | None = None, host: str = ""):
        self.process = process
        self.conn = process.channel.get_connection()  # a closed channel forgets its connection
        self.connections, self.host = connections, host
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr

    @property
    def exit_code(self) -> int | None:
        p = self.process
        if p.exit_status is not None:
            return p.exit_status
        if p.is_closing() or self.conn.is_closed():
            return -1  # the channel is gone: for us the process is over
        return None

    @property
    def pid(self) -> int | None:
        return None

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self.process.wait_closed()), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        except Exception:  # a broken connection: closed for us
            return True
        finally:
            self._forget_if_closed()

    def close_stdin(self) -> None:
        try:
            self.stdin.write_eof()
        except Exception:
            pass

    def kill(self) -> None:
        """Close the channel: the remote process's stdin and stdout go, and with them the process."""
        try:
            self.process.close()
        except Exception:
            pass
        self._forget_if_closed()

    def _forget_if_closed(self) -> None:
        if self.connections is not None and self.conn.is_closed():
            self.connections.forget_connection(self.host, self.conn)


class SSHHost(HostKind):
    """A host reached over SSH (asyncssh): one connection per host shared by its slots."""

    name = "ssh"
    fields = SSHFields

    def __init__(self, cfg: HostConfig, context: HostContext):
        super().__init__(cfg, context)
        self.connections: SSHConnections = context.shared("ssh", SSHConnections)

    @property
    def address(self) -> str:
        return ssh_fields(self.cfg).address

    async def stage_runner(self) -> str:
        return await self.connections.runner_root(self.cfg, await self.connections.connection(self.cfg))

    async def stage_run_files(self, run: Any) -> tuple[str | None, str | None]:
        return await self.connections.run_files(self.cfg, run)

    def conn_index(self, device: int) -> int:
        """Which of the host's connections a device's supervisor uses: sshd allows
        MaxSessions channels per connection, and one is kept for SFTP."""
        devices = self.slot_devices(self.cfg)
        position = devices.index(int(device)) if int(device) in devices else 0
        return position // max(1, ssh_fields(self.cfg).max_sessions - 1)

    async def start_process(self, argv: list[str], env: dict[str, str], root: str, device: int) -> SSHProcess:
        conn = await self.connections.connection(self.cfg, self.conn_index(device))
        try:
            process = await conn.create_process(supervisor_command(self.cfg, argv, env, root), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            if conn.is_closed():
                self.connections.forget_connection(self.cfg.name, conn)
            raise SlotLost(f"cannot start a worker on {self.cfg.name} {self.cfg.device}:{device}: {exc}") from None
        return SSHProcess(process, self.connections, self.cfg.name)

    async def run_command(
        self,
        argv: list[str],
        timeout: float,
        *,
        stdin: bytes | None = None,
        merge_stderr: bool = False,
        each_env_script: bool = False,
    ) -> tuple[int | None, str, str]:
        try:
            conn = await self.connections.connection(self.cfg)
            done = await asyncio.wait_for(
                conn.run(
                    shell_command(self.cfg, argv, each_env_script=each_env_script),
                    check=False,
                    input=stdin,
                    encoding=None,
                    stderr=asyncssh.STDOUT if merge_stderr else asyncssh.PIPE,
                ),
                timeout,
            )
        except asyncio.TimeoutError:
            return None, "", f"{argv[0]} did not finish within {timeout:g} s on {self.address}"
        except (asyncssh.Error, OSError) as exc:
            return None, "", f"{argv[0]} on {self.address}: {exc}"
        return done.exit_status, _text(done.stdout), _text(done.stderr)


def _text(data: Any) -> str:
    return data if isinstance(data, str) else (data or b"").decode("utf-8", "replace")


HOST_KIND = SSHHost
