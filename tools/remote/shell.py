"""The shell command lines of a host reached through a shell (SSH, a command prefix).

Built from validated inventory fields and constants only, every piece
shlex-quoted: the host's environment scripts are sourced, then the command is
``exec``ed, inside ``docker exec -i CONTAINER`` when the inventory names one.
Nothing from a tool argument reaches these lines (the model command of
verify_run arrives as an argument vector and each word is quoted).
"""

from __future__ import annotations

import shlex

from .inventory import HostConfig

ENV_STATUS = "OPDEBUG_ENV_STATUS"  # the probe's: each environment script's exit status


def _outer(host: HostConfig, script: str) -> str:
    outer = ["bash", "-c", script]
    if host.container:
        outer = ["docker", "exec", "-i", host.container, *outer]
    return " ".join(shlex.quote(a) for a in outer)


def supervisor_command(host: HostConfig, argv: list[str], env: dict[str, str], runner_root: str) -> str:
    """``argv`` with ``env`` set, under the host's env scripts and container, the runner's
    directory in front of the PYTHONPATH the environment scripts set (CANN's
    set_env.sh puts its te/tbe packages there), never replacing it."""
    q = shlex.quote
    steps = [f"source {q(script)}" for script in host.env_scripts]
    steps.append(f"export PYTHONPATH={q(runner_root)}" + "${PYTHONPATH:+:$PYTHONPATH}")
    steps.append(" ".join(["exec", "env", *(q(f"{k}={v}") for k, v in env.items()), *map(q, argv)]))
    return _outer(host, " && ".join(steps))


def shell_command(host: HostConfig, argv: list[str], *, each_env_script: bool = False) -> str:
    """``argv`` (constants + validated fields, or a model command's words) run under the
    host's env scripts and container.  ``each_env_script``: every script is sourced even
    after one fails and their statuses go to the command as ``$OPDEBUG_ENV_STATUS``
    (check_host's probe reports each); else the first that fails stops the command."""
    q = shlex.quote
    command = " ".join(q(a) for a in argv)
    if not each_env_script:
        return _outer(host, " && ".join([*(f"source {q(s)}" for s in host.env_scripts), "exec " + command]))
    steps = [f"source {q(s)}; s{i}=$?" for i, s in enumerate(host.env_scripts)]
    status = " ".join(f"${{s{i}}}" for i in range(len(host.env_scripts)))
    steps.append(f'exec env {ENV_STATUS}="{status}" {command}')
    return _outer(host, "; ".join(steps))
