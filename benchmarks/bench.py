"""Benchmarks of the runner, run by hand (not part of the tests).

    .venv/bin/python benchmarks/bench.py                # every section
    .venv/bin/python benchmarks/bench.py --section 1    # per-case overhead, warm worker vs fresh process
    .venv/bin/python benchmarks/bench.py --section 2    # comparison time on 2**24 float32 elements
    .venv/bin/python benchmarks/bench.py --section 3    # the input-write check's share of a case
    .venv/bin/python benchmarks/bench.py --section 4    # repeats + alone-runs: worker starts per failure kind

Section 1 runs a trivial case (torch.add of two 64x64 float32 inputs, full
input building, reference and comparison) through the real local transport:
the staged runner's supervisor and its warm worker, driven by the
SupervisorClient, against a fresh Python process per case that imports torch
and runs the very same case code once.

Section 2 times the full metric set of the comparison engine on 2**24
float32 elements against torch.testing.assert_close and against one
torch.dot of the two tensors (one read of both), side by side in one run.

Section 3 (issue 21) runs the same 64x64 case and a 2**24-element torch.add
through the local transport and reports the worker's own timing of the
input-write check (fingerprints before the candidate, the check after it:
``timing_us.input_check_us``, the only work it adds) against the case's wall
time at the client.

Section 4 (issue 21) runs one star of cases three times on the local
transport - a right operator, an operator with one kind of failure (wrong
values past a last dimension of 256), and one with two kinds (those, and an
exception past 16 rows) - and counts the worker processes that ran them
(distinct worker pids in the raw evidence: the repeats run on the same
worker, the run alone on a fresh one, once per kind of failure).

SSH sections live in benchmarks/bench_ssh.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CONFIG = {"run_id": "bench", "operator": {"name": "add", "candidate": "torch.add", "reference": "torch.add"},
          "tolerance": {"atol": 1e-5, "rtol": 1e-5}}


def trivial_case(i: int) -> dict:
    return {"id": f"c{i}", "mode": "eager", "seed": i,
            "inputs": [{"name": "input", "shape": [64, 64]}, {"name": "other", "shape": [64, 64]}]}


FRESH_CODE = """
import json, sys
from opdebug_runner.devices import make_device
from opdebug_runner.execute import environment, execute_case
device = make_device("cpu")
answer = execute_case(json.loads(sys.stdin.read()), device, environment(device))
print(json.dumps(answer["result"]["status"]))
"""


def section_1(warm_cases: int = 200, fresh_cases: int = 5) -> dict:
    from tools.remote.local import LocalSlot, stage_runner

    class Run:
        config = CONFIG
        modules_dir = None
        captured_dir = None

    async def warm() -> tuple[list[float], list[float]]:
        slot = LocalSlot()
        await slot.start()
        try:
            for i in range(20):  # warm-up
                await slot.run_case(Run, trivial_case(i), 30)
            walls, inside = [], []
            for i in range(warm_cases):
                t0 = time.perf_counter()
                event = await slot.run_case(Run, trivial_case(i), 30)
                walls.append(time.perf_counter() - t0)
                assert event["result"]["status"] == "passed", event
                inside.append(event["result"]["timing_us"]["total_us"] / 1e6)
            return walls, inside
        finally:
            await slot.close()

    walls, inside = asyncio.run(warm())
    stage = stage_runner()
    env = dict(os.environ, PYTHONPATH=str(stage))
    fresh = []
    for i in range(fresh_cases):
        request = json.dumps({"config": CONFIG, "case": trivial_case(i)})
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", FRESH_CODE], input=request, capture_output=True, text=True,
                             env=env, check=True)
        fresh.append(time.perf_counter() - t0)
        assert out.stdout.strip() == '"passed"', out.stderr
    warm_ms = statistics.median(walls) * 1e3
    inside_ms = statistics.median(inside) * 1e3
    fresh_ms = statistics.median(fresh) * 1e3
    print("== 1. per-case overhead: trivial 64x64 torch.add case (inputs, candidate, reference, comparison) ==")
    print(f"warm worker via supervisor : median {warm_ms:8.2f} ms per case  (p90 "
          f"{sorted(walls)[int(len(walls) * 0.9)] * 1e3:.2f} ms; {warm_cases} cases; of which "
          f"{inside_ms:.2f} ms inside the worker)")
    print(f"fresh python per case      : median {fresh_ms:8.1f} ms per case  ({fresh_cases} cases)")
    print(f"ratio fresh / warm         : {fresh_ms / warm_ms:8.0f} x")
    return {"warm_ms": warm_ms, "warm_inside_ms": inside_ms, "fresh_ms": fresh_ms, "ratio": fresh_ms / warm_ms}


def section_2(n: int = 1 << 24, repeats: int = 7) -> dict:
    import torch

    from tools.runner.compare import compare_tensor

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(n, generator=g)
    cand = ref + 1e-6 * torch.randn(n, generator=g)  # a realistic, passing candidate

    def assert_close(cand_):
        try:
            torch.testing.assert_close(cand_, ref, atol=1e-5, rtol=1e-5)
        except AssertionError:
            pass

    bad = cand.clone()
    bad[::1000] += 1.0  # a failing candidate too (assert_close then also builds its message)
    contenders = {
        "metrics": lambda: compare_tensor("out", cand, ref, atol=1e-5, rtol=1e-5),
        "assert_close": lambda: assert_close(cand),
        "dot": lambda: torch.dot(cand, ref).item(),
        "metrics_bad": lambda: compare_tensor("out", bad, ref, atol=1e-5, rtol=1e-5),
        "assert_close_bad": lambda: assert_close(bad),
    }
    # interleaved, so every contender sees the same machine load; best of `repeats`
    times = {k: [] for k in contenders}
    for fn in contenders.values():
        fn()
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    t_metrics, t_assert, t_dot, t_metrics_bad, t_assert_bad = (min(times[k]) for k in contenders)
    print(f"== 2. comparison of 2**{n.bit_length() - 1} float32 elements (best of {repeats}, "
          f"{torch.get_num_threads()} threads) ==")
    print(f"{'':28s} {'passing':>10s} {'failing':>10s}")
    print(f"{'full metric set':28s} {t_metrics * 1e3:8.1f}ms {t_metrics_bad * 1e3:8.1f}ms")
    print(f"{'torch.testing.assert_close':28s} {t_assert * 1e3:8.1f}ms {t_assert_bad * 1e3:8.1f}ms")
    print(f"{'one torch.dot (one read)':28s} {t_dot * 1e3:8.1f}ms")
    print(f"metrics / assert_close     : {t_metrics / t_assert:.2f} (passing)  {t_metrics_bad / t_assert_bad:.2f} "
          f"(failing)   target <= 0.50")
    print(f"metrics / dot              : {t_metrics / t_dot:.1f}")
    return {"metrics_ms": t_metrics * 1e3, "assert_close_ms": t_assert * 1e3, "dot_ms": t_dot * 1e3,
            "metrics_failing_ms": t_metrics_bad * 1e3, "assert_close_failing_ms": t_assert_bad * 1e3}


def section_3(small_cases: int = 200, big_cases: int = 7) -> dict:
    from tools.remote.local import LocalSlot

    class Run:
        config = CONFIG
        modules_dir = None
        captured_dir = None

    def big_case(i: int) -> dict:
        return {"id": f"big{i}", "mode": "eager", "seed": i,
                "inputs": [{"name": "input", "shape": [1 << 24]}, {"name": "other", "shape": [1 << 24]}]}

    async def measure() -> dict:
        slot = LocalSlot()
        await slot.start()
        out = {}
        try:
            for label, make, n, warm in (("64x64", trivial_case, small_cases, 20), ("2**24", big_case, big_cases, 1)):
                for i in range(warm):
                    await slot.run_case(Run, make(i), 120)
                walls, checks = [], []
                for i in range(n):
                    t0 = time.perf_counter()
                    event = await slot.run_case(Run, make(i), 120)
                    walls.append(time.perf_counter() - t0)
                    assert event["result"]["status"] == "passed", event
                    checks.append(event["result"]["timing_us"]["input_check_us"] / 1e6)
                out[label] = (statistics.median(walls), statistics.median(checks))
        finally:
            await slot.close()
        return out

    got = asyncio.run(measure())
    print("== 3. the input-write check (fingerprint before the candidate, check after), local transport ==")
    figures = {}
    for label, (wall, check) in got.items():
        share = check / max(1e-12, wall - check)
        target = 0.10 if label == "64x64" else 0.05
        print(f"{label:6s} torch.add: case {wall * 1e3:9.2f} ms at the client, check {check * 1e3:7.3f} ms inside the "
              f"worker: +{share:.1%} over the case without it (target <= {target:.0%})")
        figures[label] = {"case_ms": wall * 1e3, "check_ms": check * 1e3, "share": share}
    return figures


FAILING_OPERATOR = """
import torch


