"""Host keys, runner upload and check_host against real OpenSSH sshd on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sshd_fixture import login_user, ssh_env  # noqa: F401  (fixture)
from tools.check_host import check_host
from tools.errors import ToolError
from tools.remote import ssh


def _fingerprint(pub: Path) -> str:
    return subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True,
                          check=True).stdout.split()[1]


def test_unknown_host_key_is_refused_with_fingerprint_and_trust_command(ssh_env, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    inv = ssh_env.inventory(hosta={"known_hosts": str(kh)})
    server = ssh_env.servers["hosta"]
    with pytest.raises(ToolError) as err:
        asyncio.run(ssh.open_connection(inv.get("hosta")))
    msg = err.value.message
    fp = _fingerprint(Path(str(server.host_key) + ".pub"))
    assert err.value.code == "host_key_unknown"
    assert f"verify the fingerprint {fp} out of band".lower() in msg.lower()
    trust = f"ssh-keyscan -p {server.port} 127.0.0.1 >> {kh}"
    assert trust in msg
    # The command it names really is the one that trusts the host.
    subprocess.run(["bash", "-c", trust], check=True, capture_output=True, timeout=30)

    async def connect_and_echo():
        conn = await ssh.open_connection(inv.get("hosta"))
        try:
            return (await conn.run("echo trusted", check=True)).stdout
        finally:
            conn.close()

    assert asyncio.run(connect_and_echo()).strip() == "trusted"


def test_a_missing_known_hosts_file_is_an_empty_trust_store(ssh_env, tmp_path):
    # The inventory accepts a known_hosts path that does not exist yet (the trust command
    # creates it); until then it trusts nothing - a missing file never turns checking off.
    kh = tmp_path / "not-yet" / "known_hosts"
    inv = ssh_env.inventory(hosta={"known_hosts": str(kh)})
    assert ssh.ssh_fields(inv.get("hosta")).known_hosts == str(kh)
    server = ssh_env.servers["hosta"]
    with pytest.raises(ToolError) as err:
        asyncio.run(ssh.open_connection(inv.get("hosta")))
    assert err.value.code == "host_key_unknown"
    assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {kh}" in err.value.message
    assert not kh.exists()  # refusing wrote nothing


def test_changed_host_key_is_refused_naming_the_file_with_the_old_key(ssh_env, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    server = ssh_env.servers["hosta"]
    kh = tmp_path / "known_hosts"
    kind, blob = Path(str(other) + ".pub").read_text().split()[:2]
    kh.write_text(f"[127.0.0.1]:{server.port} {kind} {blob}\n")
    inv = ssh_env.inventory(hosta={"known_hosts": str(kh)})
    with pytest.raises(ToolError) as err:
        asyncio.run(ssh.open_connection(inv.get("hosta")))
    msg = err.value.message
    assert err.value.code == "host_key_changed"
    assert "HOST KEY CHANGED" in msg and str(kh) in msg
    assert _fingerprint(Path(str(other) + ".pub")) in msg          # the old key
    assert _fingerprint(Path(str(server.host_key) + ".pub")) in msg  # what the server offers
    assert kh.read_text().split()[2] == blob  # nothing was rewritten


def test_runner_is_uploaded_once_per_content_hash(ssh_env):
    inv = ssh_env.inventory(hostb={})
    h = inv.get("hostb")

    async def twice():
        conn = await ssh.open_connection(h)
        try:
            first = await ssh.ensure_runner(conn, h)
            marker = Path(first) / ".complete"
            stamp = marker.stat().st_mtime_ns
            second = await ssh.ensure_runner(conn, h)
            return first, second, stamp, marker.stat().st_mtime_ns
        finally:
            conn.close()

    first, second, before, after = asyncio.run(twice())
    assert first == second == ssh.runner_dir(h)
    assert before == after  # not uploaded again
    root = Path(first)
    shipped = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    assert shipped == sorted(ssh.runner_files())
    assert not [p for p in Path(h.work_dir).iterdir() if ".tmp-" in p.name]  # no half-uploads left


def test_check_host_reports_versions_env_scripts_and_exactly_what_is_missing(ssh_env, tmp_path):
    cann = tmp_path / "cann"
    cann.mkdir()
    (cann / "version.cfg").write_text("toolkit_version=8.0.RC3\n")
    good = tmp_path / "set_env.sh"
    good.write_text(f"export ASCEND_TOOLKIT_HOME={cann}\n")
    bad = tmp_path / "broken_env.sh"
    bad.write_text("return 3\n")
    inv = ssh_env.inventory(hosta={"device": "npu", "env_scripts": [str(good), str(bad)]},
                            hostb={"python": "/nonexistent/bin/python3"})

    async def checks():
        return await asyncio.gather(check_host("hosta", inventory=inv), check_host("hostb", inventory=inv),
                                    check_host("local", inventory=inv))

    npu, nopython, local = asyncio.run(checks())
    import torch

    assert npu.torch == torch.__version__ and npu.python == sys.version.split()[0]
    assert npu.cann == "8.0.RC3" and npu.cann_home == str(cann)
    assert [(e.path, e.exit_status, e.sourced) for e in npu.env_scripts] == [(str(good), 0, True),
                                                                             (str(bad), 3, False)]
    assert npu.ok is False
    assert npu.missing == [f"environment script {bad} did not source cleanly (exit status 3)",
                           "torch_npu (not importable)"]
    assert npu.free_disk_bytes > 0 and npu.work_dir_writable is True
    assert nopython.ok is False and len(nopython.missing) == 1
    assert "'/nonexistent/bin/python3' was not found" in nopython.missing[0]
    assert local.ok is True and local.missing == [] and local.transport == "local"
    assert local.torch == torch.__version__
    # the local probe's work dir is the evidence root of the environment (a temporary one), not ./.vaws-local
    assert local.work_dir == str(Path(os.environ["OPDEBUG_EVIDENCE_ROOT"]).resolve())
    with pytest.raises(ToolError, match="unknown host 'nowhere'"):
        asyncio.run(check_host("nowhere", inventory=inv))


def test_an_openssh_config_alias_is_resolved_and_still_verified(ssh_env, tmp_path):
    server = ssh_env.servers["hostb"]
    config = tmp_path / "ssh_config"
    config.write_text(f"Host npu-alias\n  HostName 127.0.0.1\n  Port {server.port}\n  User {login_user()}\n"
                      f"  IdentityFile {ssh_env.client_key}\n")
    from tools.remote.inventory import parse_inventory
    inv = parse_inventory({"hosts": {"aliased": {"ssh_config_alias": "npu-alias", "ssh_config": str(config),
                                                 "known_hosts": str(ssh_env.known_hosts)}}})
    h = inv.get("aliased")
    assert ssh.resolved_address(h) == ("127.0.0.1", server.port)

    async def whoami():
        conn = await ssh.open_connection(h)
        try:
            return (await conn.run("id -un", check=True)).stdout.strip()
        finally:
            conn.close()

    assert asyncio.run(whoami()) == login_user()
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    inv = parse_inventory({"hosts": {"aliased": {"ssh_config_alias": "npu-alias", "ssh_config": str(config),
                                                 "known_hosts": str(empty)}}})
    with pytest.raises(ToolError) as err:
        asyncio.run(ssh.open_connection(inv.get("aliased")))
    assert err.value.code == "host_key_unknown"
    assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {empty}" in err.value.message


def test_run_files_are_shipped_per_content_hash(ssh_env, tmp_path):
    h = ssh_env.inventory(hosta={}).get("hosta")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "op_mod.py").write_text("VERSION = 1\n")

    async def ship():
        conn = await ssh.open_connection(h)
        try:
            first, _ = await ssh.upload_run_files(conn, h, "run-files", modules, None)
            same, _ = await ssh.upload_run_files(conn, h, "run-files", modules, None)
            (modules / "op_mod.py").write_text("VERSION = 2\n")
            changed, captured = await ssh.upload_run_files(conn, h, "run-files", modules, None)
            with pytest.raises(ToolError) as err:
                await ssh.upload_run_files(conn, h, "../escape", modules, None)
            assert err.value.code == "invalid_id" and "'../escape' must be a safe slug" in err.value.message
            return first, same, changed, captured
        finally:
            conn.close()

    first, same, changed, captured = asyncio.run(ship())
    assert first == same and first != changed and captured is None
    assert first.startswith(f"{h.work_dir}/runs/run-files/modules-")
    assert Path(first, "op_mod.py").read_text() == "VERSION = 1\n"  # an old upload is never mixed with a new one
    assert Path(changed, "op_mod.py").read_text() == "VERSION = 2\n"
