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
- One `SSHDeviceSlot` is one warm supervisor (hence one warm worker) on one
  device, started under the device lease (see lease.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shlex
import socket
import stat
import time
from collections import deque
from pathlib import Path
from typing import Any

import asyncssh

from ..errors import ToolError
from ..evidence import safe_component
from .errors import LOST_ERRORS, SlotCannotStart, SlotLost, WorkerCannotStart
from .inventory import VISIBILITY_VARIABLE, HostConfig
from .safe_stage import CACHE_DIRS, refuse, unsafe_reason

from .slot import RunFiles
from .busy import busy_text, wait_budget, waiting_text
from .bundle import LEASE_SCRIPT, RUNNER_PACKAGE, RUNNER_SRC, bundle_files, content_hash

COMPLETE_MARKER = ".complete"
_OWNER_SAFE = re.compile(r"[^A-Za-z0-9._:-]")


class HostKeyRefused(ToolError):
    pass


class SlotUnavailable(SlotCannotStart):
    """The device could not be started: leased by someone else, env script failed, ..."""


# --------------------------------------------------------------------------
# Connections and host keys
# --------------------------------------------------------------------------


def _target(host: HostConfig) -> tuple[str, dict[str, Any]]:
    """asyncssh.connect's host argument and keyword options, from the inventory."""
    kwargs: dict[str, Any] = {"connect_timeout": host.connect_timeout}
    if host.ssh_config_alias:
        kwargs["config"] = [host.ssh_config or str(Path("~/.ssh/config").expanduser())]
        target = host.ssh_config_alias
    else:
        kwargs["config"] = None  # the inventory is the whole truth for this host
        kwargs["port"] = host.port
        target = host.hostname  # type: ignore[assignment]
    if host.user:
        kwargs["username"] = host.user
    if host.identity_files:
        kwargs["client_keys"] = list(host.identity_files)
    return target, kwargs


def resolved_address(host: HostConfig) -> tuple[str, int]:
    """(hostname, port) after the OpenSSH config alias, for messages and known_hosts."""
    target, kwargs = _target(host)
    if not host.ssh_config_alias:
        return target, host.port
    # Options are only parsed here (no connection); the real trust store is passed anyway.
    opts = asyncssh.SSHClientConnectionOptions(host=target, config=kwargs["config"], known_hosts=_known_hosts(host))
    return opts.host, opts.port


def _known_hosts(host: HostConfig):
    path = host.known_hosts
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
    kh = host.known_hosts or "~/.ssh/known_hosts"
    try:
        key = await asyncio.wait_for(
            asyncssh.get_server_host_key(target, port=port, config=kwargs["config"]), host.connect_timeout)
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
        return HostKeyRefused(f"host {host.name!r} ({hostname}:{port}): host key not trusted and could not be "
                              f"fetched again ({exc})", code="host_key_untrusted")
    offered = f"{key.get_algorithm()} key {key.get_fingerprint('sha256')}" if key else "no host key"
    fp = key.get_fingerprint("sha256") if key else "?"
    recorded = []
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
            details={"fingerprint": fp, "known_hosts": kh, "old_fingerprints": old})
    return HostKeyRefused(
        f"host {host.name!r} ({hostname}:{port}): unknown host key - refused. The server offers {offered}, "
        f"which is not in {kh}. Verify the fingerprint {fp} out of band (on the host: "
        f"`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then trust it with: `{keyscan}`",
        code="host_key_unknown", details={"fingerprint": fp, "known_hosts": kh, "trust_command": keyscan})


