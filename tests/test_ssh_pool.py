"""run_case_remote over real sshd hosts: the pool, env scripts, lost hosts, leases, cancellation.

Two sshd instances on 127.0.0.1 play two hosts with two cpu "devices" each;
the runner is uploaded to them by SFTP and runs as a real remote command.
The operator sleeps inside the candidate so that timing is controllable.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sshd_fixture import Sshd, processes_with_marker, ssh_env, write_inventory  # noqa: F401
from tools.errors import ToolError
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.remote import pool
from tools.remote.slot import RunFiles
from tools.run_case_remote import run_case_remote

REPO = Path(__file__).resolve().parent.parent

SLEEPY = '''\
import os
import time


def cand(x, delay=0.0, scale_env="", call_log=""):
    if call_log:  # one line per execution, written as the candidate starts
        fd = os.open(call_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, b"started\\n")
        os.close(fd)
    time.sleep(delay)
    if scale_env:
        return x * float(os.environ[scale_env])
    return x * 2


def ref(x, delay=0.0, scale_env="", call_log=""):
    return x * 2
'''


def plan(root: Path, run_id: str, n: int, *, delay: float = 0.0, scale_env: str = "",
         call_log: Path | None = None) -> list[str]:
    ids = [f"c{i}" for i in range(n)]
    logged = {"call_log": str(call_log)} if call_log else {}
    cases = [{"id": cid, "inputs": [{"name": "x", "shape": [8, 8]}], "seed": i,
              "attributes": {"delay": delay, "scale_env": scale_env, **logged}} for i, cid in enumerate(ids)]
    config = {"run_id": run_id, "operator": {"name": "sleepy", "candidate": "sleepy_mod.cand",
                                            "reference": "sleepy_mod.ref", "modules": ["sleepy_mod.py"]},
              "default_timeout_s": 60}
    plan_cases({"config": config, "cases": cases, "module_sources": {"sleepy_mod.py": SLEEPY}}, root=root)
    return ids


def run(coro):
    """One tool call's event loop; the warm workers are shut down at its end (as at server shutdown)."""
    async def main():
        try:
            return await coro
        finally:
            await pool.REGISTRY.close_all()
    return asyncio.run(main())


def raw_events(root: Path, run_id: str) -> dict[str, dict]:
    base = root / run_id / "raw-results"
    return {d.name: json.loads((d / "worker-result.json").read_text()) for d in base.iterdir()
            if (d / "worker-result.json").is_file()}


def recorded(root: Path, run_id: str) -> dict:
    """Recorded results from the run's append-only index (results.json is a view written by analysis);
    a case recorded twice would show as two lines."""
    lines = (root / run_id / "results.jsonl").read_text().splitlines()
    docs = [json.loads(line) for line in lines]
    assert len({d["case_id"] for d in docs}) == len(docs), "a case recorded twice"
    return {d["case_id"]: d for d in docs}


def records(root: Path, run_id: str) -> list[str]:
    """The case id of every record in the append-only results index, as written: a case
    recorded twice shows twice here (a dict keyed by case id would hide it)."""
    lines = (root / run_id / "results.jsonl").read_text().splitlines()
    return [json.loads(line)["case_id"] for line in lines]


def executions(call_log: Path) -> int:
    """How many times the candidate started (SLEEPY's call_log)."""
    return len(call_log.read_text().splitlines()) if call_log.is_file() else 0


