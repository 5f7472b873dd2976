"""run_case_remote and check_host on a Slurm host, against a real single-node Slurm.

Every slot is a real ``srun`` job of the cluster that tests/slurm_fixture.py
starts (munged, slurmctld, slurmd; a count-only GRES ``npu:4``); the runner
runs inside the job step and speaks its protocol over the step's stdio.
Nothing stands in for srun, squeue, scancel or scontrol.  The candidate
writes the job it ran in to a call log, and can wait at a rendezvous until a
number of jobs are mid-case at once, so the spread over slots is certain.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import server_env
from slurm_fixture import SlurmCluster, cmdline, processes_mentioning, require_slurm, slurm_cluster  # noqa: F401
from sshd_fixture import ssh_env, write_inventory  # noqa: F401
from test_slurm_fixture import CANCELLED, ECHO, Step, hello, job_state
from tools.check_host import check_host
from tools.errors import ToolError
from tools.plan_cases import plan_cases
from tools.remote import pool, slurm_commands as slurm_transport
from tools.remote.inventory import parse_inventory
from tools.remote.slurm_commands import duration_s, show_field
from tools.run_case_remote import run_case_remote

REPO = Path(__file__).resolve().parent.parent

CANDIDATE = '''\
import os
import signal
import time


def cand(x, delay=0.0, call_log="", rendezvous="", meet=0, sigterm_self=False, wrong=False):
    job = os.environ.get("SLURM_JOB_ID", "-")
    if call_log:  # one line per execution: the job it ran in, written as the candidate starts
        fd = os.open(call_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (job + "\\n").encode())
        os.close(fd)
    if rendezvous:  # wait until `meet` different jobs are here at once
        open(os.path.join(rendezvous, job), "w").close()
        deadline = time.time() + 45
        while len(os.listdir(rendezvous)) < meet and time.time() < deadline:
            time.sleep(0.02)
    if sigterm_self:  # the worker dies of a SIGTERM that no scheduler sent
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    time.sleep(delay)
    return x * 3 if wrong else x * 2


def ref(x, delay=0.0, call_log="", rendezvous="", meet=0, sigterm_self=False, wrong=False):
    return x * 2
'''


@pytest.fixture(scope="module")
def slurm(slurm_cluster):  # noqa: F811
    """The module's cluster, named to this process by SLURM_CONF (the login host is this machine)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(slurm_cluster.conf))
        yield slurm_cluster


@pytest.fixture(autouse=True)
def nothing_left(slurm_cluster):  # noqa: F811
    """Every test leaves no job of this transport in squeue, and no process of a job
    behind (the runner's watchdog, outside the step's process tree, sweeps for 0.3 s
    after its supervisor ended, then exits)."""
    yield
    ours = [j for j in slurm_cluster.jobs() if j.name.startswith("opdebug-")]
    assert not ours, f"jobs of the transport outlived the test: {ours}"
    daemons = {p.pid for p in slurm_cluster.procs.values()}
    def left() -> dict[int, str]:  # slurmctld's own helper (slurmscriptd) is the cluster's, not a job's
        found = {p: cmdline(p) for p in set(processes_mentioning(slurm_cluster.marker)) - daemons}
        return {p: c for p, c in found.items() if not c.startswith("slurmctld")}

    deadline = time.monotonic() + 15
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left(), f"processes of the transport's jobs outlived the test: {left()}"


def host(tmp_path: Path, **over) -> dict:
    slurm_over = over.pop("slurm", {})
    return {"transport": "local", "scheduler": "slurm", "device": "cpu", "python": sys.executable,
            "work_dir": str(tmp_path / "work"), "concurrency": 2,
            "slurm": {"partition": "opdebug", "time_limit": "10", **slurm_over}, **over}


def inventory(tmp_path: Path, **over):
    return parse_inventory({"hosts": {"cluster": host(tmp_path, **over)}})