async def open_connection(host: HostConfig) -> asyncssh.SSHClientConnection:
    """A verified, authenticated connection to an inventory host."""
    target, kwargs = _target(host)
    try:
        return await asyncssh.connect(target, known_hosts=_known_hosts(host),
                                      keepalive_interval=15, keepalive_count_max=4, **kwargs)
    except asyncssh.HostKeyNotVerifiable:
        raise await explain_host_key(host) from None
    except asyncssh.PermissionDenied as exc:
        raise ToolError(f"host {host.name!r} ({host.address}): authentication refused ({exc.reason}); "
                        "check user and identity_files (or the ssh-agent)", code="ssh_auth") from None
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
        raise ToolError(f"host {host.name!r} ({host.address}): cannot connect: {exc or type(exc).__name__}",
                        code="connection_failed") from None


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
            mode |= {asyncssh.FILEXFER_TYPE_DIRECTORY: stat.S_IFDIR, asyncssh.FILEXFER_TYPE_SYMLINK: stat.S_IFLNK,
                     asyncssh.FILEXFER_TYPE_REGULAR: stat.S_IFREG}.get(attrs.type, 0)
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
        raise ToolError(f"the host's SFTP server does not report file owners; cannot check {directory}",
                        code="unsafe_path")
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
            name = entry.filename
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


def _dir_files(local: Path | None) -> dict[str, bytes]:
    if local is None or not local.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(local.iterdir()) if p.is_file() and not p.name.startswith(".")}


async def upload_run_files(conn: asyncssh.SSHClientConnection, host: HostConfig, run_id: str,
                           modules_dir: Path | None, captured_dir: Path | None) -> tuple[str | None, str | None]:
    """Ship a run's user modules and captured inputs; (remote modules dir, remote captured dir).

    Stored per content hash (``runs/<run_id>/<kind>-<hash12>/``), so a re-run
    with the same files uploads nothing and a changed file never mixes with
    an old one."""
    run_id = safe_component(run_id, "run_id")
    out: list[str | None] = []
    async with conn.start_sftp_client() as sftp:
        uid = await _checked_work_dir(sftp, host)
        for kind, local in (("modules", modules_dir), ("captured", captured_dir)):
            files = _dir_files(local)
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


def server_owner() -> str:
    return _OWNER_SAFE.sub("_", f"{socket.gethostname()}:{os.getpid()}")[:128]


def lease_file(host: HostConfig, device: int) -> str:
    return f"{host.work_dir}/leases/{host.device}-{int(device)}.lock"


def worker_command(host: HostConfig, device: int, runner_root: str, *, owner: str = "",
                   wait_s: float | None = None) -> str:
    """The remote command line of one device's supervisor, from inventory fields
    and constants only, each piece shlex-quoted:

    ``[docker exec -i C] bash -c 'source S && export PYTHONPATH=R${PYTHONPATH:+:$PYTHONPATH} && exec env VAR=ID PY R/opdebug_lease.py ... -- PY -m opdebug_runner supervise --device K'``

    The runner's directory goes in front of the PYTHONPATH the environment
    scripts set (CANN's set_env.sh puts its te/tbe packages there), never
    replacing it.
    """
    q = shlex.quote
    device = int(device)
    env = [f"OPDEBUG_DEVICE_ID={device}", "PYTHONUNBUFFERED=1"]
    variable = VISIBILITY_VARIABLE[host.device]
    if variable:
        env.append(f"{variable}={device}")
    lease = [host.python, f"{runner_root}/{LEASE_SCRIPT}", "--lease-file", lease_file(host, device),
             "--wait", repr(float(host.lease_wait_s if wait_s is None else wait_s)), "--owner", _OWNER_SAFE.sub("_", owner)[:128],
             "--device", f"{host.device}:{device}", "--"]
    supervise = [host.python, "-m", RUNNER_PACKAGE, "supervise", "--device", host.device]
    steps = [f"source {q(script)}" for script in host.env_scripts]
    steps.append(f"export PYTHONPATH={q(runner_root)}" + "${PYTHONPATH:+:$PYTHONPATH}")
    steps.append(" ".join(["exec", "env", *map(q, env), *map(q, lease), *map(q, supervise)]))
    script = " && ".join(steps)
    argv = ["bash", "-c", script]
    if host.container:
        argv = ["docker", "exec", "-i", host.container, *argv]
    return " ".join(q(a) for a in argv)


