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

3. (``--breakdown``) where one warm case's time goes, quiet and while
   ``--burners`` busy-looping processes keep the cores busy: a raw asyncssh
   channel round trip to a warm Python echo process on the same sshd (the
   floor); the slot round trip split into client -> supervisor (request in),
   supervisor + worker (of which the worker's own candidate/reference/compare
   time), supervisor -> client (answer out); and one run_case_remote call split
   into the slot round trip, recording (``_record_event``) and the rest.
   Each is measured back to back (its own loop); then the raw channel and the
   slot in turn, case after case, so each finds its peer process asleep (on a
   loaded host a woken process waits for the scheduler: the raw channel too).

Targets (issue 4): warm >= 100x below fresh; 4 slots >= 3x the cases/s of 1.
Targets (issue 12): a run_case_remote call, recording included, <= 5 ms; the
warm round trip within 10x of the raw channel, quiet and loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
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
from tools.remote.slot import RunFiles  # noqa: E402
from tools.remote.host import SupervisorSlot  # noqa: E402
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
    run = RunFiles("warm-slot", config, store.path("artifacts", "modules"), None)
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
    files = RunFiles("tp-warmup", store.read_config().model_dump(mode="json"), store.path("artifacts", "modules"))
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


ECHO = "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line)\n    sys.stdout.buffer.flush()\n"


def burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


