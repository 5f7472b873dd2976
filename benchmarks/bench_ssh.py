"""SSH transport benchmark (run by hand, not in the tests).

    .venv/bin/python benchmarks/bench_ssh.py [--cases 40] [--fresh 5] [--sleep 0.2] [--matrix 16]

Starts its own throw-away OpenSSH sshd on 127.0.0.1 (as the tests do; needs
/usr/sbin/sshd and root or a user sshd accepts) and measures, side by side
in one run:

1. per-case overhead over SSH: a trivial 64x64 case on a warm device worker
   (the pool's SSH slot: one connection, one warm supervisor + worker) vs a
   fresh ``ssh host python -c '<import torch; run one case>'`` per case
   (OpenSSH's own client: connection, login, interpreter, torch import);
   also the warm path through run_case_remote including recording;
2. cases per second with 1, 2 and 4 slots on an operator that sleeps a fixed
   time in the candidate (warm workers; the matrix spread by the pool).

Targets (issue 4): warm >= 100x below fresh; 4 slots >= 3x the cases/s of 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
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

MODULE = '''\
import time


def cand(x, y, alpha=1.0, delay=0.0):
    if delay:
        time.sleep(delay)
    return x + alpha * y


def ref(x, y, alpha=1.0, delay=0.0):
    return x + alpha * y
'''

# What one fresh process per case has to do at the least: start python, import
# torch, build the inputs from the seed, run candidate and reference, compare.
FRESH_SCRIPT = (
    "import torch; g = torch.Generator().manual_seed(7); "
    "x = torch.randn(64, 64, generator=g); y = torch.randn(64, 64, generator=g); "
    "c = x + 0.5 * y; r = x.double() + 0.5 * y.double(); "
    "print(bool(torch.allclose(c.double(), r, atol=1e-5, rtol=1e-5)))"
)


def plan(root: Path, run_id: str, n: int, delay: float = 0.0) -> list[str]:
    ids = [f"c{i:03d}" for i in range(n)]
    cases = [{"id": cid, "inputs": [{"name": "x", "shape": [64, 64]}, {"name": "y", "shape": [64, 64]}],
              "attributes": {"alpha": 0.5, "delay": delay}, "seed": i} for i, cid in enumerate(ids)]
    config = {"run_id": run_id, "operator": {"name": "scaled_add", "candidate": "bench_mod.cand",
                                            "reference": "bench_mod.ref", "modules": ["bench_mod.py"]}}
    plan_cases({"config": config, "cases": cases, "module_sources": {"bench_mod.py": MODULE}}, root=root)
    return ids


def fresh_ssh_case(server: Sshd, key: Path, known_hosts: Path) -> float:
    start = time.perf_counter()
    out = subprocess.run(
        ["ssh", "-p", str(server.port), "-i", str(key), "-o", f"UserKnownHostsFile={known_hosts}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
         f"{login_user()}@127.0.0.1", f"{sys.executable} -c '{FRESH_SCRIPT}'"],
        capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    if out.returncode != 0 or out.stdout.strip() != "True":
        raise RuntimeError(f"fresh ssh case failed: {out.returncode} {out.stdout} {out.stderr}")
    return elapsed


async def warm_overhead(inv, root: Path, n: int) -> dict:
    host = inv.get("bench")
    ids = plan(root, "warm-slot", n + 1)
    store = RunStore(root, "warm-slot")
    config = store.read_config().model_dump(mode="json")
    cases = {c.id: c.model_dump(mode="json") for c in store.read_cases()}
    run = pool.RunFiles("warm-slot", config, store.path("artifacts", "modules"), None)
    slot = await pool.REGISTRY.checkout(host, 0, run)
    try:
        await slot.run_case(run, cases[ids[0]], 60)  # warm: modules uploaded, worker imported torch
        times = []
        for cid in ids[1:]:
            t = time.perf_counter()
            event = await slot.run_case(run, cases[cid], 60)
            times.append(time.perf_counter() - t)
            assert event["outcome"] == "result" and event["result"]["status"] == "passed", event
    finally:
        pool.REGISTRY.release(slot)
    # The same through the tool, one case per call, recording included.
    ids = plan(root, "warm-tool", n + 1)
    await run_case_remote("warm-tool", case_ids=ids[:1], hosts=["bench"], root=root, inventory=inv)
    tool_times = []
    for cid in ids[1:]:
        t = time.perf_counter()
        resp = await run_case_remote("warm-tool", case_ids=[cid], hosts=["bench"], root=root, inventory=inv)
        tool_times.append(time.perf_counter() - t)
        assert resp.recorded == [cid], resp
    return {"slot_round_trip_s": times, "tool_call_s": tool_times}


async def throughput(server_inv: dict, root: Path, n: int, delay: float) -> dict:
    out = {}
    warm_inv = parse_inventory({"hosts": {"bench": {**server_inv, "concurrency": 4}}})
    plan(root, "tp-warmup", 1)
    store = RunStore(root, "tp-warmup")
    files = pool.RunFiles("tp-warmup", store.read_config().model_dump(mode="json"), store.path("artifacts", "modules"))
    host = warm_inv.get("bench")
    slots = await asyncio.gather(*(pool.REGISTRY.checkout(host, d, files) for d in range(4)))  # all four warm
    for slot in slots:
        pool.REGISTRY.release(slot)
    for k in (1, 2, 4):
        inv = parse_inventory({"hosts": {"bench": {**server_inv, "concurrency": k}}})
        run_id = f"tp-{k}"
        ids = plan(root, run_id, n, delay=delay)
        t = time.perf_counter()
        resp = await run_case_remote(run_id, hosts=["bench"], root=root, inventory=inv)
        elapsed = time.perf_counter() - t
        assert len(resp.recorded) == n, resp
        devices = sorted({o.device for o in resp.outcomes})
        out[k] = {"elapsed_s": elapsed, "cases_per_s": n / elapsed, "devices": devices}
    return out


async def main_async(args, server: Sshd, key: Path, known_hosts: Path, base: Path) -> dict:
    server_inv = {"hostname": "127.0.0.1", "port": server.port, "user": login_user(), "identity_files": [str(key)],
                  "known_hosts": str(known_hosts), "python": sys.executable, "device": "cpu",
                  "devices": [0, 1, 2, 3], "work_dir": str(base / "work")}
    inv = parse_inventory({"hosts": {"bench": {**server_inv, "concurrency": 1}}})
    try:
        warm = await warm_overhead(inv, base / "evidence", args.cases)
        fresh = [await asyncio.to_thread(fresh_ssh_case, server, key, known_hosts) for _ in range(args.fresh)]
        tp = await throughput(server_inv, base / "evidence", args.matrix, args.sleep)
    finally:
        await pool.REGISTRY.close_all()
    return {"warm": warm, "fresh_s": fresh, "throughput": tp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40, help="warm cases timed (one at a time)")
    parser.add_argument("--fresh", type=int, default=5, help="fresh `ssh host python` cases timed")
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds the throughput operator sleeps")
    parser.add_argument("--matrix", type=int, default=16, help="cases per throughput measurement")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="opdebug-bench-ssh-"))
    key = make_client_key(base / "client")
    server = Sshd(base / "sshd", key).start()
    known_hosts = base / "known_hosts"
    known_hosts.write_text(server.host_key_line + "\n")
    try:
        figures = asyncio.run(main_async(args, server, key, known_hosts, base))
    finally:
        server.stop()

    warm = statistics.median(figures["warm"]["slot_round_trip_s"])
    tool = statistics.median(figures["warm"]["tool_call_s"])
    fresh = statistics.median(figures["fresh_s"])
    tp = figures["throughput"]
    print(f"SSH transport benchmark (sshd on 127.0.0.1:{server.port}, python {sys.version.split()[0]})")
    print(f"1. per-case overhead, trivial 64x64 case")
    print(f"   warm SSH worker, slot round trip   median {warm * 1e3:8.2f} ms  (n={args.cases})")
    print(f"   warm, one run_case_remote call     median {tool * 1e3:8.2f} ms  (recording included)")
    print(f"   fresh `ssh host python -c ...`     median {fresh * 1e3:8.2f} ms  (n={args.fresh})")
    print(f"   ratio fresh / warm round trip      {fresh / warm:8.1f}x   (target >= 100x)")
    print(f"   ratio fresh / warm tool call       {fresh / tool:8.1f}x")
    print(f"2. cases per second, operator sleeping {args.sleep:g} s, {args.matrix} cases")
    for k, row in tp.items():
        print(f"   {k} slot(s): {row['cases_per_s']:6.2f} cases/s  ({row['elapsed_s']:.2f} s; devices {row['devices']})")
    print(f"   ratio 4 slots / 1 slot             {tp[4]['cases_per_s'] / tp[1]['cases_per_s']:8.2f}x   (target >= 3x)")
    print(f"   ratio 2 slots / 1 slot             {tp[2]['cases_per_s'] / tp[1]['cases_per_s']:8.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