def shell_command(host: HostConfig, argv: list[str]) -> str:
    """`argv` (constants + validated fields) run under the host's env scripts and container."""
    q = shlex.quote
    steps = [f"source {q(s)}" for s in host.env_scripts] + ["exec " + " ".join(q(a) for a in argv)]
    outer = ["bash", "-c", " && ".join(steps)]
    if host.container:
        outer = ["docker", "exec", "-i", host.container, *outer]
    return " ".join(q(a) for a in outer)


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
            for key in [k for k in self._uploaded if k[0] == name]:
                del self._uploaded[key]

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
        stamp = json.dumps([_stamp(run.modules_dir), _stamp(run.captured_dir)])
        key = (host.name, run.run_id, stamp)
        async with self._upload_lock(host.name):
            if key not in self._uploaded:
                conn = await self.connection(host)
                self._uploaded[key] = await upload_run_files(
                    conn, host, run.run_id, run.modules_dir, run.captured_dir)
            return self._uploaded[key]

    def close_unused(self, used_hosts: set[str]) -> None:
        """Close the connections of every host not in ``used_hosts``."""
        for name in {k[0] for k in self._conns} - used_hosts:
            self.forget_connection(name)


def _stamp(path: Path | None) -> list:
    if path is None or not path.is_dir():
        return []
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir() if p.is_file())


# --------------------------------------------------------------------------
# The SSH slot: one warm supervisor on one device, under the device lease
# --------------------------------------------------------------------------

SLOT_START_TIMEOUT_S = 180.0  # until the supervisor first answers hello (then the budget it announces)
SHUTDOWN_GRACE_S = 5.0