def cand(x):
    if x.shape[0] > 16 and KINDS > 1:
        raise RuntimeError("tiling: too many rows")
    out = x * 2
    if x.shape[-1] > 256 and KINDS > 0:
        out[..., 256:] = 0
    return out


def ref(x):
    return x * 2
"""


def section_4() -> dict:
    import tempfile

    from tools.plan_cases import plan_cases
    from tools.remote.pool import REGISTRY
    from tools.run_case_remote import run_case_remote
    from tools.evidence import RunStore

    root = Path(tempfile.mkdtemp(prefix="bench-consistency-"))
    rows = [[4, 128], [8, 128], [16, 64], [32, 128], [64, 128], [4, 512], [8, 300], [16, 1024], [4, 2048],
            [8, 4096], [32, 512], [64, 300]]
    cases = [{"id": f"c{i}", "seed": i, "inputs": [{"name": "x", "shape": shape}]} for i, shape in enumerate(rows)]

    async def one(kinds: int) -> dict:
        run_id = f"kinds-{kinds}"
        plan_cases({"config": {"run_id": run_id, "operator": {"name": "op", "candidate": "op.cand",
                                                              "reference": "op.ref", "modules": ["op.py"]}},
                    "cases": cases, "module_sources": {"op.py": FAILING_OPERATOR.replace("KINDS", str(kinds))}},
                   root=root)
        t0 = time.perf_counter()
        resp = await run_case_remote(run_id, root=root)
        seconds = time.perf_counter() - t0
        store = RunStore(root, run_id)
        pids = set()
        for case in cases:
            for name in ("worker-result.json", "alone-result.json"):
                path = store.dir / "raw-results" / case["id"] / name
                if path.exists():
                    pids.add(json.loads(path.read_text()).get("worker_pid"))
        states = {}
        for o in resp.outcomes:
            states[o.state] = states.get(o.state, 0) + 1
        groups = {o.signature or ",".join(o.failed_outputs) for o in resp.outcomes if o.state != "passed"}
        return {"seconds": seconds, "workers": len(pids - {None}), "states": states, "kinds": len(groups)}

    async def main() -> dict:
        try:
            out = {}
            for kinds in (0, 1, 2):
                out[kinds] = await one(kinds)
                await REGISTRY.close_all()  # each run starts from one fresh slot
            return out
        finally:
            await REGISTRY.close_all()

    got = asyncio.run(main())
    print(f"== 4. repeats (2 more runs, same worker) + the run alone (fresh worker) on failing cases: "
          f"{len(cases)} cases ==")
    for kinds, g in got.items():
        print(f"{kinds} kind(s) of failure: {g['states']}: {g['workers']} worker process(es) "
              f"({g['workers'] - 1} fresh start(s) beyond the first), {g['seconds']:.2f} s")
    return {str(k): v for k, v in got.items()}


SECTIONS = {"1": section_1, "2": section_2, "3": section_3, "4": section_4}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS),
                        help="run only these sections (repeatable); default all")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = parser.parse_args()
    figures = {}
    for name in args.section or sorted(SECTIONS):
        figures[name] = SECTIONS[name]()
        print()
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
