"""The ``command`` host kind: a machine reached by running a command here.

Many Ascend machines are reached by a command rather than an SSH address - a
pod (``kubectl exec -i POD -n NS --``), a container (``docker exec -i C``), a
machine behind a bastion (``ssh -J bastion host``).  Such a host is its
inventory entry alone::

    [hosts.pod]
    transport = "command"
    command = ["kubectl", "exec", "-i", "npu-pod-0", "-n", "ascend", "--"]
    python = "python3"
    env_scripts = ["/usr/local/Ascend/ascend-toolkit/set_env.sh"]
    device = "npu"
    devices = [0, 1, 2, 3]
    work_dir = "/tmp/opdebug"

``command`` is an argument vector run on this machine with no shell; the kind
appends one word, ``bash``, so the prefix must give a shell on the device
machine whose stdin and stdout are the command's own.  Every use is one run of
that command: the remote bash reads exactly one line from its stdin - ``exec``
and a command line built from validated inventory fields, constants and the
quoted paths of the staged runner (shell.py: environment scripts, then the
optional ``container``) - and the rest of stdin belongs to what it execs:

- a slot's supervisor, under the device lease as on SSH (host.supervise_argv):
  the command's stdin and stdout are the protocol channel; closing them (or
  killing the command: its session here) ends the supervisor, which ends its
  worker;
- the stager (stage_files.py, sent as ``python -c SOURCE WORK_DIR``): one
  request - a JSON line, then an uncompressed tar of the runner or of a run's
  files - checked by sha256 and staged by content hash under ``work_dir``
  (``runner-<hash12>``, ``files/modules-<hash12>``), with the checks of this
  machine's stage; the path it answers must be the one the hash names;
- a short command (check_host's probe, verify_run's model command).

Nothing from a tool argument reaches a command line: the run id is not even
in the staged paths (they are named by content).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shlex
import tarfile
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from ..errors import ToolError
from ..schemas import Strict
from .bundle import bundle_files, content_hash, dir_files, dir_stamp
from .errors import SlotCannotStart
from .host import HostContext, HostKind
from .inventory import HostConfig
from .local import LocalProcess, run_local, spawn
from .shell import shell_command, supervisor_command

SHELL = "bash"  # the one word appended to the prefix: a shell on the device machine reading its stdin
STAGER_SRC = Path(__file__).resolve().parent / "stage_files.py"
STAGE_TIMEOUT_S = 120.0
_PROGRAM_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+-/")


def _word(value: str) -> str:
    if not 1 <= len(value) <= 1024 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{value!r} must be 1 to 1024 characters, none of them a control character")
    return value


def _prefix(words: list[str]) -> list[str]:
    program = words[0]
    if not set(program) <= _PROGRAM_CHARS or program.startswith("-") or ".." in program.split("/"):
        raise ValueError(
            f"the command's program {program!r} must be a plain command name (e.g. 'kubectl') or an absolute path"
        )
    return words


Word = Annotated[str, AfterValidator(_word)]


class CommandFields(Strict):
    """The ``command`` kind's own inventory field: the prefix that reaches the machine."""

    command: Annotated[list[Word], AfterValidator(_prefix)] = Field(
        min_length=1,
        max_length=64,
        description=(
            "an argument vector (never a shell string) run here that gives a shell on the device machine "
            "when 'bash' is appended: ['kubectl', 'exec', '-i', 'POD', '-n', 'NS', '--'], "
            "['docker', 'exec', '-i', 'C'], ['ssh', '-J', 'bastion', 'host']"
        ),
    )


class _Staged:
    """What a registry's command hosts staged.  A run's files are kept by host, identity and
    stamp until the host's last slot goes or its runner had to be written anew (the machine
    lost its files: a pod restarted); the runner is staged at every slot start (a round trip
    that compares the files already there), the slots starting together sharing one staging."""

    def __init__(self) -> None:
        self.files: dict[tuple, str | None] = {}
        self._flight: dict[tuple, asyncio.Future] = {}

    async def shared(self, key: tuple, make) -> Any:
        """``make()``, or the staging of ``key`` already in flight."""
        fut = self._flight.get(key)
        if fut is None:
            fut = self._flight[key] = asyncio.ensure_future(make())
            fut.add_done_callback(lambda _: self._flight.pop(key, None))
        return await asyncio.shield(fut)

    def forget(self, host: str) -> None:
        for key in [k for k in self.files if k[0] == host]:
            del self.files[key]

    def close_unused(self, used_hosts: set[str]) -> None:
        for key in [k for k in self.files if k[0] not in used_hosts]:
            del self.files[key]


