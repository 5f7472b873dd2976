"""check_host: can this inventory host run cases, and if not, exactly what is missing.

The host's kind probes it (`HostKind.probe`): it stages the runner as a slot
would, then runs the shipped stdlib probe (tools/remote/host_probe.py, sent
on stdin) where the worker runs - under the host's environment scripts and
container, through whatever reaches the host (a local subprocess, SSH with
the host key verified, a command prefix) - and the probe reports python,
torch, torch_npu and CANN versions, the visible devices and their count, free
disk in the work directory, whether each environment script sourced, whether
the staged runner is seen there, and `missing`.  A kind whose workers only a
scheduler starts reports instead what its partition offers against the
request, read-only (slurm.py: no job is started, nothing is written).  This
module never asks which kind a host is.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .errors import ToolError
from .evidence import resolve_root
from .remote.host import HostContext, ProbeRun
from .remote.inventory import HostConfig, Inventory, as_inventory
from .remote.kinds import kind_of
from .schemas import EnvScriptCheck, HostCheck, SchedulerCheck

PROBE_SRC = Path(__file__).resolve().parent / "remote" / "host_probe.py"
PROBE_TIMEOUT_S = 180.0
MIN_FREE_BYTES = 1 << 30


def _missing(host: HostConfig, probe: dict, env: list[EnvScriptCheck], run: ProbeRun) -> list[str]:
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
        missing.append(f"a writable work_dir ({run.work_dir})")
    elif run.staged and not probe.get("marker_seen"):
        where = f"inside container {host.container!r}" if host.container else "where the worker runs"
        missing.append(
            f"the runner staged at {run.staged.rsplit('/', 1)[0]} is not visible {where}: mount "
            f"{host.work_dir} there at the same path (docker run -v PATH:PATH)"
        )
    free = probe.get("free_disk_bytes")
    if free is not None and free < MIN_FREE_BYTES:
        missing.append(f"free disk in {run.work_dir} ({free // (1 << 20)} MiB, want at least 1 GiB)")
    return missing


async def check_host(
    host: str, *, inventory: Inventory | str | os.PathLike | None = None, root: str | os.PathLike | None = None
) -> HostCheck:
    """Report what `host` (an inventory name) has and what it lacks.  For a host of this
    machine the work directory is the evidence root (``root``, as the server was started
    with).  Not read-only: the runner is staged as a slot would stage it, and the probe
    creates the work directory if it is missing and writes (then removes) a probe file there."""
    cfg = as_inventory(inventory).get(host)
    started = time.monotonic()
    context = HostContext()  # its own connections, closed at the end
    kind = kind_of(cfg)(cfg, context)
    try:
        run = await kind.probe(PROBE_SRC.read_bytes(), str(resolve_root(root)), PROBE_TIMEOUT_S)
    finally:
        context.close_unused(set())
    common = {
        "host": cfg.name,
        "transport": cfg.transport,
        "address": kind.address,
        "device_kind": cfg.device,
        "work_dir": run.work_dir,
    }
    if not run.ran:  # a scheduler's read-only report
        return HostCheck(
            **common,
            ok=not run.missing,
            devices=kind.lent_devices(None),
            missing=run.missing,
            elapsed_s=round(time.monotonic() - started, 3),
            scheduler=SchedulerCheck.model_validate(run.scheduler_report),
        )
    if run.code is None and not run.out:
        raise ToolError(f"the probe did not run on {cfg.name}: {run.err}", code="probe_timeout")
    probe, errors = _read_probe(run.out)
    statuses = probe.get("env_script_status", [])
    env = [
        EnvScriptCheck(
            path=p,
            exit_status=statuses[i] if i < len(statuses) else None,
            sourced=i < len(statuses) and statuses[i] == 0,
        )
        for i, p in enumerate(cfg.env_scripts)
    ]
    if probe:
        missing = run.missing + _missing(cfg, probe, env, run)
        errors += probe.get("errors", [])
    else:
        missing = run.missing + [_why_not_run(cfg, run, statuses)]
    return HostCheck(
        **common,
        ok=not missing,
        python=probe.get("python"),
        python_executable=probe.get("python_executable"),
        torch=probe.get("torch"),
        torch_npu=probe.get("torch_npu"),
        cann=probe.get("cann"),
        cann_home=probe.get("cann_home"),
        devices=kind.lent_devices(probe.get("device_count")),
        device_count=probe.get("device_count"),
        visibility=probe.get("visibility", {}),
        work_dir_writable=probe.get("work_dir_writable"),
        free_disk_bytes=probe.get("free_disk_bytes"),
        env_scripts=env,
        missing=missing,
        errors=errors,
        elapsed_s=round(time.monotonic() - started, 3),
    )


def _read_probe(out: str) -> tuple[dict, list[str]]:
    """The probe's JSON line (its last line of output), and why it could not be read."""
    line = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        probe = json.loads(line) if line else {}
    except json.JSONDecodeError:
        return {}, [f"unreadable probe output: {line[-500:]!r}"]
    return (probe, []) if isinstance(probe, dict) else ({}, [f"unreadable probe output: {line[-500:]!r}"])


def _why_not_run(cfg: HostConfig, run: ProbeRun, statuses: list) -> str:
    tail = run.err.strip()[-1500:]
    if run.code == 127:
        why = f"python {cfg.python!r} was not found on the host"
    elif cfg.env_scripts and len(statuses) < len(cfg.env_scripts):
        why = "the probe did not run: an environment script exited the shell or python failed to start"
    else:
        why = "the probe did not run"
    return f"{why} (exit status {run.code}; stderr: {tail or '-'})"
