"""How fast the diagnosis converges, and how fast analysis is.

1. For each planted kind (benchmarks/narrow_kinds.py, operators in
   tests/operators/): the agent loop (a first star with distractors, run on
   host ``local``, analyze, apply the first next case as it is) and the
   autopilot (narrow_failure) - steps and new cases until the exact finding.
2. The kinds beyond one axis (HARD_KINDS: an interaction, bytes, two
   dimensions compared, mixed dtypes, rank, zero rows, an accumulation with no
   clean boundary): the first analysis' finding, the autopilot's final finding
   (40 new cases at most), exact or not, and the new cases it used.
3. The kinds whose truth lies outside the first space (FALSIFY_KINDS,
   benchmarks/falsify_kinds.py): step-1 and final finding, its validation
   (probes built to break it, predicted / run), exact or not, the
   counterexamples, the new cases; never a wrong exact finding.
4. build_analysis on N synthetic cases (a threshold bug on x.shape[-1] among
   dtype/stride/offset distractors), in memory: seconds per analysis.

    .venv/bin/python benchmarks/bench_narrow.py            # all
    .venv/bin/python benchmarks/bench_narrow.py --kinds-only | --hard-only | --falsify-only
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

from narrow_kinds import HARD_KINDS, KINDS, hard_plan_request, plan_request  # noqa: E402

MAX_MANUAL = 14  # exact needs its probes too: more rounds of one next case each


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
    rounds = sum(1 for s in resp.steps if s.kinds != ["pending"])  # the pending cases' run is not a round
    return ok, rounds, resp.new_cases, resp.seconds, resp.stopped


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


def _finding_text(findings, competing) -> str:
    if not findings:
        return "none" + (f" ({len(competing)} competing)" if competing else "")
    f = findings[0]
    text = f"`{f.predicate}`" + (" (exact)" if f.exact else "")
    if f.kind == "threshold" and f.fails_at is not None:
        text += f" passes at {f.passes_at:g}, fails at {f.fails_at:g}" if f.passes_at is not None else ""
    if competing:
        text += f" + {len(competing)} competing"
    return text


def bench_hard() -> None:
    from tools.analyze_failures import analyze_failures
    from tools.narrow import narrow_failure
    from tools.plan_cases import plan_cases
    from tools.remote.pool import REGISTRY
    from tools.run_case_remote import run_case_remote

    loop = asyncio.new_event_loop()
    rows = []
    try:
        for kind, spec in HARD_KINDS.items():
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                plan_cases(hard_plan_request("hard", kind), root=root)
                loop.run_until_complete(run_case_remote("hard", root=root))
                first = analyze_failures("hard", root=root)
                resp = loop.run_until_complete(narrow_failure({"run_id": "hard", "max_cases": 40}, root=root))
            lead = resp.findings[0] if resp.findings else None
            if spec["predicate"] is None:
                ok = lead is not None and lead.kind == "trend" and lead.axis == spec["trend"] and not resp.exact
            else:
                ok = lead is not None and lead.exact and lead.predicate == spec["predicate"]
            rows.append((kind, spec["predicate"] or f"no exact finding (trend on {spec['trend']})",
                         _finding_text(first.findings, first.competing), _finding_text(resp.findings, resp.competing),
                         "yes" if resp.exact else "no", resp.new_cases, resp.stopped, "right" if ok else "WRONG"))
    finally:
        loop.run_until_complete(REGISTRY.close_all())
        loop.close()
    print("| planted kind | planted condition | step-1 finding | final finding | exact? | new cases | stopped | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def bench_falsify() -> None:
    """The kinds whose truth lies outside the first space (falsify_kinds.py): step-1 and final finding,
    the final finding's validation, exact or not, new cases, and whether the end is right (the planted
    condition, or no exact finding - never a wrong exact one)."""
    from falsify_kinds import FALSIFY_KINDS, falsify_plan_request, wrong_exact

    from tools.analyze_failures import analyze_failures
    from tools.narrow import narrow_failure
    from tools.plan_cases import plan_cases
    from tools.remote.pool import REGISTRY
    from tools.run_case_remote import run_case_remote

    loop = asyncio.new_event_loop()
    rows = []
    try:
        for kind, spec in FALSIFY_KINDS.items():
            with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
                root = Path(tmp)
                plan_cases(falsify_plan_request("f", kind), root=root)
                loop.run_until_complete(run_case_remote("f", root=root))
                first = analyze_failures("f", root=root)
                resp = loop.run_until_complete(narrow_failure({"run_id": "f", "max_cases": 40}, root=root))
            lead = resp.findings[0] if resp.findings else None
            wrong = wrong_exact(kind, [f.model_dump() for f in resp.findings])
            reached = bool(lead and lead.exact and lead.predicate in spec["exact"])
            rows.append((kind, _finding_text(first.findings, first.competing),
                         _finding_text(resp.findings, resp.competing),
                         lead.validation.text if lead is not None and lead.validation else "-",
                         "yes" if resp.exact else "no", len(resp.counterexamples), resp.new_cases,
                         "WRONG EXACT" if wrong else "planted" if reached else "no exact finding"))
    finally:
        loop.run_until_complete(REGISTRY.close_all())
        loop.close()
    print("| planted kind | step-1 finding | final finding | validation | exact? | counterexamples | new cases "
          "| end |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


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
    parser.add_argument("--hard-only", action="store_true")
    parser.add_argument("--falsify-only", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 10000])
    args = parser.parse_args()
    if args.falsify_only:
        bench_falsify()
        return
    if not (args.analysis_only or args.hard_only):
        bench_kinds()
    if not (args.analysis_only or args.kinds_only):
        bench_hard()
    if not (args.analysis_only or args.kinds_only or args.hard_only):
        bench_falsify()
    if not (args.kinds_only or args.hard_only):
        bench_analysis(args.sizes)


if __name__ == "__main__":
    main()