def tar_bytes(files: dict[str, bytes]) -> bytes:
    """An uncompressed tar of ``files`` (relative path -> content), the same bytes for the same files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(files):
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(files[rel]), 0o600, 0
            tar.addfile(info, io.BytesIO(files[rel]))
    return buf.getvalue()


class CommandHost(HostKind):
    """A machine reached by a command prefix: each supervisor, staging and short command is one run of it."""

    name = "command"
    fields = CommandFields

    def __init__(self, cfg: HostConfig, context: HostContext):
        super().__init__(cfg, context)
        self.prefix = [*cfg.fields(CommandFields).command, SHELL]
        self.staged: _Staged = context.shared("command", _Staged)

    @property
    def address(self) -> str:
        return shlex.join(self.prefix[:-1])

    async def _open(self, line: str) -> LocalProcess:
        """One run of the prefix, its shell given ``line`` (then stdin is what ``line`` execs)."""
        try:
            process = await spawn(self.prefix, dict(os.environ))
        except OSError as exc:
            raise SlotCannotStart(
                f"{self.cfg.name}: cannot run its command {self.address}: {exc.strerror or exc}",
                code="slot_start_failed",
            ) from None
        assert process.stdin is not None  # piped by spawn
        process.stdin.write(line.encode("utf-8") + b"\n")
        await process.stdin.drain()
        return process

    async def start_process(self, argv: list[str], env: dict[str, str], root: str, device: int) -> LocalProcess:
        return await self._open("exec " + supervisor_command(self.cfg, argv, env, root))

    async def run_command(
        self,
        argv: list[str],
        timeout: float,
        *,
        stdin: bytes | None = None,
        merge_stderr: bool = False,
        each_env_script: bool = False,
    ) -> tuple[int | None, str, str]:
        line = "exec " + shell_command(self.cfg, argv, each_env_script=each_env_script) + "\n"
        return await run_local(
            self.prefix, timeout, stdin=line.encode("utf-8") + (stdin or b""), merge_stderr=merge_stderr
        )

    async def _stage(self, name: str, files: dict[str, bytes]) -> tuple[str, bool]:
        """Send ``files`` through the command; the directory they are staged in there, and
        whether they were written now."""
        data = tar_bytes(files)
        header = {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        stager = [self.python, "-c", STAGER_SRC.read_text(encoding="utf-8"), self.cfg.work_dir]
        # every environment script sourced, whatever one of them says (it may put python on PATH;
        # the probe and the supervisor report a failing one)
        code, out, err = await self.run_command(
            stager, STAGE_TIMEOUT_S, stdin=json.dumps(header).encode() + b"\n" + data, each_env_script=True
        )
        answer = _last_json(out)
        folder = self.cfg.work_dir if name == "runner" else f"{self.cfg.work_dir}/files"
        expected = f"{folder}/{name}-{content_hash(files)[:12]}"
        if answer.get("event") == "staged" and answer.get("path") == expected:
            return expected, bool(answer.get("new"))
        if answer.get("event") == "stage_refused":
            raise ToolError(
                f"{self.cfg.name}: refused to stage the {name} in {self.cfg.work_dir}: {answer.get('reason')}",
                code="unsafe_path",
            )
        tail = (err.strip() or out.strip())[-1500:]
        raise SlotCannotStart(
            f"{self.cfg.name}: staging the {name} through {self.address} failed (exit status {code}): {tail or '-'}",
            code="slot_start_failed",
        )

    async def stage_runner(self) -> str:
        files = bundle_files()
        key = (self.cfg.name, self.cfg.worker_identity(), "runner", content_hash(files))
        path, new = await self.staged.shared(key, lambda: self._stage("runner", files))
        if new:  # nothing was there: neither are the run files staged before (a pod restarted)
            self.staged.forget(self.cfg.name)
        return path

    async def stage_run_files(self, run: Any) -> tuple[str | None, str | None]:
        out: list[str | None] = []
        for name, local in (("modules", run.modules_dir), ("captured", run.captured_dir)):
            key = (self.cfg.name, self.cfg.worker_identity(), name, json.dumps(dir_stamp(local)))
            if key not in self.staged.files:
                self.staged.files[key] = await self.staged.shared(key, lambda n=name, d=local: self._stage_dir(n, d))
            out.append(self.staged.files[key])
        return out[0], out[1]

    async def _stage_dir(self, name: str, local: Path | None) -> str | None:
        files = dir_files(local)
        return (await self._stage(name, files))[0] if files else None


def _last_json(out: str) -> dict:
    for line in reversed(out.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


HOST_KIND = CommandHost
