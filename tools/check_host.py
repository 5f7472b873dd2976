"""check_host: can this inventory host run cases, and if not, exactly what is missing.

Connects (host key verified), runs the shipped stdlib probe
(tools/remote/host_probe.py, sent on stdin) under the host's environment
scripts and container, and reports python, torch, torch_npu and CANN
versions, the visible devices and their count, free disk in the work
directory, whether each environment script sourced, and `missing`.
For a host of this machine (host kind ``local``) the same probe runs as a local subprocess.  For a Slurm
host (inventory ``scheduler = "slurm"``) it asks the login host what the
partition offers and compares it with the inventory's request, read-only
(tools/remote/slurm_partition.py): no job is started, nothing is written.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
import sys
import time
from pathlib import Path

from .errors import ToolError
from .evidence import resolve_root
from .remote.host import HostContext, HostKind
from .remote.inventory import HostConfig, Inventory, as_inventory
from .remote.kinds import kind_of
from .schemas import EnvScriptCheck, HostCheck, SchedulerCheck

PROBE_SRC = Path(__file__).resolve().parent / "remote" / "host_probe.py"
PROBE_TIMEOUT_S = 180.0
MIN_FREE_BYTES = 1 << 30


def probe_command(host: HostConfig, marker: str = "") -> str:
    """`[docker exec -i C] bash -c 'source S0; s0=$?; ...; exec env OPDEBUG_ENV_STATUS="$s0 ..." PY - WORK KIND'`.
    Built from validated inventory fields and constants only, each quoted."""
    q = shlex.quote
    steps = [f"source {q(s)}; s{i}=$?" for i, s in enumerate(host.env_scripts)]
    status = " ".join(f"${{s{i}}}" for i in range(len(host.env_scripts)))
    steps.append(
        f'exec env OPDEBUG_ENV_STATUS="{status}" {q(host.python)} - {q(host.work_dir)} {q(host.device)}'
        + (f" {q(marker)}" if marker else "")
    )
    argv = ["bash", "-c", "; ".join(steps)]
    if host.container:
        argv = ["docker", "exec", "-i", host.container, *argv]
    return " ".join(q(a) for a in argv)


async def _run_probe_ssh(host: HostConfig) -> tuple[int | None, str, str]:
    from .remote.ssh import open_connection  # asyncssh only when a remote host is checked

    conn = await open_connection(host)
    marker = f".opdebug-visible-{secrets.token_hex(8)}"
    try:
        async with conn.start_sftp_client() as sftp:
            await sftp.makedirs(host.work_dir, exist_ok=True)
            async with sftp.open(f"{host.work_dir}/{marker}", "wb") as fh:
                await fh.write(b"written by check_host over SFTP\n")
        try:
            result = await asyncio.wait_for(
                conn.run(probe_command(host, marker), input=PROBE_SRC.read_text(), check=False), PROBE_TIMEOUT_S
            )
        finally:
            async with conn.start_sftp_client() as sftp:
                await sftp.remove(f"{host.work_dir}/{marker}")
        return result.exit_status, str(result.stdout or ""), str(result.stderr or "")
    finally:
        conn.close()


async def _run_probe_here(kind: HostKind, work_dir: str) -> tuple[int | None, str, str]:
    """The probe on this machine, through the host kind's short command."""
    code, out, err = await kind.run_command(
        [sys.executable, "-", work_dir, kind.cfg.device], PROBE_TIMEOUT_S, stdin=PROBE_SRC.read_bytes()
    )
    if code is None and not out:
        raise ToolError(f"the local probe did not run: {err}", code="probe_timeout")
    return code, out, err


def _missing(host: HostConfig, probe: dict, env: list[EnvScriptCheck]) -> list[str]:
    missing = [
        f"environment script {e.path} did not source cleanly (exit status {e.exit_status})"
        for e in env
        if not e.sourced
    ]
    if probe.get("torch") is None:
        missing.append(f"torch (not importable by {probe.get('python_executable') or host.python})")
    if host.device == "npu":
        if probe.get("torch_npu") is None:
            missing.append("torch_npu (not importable)")
        if probe.get("cann") is None:
            missing.append(
                "CANN (no version file under $ASCEND_TOOLKIT_HOME / $ASCEND_HOME_PATH; "
                "list CANN's set_env.sh in env_scripts)"
            )
    count = probe.get("device_count")
    if host.device in ("npu", "cuda") and count is not None:
        if count == 0:
            missing.append(f"{host.device} devices (none visible)")
        else:
            absent = [d for d in host.devices if d >= count]
            if absent:
                missing.append(f"{host.device} devices {absent} (only {count} visible: ids 0..{count - 1})")
    if probe.get("work_dir_writable") is False:
        missing.append(f"a writable work_dir ({host.work_dir})")
    elif kind_of(host).remote and not probe.get("marker_seen"):
        where = f"inside container {host.container!r}" if host.container else "where the worker runs"
        missing.append(
            f"work_dir {host.work_dir} as uploaded by SFTP is not visible {where}: mount it at the "
            "same path (docker run -v PATH:PATH)"
        )
    free = probe.get("free_disk_bytes")
    if free is not None and free < MIN_FREE_BYTES:
        missing.append(f"free disk in {host.work_dir} ({free // (1 << 20)} MiB, want at least 1 GiB)")
    return missing