async def breakdown(inv, tool_inv, root: Path, n: int, tag: str) -> dict:
    """Per-stage times of n warm cases (see the module doc, part 3).  The raw
    channel, the slot round trip and the tool call are measured in turn, case
    by case, so whatever else the machine does weighs on all three alike."""
    import tools.run_case_remote as rcr

    host = inv.get("bench")
    conn = await pool.REGISTRY.host(host).connections.connection(host)
    proc = await conn.create_process(f"{sys.executable} -u -c {shlex.quote(ECHO)}", encoding=None)
    line = json.dumps({"op": "run", "pad": "x" * 200}).encode() + b"\n"

    async def raw_round_trip() -> float:
        t = time.perf_counter()
        proc.stdin.write(line)
        await proc.stdout.readline()
        return time.perf_counter() - t

    ids = plan(root, f"bd-slot-{tag}", n + 1)
    store = RunStore(root, f"bd-slot-{tag}")
    config = store.read_config().model_dump(mode="json")
    cases = {c.id: c.model_dump(mode="json") for c in store.read_cases()}
    run = RunFiles(f"bd-slot-{tag}", config, store.path("artifacts", "modules"), None)
    tool_ids = plan(root, f"bd-tool-{tag}", n + 1)

    spans: dict[str, list[float]] = {"slot": [], "record": []}
    in_tool = [False]
    real_record, real_slot_run = rcr._record_event, SupervisorSlot.run_case

    def timed_record(*a, **k):
        t = time.perf_counter()
        try:
            return real_record(*a, **k)
        finally:
            spans["record"].append(time.perf_counter() - t)

    async def timed_slot_run(self, *a, **k):
        t = time.perf_counter()
        try:
            return await real_slot_run(self, *a, **k)
        finally:
            if in_tool[0]:
                spans["slot"].append(time.perf_counter() - t)

    slot = await pool.REGISTRY.checkout(host, 0, run)  # device 0 here, device 1 for the tool: both warm
    rcr._record_event, SupervisorSlot.run_case = timed_record, timed_slot_run

    async def slot_round_trip(cid: str) -> dict:
        sent = time.time()
        t = time.perf_counter()
        event = await slot.run_case(run, cases[cid], 60)
        total = time.perf_counter() - t
        got = time.time()
        worker_us = (event["result"].get("timing_us") or {}).get("total_us") or 0.0
        return {"total": total, "in": event["started_at"] - sent,
                "supervisor_worker": event["finished_at"] - event["started_at"],
                "worker": worker_us / 1e6, "out": got - event["finished_at"]}

    half = max(1, n // 2)
    try:
        for _ in range(5):
            await raw_round_trip()
        await slot.run_case(run, cases[ids[0]], 60)
        await run_case_remote(f"bd-tool-{tag}", case_ids=tool_ids[:1], hosts=["bench"], root=root,
                              inventory=tool_inv)
        spans["slot"].clear(), spans["record"].clear()
        # back to back: each its own loop (as an agent or a loop of calls sees it)
        hot = [await raw_round_trip() for _ in range(n)]
        rows = [await slot_round_trip(cid) for cid in ids[1:1 + half]]
        tool = []
        in_tool[0] = True
        for tool_cid in tool_ids[1:]:
            t = time.perf_counter()
            resp = await run_case_remote(f"bd-tool-{tag}", case_ids=[tool_cid], hosts=["bench"], root=root,
                                         inventory=tool_inv)
            tool.append(time.perf_counter() - t)
            assert resp.recorded == [tool_cid], resp
        in_tool[0] = False
        # in turn: a raw round trip, then a case, and again (each finds its peer asleep)
        raw, turn = [], []
        for cid in ids[1 + half:]:
            raw.append(await raw_round_trip())
            turn.append(await slot_round_trip(cid))
    finally:
        rcr._record_event, SupervisorSlot.run_case = real_record, real_slot_run
        pool.REGISTRY.release(slot)
        proc.stdin.write_eof()
        proc.close()
    med = statistics.median
    return {"raw_hot": med(hot), "slot_total": med(r["total"] for r in rows),
            "in": med(r["in"] for r in rows), "supervisor_worker": med(r["supervisor_worker"] for r in rows),
            "worker": med(r["worker"] for r in rows), "out": med(r["out"] for r in rows),
            "raw_turn": med(raw), "slot_turn": med(r["total"] for r in turn),
            "ratio_turn": med(r["total"] / w for r, w in zip(turn, raw)),
            "tool_total": med(tool), "tool_slot": med(spans["slot"]), "tool_record": med(spans["record"]),
            "tool_rest": med(tool) - med(spans["slot"]) - med(spans["record"])}


def print_breakdown(quiet: dict, loaded: dict, burners_n: int) -> None:
    rows = [("raw asyncssh channel round trip, back to back (floor)", "raw_hot"),
            ("warm slot round trip, back to back", "slot_total"),
            ("  client -> supervisor (request in)", "in"),
            ("  supervisor + worker", "supervisor_worker"),
            ("    of which the worker's candidate/reference/compare", "worker"),
            ("  supervisor -> client (answer out)", "out"),
            ("raw channel round trip, in turn with a case", "raw_turn"),
            ("warm slot round trip, in turn with a raw one", "slot_turn"),
            ("one run_case_remote call, back to back", "tool_total"),
            ("  slot round trip inside it", "tool_slot"),
            ("  recording (_record_event)", "tool_record"),
            ("  the rest (store reads, inventory, pool, response)", "tool_rest")]
    print(f"3. breakdown of one warm case (medians, ms); loaded = {burners_n} busy-looping processes")
    print(f"   {'':58s} {'quiet':>9s} {'loaded':>9s}")
    for label, key in rows:
        print(f"   {label:58s} {quiet[key] * 1e3:9.2f} {loaded[key] * 1e3:9.2f}")
    for name, d in (("quiet", quiet), ("loaded", loaded)):
        print(f"   {name}: round trip / raw channel = {d['slot_total'] / d['raw_hot']:.1f}x back to back, "
              f"{d['ratio_turn']:.1f}x in turn (median per-case ratio) (target <= 10x); "
              f"tool call {d['tool_total'] * 1e3:.2f} ms (target <= 5 ms)")


async def main_async(args, server: Sshd, key: Path, known_hosts: Path, base: Path) -> dict:
    server_inv = {"hostname": "127.0.0.1", "port": server.port, "user": login_user(), "identity_files": [str(key)],
                  "known_hosts": str(known_hosts), "python": sys.executable, "device": "cpu",
                  "devices": [0, 1, 2, 3], "work_dir": str(base / "work")}
    inv = parse_inventory({"hosts": {"bench": {**server_inv, "concurrency": 1}}})
    if args.breakdown:
        tool_inv = parse_inventory({"hosts": {"bench": {**server_inv, "concurrency": 1, "devices": [1]}}})
        try:
            quiet = await breakdown(inv, tool_inv, base / "evidence", args.cases, "quiet")
            procs = burners(args.burners)
            try:
                await asyncio.sleep(0.5)
                loaded = await breakdown(inv, tool_inv, base / "evidence", args.cases, "loaded")
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
        finally:
            await pool.REGISTRY.close_all()
        return {"breakdown": {"quiet": quiet, "loaded": loaded}}
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
    parser.add_argument("--breakdown", action="store_true", help="only part 3: where one warm case's time goes")
    parser.add_argument("--burners", type=int, default=4, help="busy-looping processes for the loaded breakdown")
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

    if args.breakdown:
        print(f"SSH transport benchmark (sshd on 127.0.0.1:{server.port}, python {sys.version.split()[0]})")
        print_breakdown(figures["breakdown"]["quiet"], figures["breakdown"]["loaded"], args.burners)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str))
        return
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
