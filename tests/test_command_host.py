"""The ``command`` host kind, for real: a host reached by a command prefix run here.

The OpenSSH client binary against the test sshd (``ssh -p PORT -i KEY -o
UserKnownHostsFile=... -o BatchMode=yes USER@127.0.0.1``, and through a
bastion with ``ssh -F CONFIG -J bastion npu``), a local prefix (``env``), and
a container prefix emulated by a tiny local ``docker`` that execs its argv.
Whole runs go through the real pool and run_case_remote; check_host reports
python, torch and devices; a channel killed mid-case leaves the case pending
and no process behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from sshd_fixture import login_user, processes_with_marker, ssh_env  # noqa: F401  (fixture)

from tools.check_host import check_host
from tools.errors import ToolError
from tools.plan_cases import plan_cases
from tools.remote import pool
from tools.remote.bundle import content_hash
from tools.remote.command import STAGER_SRC, CommandHost, tar_bytes
from tools.remote.inventory import parse_inventory
from tools.run_case_remote import run_case_remote

OPERATORS = Path(__file__).resolve().parent / "operators"
HANGS = """\
import time


def cand(x, started=""):
    open(started, "w").close()  # the candidate runs: the channel may go now
    time.sleep(600)
    return x


def ref(x, started=""):
    return x