def test_one_matrix_spreads_over_two_hosts_and_four_slots(ssh_env, tmp_path):
    inv = ssh_env.inventory(hosta={}, hostb={})
    calls = tmp_path / "spread-calls.log"
    ids = plan(tmp_path, "spread", 8, delay=0.5, call_log=calls)
    resp = run(run_case_remote("spread", hosts=["hosta", "hostb"], root=tmp_path, inventory=inv))
    assert sorted(resp.recorded) == sorted(ids) and resp.pending == []
    assert [o.state for o in resp.outcomes] == ["passed"] * 8
    results = recorded(tmp_path, "spread")
    assert sorted(records(tmp_path, "spread")) == sorted(ids)  # every case recorded exactly once
    assert executions(calls) == 8  # ...and executed exactly once: 8 runs for 8 cases
    assert sorted(raw_events(tmp_path, "spread")) == sorted(ids)
    used = {(r["source"]["host"], r["source"]["device"]) for r in results.values()}
    assert {h for h, _ in used} == {"hosta", "hostb"}
    assert len(used) >= 3  # the cases really spread over the slots
    again = run(run_case_remote("spread", case_ids=ids[:2], hosts=["hosta"], root=tmp_path, inventory=inv))
    assert again.refused == ids[:2] and again.recorded == []


def test_a_host_with_more_slots_than_sshd_max_sessions_gets_more_connections(ssh_env, tmp_path):
    server = Sshd(tmp_path / "sshd-few", ssh_env.client_key, max_sessions=2).start()
    try:
        with open(ssh_env.known_hosts, "a") as fh:
            fh.write(server.host_key_line + "\n")
        ssh_env.servers["few"] = server
        inv = ssh_env.inventory(few={"devices": [0, 1, 2], "max_sessions": 2})
        ids = plan(tmp_path, "few", 3)
        store = RunStore(tmp_path, "few")
        files = RunFiles("few", store.read_config().model_dump(mode="json"),
                              store.path("artifacts", "modules"))
        cases = [c.model_dump(mode="json") for c in store.read_cases()]

        async def three_slots_at_once():
            host = inv.get("few")
            slots = await asyncio.gather(*(pool.REGISTRY.checkout(host, d, files) for d in (0, 1, 2)))
            events = await asyncio.gather(*(s.run_case(files, c, 30) for s, c in zip(slots, cases)))
            for s in slots:
                pool.REGISTRY.release(s)
            return [s.kind.conn_index(s.device_id) for s in slots], events

        conn_indexes, events = run(three_slots_at_once())
        assert conn_indexes == [0, 1, 2]  # three sessions on a MaxSessions=2 server: three connections
        assert [e["result"]["status"] for e in events] == ["passed"] * 3
        assert [e["case_id"] for e in events] == ids
    finally:
        server.stop()
        ssh_env.servers.pop("few", None)


def test_environment_script_variables_reach_the_runner(ssh_env, tmp_path):
    script = tmp_path / "set_env.sh"
    script.write_text("export OPDEBUG_TEST_SCALE=2\n")
    without = ssh_env.inventory(hosta={"devices": [0]})
    with_script = ssh_env.inventory(hosta={"env_scripts": [str(script)], "devices": [0]})
    plan(tmp_path, "env-off", 1, scale_env="OPDEBUG_TEST_SCALE")
    plan(tmp_path, "env-on", 1, scale_env="OPDEBUG_TEST_SCALE")

    async def both():  # one server; the inventory entry of hosta gains the script in between
        off = await run_case_remote("env-off", hosts=["hosta"], root=tmp_path, inventory=without)
        on = await run_case_remote("env-on", hosts=["hosta"], root=tmp_path, inventory=with_script)
        return off, on

    off, on = run(both())
    assert off.outcomes[0].state == "crash" and "KeyError" in (off.outcomes[0].signature or "")
    # x * float($OPDEBUG_TEST_SCALE) == x * 2: the variable the script exported reached the
    # candidate - through a worker restarted for the changed inventory entry, not the warm old one.
    assert on.outcomes[0].state == "passed", on.outcomes[0]