def plan(root: Path, run_id: str, n: int, *, extra: tuple[dict, ...] = (), **attributes) -> list[str]:
    """n cases of the candidate with these attributes, then the `extra` cases as given."""
    ids = [f"c{i}" for i in range(n)]
    attributes = {k: str(v) if isinstance(v, Path) else v for k, v in attributes.items()}
    cases = [{"id": cid, "inputs": [{"name": "x", "shape": [4, 4]}], "seed": i, "attributes": attributes}
             for i, cid in enumerate(ids)] + list(extra)
    ids += [c["id"] for c in extra]
    config = {"run_id": run_id, "operator": {"name": "twice", "candidate": "twice_mod.cand",
                                            "reference": "twice_mod.ref", "modules": ["twice_mod.py"]},
              "default_timeout_s": 90}
    plan_cases({"config": config, "cases": cases, "module_sources": {"twice_mod.py": CANDIDATE}}, root=root)
    return ids


def run(coro):
    """One tool call's event loop; whatever is warm is shut down at its end (as at server shutdown)."""
    async def main():
        try:
            return await coro
        finally:
            await pool.REGISTRY.close_all()
    return asyncio.run(main())


def collect(into: list[str]):
    async def news(text: str) -> None:
        into.append(text)
    return news


def recorded(root: Path, run_id: str) -> dict[str, dict]:
    docs = [json.loads(line) for line in (root / run_id / "results.jsonl").read_text().splitlines()]
    assert len({d["case_id"] for d in docs}) == len(docs), "a case recorded twice"
    return {d["case_id"]: d for d in docs}


def jobs_in_log(call_log: Path) -> list[str]:
    return call_log.read_text().split() if call_log.is_file() else []


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def hold(cluster: SlurmCluster, name: str, gres: str) -> subprocess.Popen:
    """Another job holding `gres` (as another user's would), running until killed."""
    proc = subprocess.Popen(["srun", f"--partition={cluster.partition}", f"--job-name={name}", f"--gres={gres}",
                             "sleep", "300"], env=cluster.env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: any(j.state == "RUNNING" for j in cluster.jobs(name=name)), what=f"job {name} running")
    return proc


def release(cluster: SlurmCluster, *procs: subprocess.Popen, names: tuple[str, ...] = ()) -> None:
    """Cancel the held jobs (their sruns exit on their own: 0.05 s; a killed srun's job takes 2.7 s)."""
    for name in names:
        cluster.run("scancel", f"--name={name}")
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # srun's pid only: its helper child ends the job
            proc.wait(timeout=30)
    wait_for(lambda: not any(cluster.jobs(name=n) for n in names), what="the held jobs to end")


# --------------------------------------------------------------------------


def test_sixteen_cases_spread_over_four_slurm_jobs_each_with_its_own_device(slurm, tmp_path):
    inv = inventory(tmp_path, concurrency=4)
    calls, meet = tmp_path / "calls.log", tmp_path / "meet"
    meet.mkdir()
    ids = plan(tmp_path, "spread", 16, delay=0.05, call_log=calls, rendezvous=meet, meet=4)
    resp = run(run_case_remote("spread", hosts=["cluster"], root=tmp_path, inventory=inv))
    assert sorted(resp.recorded) == sorted(ids) and resp.pending == []
    assert [o.state for o in resp.outcomes] == ["passed"] * 16, [o.error for o in resp.outcomes]
    results = recorded(tmp_path, "spread")
    assert len(jobs_in_log(calls)) == 16  # each case executed once
    placement = {cid: r["environment"]["placement"] for cid, r in results.items()}
    jobs = {p["SLURM_JOB_ID"] for p in placement.values()}
    assert len(jobs) == 4  # four slots, four Slurm jobs
    device_of_job: dict[str, set[str]] = {}
    for cid, p in placement.items():
        assert p["SLURM_STEP_ID"] == "0" and p["SLURMD_NODENAME"] == slurm.node
        assert results[cid]["source"]["device"] == f"cpu:{p['OPDEBUG_DEVICE_ID']}"
        assert "bare count" in p["OPDEBUG_DEVICE_SOURCE"]  # count-only GRES: said, not passed off as Slurm's
        device_of_job.setdefault(p["SLURM_JOB_ID"], set()).add(p["OPDEBUG_DEVICE_ID"])
    assert all(len(d) == 1 for d in device_of_job.values())  # a job keeps its device
    assert sorted(d for ds in device_of_job.values() for d in ds) == ["0", "1", "2", "3"]  # each its own
    # real jobs of this cluster, named by the transport, which all ended by themselves
    finished = {j.job_id: j for j in slurm.jobs(states="all")}
    assert jobs <= set(finished)
    assert {finished[j].state for j in jobs} == {"COMPLETED"}
    assert all(finished[j].name.startswith("opdebug-") and "-cluster-" in finished[j].name for j in jobs)
    assert slurm.jobs() == []


