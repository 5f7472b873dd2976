"""Slurm vs SSH on the same machine: cases per second, the start-up of a slot, and the
cost of a long protocol line through srun (run by hand, not in the tests):

    .venv/bin/python benchmarks/bench_slurm.py [--slots 4] [--cases 64] [--per-case 40]

It starts a real single-node Slurm (tests/slurm_fixture.py: munged, slurmctld,
slurmd, a count-only GRES npu:4) and one loopback OpenSSH sshd (tests/sshd_fixture.py),
and names both in one inventory: host ``slurm`` (this machine as the login host,
every slot one ``srun`` job) and host ``ssh`` (every slot one remote process
under the device lease).  The operator returns at once, so the figures are the
transports' own cost.

1. **A long line through srun.**  An echo task in an srun step answers a
   2,400-byte line (the size of a typical ``case_done``): sent plain, then framed
   the way the Slurm transport frames it (pieces of at most 1000 bytes, each after
   the other side's ack; tools/remote/slurm_step.py).  Plain lines over 1 KB wait
   for a delayed ACK (44 ms each way); framed ones do not.
2. **Slot start-up**: from srun's start to the step's first line (the scheduler
   placing the job and launching the step) and to the supervisor's hello (the
   runner's worker started: torch imported); the same for an SSH slot (connect,
   upload, lease, hello).
3. **Per case on a warm slot**: the median round trip of one case (request,
   candidate, reference, comparison, answer) on one slot, Slurm vs SSH.
4. **A run**: ``run_case_remote`` of N cases over S slots on each host from
   cold (every slot starts within the run; a Slurm host's always do: its jobs
   live for one run), then the SSH run again with its slots warm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from slurm_fixture import SlurmCluster  # noqa: E402
from sshd_fixture import Sshd, login_user, make_client_key  # noqa: E402
from tools.evidence import RunStore  # noqa: E402
from tools.plan_cases import plan_cases  # noqa: E402
from tools.remote import pool  # noqa: E402
from tools.remote.inventory import parse_inventory  # noqa: E402
from tools.remote.slot import RunFiles  # noqa: E402
from tools.remote.slurm_step import frames  # noqa: E402
from tools.run_case_remote import run_case_remote  # noqa: E402

MODULE = "def cand(x, wrong=False):\n    return x * 3 if wrong else x * 2\n\n\ndef ref(x, wrong=False):\n    return x * 2\n"

# The echo task for (1): answers "P<n>" with one n-byte line, "F<n>" with the same line framed
# (pieces acked by the reader with a "." line), and "." acks in between.
ECHO = r'''
import os, sys
sys.path.insert(0, os.environ["BENCH_REPO"])
from tools.remote.slurm_step import frames
def read_line():
    b = b""
    while not b.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            sys.exit(0)
        b += c
    return b
os.write(1, b"ready\n")
while True:
    line = read_line()
    n = int(line[1:])
    body = b"{" + b"x" * (n - 3) + b"}\n"
    if line[:1] == b"P":
        os.write(1, body)
    else:
        wire = frames(body)
        for piece in wire[:-1]:
            os.write(1, piece)
            read_line()  # the ack
        os.write(1, wire[-1])
'''


def plan(root: Path, run_id: str, n: int) -> None:
    cases = [{"id": f"c{i:04d}", "inputs": [{"name": "x", "shape": [8, 8]}], "seed": i} for i in range(n)]
    config = {"run_id": run_id, "operator": {"name": "twice", "candidate": "bench_mod.cand",
                                            "reference": "bench_mod.ref", "modules": ["bench_mod.py"]},
              "default_timeout_s": 120}
    plan_cases({"config": config, "cases": cases, "module_sources": {"bench_mod.py": MODULE}}, root=root)


def long_line(cluster: SlurmCluster, size: int, rounds: int) -> dict:
    env = dict(cluster.env, BENCH_REPO=str(REPO))
    proc = subprocess.Popen(["srun", f"--partition={cluster.partition}", "--job-name=bench-echo", "--gres=npu:1",
                             sys.executable, "-c", ECHO], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            bufsize=0)
    out = proc.stdout

    def read_line() -> bytes:
        b = b""
        while not b.endswith(b"\n"):
            c = out.read(1)
            if not c:
                raise RuntimeError("the echo step ended")
            b += c
        return b

    assert read_line() == b"ready\n"

    def once(mode: str) -> float:
        t = time.perf_counter()
        proc.stdin.write(f"{mode}{size}\n".encode())
        while True:
            line = read_line()
            if mode == "F" and line[:1] == b"+":
                proc.stdin.write(b".\n")
                continue
            break
        return time.perf_counter() - t

    figures = {m: statistics.median(once(m) for _ in range(rounds)) * 1e3 for m in ("P", "F")}
    proc.stdin.close()
    proc.wait(timeout=30)
    return {"plain_ms": figures["P"], "framed_ms": figures["F"], "size": size}


async def warm_slot(inv, name: str, root: Path) -> tuple[object, RunFiles, dict, float]:
    store = RunStore(root, "percase")
    files = RunFiles("percase", store.read_config().model_dump(mode="json"), store.path("artifacts", "modules"))
    case = store.read_cases()[0].model_dump(mode="json")
    t = time.perf_counter()
    slot = await pool.REGISTRY.checkout(inv.get(name), 0, files)
    return slot, files, case, time.perf_counter() - t


async def per_case(slot, files: RunFiles, case: dict, n: int) -> dict:
    times, sizes = [], []
    for _ in range(n):
        t = time.perf_counter()
        event = await slot.run_case(files, case, 60)
        times.append(time.perf_counter() - t)
        sizes.append(len(str(event)))
    return {"median_ms": statistics.median(times) * 1e3, "p90_ms": sorted(times)[int(0.9 * len(times))] * 1e3}


async def a_run(inv, name: str, root: Path, run_id: str, n: int) -> dict:
    plan(root, run_id, n)
    t = time.perf_counter()
    resp = await run_case_remote(run_id, hosts=[name], root=root, inventory=inv)
    wall = time.perf_counter() - t
    assert len(resp.recorded) == n, [o.error for o in resp.outcomes if not o.recorded][:3]
    return {"wall_s": wall, "cases_per_s": n / wall}


async def main_async(args, cluster: SlurmCluster, sshd: Sshd, key: Path, known_hosts: Path, base: Path) -> dict:
    hosts = {
        "slurm": {"transport": "local", "scheduler": "slurm", "device": "cpu", "python": sys.executable,
                  "concurrency": args.slots, "work_dir": str(base / "work-slurm"),
                  "slurm": {"partition": cluster.partition, "time_limit": "30", "gres": "npu:1"}},
        "ssh": {"hostname": "127.0.0.1", "port": sshd.port, "user": login_user(), "identity_files": [str(key)],
                "known_hosts": str(known_hosts), "python": sys.executable, "device": "cpu",
                "devices": list(range(100, 100 + args.slots)), "work_dir": str(base / "work-ssh")},
    }
    inv = parse_inventory({"hosts": hosts})
    root = base / "evidence"
    plan(root, "percase", 1)
    out: dict = {}
    try:
        for name in ("slurm", "ssh"):
            slot, files, case, start_s = await warm_slot(inv, name, root)
            out[f"{name}_start_s"] = start_s
            if name == "slurm":
                out["slurm_step_s"] = slot.step_s
            await slot.run_case(files, case, 60)  # the user module imported once
            out[f"{name}_case"] = await per_case(slot, files, case, args.per_case)
            # a mismatch whose kept outputs (keep_outputs) make a 0.7 MB answer line
            big = dict(case, id="big", inputs=[dict(case["inputs"][0], shape=[256, 256])], attributes={"wrong": True})
            kept = RunFiles(files.run_id, dict(files.config, keep_outputs_max_bytes=8 << 20), files.modules_dir)
            event = await slot.run_case(kept, big, 60)
            out["big_line_bytes"] = len(json.dumps(event))
            out[f"{name}_big"] = await per_case(slot, kept, big, max(5, args.per_case // 4))
            await pool.REGISTRY.finished(slot)
        for name in ("slurm", "ssh"):
            await pool.REGISTRY.close_all()  # both from cold: every slot starts within the run
            out[f"{name}_run"] = await a_run(inv, name, root, f"run-{name}", args.cases)
        out["ssh_warm_run"] = await a_run(inv, "ssh", root, "run-ssh-warm", args.cases)  # its slots stayed warm
    finally:
        await pool.REGISTRY.close_all()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=4, help="slots per host (the cluster has npu:4)")
    parser.add_argument("--cases", type=int, default=64, help="cases of the run on each host")
    parser.add_argument("--per-case", type=int, default=40, help="cases timed one by one on a warm slot")
    parser.add_argument("--line", type=int, default=2400, help="bytes of the long line of (1)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="opdebug-bench-slurm-"))
    cluster = SlurmCluster(base / "slurm").start()
    key = make_client_key(base / "client")
    sshd = Sshd(base / "sshd", key).start()
    known_hosts = base / "known_hosts"
    known_hosts.write_text(sshd.host_key_line + "\n")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        line = long_line(cluster, args.line, 20)
        figures = asyncio.run(main_async(args, cluster, sshd, key, known_hosts, base))
    finally:
        sshd.stop()
        cluster.stop()
    f = figures
    print(f"Slurm vs SSH on this machine ({os.cpu_count()} cores; Slurm {cluster.gres_name}:{cluster.gres_count} "
          f"count-only, {args.slots} slots each); the operator returns at once")
    print(f"  1. a {line['size']}-byte line through an srun step, round trip: plain {line['plain_ms']:.2f} ms, "
          f"framed {line['framed_ms']:.2f} ms")
    print(f"  2. slot start-up: Slurm {f['slurm_start_s']:.2f} s (srun -> step running {f['slurm_step_s']:.3f} s, "
          f"then the runner's worker), SSH {f['ssh_start_s']:.2f} s (connect, upload, lease, worker)")
    print(f"  3. one case on a warm slot: Slurm {f['slurm_case']['median_ms']:.2f} ms median "
          f"(p90 {f['slurm_case']['p90_ms']:.2f}), SSH {f['ssh_case']['median_ms']:.2f} ms median "
          f"(p90 {f['ssh_case']['p90_ms']:.2f})")
    print(f"     one case whose answer is a {f['big_line_bytes'] / 1e6:.1f} MB line (keep_outputs): Slurm "
          f"{f['slurm_big']['median_ms']:.1f} ms median, SSH {f['ssh_big']['median_ms']:.1f} ms")
    print(f"  4. a run of {args.cases} cases on {args.slots} slots, every slot started within it: Slurm "
          f"{f['slurm_run']['cases_per_s']:.1f} cases/s ({f['slurm_run']['wall_s']:.2f} s, its jobs started and "
          f"ended within), SSH {f['ssh_run']['cases_per_s']:.1f} cases/s ({f['ssh_run']['wall_s']:.2f} s)")
    print(f"     the same run again on SSH, its slots still warm: {f['ssh_warm_run']['cases_per_s']:.1f} cases/s "
          f"({f['ssh_warm_run']['wall_s']:.2f} s); a Slurm host's slots never stay warm (a job per run)")


if __name__ == "__main__":
    main()
