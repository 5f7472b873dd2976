"""verify's model command on an SSH host (a real sshd): the config's command
runs as its argv - every word quoted, under the host's environment scripts -
so shell text inside a word is printed, never executed."""

from __future__ import annotations

import asyncio
import shlex

from sshd_fixture import login_user, ssh_env  # noqa: F401  (fixture)

from tools.artifacts.verify import run_model_command
from tools.remote.pool import REGISTRY


def test_the_model_command_runs_over_ssh_as_argv_under_the_env_scripts(ssh_env, tmp_path):  # noqa: F811
    env_script = tmp_path / "set_env.sh"
    env_script.write_text("export OPDEBUG_MODEL_ENV=from-env-script\n")
    inv = ssh_env.inventory(hosta={"device": "cpu", "env_scripts": [str(env_script)]})
    host = inv.resolve(["hosta"])[0]
    marker = tmp_path / "PWNED"

    async def commands():
        try:
            quoted = await run_model_command(shlex.join(["echo", f"$(touch {marker})", ";", "exit", "3"]), host,
                                             timeout_s=60)
            shell = await run_model_command(shlex.join(["sh", "-c", "echo $OPDEBUG_MODEL_ENV; exit 4"]), host,
                                            timeout_s=60)
            return quoted, shell
        finally:
            await REGISTRY.close_all()

    quoted, shell = asyncio.run(commands())
    assert quoted["exit_status"] == 0 and quoted["transport"] == "ssh" and quoted["host"] == "hosta"
    assert quoted["output_tail"].strip() == f"$(touch {marker}) ; exit 3"
    assert not marker.exists()
    assert shell["exit_status"] == 4 and shell["output_tail"].strip() == "from-env-script"
    assert shell["argv"] == ["sh", "-c", "echo $OPDEBUG_MODEL_ENV; exit 4"]
