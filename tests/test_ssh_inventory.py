"""Inventory validation, remote command building and the host-side lease helper (no sshd needed)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.errors import ToolError
from tools.remote import ssh
from tools.remote.inventory import LOCAL, load_inventory, parse_inventory
from tools.remote.kinds import kind_of

REPO = Path(__file__).resolve().parent.parent
LEASE = REPO / "tools" / "remote" / "lease.py"


def host(**over):
    base = {"hostname": "npu-box.example", "known_hosts": "/tmp/kh", "devices": [0, 1]}
    return {**base, **over}


def test_local_is_always_there_and_names_are_the_only_way_in(tmp_path, monkeypatch):
    monkeypatch.delenv("OPDEBUG_INVENTORY", raising=False)
    inv = load_inventory()
    assert inv.names() == [LOCAL]
    assert inv.get(LOCAL).transport == "local" and inv.get(LOCAL).device == "cpu"
    path = tmp_path / "hosts.toml"
    path.write_text('[hosts.npu-a]\nhostname = "10.0.0.12"\nknown_hosts = "/tmp/kh"\ndevices = [0, 1, 2, 3]\n'
                    'concurrency = 2\n')
    monkeypatch.setenv("OPDEBUG_INVENTORY", str(path))
    inv = load_inventory()
    assert inv.names() == [LOCAL, "npu-a"]
    assert kind_of(inv.get("npu-a")).slot_devices(inv.get("npu-a")) == [0, 1]
    with pytest.raises(ToolError) as err:
        inv.resolve(["npu-a", "10.0.0.12"])
    assert err.value.code == "unknown_host" and "'10.0.0.12'" in err.value.message
    assert "['local', 'npu-a']" in err.value.message


@pytest.mark.parametrize("field,value,needle", [
    ("hostname", "box; rm -rf /", "hostname"),
    ("user", "root$(id)", "user"),
    ("python", "python3 -c 'x'", "python"),
    ("env_scripts", ["/opt/set env.sh"], "env_scripts.0"),
    ("env_scripts", ["relative/set_env.sh"], "env_scripts.0"),
    ("work_dir", "/tmp/../etc", "work_dir"),
    ("container", "-it evil", "container"),
    ("device", "tpu", "device"),
    ("devices", [0, 0], "devices"),
    ("port", 0, "port"),
    ("colour", "blue", "colour"),
])
def test_bad_fields_are_refused_naming_host_and_field(field, value, needle):
    with pytest.raises(ToolError) as err:
        parse_inventory({"hosts": {"npu-a": host(**{field: value})}})
    assert err.value.code == "invalid_inventory"
    assert f"hosts.npu-a.{needle}" in err.value.message or (
        needle == "devices" and "hosts.npu-a" in err.value.message and "repeats" in err.value.message)


def test_address_shape_and_reserved_local():
    with pytest.raises(ToolError, match="exactly one of 'hostname' or 'ssh_config_alias'"):
        parse_inventory({"hosts": {"a": {"known_hosts": "/tmp/kh"}}})
    with pytest.raises(ToolError, match="reserved for the local transport"):
        parse_inventory({"hosts": {"local": host()}})
    inv = parse_inventory({"hosts": {"b": {"ssh_config_alias": "npu-b", "ssh_config": "/tmp/cfg",
                                           "known_hosts": "/tmp/kh"}}})
    assert ssh.ssh_fields(inv.get("b")).ssh_config_alias == "npu-b"


def test_known_hosts_is_required_without_a_default(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/known_hosts there
    with pytest.raises(ToolError, match="'known_hosts' is required"):
        parse_inventory({"hosts": {"a": {"hostname": "h"}}})
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "known_hosts").write_text("")
    inv = parse_inventory({"hosts": {"a": {"hostname": "h"}}})
    assert ssh.ssh_fields(inv.get("a")).known_hosts == str(tmp_path / ".ssh" / "known_hosts")


def test_worker_command_is_quoted_and_has_the_visibility_variable():
    inv = parse_inventory({"hosts": {
        "npu-a": host(device="npu", python="/usr/local/python3.10/bin/python3", work_dir="/data/opdebug", env_scripts=["/usr/local/Ascend/ascend-toolkit/set_env.sh"],
                      container="cann-dev")}})
    h = inv.get("npu-a")
    cmd = ssh.worker_command(h, 3, "/data/opdebug/runner-abc", owner="me:1")
    outer = shlex.split(cmd)
    assert outer[:6] == ["docker", "exec", "-i", "cann-dev", "bash", "-c"]
    inner = outer[6]
    steps = inner.split(" && ")
    assert steps[0] == "source /usr/local/Ascend/ascend-toolkit/set_env.sh"
    # the runner goes in front of the PYTHONPATH set_env.sh exported (its te/tbe), not instead of it
    assert steps[1] == "export PYTHONPATH=/data/opdebug/runner-abc${PYTHONPATH:+:$PYTHONPATH}"
    argv = shlex.split(steps[2])
    assert argv[:2] == ["exec", "env"]
    assert "ASCEND_RT_VISIBLE_DEVICES=3" in argv and not any(a.startswith("PYTHONPATH=") for a in argv)
    assert argv[argv.index("--lease-file") + 1] == "/data/opdebug/leases/npu-3.lock"
    assert argv[-6:] == ["/usr/local/python3.10/bin/python3", "-m", "opdebug_runner", "supervise", "--device", "npu"]
    cpu = parse_inventory({"hosts": {"c": host(device="cpu")}}).get("c")
    cpu_argv = shlex.split(shlex.split(ssh.worker_command(cpu, 1, "/r"))[2].split(" && ")[-1])
    assert "OPDEBUG_DEVICE_ID=1" in cpu_argv
    assert not any(a.startswith(("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")) for a in cpu_argv)
    # Whatever the owner text says, it stays one quoted word and never shell syntax.
    evil = ssh.worker_command(cpu, 0, "/r", owner="$(id); touch /tmp/pwned #")
    assert "$(id)" not in evil and "touch /tmp/pwned" not in evil


def _lease(path: Path, wait: float, *cmd: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(LEASE), "--lease-file", str(path), "--wait", str(wait),
                             "--owner", "test:1", "--device", "cpu:0", "--", *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_lease_is_exclusive_names_its_holder_and_dies_with_its_process(tmp_path):
    lock = tmp_path / "leases" / "cpu-0.lock"
    first = _lease(lock, 1, sys.executable, "-c", "import sys,time; sys.stdout.write('ready\\n'); "
                   "sys.stdout.flush(); time.sleep(30)")
    acquired = json.loads(first.stdout.readline())
    assert acquired["event"] == "lease_acquired"
    assert first.stdout.readline() == "ready\n"
    # The exec'd command (not the helper) holds the lock: its pid is in the file.
    assert json.loads(lock.read_text())["pid"] == first.pid
    started = time.monotonic()
    second = _lease(lock, 0.5, "true")
    out, _ = second.communicate(timeout=10)
    events = [json.loads(line) for line in out.splitlines()]
    assert second.returncode == 75
    assert [e["event"] for e in events] == ["lease_waiting", "lease_busy"]
    assert events[-1]["holder"]["pid"] == first.pid and events[-1]["holder"]["owner"] == "test:1"
    assert time.monotonic() - started >= 0.5
    first.kill()
    first.wait()
    third = _lease(lock, 5, "true")
    out, _ = third.communicate(timeout=10)
    assert third.returncode == 0 and json.loads(out.splitlines()[0])["event"] == "lease_acquired"
    first.stdout.close(), first.stderr.close()