def test_an_environment_scripts_pythonpath_reaches_the_worker(ssh_env, tmp_path):
    # CANN's set_env.sh prepends its te/tbe packages to PYTHONPATH; the runner's own
    # directory must go in front of it, not replace it.
    site = tmp_path / "cann-site"
    site.mkdir()
    (site / "opdebug_cann_lib.py").write_text("def cand(x):\n    return x * 2\n")
    script = tmp_path / "set_env_pythonpath.sh"
    script.write_text(f"export PYTHONPATH={site}:$PYTHONPATH\n")
    inv = ssh_env.inventory(hosta={"env_scripts": [str(script)], "devices": [0]})
    config = {"run_id": "env-pp", "operator": {"name": "lib", "candidate": "opdebug_cann_lib.cand",
                                               "reference": "sleepy_mod.ref", "modules": ["sleepy_mod.py"]}}
    plan_cases({"config": config, "cases": [{"id": "c0", "inputs": [{"name": "x", "shape": [8, 8]}]}],
                "module_sources": {"sleepy_mod.py": SLEEPY}}, root=tmp_path)
    resp = run(run_case_remote("env-pp", hosts=["hosta"], root=tmp_path, inventory=inv))
    assert resp.outcomes[0].state == "passed", resp.outcomes[0]


def test_a_host_lost_mid_run_leaves_unfinished_cases_pending_and_a_rerun_completes(ssh_env, tmp_path, monkeypatch):
    monkeypatch.setattr(pool, "RETRY_DELAYS_S", (0.2, 0.5, 1.0))  # the host stays down: every retry fails
    server = Sshd(tmp_path / "sshd-lost", ssh_env.client_key).start()
    try:
        with open(ssh_env.known_hosts, "a") as fh:
            fh.write(server.host_key_line + "\n")
        ssh_env.servers["lost"] = server
        inv = ssh_env.inventory(lost={})
        calls = tmp_path / "lost-calls.log"
        ids = plan(tmp_path, "lost", 8, delay=0.5, call_log=calls)

        async def kill_after_two_recorded():
            task = asyncio.ensure_future(run_case_remote("lost", hosts=["lost"], root=tmp_path, inventory=inv))
            deadline = time.monotonic() + 60
            # two recorded, and both slots mid-case (two more candidates started than recorded)
            while len(recorded(tmp_path, "lost")) < 2 or executions(calls) < len(recorded(tmp_path, "lost")) + 2:
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.02)
            server.kill()
            return await asyncio.wait_for(task, 60)

        resp = run(kill_after_two_recorded())
        results = recorded(tmp_path, "lost")
        assert 2 <= len(resp.recorded) < 8
        assert sorted(resp.recorded) == sorted(results)
        assert sorted(resp.pending) == sorted(set(ids) - set(results))
        lost = [o for o in resp.outcomes if o.state == "pending" and "connection lost" in (o.error or "")]
        assert lost, [o.error for o in resp.outcomes]
        assert all(not o.recorded for o in resp.outcomes if o.state == "pending")
        # never half-recorded: no raw evidence for a pending case
        assert sorted(raw_events(tmp_path, "lost")) == sorted(results)
        assert resp.rerun_hint and "run_case_remote again" in resp.rerun_hint

        server.start()  # the host comes back: same port, same host key
        again = run(run_case_remote("lost", hosts=["lost"], root=tmp_path, inventory=inv))
        assert sorted(again.recorded) == sorted(resp.pending) and again.pending == []
        assert sorted(recorded(tmp_path, "lost")) == sorted(ids)
    finally:
        server.stop()
        ssh_env.servers.pop("lost", None)