def test_the_device_index_is_the_one_the_scheduler_gave_the_job(tmp_path, monkeypatch):
    require_slurm()
    files = SlurmCluster(tmp_path / "slurm-files", gres_files=True).start()  # gres.conf with File= entries
    blocker = None
    try:
        monkeypatch.setenv("SLURM_CONF", str(files.conf))
        blocker = hold(files, "someone-else", "npu:1")  # takes index 0
        blocked = files.run("scontrol", "-d", "-o", "show", "job", files.jobs(name="someone-else")[0].job_id)
        assert "GRES=npu:1(IDX:0)" in blocked.stdout
        meet = tmp_path / "meet"
        meet.mkdir()
        ids = plan(tmp_path, "idx", 4, rendezvous=meet, meet=2)
        resp = run(run_case_remote("idx", hosts=["cluster"], root=tmp_path, inventory=inventory(tmp_path)))
        assert sorted(resp.recorded) == sorted(ids), [o.error for o in resp.outcomes]
        placement = [r["environment"]["placement"] for r in recorded(tmp_path, "idx").values()]
        devices = {p["OPDEBUG_DEVICE_ID"] for p in placement}
        # the scheduler's indexes 1 and 2 (0 is taken): slot order would have said 0 and 1
        assert devices == {"1", "2"}
        assert all("GRES index" in p["OPDEBUG_DEVICE_SOURCE"] for p in placement)
        assert not [j for j in files.jobs() if j.name.startswith("opdebug-")]
    finally:
        if blocker is not None:
            release(files, blocker, names=("someone-else",))
        files.stop()


def test_a_job_cancelled_mid_case_leaves_that_case_pending_and_the_rerun_completes(slurm, tmp_path, monkeypatch):
    monkeypatch.setattr(pool, "RETRY_DELAYS_S", (0.2, 0.5, 1.0))
    inv = inventory(tmp_path, concurrency=2)
    calls = tmp_path / "calls.log"
    ids = plan(tmp_path, "cancel", 4, delay=1.0, call_log=calls)
    news: list[str] = []
    victim: list[str] = []

    async def cancel_one_mid_case():
        task = asyncio.ensure_future(run_case_remote("cancel", hosts=["cluster"], root=tmp_path, inventory=inv,
                                                     on_news=collect(news)))
        deadline = time.monotonic() + 60
        while not jobs_in_log(calls):  # a case started: its job is mid-case for 1 s
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.02)
        victim.append(jobs_in_log(calls)[0])
        slurm.run("scancel", victim[0])  # what an operator or a preemption does
        return await asyncio.wait_for(task, 120)

    resp = run(cancel_one_mid_case())
    pending = [o for o in resp.outcomes if o.state == "pending"]
    assert len(pending) == 1, [(o.case_id, o.state, o.error) for o in resp.outcomes]
    lost = pending[0]
    assert "ended by the scheduler (scancel" in lost.error and f"slurm job {victim[0]}" in lost.error
    assert not lost.recorded and lost.case_id not in recorded(tmp_path, "cancel")
    assert not (tmp_path / "cancel" / "raw-results" / lost.case_id).exists()  # never half-recorded
    # the run went on: every other case recorded, and the lost slot was started again (said)
    assert sorted(resp.recorded) == sorted(set(ids) - {lost.case_id})
    assert any("starting it again" in n and "retry 1 of 3" in n for n in news), news
    assert {j.state for j in slurm.jobs(states="all") if j.job_id == victim[0]} == {"CANCELLED"}
    again = run(run_case_remote("cancel", hosts=["cluster"], root=tmp_path, inventory=inv))
    assert again.recorded == [lost.case_id] and again.pending == []
    assert sorted(recorded(tmp_path, "cancel")) == sorted(ids)