"""
# `docker exec [-i] CONTAINER CMD...` run here: CMD with the container's name in its environment.
FAKE_DOCKER = """#!/bin/sh
[ "$1" = exec ] || { echo "fake docker: only exec" >&2; exit 64; }
shift
[ "$1" = -i ] && shift
name=$1
shift
OPDEBUG_TEST_CONTAINER=$name exec "$@"
"""


def plan_bf16(root: Path, run_id: str, n: int = 2) -> None:
    config = {
        "run_id": run_id,
        "operator": {
            "name": "bf16_only",
            "candidate": "bf16_only.cand",
            "reference": "bf16_only.ref",
            "modules": ["bf16_only.py"],
        },
        "tolerance": {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"bfloat16": {"atol": 8e-3, "rtol": 8e-3}}},
    }
    cases = [
        {"id": f"x-{d}-{i}", "inputs": [{"name": "x", "shape": [4, 8], "dtype": d}], "seed": i}
        for d in ("float32", "bfloat16")
        for i in range(n)
    ]
    plan_cases(
        {
            "config": config,
            "cases": cases,
            "module_sources": {"bf16_only.py": (OPERATORS / "bf16_only.py").read_text()},
        },
        root=root,
    )


EXPECTED = {
    "x-float32-0": "passed",
    "x-float32-1": "passed",
    "x-bfloat16-0": "numerical_mismatch",
    "x-bfloat16-1": "numerical_mismatch",
}


def run(coro, hellos: list[dict] | None = None):
    async def main():
        try:
            return await coro
        finally:
            if hellos is not None:  # what each warm supervisor said, and the program that reached it here
                hellos.extend(
                    {**e.slot.hello, "program": _program(e.slot.pid)} for e in pool.REGISTRY._entries.values()
                )
            await pool.REGISTRY.close_all()

    return asyncio.run(main())


def _program(pid: int | None) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def ssh_prefix(env, name: str = "hosta") -> list[str]:
    server = env.servers[name]
    return [
        "ssh",
        "-p",
        str(server.port),
        "-i",
        str(env.client_key),
        "-o",
        f"UserKnownHostsFile={env.known_hosts}",
        "-o",
        "BatchMode=yes",
        f"{login_user()}@127.0.0.1",
    ]


def command_host(command: list[str], work_dir: Path, **over) -> dict:
    return {
        "transport": "command",
        "command": command,
        "python": sys.executable,
        "device": "cpu",
        "devices": [0, 1],
        "work_dir": str(work_dir),
        **over,
    }


def fake_docker(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    return docker


def test_a_whole_run_through_the_openssh_client_and_check_host_on_it(ssh_env, tmp_path):  # noqa: F811
    work = tmp_path / "ssh-work"
    inv = parse_inventory({"hosts": {"pod": command_host(ssh_prefix(ssh_env), work)}})
    plan_bf16(tmp_path, "via-ssh")
    hellos: list[dict] = []
    resp = run(run_case_remote("via-ssh", hosts=["pod"], root=tmp_path, inventory=inv), hellos)
    assert {o.case_id: o.state for o in resp.outcomes} == EXPECTED
    # each supervisor's channel is an ssh client here; it ran from the runner staged through the command
    assert hellos and all(h["program"] == "ssh" for h in hellos), hellos
    runner = [p for p in work.iterdir() if p.name.startswith("runner-")]
    assert len(runner) == 1 and (runner[0] / "opdebug_lease.py").is_file()
    staged = list((work / "files").iterdir())
    assert [p.name.split("-")[0] for p in staged] == ["modules"] and "via-ssh" not in str(staged[0])
    assert sorted(p.name for p in (work / "leases").iterdir()) == ["cpu-0.lock", "cpu-1.lock"]

    check = asyncio.run(check_host("pod", inventory=inv))
    import torch

    assert check.ok, check.missing
    assert check.transport == "command" and check.address.startswith("ssh -p ")
    assert check.python == sys.version.split()[0] and check.torch == torch.__version__
    assert check.devices == [0, 1] and check.device_count == os.cpu_count() and check.work_dir == str(work)


def test_a_bastion_prefix_reaches_the_host_through_another(ssh_env, tmp_path):  # noqa: F811
    """``ssh -J bastion npu``: hosta's sshd is the bastion, hostb's the device machine."""
    config = tmp_path / "ssh_config"
    a, b = ssh_env.servers["hosta"].port, ssh_env.servers["hostb"].port
    config.write_text(
        f"Host *\n  User {login_user()}\n  IdentityFile {ssh_env.client_key}\n"
        f"  UserKnownHostsFile {ssh_env.known_hosts}\n  BatchMode yes\n"
        f"Host bastion\n  HostName 127.0.0.1\n  Port {a}\nHost npu\n  HostName 127.0.0.1\n  Port {b}\n"
    )
    work = tmp_path / "bastion-work"
    inv = parse_inventory({"hosts": {"behind": command_host(["ssh", "-F", str(config), "-J", "bastion", "npu"], work)}})
    check = asyncio.run(check_host("behind", inventory=inv))
    assert check.ok and check.torch and check.devices == [0, 1], check.missing


def test_a_local_prefix_and_an_emulated_container_run_a_whole_run(tmp_path, monkeypatch):
    """The prefix is a container's (``docker exec -i npu-box``, a local stand-in that execs its
    argv) and the inventory's ``container`` wraps the worker once more, as on a shared server."""
    docker = fake_docker(tmp_path)
    monkeypatch.setenv("PATH", f"{docker.parent}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "box-work"
    env_script = tmp_path / "set_env.sh"
    env_script.write_text("export ASCEND_TEST_TOOLKIT=sourced\n")
    broken = tmp_path / "broken_env.sh"
    broken.write_text("return 3\n")
    inv = parse_inventory(
        {
            "hosts": {
                "box": command_host(
                    [str(docker), "exec", "-i", "npu-box"],
                    work,
                    container="cann",
                    env_scripts=[str(env_script)],
                    devices=[0],
                ),
                "broken": command_host(["env"], work, env_scripts=[str(env_script), str(broken)]),
                "plain": command_host(["env", "OPDEBUG_TEST_PREFIX=env"], tmp_path / "plain-work", devices=[0]),
            }
        }
    )
    # one run per host: a run of two hosts may end before the second host's slot says hello (its cases all
    # done on the first), and each host's own hello is what is checked below
    hellos: list[dict] = []
    for host in ("box", "plain"):
        plan_bf16(tmp_path, f"run-{host}")
        resp = run(run_case_remote(f"run-{host}", hosts=[host], root=tmp_path, inventory=inv), hellos)
        assert {o.case_id: o.state for o in resp.outcomes} == EXPECTED, host
    containers = {h["env"].get("OPDEBUG_TEST_CONTAINER") for h in hellos}
    assert "cann" in containers and None in containers, hellos  # box's workers inside 'cann'; plain's not
    assert any(h["env"].get("OPDEBUG_TEST_PREFIX") == "env" for h in hellos)
    # box's environment script was sourced where its workers run (inside the container)
    assert {h["env"].get("ASCEND_TEST_TOOLKIT") for h in hellos if h["env"].get("OPDEBUG_TEST_CONTAINER")} == {
        "sourced"
    }
    check = asyncio.run(check_host("box", inventory=inv))
    assert check.ok and check.device_count and check.devices == [0], check.missing
    assert [(e.exit_status, e.sourced) for e in check.env_scripts] == [(0, True)]
    broken_check = asyncio.run(check_host("broken", inventory=inv))
    assert [(e.exit_status, e.sourced) for e in broken_check.env_scripts] == [(0, True), (3, False)]
    assert broken_check.missing == [f"environment script {broken} did not source cleanly (exit status 3)"]


def test_killing_the_channel_mid_case_leaves_the_case_pending_and_no_process_behind(ssh_env, tmp_path):  # noqa: F811
    work = tmp_path / "kill-work"
    started = tmp_path / "candidate-started"
    inv = parse_inventory({"hosts": {"pod": command_host(ssh_prefix(ssh_env), work, devices=[0])}})
    config = {
        "run_id": "hang",
        "operator": {
            "name": "hangs",
            "candidate": "hangs_mod.cand",
            "reference": "hangs_mod.ref",
            "modules": ["hangs_mod.py"],
        },
        "default_timeout_s": 300,
    }
    plan_cases(
        {
            "config": config,
            "cases": [{"id": "h0", "inputs": [{"name": "x", "shape": [4]}], "attributes": {"started": str(started)}}],
            "module_sources": {"hangs_mod.py": HANGS},
        },
        root=tmp_path,
    )

    async def kill_the_client_mid_case():
        task = asyncio.ensure_future(run_case_remote("hang", hosts=["pod"], root=tmp_path, inventory=inv))
        deadline = time.monotonic() + 120
        # the supervisor and its worker run, the worker inside the candidate
        while not started.exists():
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.1)
        client = next(e.slot.pid for e in pool.REGISTRY._entries.values())
        assert _program(client) == "ssh"
        os.kill(client, signal.SIGKILL)
        return await asyncio.wait_for(task, 60)

    resp = run(kill_the_client_mid_case())
    assert [o.state for o in resp.outcomes] == ["pending"] and resp.recorded == []
    assert "connection lost" in (resp.outcomes[0].error or ""), resp.outcomes[0].error
    assert resp.pending == ["h0"]
    deadline = time.monotonic() + 15
    while processes_with_marker(str(work)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_marker(str(work)) == []  # supervisor, worker, lease helper: all gone


def test_the_prefix_is_an_argument_vector_and_only_the_command_kinds_field():
    def refused(entry: dict) -> str:
        with pytest.raises(ToolError) as err:
            parse_inventory({"hosts": {"pod": {"device": "cpu", **entry}}})
        assert err.value.code == "invalid_inventory"
        return err.value.message

    assert "hosts.pod.command" in refused({"transport": "command", "command": "kubectl exec -i pod --"})
    assert "hosts.pod.command" in refused({"transport": "command", "command": []})
    assert "control character" in refused({"transport": "command", "command": ["ssh", "host\nrm -rf /"]})
    assert "plain command name" in refused({"transport": "command", "command": ["-oProxyCommand=x", "h"]})
    assert "hosts.pod.command" in refused({"transport": "command"})  # the kind's own field is required
    # no SSH address or known_hosts is asked of a command host; its field is refused elsewhere
    message = refused({"hostname": "h", "known_hosts": "/dev/null", "command": ["kubectl"]})
    assert "hosts.pod.command: Value error, not a field of a 'ssh' host" in message
    host = parse_inventory(
        {
            "hosts": {
                "pod": {
                    "transport": "command",
                    "device": "cpu",
                    "command": ["kubectl", "exec", "-i", "p", "-n", "ns", "--"],
                }
            }
        }
    )
    kind = CommandHost(host.get("pod"), pool.REGISTRY.context)
    assert kind.prefix == ["kubectl", "exec", "-i", "p", "-n", "ns", "--", "bash"]
    assert kind.address == "kubectl exec -i p -n ns --"


def test_check_host_on_a_command_host_without_its_python_says_what_is_missing(tmp_path):
    inv = parse_inventory({"hosts": {"pod": command_host(["env"], tmp_path / "w", python="/nonexistent/bin/python3")}})
    check = asyncio.run(check_host("pod", inventory=inv))
    assert not check.ok and check.torch is None
    assert check.missing[0].startswith("the runner staged where the worker runs") and "127" in check.missing[0]
    assert "python '/nonexistent/bin/python3' was not found on the host" in check.missing[-1], check.missing


def _stage(work: Path, name: str, data: bytes, digest: str | None = None) -> dict:
    """The stager as a command host runs it: ``python -c SOURCE WORK_DIR``, one request on stdin."""
    header = {"name": name, "size": len(data), "sha256": digest or hashlib.sha256(data).hexdigest()}
    done = subprocess.run(
        [sys.executable, "-c", STAGER_SRC.read_text(), str(work)],
        input=json.dumps(header).encode() + b"\n" + data,
        capture_output=True,
        timeout=60,
    )
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def test_the_stager_checks_the_bytes_by_hash_and_never_trusts_a_tree_it_did_not_write(tmp_path):
    work = tmp_path / "work"
    files = {"pkg/a.py": b"A = 1\n", "b.py": b"B = 2\n"}
    good = tar_bytes(files)
    staged = _stage(work, "modules", good)
    path = f"{work}/files/modules-{content_hash(files)[:12]}"
    assert staged == {"event": "staged", "path": path, "new": True}
    assert Path(staged["path"], "pkg", "a.py").read_bytes() == b"A = 1\n"
    # the same files: the same stage, verified byte for byte
    assert _stage(work, "modules", good) == {"event": "staged", "path": path, "new": False}

    refused = _stage(work, "modules", good, digest="0" * 64)  # bytes changed on the way
    assert refused["event"] == "stage_refused" and "sha256" in refused["reason"]
    Path(staged["path"], "b.py").write_bytes(b"B = 'planted'\n")  # a tree changed after it was staged
    planted = _stage(work, "modules", good)
    assert planted["event"] == "stage_refused" and "'b.py' differs from the shipped file" in planted["reason"]

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
    escape = _stage(work, "runner", buf.getvalue())
    assert escape["event"] == "stage_refused" and "'../escape.py'" in escape["reason"]
    assert not (tmp_path / "escape.py").exists()
    other = _stage(work, "../etc", good)
    assert other["event"] == "stage_refused" and not (tmp_path / "etc").exists()


def test_a_model_command_through_the_prefix_is_words_never_shell_syntax(ssh_env, tmp_path):  # noqa: F811
    """verify_run's model command (a tool argument) reaches the far shell as quoted words only,
    even through ssh, which would join an argument vector into one shell line."""
    from tools.artifacts.verify import run_model_command

    inv = parse_inventory({"hosts": {"pod": command_host(ssh_prefix(ssh_env), tmp_path / "w")}})
    planted = tmp_path / "PWNED"
    command = shlex.join(["echo", f"$(touch {planted})", ";", "exit", "3"])
    done = run(run_model_command(command, inv.get("pod"), timeout_s=60))
    assert done["exit_status"] == 0 and done["output_tail"].strip() == f"$(touch {planted}) ; exit 3"
    assert not planted.exists()


def test_a_machine_that_lost_its_files_gets_them_again(tmp_path):
    """A pod restarted: the next slot finds no runner, stages it anew, and the run's files with it."""
    work = tmp_path / "pod-work"
    inv = parse_inventory({"hosts": {"pod": command_host(["env"], work, devices=[0])}})
    plan_bf16(tmp_path, "restart", n=1)

    async def twice():
        try:
            first = await run_case_remote(
                "restart", case_ids=["x-float32-0"], hosts=["pod"], root=tmp_path, inventory=inv
            )
            await pool.REGISTRY.close_idle(["pod"])  # its processes went with the pod...
            shutil.rmtree(work)  # ...and so did its files
            second = await run_case_remote("restart", hosts=["pod"], root=tmp_path, inventory=inv)
            return first, second
        finally:
            await pool.REGISTRY.close_all()

    first, second = asyncio.run(twice())
    assert [o.state for o in first.outcomes] == ["passed"]
    assert {o.case_id: o.state for o in second.outcomes} == {"x-bfloat16-0": "numerical_mismatch"}
    assert [p.name.split("-")[0] for p in (work / "files").iterdir()] == ["modules"]