def _connection_processes(listener: int) -> list[int]:
    """The per-connection sshd processes: the listener's children."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[1]) == listener:
                    out.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return out


def test_a_dropped_connection_is_started_again_and_the_rest_of_the_run_completes(ssh_env, tmp_path, monkeypatch):
    # Before: one dropped connection left every case not yet run pending ("no slot was left to run it").
    monkeypatch.setattr(pool, "RETRY_DELAYS_S", (0.2, 0.5, 1.0))
    server = Sshd(tmp_path / "sshd-drop", ssh_env.client_key).start()
    try:
        with open(ssh_env.known_hosts, "a") as fh:
            fh.write(server.host_key_line + "\n")
        ssh_env.servers["drop"] = server
        inv = ssh_env.inventory(drop={})
        calls = tmp_path / "drop-calls.log"
        ids = plan(tmp_path, "drop", 8, delay=0.5, call_log=calls)
        news: list[str] = []

        async def collect(text: str) -> None:
            news.append(text)

        async def drop_the_connection_mid_case():
            task = asyncio.ensure_future(run_case_remote("drop", hosts=["drop"], root=tmp_path, inventory=inv,
                                                         on_news=collect))
            deadline = time.monotonic() + 60
            while len(recorded(tmp_path, "drop")) < 2 or executions(calls) < len(recorded(tmp_path, "drop")) + 2:
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.02)
            for pid in _connection_processes(server.proc.pid):  # the connection goes, the host stays
                os.kill(pid, 9)
            return await asyncio.wait_for(task, 60)

        resp = run(drop_the_connection_mid_case())
        lost = [o for o in resp.outcomes if o.state == "pending"]
        assert len(lost) == 2 and all("connection lost" in o.error for o in lost), [o.error for o in lost]
        assert sorted(resp.recorded) == sorted(set(ids) - {o.case_id for o in lost})  # the rest ran
        assert sorted(recorded(tmp_path, "drop")) == sorted(resp.recorded)
        assert any("starting it again in 0.2 s (retry 1 of 3)" in n for n in news), news
    finally:
        server.stop()
        ssh_env.servers.pop("drop", None)


def _intervals(root: Path, run_id: str) -> list[tuple[float, float, str]]:
    return [(e["started_at"], e["finished_at"], f"{run_id}/{cid}") for cid, e in raw_events(root, run_id).items()]


def _assert_disjoint(intervals: list[tuple[float, float, str]]) -> None:
    ordered = sorted(intervals)
    for (s1, f1, a), (s2, f2, b) in zip(ordered, ordered[1:]):
        assert s2 >= f1, f"{a} [{s1:.3f}, {f1:.3f}] overlaps {b} [{s2:.3f}, {f2:.3f}]"


AGENT = ("import asyncio, sys\n"
         "from tools.errors import ToolError\n"
         "from tools.run_case_remote import run_case_remote\n"
         "try:\n"
         "    r = asyncio.run(run_case_remote(sys.argv[1], hosts=[sys.argv[2]], root=sys.argv[3], inventory=sys.argv[4]))\n"
         "    print(r.model_dump_json())\n"
         "except ToolError as e:\n"
         "    print('TOOLERROR ' + e.message)\n")


def _agent(run_id: str, host: str, root: Path, inventory: Path) -> subprocess.Popen:
    """A second agent: another server process using the same host."""
    return subprocess.Popen([sys.executable, "-c", AGENT, run_id, host, str(root), str(inventory)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_runs_on_one_device_never_overlap(ssh_env, tmp_path):
    hosts = {"hostb": ssh_env.host("hostb", devices=[0], lease_wait_s=60.0)}
    inv_file = write_inventory(tmp_path / "hosts.toml", hosts)
    short_file = write_inventory(tmp_path / "short.toml", {"hostb": {**hosts["hostb"], "lease_wait_s": 0.5}})
    for run_id in ("same-a", "same-b", "agent-a", "agent-b", "agent-c"):
        plan(tmp_path, run_id, 3, delay=0.3)

    # Two tool calls of one server: exclusive checkout of the warm slot.
    async def two_calls():
        return await asyncio.gather(
            run_case_remote("same-a", hosts=["hostb"], root=tmp_path, inventory=str(inv_file)),
            run_case_remote("same-b", hosts=["hostb"], root=tmp_path, inventory=str(inv_file)))

    a, b = run(two_calls())
    assert len(a.recorded) == len(b.recorded) == 3
    _assert_disjoint(_intervals(tmp_path, "same-a") + _intervals(tmp_path, "same-b"))

    # Two agents (two server processes): the lease on the host keeps them apart.
    async def two_agents():
        other = _agent("agent-b", "hostb", tmp_path, inv_file)
        mine = await run_case_remote("agent-a", hosts=["hostb"], root=tmp_path, inventory=str(inv_file))
        # While this server's warm worker holds the device, a third agent is told who holds it.
        third = _agent("agent-c", "hostb", tmp_path, short_file)
        out_c, _ = await asyncio.to_thread(third.communicate, timeout=60)
        await pool.REGISTRY.close_all()  # idle shutdown: the lease is released
        out_b, err_b = await asyncio.to_thread(other.communicate, timeout=120)
        return mine, out_b, err_b, out_c

    mine, out_b, err_b, out_c = run(two_agents())
    theirs = json.loads(out_b.strip().splitlines()[-1]) if out_b.strip() else {"err": err_b}
    assert len(mine.recorded) == 3 and len(theirs["recorded"]) == 3, theirs
    _assert_disjoint(_intervals(tmp_path, "agent-a") + _intervals(tmp_path, "agent-b"))
    # This server's warm worker held the device all along the third agent's wait: refused, holder named.
    assert out_c.startswith("TOOLERROR"), out_c
    assert "is leased by pid" in out_c and "owner " in out_c and "lease file" in out_c
    assert recorded(tmp_path, "agent-c") == {}


def test_a_cancelled_run_leaves_no_runner_process_on_the_host(ssh_env, tmp_path):
    marker = str(tmp_path / "cancel-work")
    inv = ssh_env.inventory(hosta={"work_dir": marker})
    calls = tmp_path / "cancel-calls.log"
    plan(tmp_path, "cancel", 4, delay=30.0, call_log=calls)

    async def start_then_cancel():
        task = asyncio.ensure_future(run_case_remote("cancel", hosts=["hosta"], root=tmp_path, inventory=inv))
        deadline = time.monotonic() + 60
        # two supervisors and their two workers, both cases sleeping inside the candidate
        while len(processes_with_marker(marker)) < 4 or executions(calls) < 2:
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The server (this event loop, its SSH connection) lives on, as an MCP server does.
        deadline = time.monotonic() + 10
        while processes_with_marker(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        return processes_with_marker(marker)

    left = run(start_then_cancel())
    assert left == []
    assert recorded(tmp_path, "cancel") == {}


def test_warm_workers_are_reused_across_tool_calls_and_shut_down_when_idle(ssh_env, tmp_path):
    marker = str(tmp_path / "warm-work")
    inv = ssh_env.inventory(hostb={"work_dir": marker, "devices": [0], "idle_timeout_s": 30.0})
    # Re-read inventory with other waits and concurrency: nothing the worker depends on changed.
    reread = ssh_env.inventory(hostb={"work_dir": marker, "devices": [0, 1], "concurrency": 1,
                                      "idle_timeout_s": 30.0, "lease_wait_s": 5.0})
    plan(tmp_path, "warm-1", 2)
    plan(tmp_path, "warm-2", 2)

    async def two_calls_then_idle():
        first = await run_case_remote("warm-1", hosts=["hostb"], root=tmp_path, inventory=inv)
        second = await run_case_remote("warm-2", hosts=["hostb"], root=tmp_path, inventory=reread)
        alive_between = processes_with_marker(marker)
        not_yet = await pool.REGISTRY.reap_idle()  # used just now: stays warm
        reaped = await pool.REGISTRY.reap_idle(now=time.monotonic() + 31)  # idle past idle_timeout_s
        deadline = time.monotonic() + 10
        while processes_with_marker(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return first, second, alive_between, not_yet, reaped, processes_with_marker(marker)

    first, second, alive_between, not_yet, reaped, left = run(two_calls_then_idle())
    assert len(first.recorded) == len(second.recorded) == 2
    pids = {e["worker_pid"] for run_id in ("warm-1", "warm-2") for e in raw_events(tmp_path, run_id).values()}
    assert len(pids) == 1  # one warm worker served both tool calls
    assert len(alive_between) >= 2 and not_yet == [] and reaped == [("hostb", 0)]  # supervisor + worker (+ helpers)
    assert left == []  # idle shutdown stopped the supervisor and its worker (and so released the lease)


def test_a_run_on_an_untrusted_host_is_refused_with_the_trust_command_and_records_nothing(ssh_env, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inv = ssh_env.inventory(hosta={"known_hosts": str(empty), "devices": [0, 1, 2]})
    plan(tmp_path, "untrusted", 2)
    with pytest.raises(ToolError) as err:
        run(run_case_remote("untrusted", hosts=["hosta"], root=tmp_path, inventory=inv))
    assert err.value.code == "no_slot"
    port = ssh_env.servers["hosta"].port
    assert f"ssh-keyscan -p {port} 127.0.0.1 >> {empty}" in err.value.message
    assert recorded(tmp_path, "untrusted") == {}


def test_a_failing_environment_script_stops_the_slot_and_says_why(ssh_env, tmp_path):
    missing = tmp_path / "no_such_set_env.sh"
    inv = ssh_env.inventory(hostb={"env_scripts": [str(missing)], "devices": [0]})
    plan(tmp_path, "badenv", 1)
    with pytest.raises(ToolError) as err:
        run(run_case_remote("badenv", hosts=["hostb"], root=tmp_path, inventory=inv))
    assert err.value.code == "no_slot"
    assert "exited before taking the device lease (exit status 1)" in err.value.message
    assert str(missing) in err.value.message  # bash's own complaint, from the remote stderr
    assert recorded(tmp_path, "badenv") == {}


def test_a_device_leased_elsewhere_does_not_hold_up_a_run_the_free_devices_finish(ssh_env, tmp_path):
    work = tmp_path / "leased-work"
    inv = ssh_env.inventory(hosta={"work_dir": str(work), "devices": [0, 1], "lease_wait_s": 60.0})
    # Someone else (another agent's worker) holds device 1 for a minute.
    holder = subprocess.Popen([sys.executable, str(REPO / "tools" / "remote" / "lease.py"), "--lease-file",
                               str(work / "leases" / "cpu-1.lock"), "--wait", "0", "--owner", "someone-else",
                               "--", "sleep", "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(holder.stdout.readline())["event"] == "lease_acquired"
        ids = plan(tmp_path, "leased", 3)
        started = time.monotonic()
        resp = run(run_case_remote("leased", hosts=["hosta"], root=tmp_path, inventory=inv))
        elapsed = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert sorted(resp.recorded) == ids
    assert {o.device for o in resp.outcomes} == {"cpu:0"}
    assert elapsed < 30, elapsed  # not the 60 s lease wait of the busy device
    # The remote helper that was queueing for device 1 left when its channel closed.
    deadline = time.monotonic() + 5
    while processes_with_marker(str(work)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_marker(str(work)) == []


def test_a_captured_input_is_shipped_to_the_host_and_replayed(ssh_env, tmp_path):
    import torch

    capture = tmp_path / "act.pt"
    saved = torch.full((8, 8), 1.5)
    saved[0, :3] = float("nan")
    torch.save(saved, capture)
    config = {"run_id": "capt", "operator": {"name": "sleepy", "candidate": "sleepy_mod.cand",
                                            "reference": "sleepy_mod.ref", "modules": ["sleepy_mod.py"]}}
    plan_cases({"config": config, "module_sources": {"sleepy_mod.py": SLEEPY}, "captured_files": {"act": str(capture)},
                "cases": [{"id": "c0", "inputs": [{"name": "x", "shape": [8, 8],
                                                   "values": {"kind": "captured", "captured": "act"}}]}]},
               root=tmp_path)
    inv = ssh_env.inventory(hosta={})
    resp = run(run_case_remote("capt", hosts=["hosta"], root=tmp_path, inventory=inv))
    assert resp.recorded == ["c0"] and resp.outcomes[0].host == "hosta"
    meta = json.loads((tmp_path / "capt" / "input-metadata" / "c0.json").read_text())["inputs"][0]
    assert meta["stats"]["nan"] == 3  # the host built the input from the captured bytes, not from a seed