async def check_host(
    host: str, *, inventory: Inventory | str | os.PathLike | None = None, root: str | os.PathLike | None = None
) -> HostCheck:
    """Report what `host` (an inventory name) has and what it lacks.  For host
    ``local`` the work directory is the evidence root (``root``, as the server
    was started with).  Not read-only: the probe creates the work directory if
    it is missing and writes (then removes) a probe file there, and over SSH a
    marker file is uploaded and removed to check what the worker sees."""
    inv = as_inventory(inventory)
    cfg = inv.get(host)
    started = time.monotonic()
    if cfg.scheduler:
        return await _check_scheduler(cfg, started)
    kind = kind_of(cfg)(cfg, HostContext())
    if kind.remote:  # the files it runs are uploaded: is the upload seen where the worker runs?
        work_dir = cfg.work_dir
        code, out, err = await _run_probe_ssh(cfg)
    else:
        work_dir = str(resolve_root(root))
        code, out, err = await _run_probe_here(kind, work_dir)
    address = kind.address
    statuses: list[int] = []
    probe: dict = {}
    errors: list[str] = []
    line = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        probe = json.loads(line) if line else {}
        statuses = probe.get("env_script_status", [])
    except json.JSONDecodeError:
        errors.append(f"unreadable probe output: {line[-500:]!r}")
    env = [
        EnvScriptCheck(
            path=p,
            exit_status=statuses[i] if i < len(statuses) else None,
            sourced=i < len(statuses) and statuses[i] == 0,
        )
        for i, p in enumerate(cfg.env_scripts)
    ]
    if probe:
        missing = _missing(cfg, probe, env)
        errors += probe.get("errors", [])
    else:
        tail = err.strip()[-1500:]
        if code == 127:
            why = f"python {cfg.python!r} was not found on the host"
        elif cfg.env_scripts and len(statuses) < len(cfg.env_scripts):
            why = "the probe did not run: an environment script exited the shell or python failed to start"
        else:
            why = "the probe did not run"
        missing = [f"{why} (exit status {code}; stderr: {tail or '-'})"]
    return HostCheck(
        host=cfg.name,
        transport=cfg.transport,
        address=address,
        ok=not missing,
        python=probe.get("python"),
        python_executable=probe.get("python_executable"),
        torch=probe.get("torch"),
        torch_npu=probe.get("torch_npu"),
        cann=probe.get("cann"),
        cann_home=probe.get("cann_home"),
        device_kind=cfg.device,
        devices=_lent(kind, probe.get("device_count")),
        device_count=probe.get("device_count"),
        visibility=probe.get("visibility", {}),
        work_dir=work_dir,
        work_dir_writable=probe.get("work_dir_writable"),
        free_disk_bytes=probe.get("free_disk_bytes"),
        env_scripts=env,
        missing=missing,
        errors=errors,
        elapsed_s=round(time.monotonic() - started, 3),
    )


def _lent(kind: HostKind, seen: int | None) -> list[int]:
    """The devices the host's slots use: with all_devices, every one the probe saw."""
    if kind.cfg.all_devices and seen:
        return list(range(seen))[: kind.cfg.concurrency or seen]
    return list(kind.cfg.devices)


async def _check_scheduler(cfg: HostConfig, started: float) -> HostCheck:
    """A Slurm host: what its partition offers and what the request lacks (read-only)."""
    from .remote.slurm_partition import partition_report

    context = HostContext()  # its own connection, closed at the end (as the probe's)
    kind = kind_of(cfg)(cfg, context)
    try:
        report, missing = await partition_report(kind.login, cfg)
    finally:
        context.close_unused(set())
    errors: list[str] = []
    if kind.address is None and not os.access(_existing_parent(cfg.work_dir), os.W_OK):
        missing.append(f"a writable work_dir ({cfg.work_dir}) on a file system the nodes see")
    return HostCheck(
        host=cfg.name,
        transport=cfg.transport,
        address=kind.address,
        ok=not missing,
        device_kind=cfg.device,
        devices=[],
        work_dir=cfg.work_dir,
        missing=missing,
        errors=errors,
        elapsed_s=round(time.monotonic() - started, 3),
        scheduler=SchedulerCheck.model_validate(report),
    )


def _existing_parent(path: str) -> str:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return str(p)