def test_a_worker_killed_by_a_signal_the_scheduler_did_not_send_is_the_operators_crash(slurm, tmp_path):
    # the guard against reading a scheduler kill as a crash must not hide a real one
    plan(tmp_path, "selfkill", 1, sigterm_self=True)
    resp = run(run_case_remote("selfkill", hosts=["cluster"], root=tmp_path,
                               inventory=inventory(tmp_path, concurrency=1)))
    crash = resp.outcomes[0]
    assert crash.state == "crash" and crash.recorded and crash.signature == "SIGTERM", crash
    assert crash.rerun_case  # killed from outside the harness: the agent may rerun it under a new id


def test_a_slot_too_close_to_its_time_limit_hands_its_next_case_to_a_new_job(slurm, tmp_path):
    news: list[str] = []
    calls = tmp_path / "calls.log"
    ids = plan(tmp_path, "expiry", 2, call_log=calls)  # each case may take 90 s: more than a 2-minute job has left
    resp = run(run_case_remote("expiry", hosts=["cluster"], root=tmp_path, on_news=collect(news),
                               inventory=inventory(tmp_path, concurrency=1, slurm={"time_limit": "2"})))
    assert sorted(resp.recorded) == sorted(ids) and resp.pending == []
    jobs = jobs_in_log(calls)
    assert len(jobs) == 2 and jobs[0] != jobs[1]  # the second case went to a fresh job, it was never lost
    assert any("too soon for a case of 90 s" in n for n in news), news


