"""Issue 11 over real sshd: a planted runner is never run, and a run survives
kills of the connection, the worker, the supervisor and the server."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sshd_fixture import descendants, processes_with_marker, ssh_env, write_inventory  # noqa: F401
from tools.errors import ToolError
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.remote import ssh

REPO = Path(__file__).resolve().parent.parent

STEADY = '''\
import time


def cand(x, delay=0.0):
    time.sleep(delay)
    return x * 2


def ref(x, delay=0.0):
    return x * 2
'''


def test_a_planted_runner_on_the_host_is_refused_not_run(ssh_env, tmp_path):
    h = ssh_env.inventory(hosta={"work_dir": str(tmp_path / "work")}).get("hosta")

    async def ensure():
        conn = await ssh.open_connection(h)
        try:
            return await ssh.ensure_runner(conn, h)
        finally:
            conn.close()

    root = Path(asyncio.run(ensure()))
    main = root / "opdebug_runner" / "__main__.py"
    original = main.read_bytes()
    main.write_bytes(original + b"\nprint('planted')\n")  # a copy someone left under the same name
    with pytest.raises(ToolError) as err:
        asyncio.run(ensure())
    assert err.value.code == "unsafe_path" and "differs from the shipped file" in err.value.message
    main.write_bytes(original)
    assert asyncio.run(ensure()) == str(root)  # the genuine copy is used as it is
    os.chmod(tmp_path / "work", 0o777)  # a work_dir others can write
    with pytest.raises(ToolError, match="work_dir is writable by"):
        asyncio.run(ensure())
    os.chmod(tmp_path / "work", 0o755)


def _sshd_sessions(sshd_pid: int) -> list[int]:
    out = []
    for pid in descendants(sshd_pid):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("sshd"):
            out.append(pid)
    return out


def _runner_pids(work: Path, role: str) -> list[int]:
    out = []
    for pid in processes_with_marker(str(work)):
        try:
            if role.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def test_a_run_survives_kills_at_random_points_and_leaves_nothing(ssh_env, tmp_path):
    work = tmp_path / "fi-work"
    inv = write_inventory(tmp_path / "inv.toml", {"hosta": ssh_env.host("hosta", work_dir=str(work),
                                                                        devices=[0, 1], lease_wait_s=30.0)})
    ids = [f"c{i:02d}" for i in range(20)]
    config = {"run_id": "fi", "operator": {"name": "steady", "candidate": "steady_mod.cand",
                                          "reference": "steady_mod.ref", "modules": ["steady_mod.py"]},
              "default_timeout_s": 60}
    plan_cases({"config": config, "module_sources": {"steady_mod.py": STEADY},
                "cases": [{"id": c, "inputs": [{"name": "x", "shape": [8, 8]}], "seed": i,
                           "attributes": {"delay": 1.0}} for i, c in enumerate(ids)]}, root=tmp_path)
    cmd = [sys.executable, "-m", "tools.cli", "run", "--root", str(tmp_path), "--run-id", "fi", "--host", "hosta",
           "--inventory", str(inv), "--json"]
    rng = random.Random(11)
    targets = ["connection", "worker", "supervisor", "server"]
    rng.shuffle(targets)
    sshd = ssh_env.servers["hosta"].proc.pid
    killed = {}
    for round_, target in enumerate(targets):  # each round runs its own 5 cases, so each kill lands mid-run
        chunk = [arg for c in ids[5 * round_:5 * round_ + 5] for arg in ("--case", c)]
        server = subprocess.Popen(cmd + chunk, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not _runner_pids(work, "worker") and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.2, 1.0))
        victims = {"connection": lambda: _sshd_sessions(sshd), "server": lambda: [server.pid],
                   "worker": lambda: _runner_pids(work, "worker")[:1],
                   "supervisor": lambda: _runner_pids(work, "supervise")[:1]}[target]()
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed[target] = victims
        server.communicate(timeout=180)
    assert all(killed.values()), killed  # every kill found its victim
    final = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr
    store = RunStore(tmp_path, "fi")
    results = store.read_results()
    assert sorted(results) == ids and store.pending_case_ids() == []  # every case recorded, once
    for cid, result in results.items():
        raw = json.loads((tmp_path / "fi" / "raw-results" / cid / "result.json").read_text())
        assert raw["status"] == result.status, cid
        # a killed worker is the only crash there can be; any other kill leaves the case pending, then passed
        assert result.status == "passed" or (result.status == "crash" and result.error.signature == "SIGKILL"), \
            (cid, result.status, result.error)
    manifest = json.loads((tmp_path / "fi" / "manifest.json").read_text())
    assert manifest["recorded_count"] == len(results) == manifest["case_count"]
    deadline = time.monotonic() + 15
    while processes_with_marker(str(work)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_marker(str(work)) == [], killed
