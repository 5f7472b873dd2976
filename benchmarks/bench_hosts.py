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
    files = pool.RunFiles("warmup", store.read_config().model_dump(mode="json"), store.path("artifacts", "modules"))
    specs = pool.slot_specs(inv.resolve(names))
    slots = await asyncio.gather(*(pool.REGISTRY.checkout(s.host, s.device, files) for s in specs))
    for slot in slots:
        pool.REGISTRY.release(slot)


async def measure(inv, names: list[str], root: Path, run_id: str, n: int, delay: float) -> dict:
    plan(root, run_id, n, delay)
    t = time.perf_counter()
    resp = await run_case_remote(run_id, hosts=names, root=root, inventory=inv)
    elapsed = time.perf_counter() - t
    assert len(resp.recorded) == n, (len(resp.recorded), resp.rerun_hint)
    return {"elapsed_s": elapsed, "cases_per_s": n / elapsed, "slots": len({(o.host, o.device) for o in resp.outcomes})}


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


if __name__ == "__main__":
    main()