def toml_inventory(tmp_path: Path, **over) -> Path:
    """The host as a hosts.toml file (for a server or CLI process)."""
    h = host(tmp_path, **over)
    options = h.pop("slurm")
    path = write_inventory(tmp_path / "hosts.toml", {"cluster": h})
    with open(path, "a") as fh:
        fh.write("\n[hosts.cluster.slurm]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))
    return path


def mcp_run(slurm: SlurmCluster, tmp_path: Path, run_id: str) -> tuple[Any, list[tuple[float, float | None, str]]]:
    """run_case_remote through the real MCP client and a `python -m mcp_server` over stdio."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    progress: list[tuple[float, float | None, str]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message or ""))

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mcp_server", "--evidence-root", str(tmp_path)], cwd=str(REPO),
            env={**slurm.env, **server_env(), "OPDEBUG_INVENTORY": str(toml_inventory(tmp_path))})
        async with Client(params, cache=None, read_timeout_seconds=120) as client:
            return await client.call_tool("run_case_remote", {"run_id": run_id, "hosts": ["cluster"]},
                                          progress_callback=on_progress)

    return asyncio.run(main()), progress


def test_a_pending_job_is_reported_withdrawn_when_not_needed_and_given_up_after_max_pending(slurm, tmp_path):
    blocker = hold(slurm, "three-npus", "npu:3")
    try:
        # one npu free: one slot runs every case, the other waits in the queue - said in the MCP progress -
        # and is withdrawn once the cases are done
        ids = plan(tmp_path, "one-free", 2, delay=1.2)
        result, progress = mcp_run(slurm, tmp_path, "one-free")
        assert not result.is_error, result.content
        assert sorted(result.structured_content["recorded"]) == sorted(ids)
        assert len({r["environment"]["placement"]["SLURM_JOB_ID"] for r in recorded(tmp_path, "one-free").values()}) == 1
        waiting = [m for _, _, m in progress if "waiting in the queue, PENDING (Resources)" in m]
        assert waiting, progress
        values = [done for done, _, _ in progress]
        assert values == sorted(values) and len(set(values)) == len(values)  # every notification advances
        assert [d for d, _, m in progress if m.startswith("c")][-1] == 2
        # no npu free: the only slot gives up after max_pending_s, and says why
        last = hold(slurm, "the-last-npu", "npu:1")
        try:
            news: list[str] = []
            plan(tmp_path, "none-free", 1)
            t0 = time.monotonic()
            with pytest.raises(ToolError) as err:
                run(run_case_remote("none-free", hosts=["cluster"], root=tmp_path, on_news=collect(news),
                                    inventory=inventory(tmp_path, concurrency=1, slurm={"max_pending_s": 2.5})))
            assert time.monotonic() - t0 < 30
            assert err.value.code == "no_slot"
            assert "still pending after 2.5 s (PENDING (Resources))" in err.value.message
            assert any("waiting in the queue, PENDING (Resources)" in n for n in news), news
        finally:
            release(slurm, last, names=("the-last-npu",))
    finally:
        release(slurm, blocker, names=("three-npus",))


def test_no_job_outlives_an_opdebug_run_killed_with_sigkill(slurm, tmp_path):
    inv = toml_inventory(tmp_path)
    calls = tmp_path / "calls.log"
    plan(tmp_path, "killed", 4, delay=120, call_log=calls)
    env = dict(slurm.env, OPDEBUG_INVENTORY=str(inv), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "run", "--root", str(tmp_path), "--run-id",
                             "killed", "--host", "cluster"], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: len(jobs_in_log(calls)) >= 2, timeout=120, what="both slots mid-case")
        ours = [j for j in slurm.jobs() if j.name.startswith("opdebug-")]
        assert len(ours) == 2 and {j.state for j in ours} == {"RUNNING"}
        assert {j.job_id for j in ours} == set(jobs_in_log(calls))
        proc.kill()  # SIGKILL: no cleanup of its own runs
        proc.wait(timeout=10)
        # its sruns live on as orphans, but every step's stdin closed with it: the jobs end by themselves
        wait_for(lambda: not [j for j in slurm.jobs() if j.name.startswith("opdebug-")], timeout=30,
                 what="the killed server's jobs to leave squeue")
        wait_for(lambda: not processes_mentioning(str(tmp_path / "work") + "/"), timeout=15,
                 what="no runner process left")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_jobs_of_a_server_that_is_gone_are_reported_by_check_host_and_cancelled_by_the_next_run(slurm, tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    names = {"orphan": f"opdebug-{slurm_transport.MACHINE}-{gone.pid}-12345-cluster-0-0",
             "alive": f"opdebug-{slurm_transport.server_tag()}-cluster-7-7",  # this process: running
             "foreign": f"opdebug-{'0' * 8 if slurm_transport.MACHINE != '0' * 8 else '1' * 8}-1-1-cluster-0-0"}
    held = {k: hold(slurm, name, "npu:1") for k, name in names.items()}
    try:
        before = len(slurm.jobs(states="all"))
        check = run(check_host("cluster", inventory=inventory(tmp_path)))
        assert len(slurm.jobs(states="all")) == before  # read-only: no job started
        orphan_id = slurm.jobs(name=names["orphan"])[0].job_id
        assert any(orphan_id in n and "gone" in n for n in check.scheduler.notes), check.scheduler.notes
        news: list[str] = []
        plan(tmp_path, "after", 1)
        resp = run(run_case_remote("after", hosts=["cluster"], root=tmp_path, on_news=collect(news),
                                   inventory=inventory(tmp_path, concurrency=1)))
        assert resp.recorded == ["c0"]
        assert any(f"cancelled 1 Slurm job(s)" in n and orphan_id in n for n in news), news
        assert slurm.jobs(name=names["orphan"]) == []
        assert slurm.jobs(name=names["alive"]) and slurm.jobs(name=names["foreign"])  # never touched
    finally:
        release(slurm, *held.values(), names=tuple(names.values()))


def test_check_host_says_what_the_partition_offers_and_what_is_missing(slurm, tmp_path):
    ok = run(check_host("cluster", inventory=inventory(tmp_path, concurrency=4)))
    assert ok.ok and ok.missing == [], ok.missing
    s = ok.scheduler
    assert s.partition == "opdebug" and s.partition_state == "UP" and s.slurm_version.startswith("slurm")
    assert [(n.name, n.gres, n.usable) for n in s.nodes] == [(slurm.node, "npu:4", True)]
    assert s.slots_possible == 4 and s.gres_requested == "npu:1"
    bad = run(check_host("cluster", inventory=inventory(tmp_path, slurm={"partition": "nosuch"})))
    assert not bad.ok and "partition 'nosuch' on this cluster (it has: opdebug)" in bad.missing[0]
    gpu = run(check_host("cluster", inventory=inventory(tmp_path, slurm={"gres": "gpu:1"})))
    assert not gpu.ok and any("GRES gpu:1" in m and "npu:4" in m for m in gpu.missing), gpu.missing
    many = run(check_host("cluster", inventory=inventory(tmp_path, concurrency=6, slurm={"gres": "npu:2"})))
    assert many.ok and many.scheduler.slots_possible == 2
    assert any("6 slots asked" in n for n in many.scheduler.notes), many.scheduler.notes
    # a run on the bad request: no slot starts, in srun's own words, and nothing is retried or left behind
    plan(tmp_path, "bad-partition", 1)
    with pytest.raises(ToolError) as err:
        run(run_case_remote("bad-partition", hosts=["cluster"], root=tmp_path,
                            inventory=inventory(tmp_path, slurm={"partition": "nosuch"})))
    assert err.value.code == "no_slot" and "invalid partition specified: nosuch" in err.value.message
    assert "retry" not in err.value.message


def test_a_login_host_over_ssh(slurm, ssh_env, tmp_path):  # noqa: F811
    script = tmp_path / "slurm_env.sh"
    script.write_text(f"export SLURM_CONF={slurm.conf}\n")  # what a site's module setup does
    login = ssh_env.host("hosta", scheduler="slurm", concurrency=1,
                         slurm={"partition": "opdebug", "time_limit": "10", "login_env_scripts": [str(script)]})
    del login["devices"]  # the scheduler picks them
    inv = parse_inventory({"hosts": {"hosta": login}})
    # a mismatch whose kept outputs make a 0.7 MB answer line: a long burst through the step's relay
    big = {"id": "big-wrong", "inputs": [{"name": "x", "shape": [256, 256]}], "seed": 7, "attributes": {"wrong": True}}
    ids = plan(tmp_path, "over-ssh", 1, extra=(big,))
    resp = run(run_case_remote("over-ssh", hosts=["hosta"], root=tmp_path, inventory=inv, keep_outputs=True))
    assert sorted(resp.recorded) == sorted(ids), [o.error for o in resp.outcomes]
    assert {o.case_id: o.state for o in resp.outcomes} == {"c0": "passed", "big-wrong": "numerical_mismatch"}
    kept = tmp_path / "over-ssh" / "raw-results" / "big-wrong" / "outputs.pt"
    import torch
    outputs = torch.load(kept)
    assert torch.equal(outputs["candidate"], (outputs["reference"] * 1.5).float())  # x*3 against x*2 (a float64 truth)
    jobs = {r["environment"]["placement"]["SLURM_JOB_ID"] for r in recorded(tmp_path, "over-ssh").values()}
    assert len(jobs) == 1 and jobs <= {j.job_id for j in slurm.jobs(states="all")}
    check = run(check_host("hosta", inventory=inv))
    assert check.ok and check.scheduler.partition == "opdebug", check.missing


def test_a_slot_past_its_time_limit_leaves_its_case_pending_with_the_reason(slurm, tmp_path, monkeypatch):
    """60-90 s, as short as Slurm allows: time limits are whole minutes and slurmctld
    checks them every 30 s.  When the call returns the job has ended and, with it,
    every process of the slot - the supervisor's watchdog included (nothing_left).

    The same minute times out a bare srun step started beside the slot (what the cluster
    itself does, which the slot reads; one wait for both): ``--time=1`` (one minute, the smallest
    limit there is), slurmctld SIGTERMs the task at its next 30-second check, slurmstepd's
    CANCELLED line ends with DUE TO TIME LIMIT, and the job's state is TIMEOUT."""
    monkeypatch.setattr(pool, "RETRY_DELAYS_S", ())  # no second job: one case, one limit
    plan(tmp_path, "limit", 1, delay=150)
    bare = Step(slurm, "opdebug-limit-0", ECHO, "--time=1")
    try:
        job_id, _ = hello(bare)
        resp = run(run_case_remote("limit", hosts=["cluster"], root=tmp_path,
                                   inventory=inventory(tmp_path, concurrency=1, slurm={"time_limit": "1"})))
        assert [o.state for o in resp.outcomes] == ["pending"]
        assert "ended by the scheduler (time limit" in resp.outcomes[0].error, resp.outcomes[0].error
        # the call returns once the job has left squeue; by then no process of the slot runs
        left = {p: cmdline(p) for p in processes_mentioning(slurm.marker)}
        assert not {p: c for p, c in left.items() if "opdebug_" in c}, left
        assert bare.wait(timeout=120) == 128 + signal.SIGTERM
        took = time.monotonic() - bare.t0
        m = CANCELLED.search(bare.stderr)
        assert m and m.group(1) == job_id and m.group(4) == "TIME LIMIT", bare.stderr
        wait_for(lambda: job_state(slurm, job_id) == ("TIMEOUT", "TimeLimit"), what="state TIMEOUT")
        # Slurm's own clock (whole seconds from the job's start): it ran its full minute; our
        # clock, started before srun, may read a fraction less
        show = slurm.run("scontrol", "-o", "show", "job", job_id).stdout
        ran = duration_s(show_field(show, "RunTime"))
        print(f"\n[slurm] --time=1 step killed after {took:.1f}s (RunTime {ran:g} s)")
        assert ran is not None and 60 <= ran < 100 and took < 100, show
    finally:
        if bare.proc.poll() is None:
            slurm.run("scancel", "--name=opdebug-limit-0")
        bare.kill()


def test_a_backward_timeout_on_a_slurm_slot_reads_as_a_timeout(slurm, tmp_path, monkeypatch):
    # the supervisor's own kill of a hanging backward (signature "backward: timeout", SIGKILL) is the
    # case's timeout: no rerun_case, and the slot does not go looking for the scheduler's hand
    from tools.remote import slurm as slurm_slots

    looked: list[str] = []
    scheduler_end = slurm_slots.SlurmSlot._scheduler_end

    async def watched(self, wait_s):
        looked.append(self.label)
        return await scheduler_end(self, wait_s)

    monkeypatch.setattr(slurm_slots.SlurmSlot, "_scheduler_end", watched)
    source = (REPO / "tests" / "operators" / "backward_segfault.py").read_text()
    config = {"run_id": "bwd", "grad_inputs": ["x"], "default_timeout_s": 30,
              "operator": {"name": "doubled", "candidate": "backward_segfault.cand",
                           "reference": "backward_segfault.ref", "modules": ["backward_segfault.py"]}}
    cases = [{"id": "hangs", "inputs": [{"name": "x", "shape": [4, 4]}], "attributes": {"hang": True},
              "timeout_s": 3}]
    plan_cases({"config": config, "cases": cases, "module_sources": {"backward_segfault.py": source}}, root=tmp_path)
    resp = run(run_case_remote("bwd", hosts=["cluster"], root=tmp_path, inventory=inventory(tmp_path, concurrency=1)))
    (hangs,) = resp.outcomes
    assert hangs.state == "crash" and hangs.recorded and hangs.signature == "backward: timeout", hangs
    assert hangs.rerun_case is None  # the harness's own kill: nothing to rerun under a new id
    assert recorded(tmp_path, "bwd")["hangs"]["error"]["phase"] == "backward"
    assert looked == [], "a backward timeout was read as a kill from outside (the scheduler was asked)"
