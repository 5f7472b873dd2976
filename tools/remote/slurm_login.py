"""The login host of a Slurm host: this machine or an SSH host, where srun and friends run.

`LocalLogin` runs them here as argument vectors (no shell on our side; the
environment scrubbed of an outer allocation's ``SLURM_*`` and of device
variables); `SSHLogin` over the host's shared SSH connection, as one quoted
shell command after the login environment scripts.  Both stage the runner and
a run's files in ``work_dir`` (which the nodes must see) and start a slot's
``srun`` as a `local.LocalProcess` / `ssh.SSHProcess`.  The job queries (`job_state`,
`jobs_named`, `own_jobs`) and the `sweep` of jobs left by a server that is
gone run through either.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

from ..errors import ToolError
from ..evidence import safe_component
from .bundle import bundle_files, content_hash, dir_files, dir_stamp
from .errors import SlotCannotStart, SlotLost
from .inventory import HostConfig
from .local import LocalProcess, run_local, spawn
from .safe_stage import private_dir, stage_tree
from .slot import RunFiles
from .slurm_commands import JOB_ID, JOB_PREFIX, LOGIN_SCRUB, JobState, local_login_env, login_command, owner_gone
from .slurm_fields import slurm_options
from .ssh import SSHConnections, SSHProcess, ssh_fields

COMMAND_TIMEOUT_S = 30.0  # one squeue/scancel/scontrol/sinfo


class LocalLogin:
    """srun and friends run on this machine, as argument vectors (no shell on our side)."""

    address: str | None = None  # this machine

    def __init__(self, host: HostConfig):
        self.cfg = host
        self._files: dict[tuple[str, str], tuple[str | None, str | None]] = {}

    def _argv(self, argv: list[str]) -> list[str]:
        scripts = slurm_options(self.cfg).login_env_scripts
        if not scripts:
            return list(argv)
        q = shlex.quote
        steps = [f"source {q(s)}" for s in scripts] + [LOGIN_SCRUB, 'exec "$@"']
        return ["bash", "-c", " && ".join(steps), "opdebug-login", *argv]

    async def run(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int | None, str, str]:
        return await run_local(self._argv(argv), timeout, env=local_login_env())

    async def spawn(self, argv: list[str]) -> LocalProcess:
        try:
            return await spawn(self._argv(argv), local_login_env(), whole_group=False)
        except OSError as exc:
            raise SlotCannotStart(
                f"{self.cfg.name}: cannot run srun on this machine: {exc.strerror or exc} "
                "(is Slurm's client installed and on PATH?)",
                code="slurm_missing",
            ) from None

    async def runner_root(self) -> str:
        """The runner staged into work_dir (which the nodes must see), once per content hash."""
        files = bundle_files()
        root = await asyncio.to_thread(stage_tree, Path(self.cfg.work_dir), f"runner-{content_hash(files)[:12]}", files)
        return str(root)

    async def run_files(self, run: RunFiles) -> tuple[str | None, str | None]:
        """The run's user modules and captured inputs, copied under work_dir (the
        evidence directory need not be on a file system the nodes see)."""
        stamp = json.dumps([dir_stamp(run.modules_dir), dir_stamp(run.captured_dir)])
        key = (run.run_id, stamp)
        if key not in self._files:
            self._files[key] = await asyncio.to_thread(self._stage_run_files, run)
        return self._files[key]

    def _stage_run_files(self, run: RunFiles) -> tuple[str | None, str | None]:
        run_id = safe_component(run.run_id, "run_id")
        out: list[str | None] = []
        for kind, local in (("modules", run.modules_dir), ("captured", run.captured_dir)):
            files = dir_files(local)
            if not files:
                out.append(None)
                continue
            base = private_dir(private_dir(Path(self.cfg.work_dir) / "runs") / run_id)
            out.append(str(stage_tree(base, f"{kind}-{content_hash(files)[:12]}", files)))
        return out[0], out[1]


class SSHLogin:
    """srun and friends run on an SSH login host over the host's shared connection."""

    def __init__(self, connections: SSHConnections, host: HostConfig):
        self.connections = connections
        self.cfg = host
        self.address: str | None = ssh_fields(host).address

    async def run(self, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int | None, str, str]:
        import asyncssh

        try:
            conn = await self.connections.connection(self.cfg)
            done = await asyncio.wait_for(conn.run(login_command(self.cfg, argv), check=False), timeout)
        except asyncio.TimeoutError:
            return None, "", f"{argv[0]} did not answer within {timeout:g} s on {self.address}"
        except (asyncssh.Error, OSError, ToolError) as exc:  # ToolError: cannot connect, host key refused
            return None, "", f"{argv[0]} on {self.address}: {exc}"
        out = done.stdout if isinstance(done.stdout, str) else (done.stdout or b"").decode("utf-8", "replace")
        err = done.stderr if isinstance(done.stderr, str) else (done.stderr or b"").decode("utf-8", "replace")
        return done.exit_status, out or "", err or ""

    async def spawn(self, argv: list[str]) -> SSHProcess:
        import asyncssh

        conn = await self.connections.connection(self.cfg)
        try:
            process = await conn.create_process(login_command(self.cfg, argv), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            if conn.is_closed():
                self.connections.forget_connection(self.cfg.name, conn)
            raise SlotLost(f"cannot start srun on {self.cfg.name} ({self.address}): {exc}") from None
        return SSHProcess(process, self.connections, self.cfg.name)

    async def runner_root(self) -> str:
        return await self.connections.runner_root(self.cfg, await self.connections.connection(self.cfg))

    async def run_files(self, run: RunFiles) -> tuple[str | None, str | None]:
        return await self.connections.run_files(self.cfg, run)


def login_for(host: HostConfig, connections: SSHConnections) -> LocalLogin | SSHLogin:
    """The login host of a Slurm host: this machine, or an SSH host over ``connections``."""
    return LocalLogin(host) if host.transport == "local" else SSHLogin(connections, host)


async def job_state(login, *, job_id: str | None = None, name: str | None = None, all_states: bool = False) -> JobState:
    """The job's squeue state and reason (by id, else by name among the caller's jobs)."""
    argv = ["squeue", "-h", "-o", "%i|%T|%r"]
    argv += ["-j", job_id] if job_id else ["--me", f"--name={name}"]
    if all_states:
        argv.append("--states=all")
    code, out, _ = await login.run(argv)
    if code == 0:
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and JOB_ID.fullmatch(parts[0]):
                return JobState(parts[0], parts[1], parts[2])
    return JobState(job_id, None, None)


async def jobs_named(login, names: list[str]) -> list[tuple[str, str, str]]:
    """(id, name, state) of the caller's queued or running jobs with these names."""
    if not names:
        return []
    code, out, _ = await login.run(["squeue", "--me", "-h", "-o", "%i|%j|%T", f"--name={','.join(names)}"])
    if code != 0:
        return []
    rows = [line.strip().split("|") for line in out.splitlines()]
    return [(r[0], r[1], r[2]) for r in rows if len(r) == 3 and JOB_ID.fullmatch(r[0])]


async def own_jobs(login) -> list[tuple[str, str, str]] | None:
    """(id, name, state) of every job of the login user named by this transport; None when squeue fails."""
    code, out, _ = await login.run(["squeue", "--me", "-h", "-o", "%i|%j|%T"])
    if code != 0:
        return None
    rows = [line.strip().split("|") for line in out.splitlines()]
    return [(r[0], r[1], r[2]) for r in rows if len(r) == 3 and JOB_ID.fullmatch(r[0]) and r[1].startswith(JOB_PREFIX)]


async def sweep(login, host_name: str, run: RunFiles | None = None) -> list[str]:
    """Cancel the login user's jobs whose names say a server of this machine started
    them and that server no longer runs; returns their ids."""
    jobs = await own_jobs(login)
    orphans = [job_id for job_id, name, _ in jobs or [] if owner_gone(name)]
    if orphans:
        await login.run(["scancel", *orphans])
        if run is not None:
            await run.say(
                f"{host_name}: cancelled {len(orphans)} Slurm job(s) left by a server of this machine "
                f"that is gone: {', '.join(orphans)}"
            )
    return orphans
