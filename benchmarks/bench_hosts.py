"""Many hosts: one matrix over H loopback sshd "hosts" x S slots each, on an
operator that sleeps a fixed time (run by hand, not in the tests):

    .venv/bin/python benchmarks/bench_hosts.py [--hosts 16] [--slots 4] [--sleep 1.0] [--per-slot 4]

Each host is its own OpenSSH sshd on 127.0.0.1 (own port, own host key),
named in one inventory; every slot is warmed first (torch imported), then one
run_case_remote call runs hosts x slots x per-slot cases.  Efficiency is the
cases per second over (hosts x slots) times the cases per second of one slot
(measured the same way on one slot of the first host); the issue asks >= 0.8.
Also printed: where the rest went (the slowest slot's busy time vs the wall
time, i.e. start-up skew and recording/lock waits).

Needs memory for hosts x slots warm torch workers (about 200 MB each).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from sshd_fixture import Sshd, login_user, make_client_key  # noqa: E402
from tools.evidence import RunStore  # noqa: E402
from tools.plan_cases import plan_cases  # noqa: E402
from tools.remote import pool  # noqa: E402
from tools.remote.slot import RunFiles, slot_specs  # noqa: E402
from tools.remote.ssh import SSHConnections  # noqa: E402
from tools.remote.inventory import parse_inventory  # noqa: E402
from tools.run_case_remote import run_case_remote  # noqa: E402

MODULE = "import time\n\ndef cand(x, delay=0.0):\n    time.sleep(delay)\n    return x * 2\n\n" \
         "def ref(x, delay=0.0):\n    return x * 2\n"


def plan(root: Path, run_id: str, n: int, delay: float) -> None:
    cases = [{"id": f"c{i:04d}", "inputs": [{"name": "x", "shape": [8, 8]}], "attributes": {"delay": delay},
              "seed": i} for i in range(n)]
    config = {"run_id": run_id, "operator": {"name": "sleepy", "candidate": "hosts_mod.cand",
                                            "reference": "hosts_mod.ref", "modules": ["hosts_mod.py"]},
              "default_timeout_s": 120}
    plan_cases({"config": config, "cases": cases, "module_sources": {"hosts_mod.py": MODULE}}, root=root)


async def warm(inv, names: list[str], root: Path) -> None:
    plan(root, "warmup", 1, 0.0)
    store = RunStore(root, "warmup")
    files = RunFiles("warmup", store.read_config().model_dump(mode="json"), store.path("artifacts", "modules"))
    specs = slot_specs(inv.resolve(names))
    slots = await asyncio.gather(*(pool.REGISTRY.checkout(s.host, s.device, files) for s in specs))
    for slot in slots:
        pool.REGISTRY.release(slot)


async def measure(inv, names: list[str], root: Path, run_id: str, n: int, delay: float) -> dict:
    """One run_case_remote call over every slot; also when each case went to a
    slot and came back, and the client's time spent recording (the event loop)."""
    import tools.run_case_remote as rcr

    plan(root, run_id, n, delay)
    started: list[float] = []
    finished: list[float] = []
    recording: list[float] = []
    real_record = rcr._record_event

    def timed_record(*a, **k):
        t = time.perf_counter()
        try:
            return real_record(*a, **k)
        finally:
            recording.append(time.perf_counter() - t)

    async def on_start(case_id: str) -> None:
        started.append(time.perf_counter())

    async def progress(done: int, total: int, outcome) -> None:
        finished.append(time.perf_counter())

    uploads: list[tuple[float, float]] = []  # (began, ended) of each slot's wait for the run's files
    real_run_files = SSHConnections.run_files

    async def timed_run_files(*a, **k):
        began = time.perf_counter()
        try:
            return await real_run_files(*a, **k)
        finally:
            uploads.append((began, time.perf_counter()))

    rcr._record_event = timed_record
    SSHConnections.run_files = timed_run_files
    busy_before = _cpu_busy()
    t = time.perf_counter()
    try:
        resp = await run_case_remote(run_id, hosts=names, root=root, inventory=inv, on_start=on_start,
                                     progress=progress)
    finally:
        rcr._record_event = real_record
        SSHConnections.run_files = real_run_files
    elapsed = time.perf_counter() - t
    busy = [b - a for a, b in zip(busy_before, _cpu_busy())]
    assert len(resp.recorded) == n, (len(resp.recorded), resp.rerun_hint)
    slots = len({(o.host, o.device) for o in resp.outcomes})
    first_wave = sorted(started)[:slots]
    return {"elapsed_s": elapsed, "cases_per_s": n / elapsed, "slots": slots,
            "first_start_s": first_wave[0] - t, "last_first_start_s": first_wave[-1] - t,
            "last_finish_s": max(finished) - t, "recording_s": sum(recording),
            "recording_ms_per_case": 1e3 * sum(recording) / max(1, len(recording)),
            "cpu_busy": busy[0] / busy[1] if busy[1] else 0.0,
            "files_wait_s": max((e - b for b, e in uploads), default=0.0),
            "waves_s": [sorted(finished)[min(len(finished), (k + 1) * slots) - 1] - t
                        for k in range(-(-len(finished) // max(1, slots)))]}


def _cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot, from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


async def main_async(args, servers: list[Sshd], key: Path, known_hosts: Path, base: Path) -> dict:
    hosts = {f"h{i:02d}": {"hostname": "127.0.0.1", "port": s.port, "user": login_user(),
                           "identity_files": [str(key)], "known_hosts": str(known_hosts), "python": sys.executable,
                           # distinct device ids: the device lease is per machine, and these "hosts" share one
                           "device": "cpu", "devices": list(range(i * args.slots, (i + 1) * args.slots)),
                           "concurrency": args.slots,
                           "work_dir": str(base / f"work-{i}")} for i, s in enumerate(servers)}
    inv = parse_inventory({"hosts": hosts})
    one = parse_inventory({"hosts": {"h00": {**hosts["h00"], "concurrency": 1, "devices": [0]}}})  # warm already
    root = base / "evidence"
    try:
        t = time.perf_counter()
        await warm(inv, list(hosts), root)
        warm_s = time.perf_counter() - t
        single = await measure(one, ["h00"], root, "one-slot", args.per_slot * 2, args.sleep)
        total = args.hosts * args.slots
        many = await measure(inv, list(hosts), root, "many", total * args.per_slot, args.sleep)
    finally:
        await pool.REGISTRY.close_all()
    return {"warm_s": warm_s, "single": single, "many": many, "total_slots": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds the candidate sleeps")
    parser.add_argument("--per-slot", type=int, default=4, help="cases per slot in the big run")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="opdebug-bench-hosts-"))
    key = make_client_key(base / "client")
    servers = [Sshd(base / f"sshd-{i}", key).start() for i in range(args.hosts)]
    known_hosts = base / "known_hosts"
    known_hosts.write_text("".join(s.host_key_line + "\n" for s in servers))
    try:
        figures = asyncio.run(main_async(args, servers, key, known_hosts, base))
    finally:
        for s in servers:
            s.stop()
    single, many, total = figures["single"], figures["many"], figures["total_slots"]
    efficiency = many["cases_per_s"] / (total * single["cases_per_s"])
    print(f"many-hosts benchmark: {args.hosts} sshd hosts x {args.slots} slots, candidate sleeps {args.sleep:g} s")
    print(f"   warming {total} slots took {figures['warm_s']:.1f} s")
    print(f"   one slot:     {single['cases_per_s']:7.3f} cases/s ({single['elapsed_s']:.2f} s)")
    print(f"   {total:3d} slots:    {many['cases_per_s']:7.3f} cases/s ({many['elapsed_s']:.2f} s, "
          f"{many['slots']} slots used)")
    print(f"   efficiency = {efficiency:.2f} (cases/s over {total}x one slot; target >= 0.8)")
    ideal = args.per_slot * args.sleep
    print(f"   where the rest went ({many['elapsed_s']:.2f} s against {ideal:.2f} s of sleeping per slot):")
    print(f"     every slot was handed its first case {many['last_first_start_s']:.2f} s after the call began "
          f"(the first at {many['first_start_s']:.3f} s)")
    print(f"     the longest wait of a slot for the run's files (user modules, uploaded over SFTP once per host "
          f"and run, in the first wave) was {many['files_wait_s']:.2f} s")
    print(f"     the machine's {os.cpu_count()} cores were {many['cpu_busy']:.0%} busy during the call "
          f"(sshd, supervisors, workers and this client share them)")
    print(f"     recording took {many['recording_s']:.2f} s of the client's event loop "
          f"({many['recording_ms_per_case']:.2f} ms per case), one case at a time")
    print(f"     the last case came back at {many['last_finish_s']:.2f} s; each wave of {total} cases was back by "
          + ", ".join(f"{w:.2f}" for w in many["waves_s"]) + " s")


if __name__ == "__main__":
    main()
