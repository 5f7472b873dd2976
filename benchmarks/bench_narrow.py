"""How fast the diagnosis converges, and how fast analysis is.

1. For each planted kind (benchmarks/narrow_kinds.py, operators in
   tests/operators/): the agent loop (a first star with distractors, run on
   host ``local``, analyze, apply the first next case as it is) and the
   autopilot (narrow_failure) - steps and cases until the exact finding.
2. build_analysis on N synthetic cases (a threshold bug on x.shape[-1] among
   dtype/stride/offset distractors), in memory: seconds per analysis.

    .venv/bin/python benchmarks/bench_narrow.py            # both
    .venv/bin/python benchmarks/bench_narrow.py --analysis-only --sizes 1000 10000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from narrow_kinds import KINDS, plan_request  # noqa: E402

MAX_MANUAL = 8


def manual(loop, root: Path, kind: str) -> tuple[int | None, int]:
    from tools.analyze_failures import analyze_failures
    from tools.evidence import RunStore
    from tools.plan_cases import plan_cases
    from tools.run_case_remote import run_case_remote

    plan_cases(plan_request("manual", kind), root=root)
    first = len(RunStore(root, "manual").read_cases())
    loop.run_until_complete(run_case_remote("manual", root=root))
    analysis = analyze_failures("manual", root=root)
    for step in range(MAX_MANUAL + 1):
        f = next((f for f in analysis.findings if f.axis == KINDS[kind]["axis"]), None)
        if f is not None and f.exact and f.predicate == KINDS[kind]["predicate"]:
            return step, len(RunStore(root, "manual").read_cases()) - first
        if step == MAX_MANUAL or not analysis.next_cases or analysis.next_cases[0].star is None:
            break
        plan_cases({"run_id": "manual", "append": True, "stars": [analysis.next_cases[0].star]}, root=root)
        loop.run_until_complete(run_case_remote("manual", root=root))
        analysis = analyze_failures("manual", root=root)
    return None, len(RunStore(root, "manual").read_cases()) - first


def autopilot(loop, root: Path, kind: str):
    from tools.narrow import narrow_failure
    from tools.plan_cases import plan_cases

    plan_cases(plan_request("auto", kind), root=root)
    resp = loop.run_until_complete(narrow_failure({"run_id": "auto", "max_cases": 60}, root=root))
    f = next((f for f in resp.findings if f.axis == KINDS[kind]["axis"]), None)
    ok = f is not None and f.exact and f.predicate == KINDS[kind]["predicate"]
    return ok, len(resp.steps), resp.cases_run, resp.seconds, resp.stopped


def bench_kinds() -> None:
    from tools.remote.pool import REGISTRY

    loop = asyncio.new_event_loop()
    rows = []
    try:
        for kind in KINDS:
            with tempfile.TemporaryDirectory() as tmp:
                m_steps, m_cases = manual(loop, Path(tmp) / "m", kind)
                ok, a_steps, a_cases, secs, stopped = autopilot(loop, Path(tmp) / "a", kind)
            rows.append((kind, KINDS[kind]["predicate"], m_steps, m_cases, a_steps if ok else None, a_cases,
                         secs, stopped))
    finally:
        loop.run_until_complete(REGISTRY.close_all())
        loop.close()
    print("| planted kind | exact finding | manual loop: steps (new cases) | autopilot: rounds (new cases) "
          "| autopilot s | stopped |")
    print("|---|---|---|---|---|---|")
    for kind, pred, ms, mc, as_, ac, secs, stopped in rows:
        print(f"| {kind} | `{pred}` | {'not reached' if ms is None else ms} ({mc}) | "
              f"{'not reached' if as_ is None else as_} ({ac}) | {secs:.1f} | {stopped} |")


def synthetic(n: int):
    from tools.schemas import Case, CaseResult, OperatorConfig

    cases, results = [], {}
    dtypes = ("float32", "float16", "bfloat16")
    for i in range(n):
        last = 16 + (i * 37) % 4096
        spec = {"name": "x", "shape": [4 + i % 7, last], "dtype": dtypes[i % 3], "storage_offset": i % 5}
        if i % 4 == 0:
            spec["strides"] = [1, 4 + i % 7]
        case = Case.model_validate({"id": f"c{i}", "inputs": [spec, {"name": "w", "shape": [last]}],
                                    "attributes": {"eps": 1e-6 if i % 2 else 1e-5}})
        cases.append(case)
        status = "numerical_mismatch" if last > 2048 else "passed"
        body = {"case_id": case.id, "status": status}
        if status != "passed":
            body["comparisons"] = [{"output": "y", "passed": False, "max_abs": 1.0}]
        results[case.id] = CaseResult.model_validate(body)
    config = OperatorConfig.model_validate({"run_id": "syn", "operator": {"name": "op", "candidate": "m.c",
                                                                          "reference": "m.r"}})
    return config, cases, results


def bench_analysis(sizes: list[int]) -> None:
    from tools.analysis import build_analysis

    print("| cases | build_analysis s | findings | lead finding |")
    print("|---|---|---|---|")
    for n in sizes:
        config, cases, results = synthetic(n)
        t0 = time.perf_counter()
        analysis = build_analysis("syn", config, cases, results)
        dt = time.perf_counter() - t0
        lead = analysis.findings[0].predicate if analysis.findings else "-"
        print(f"| {n} | {dt:.2f} | {len(analysis.findings)} | `{lead}` |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--analysis-only", action="store_true")
    parser.add_argument("--kinds-only", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 10000])
    args = parser.parse_args()
    if not args.analysis_only:
        bench_kinds()
    if not args.kinds_only:
        bench_analysis(args.sizes)


if __name__ == "__main__":
    main()
