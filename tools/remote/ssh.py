"""The asyncssh transport: verified connections, the shipped runner, device workers.

- Host keys are always checked against the host's known_hosts file.  An
  unknown key is refused with its fingerprint and the command that trusts it;
  a changed key is refused and the file holding the old key is named.
- The runner (``tools/runner/*.py``, plus the lease helper) is uploaded by
  SFTP once per content hash into ``<work_dir>/runner-<hash12>/`` (into a
  temporary directory first, renamed when complete, so a half-upload is never
  used); a run's user modules go to ``<work_dir>/runs/<run_id>/modules/``.
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
from pathlib import Path
from typing import Any

import asyncssh

from ..errors import ToolError
from ..evidence import safe_component
from .errors import SlotCannotStart
from .inventory import VISIBILITY_VARIABLE, HostConfig
from .local import RUNNER_PACKAGE, RUNNER_SRC, content_hash, runner_sources

LEASE_SRC = Path(__file__).resolve().parent / "lease.py"
LEASE_SCRIPT = "opdebug_lease.py"
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
    files = {f"{RUNNER_PACKAGE}/{name}": data for name, data in runner_sources().items()}
    if not files:
        raise ToolError(f"no runner sources under {RUNNER_SRC}", code="harness_error")
    files[LEASE_SCRIPT] = LEASE_SRC.read_bytes()
    return files


def runner_dir(host: HostConfig, files: dict[str, bytes] | None = None) -> str:
    return f"{host.work_dir}/runner-{content_hash(files or runner_files())[:12]}"


async def _upload_tree(sftp: asyncssh.SFTPClient, final: str, files: dict[str, bytes]) -> bool:
    """Upload files into a temp dir next to `final`, then rename it into place.
    False when `final` already existed complete (nothing uploaded)."""
    if await sftp.exists(f"{final}/{COMPLETE_MARKER}"):
        return False
    parent = final.rsplit("/", 1)[0]
    tmp = f"{parent}/.{final.rsplit('/', 1)[1]}.tmp-{secrets.token_hex(6)}"
    await sftp.makedirs(tmp, exist_ok=True)
    try:
        for rel in sorted(files):
            path = f"{tmp}/{rel}"
            await sftp.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            async with sftp.open(path, "wb") as fh:
                await fh.write(files[rel])
        async with sftp.open(f"{tmp}/{COMPLETE_MARKER}", "wb") as fh:
            await fh.write(json.dumps({"files": sorted(files)}).encode())
        try:
            await sftp.rename(tmp, final)  # SFTP rename never replaces: the first complete upload wins
        except asyncssh.SFTPError:
            if not await sftp.exists(f"{final}/{COMPLETE_MARKER}"):
                raise
            await sftp.rmtree(tmp, ignore_errors=True)
            return False
    except BaseException:
        try:
            await sftp.rmtree(tmp, ignore_errors=True)
        except Exception:
            pass
        raise
    return True


async def ensure_runner(conn: asyncssh.SSHClientConnection, host: HostConfig) -> str:
    """The runner's directory on the host, uploading it once per content hash."""
    files = runner_files()
    final = runner_dir(host, files)
    async with conn.start_sftp_client() as sftp:
        await sftp.makedirs(host.work_dir, exist_ok=True)
        await _upload_tree(sftp, final, files)
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
        for kind, local in (("modules", modules_dir), ("captured", captured_dir)):
            files = _dir_files(local)
            if not files:
                out.append(None)
                continue
            base = f"{host.work_dir}/runs/{run_id}"
            await sftp.makedirs(base, exist_ok=True)
            final = f"{base}/{kind}-{content_hash(files)[:12]}"
            await _upload_tree(sftp, final, files)
            out.append(final)
    return out[0], out[1]


# --------------------------------------------------------------------------
# The device worker command
# --------------------------------------------------------------------------


def server_owner() -> str:
    return _OWNER_SAFE.sub("_", f"{socket.gethostname()}:{os.getpid()}")[:128]


def lease_file(host: HostConfig, device: int) -> str:
    return f"{host.work_dir}/leases/{host.device}-{int(device)}.lock"


def worker_command(host: HostConfig, device: int, runner_root: str, *, owner: str = "") -> str:
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
             "--wait", repr(float(host.lease_wait_s)), "--owner", _OWNER_SAFE.sub("_", owner)[:128],
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