class SSHDeviceSlot:
    """One warm supervisor on one device of an SSH host, under the device lease."""

    def __init__(self, connections: SSHConnections, host: HostConfig, device: int):
        self.connections = connections
        self.cfg = host
        self.host = host.name
        self.device_id = int(device)
        self.device = f"{host.device}:{self.device_id}"
        # sshd allows MaxSessions channels per connection; one is kept for SFTP.
        position = host.slot_devices.index(self.device_id) if self.device_id in host.slot_devices else 0
        self.conn_index = position // max(1, host.max_sessions - 1)
        self.process: asyncssh.SSHClientProcess | None = None
        self.client: Any = None
        self.hello: dict = {}
        self.lease: dict = {}
        self._alive = False
        self._stderr: deque[bytes] = deque(maxlen=100)
        self._stderr_task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        """Started, and neither the process nor its connection has gone away."""
        p = self.process
        return (self._alive and p is not None and p.exit_status is None and not p.is_closing()
                and not p.channel.get_connection().is_closed())

    async def start(self, run: RunFiles) -> None:
        from .supervisor_client import SupervisorClient

        root = await self.connections.runner_root(self.cfg, await self.connections.connection(self.cfg))
        conn = await self.connections.connection(self.cfg, self.conn_index)
        wait_s = wait_budget(self.cfg.lease_wait_s, run)
        cmd = worker_command(self.cfg, self.device_id, root,
                                           owner=server_owner(), wait_s=wait_s)
        try:
            self.process = await conn.create_process(cmd, encoding=None)
        except (asyncssh.Error, OSError) as exc:
            if conn.is_closed():
                self.connections.forget_connection(self.cfg.name, conn)
            raise SlotLost(f"cannot start a worker on {self.host} {self.device}: {exc}") from None
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        try:
            self.lease = await asyncio.wait_for(self._await_lease(wait_s, run.say), wait_s + 60)
            self.client = SupervisorClient(self.process.stdout, self.process.stdin, label=f"{self.host} {self.device}")
            self.hello = await self.client.hello(timeout=SLOT_START_TIMEOUT_S)
            if self.hello.get("worker_error"):
                raise WorkerCannotStart(f"{self.host} {self.device}: the worker cannot start: "
                                        f"{self.hello['worker_error']}")
        except BaseException:
            await self._kill()
            raise
        self._alive = True

    async def _await_lease(self, wait_s: float, on_wait=None) -> dict:
        """The lease helper's answer; each second of a wait is told to ``on_wait`` (the run's news)."""
        assert self.process is not None
        waiting_on: dict = {}
        t0 = time.monotonic()
        while True:
            line = await self.process.stdout.readline()
            if not line:
                if self._stderr_task is not None:  # let the last words of the failed command arrive
                    try:
                        await asyncio.wait_for(asyncio.shield(self._stderr_task), 2.0)
                    except (asyncio.TimeoutError, asyncssh.Error, OSError):
                        pass
                await self._kill()
                raise SlotUnavailable(
                    f"{self.host} {self.device}: the worker exited before taking the device lease "
                    f"(exit status {self.process.exit_status}); stderr: {self.stderr_tail() or '-'}",
                    code="slot_start_failed")
            try:
                event = json.loads(line)
            except ValueError:
                continue  # noise from an environment script on stdout
            kind = event.get("event") if isinstance(event, dict) else None
            if kind == "lease_acquired":
                return event
            if kind == "lease_waiting":
                waiting_on = event.get("holder") or waiting_on
                waited = time.monotonic() - t0
                if waited >= wait_s:  # the call's budget is shorter than the helper's --wait: stop here
                    raise SlotUnavailable(busy_text(self.host, self.device, waiting_on, waited, wait_s,
                                                    event.get("lease_file")), code="device_busy",
                                          details={"holder": waiting_on, "waited_s": round(waited, 1),
                                                   "budget_s": wait_s})
                if on_wait is not None:
                    await on_wait(waiting_text(self.host, self.device, waiting_on, waited, wait_s))
            if kind == "lease_refused":
                raise SlotUnavailable(
                    f"{self.host} {self.device}: refused to take the device lease: {event.get('reason')}",
                    code="unsafe_path")
            if kind == "lease_busy":
                holder = event.get("holder") or waiting_on
                waited = time.monotonic() - t0
                raise SlotUnavailable(busy_text(self.host, self.device, holder, waited, wait_s,
                                                event.get("lease_file")),
                                      code="device_busy",
                                      details={"holder": holder, "waited_s": round(waited, 1), "budget_s": wait_s})

    async def _drain_stderr(self) -> None:
        """Keep the supervisor's diagnostics (and keep the channel window open)."""
        assert self.process is not None
        try:
            while True:
                line = await self.process.stderr.readline()
                if not line:
                    return
                self._stderr.append(line)
        except (asyncssh.Error, OSError):
            return

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace").strip()[-1500:]

    async def run_case(self, run: RunFiles, case: dict, timeout_s: float) -> dict:
        if not self.alive or self.client is None:
            raise SlotLost(f"{self.host} {self.device} is not running")
        modules, captured = await self.connections.run_files(self.cfg, run)
        try:
            return await self.client.run_case(run.config, case, timeout_s, modules, captured)
        except LOST_ERRORS as exc:
            self._alive = False
            raise SlotLost(f"{self.host} {self.device}: connection lost mid-case ({type(exc).__name__}: {exc})") \
                from None

    async def abort(self) -> None:
        """Close the channel now (cancelled or broken): the supervisor's stdin hits
        EOF and it kills its worker and exits; no polite shutdown round trip.  A
        connection found closed is dropped from the connection cache (the next slot reconnects)."""
        await self._kill()
        if self.process is not None:
            conn = self.process.channel.get_connection()
            if conn.is_closed():
                self.connections.forget_connection(self.host, conn)

    async def _kill(self) -> None:
        self._alive = False
        if self.process is not None:
            try:
                self.process.close()  # closes the channel: the supervisor's stdin hits EOF
                await asyncio.wait_for(self.process.wait_closed(), SHUTDOWN_GRACE_S)
            except (asyncio.TimeoutError, asyncssh.Error, OSError):
                pass
        if self._stderr_task is not None and not self._stderr_task.done():
            self._stderr_task.cancel()

    async def close(self) -> None:
        """Polite shutdown (the supervisor kills its worker and exits), then close the channel."""
        if self.alive and self.client is not None:
            try:
                await asyncio.wait_for(self.client.close(), SHUTDOWN_GRACE_S)
            except (asyncio.TimeoutError, Exception):
                pass
        await self._kill()
